// The built-in retention's options, which the worker and the relay share (see runnerOptions):
// --retain-processed, --retain-dead, --retain-audit, --retain-inbox and --retention-interval.

import { Option } from "commander";
import { MIN_INBOX_RETENTION_MS } from "../outbox/retention.js";
import { describeRetention, type RetentionSettings } from "../runtime/retention.js";
import { minDuration } from "./options.js";

/** The built-in retention's options (off unless one --retain-* is given). */
export function retentionOptions(): Option[] {
  const age = minDuration(1_000);
  return [
    new Option(
      "--retain-processed <duration>",
      "purge, in the background, messages processed longer ago than this, e.g. 7d (their dedupe keys are free again; default: kept)",
    ).argParser(age),
    new Option("--retain-dead <duration>", "purge dead messages that died longer ago than this, e.g. 30d (default: kept)").argParser(age),
    new Option("--retain-audit <duration>", "purge audit rows written longer ago than this, e.g. 30d (default: kept)").argParser(age),
    new Option(
      "--retain-inbox <duration>",
      "purge inbox ids received longer ago than this, at least 1h: longer than a message can come again (default: kept)",
    ).argParser(minDuration(MIN_INBOX_RETENTION_MS, " (an inbox id must outlive every redelivery of its message, or it is applied twice)")),
    new Option("--retention-interval <duration>", "time between two retention passes (the first runs at start)")
      .argParser(minDuration(1_000))
      .default(600_000, "10m"),
  ];
}

/** What retentionOptions parsed to (milliseconds). */
export interface RetentionFlags {
  retainProcessed?: number;
  retainDead?: number;
  retainAudit?: number;
  retainInbox?: number;
  retentionInterval: number;
}

/** The retention the --retain-* flags ask for, or undefined when none is given (retention off). */
export function retentionSettings(flags: RetentionFlags): RetentionSettings | undefined {
  const ages = {
    ...(flags.retainProcessed === undefined ? {} : { processed: flags.retainProcessed }),
    ...(flags.retainDead === undefined ? {} : { dead: flags.retainDead }),
    ...(flags.retainAudit === undefined ? {} : { audit: flags.retainAudit }),
    ...(flags.retainInbox === undefined ? {} : { inbox: flags.retainInbox }),
  };
  return Object.keys(ages).length === 0 ? undefined : { ...ages, intervalMs: flags.retentionInterval };
}

/** The retention in effect, for the "worker started" and "relay started" log lines: { processed: "7d", every: "10m" }, or "off". */
export function retentionInEffect(flags: RetentionFlags): Readonly<Record<string, string>> | "off" {
  return describeRetention(retentionSettings(flags));
}
