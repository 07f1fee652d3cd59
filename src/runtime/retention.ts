// The built-in retention of a long-running command (the worker, the relay; see
// outbox/retention.ts): started with the store's logs and metrics, it logs each pass that deleted
// something or failed, and counts the deleted rows (wassal_retention_purged_total{kind}).

import type { Logger } from "pino";
import type { Registry } from "prom-client";
import { DEFAULT_RETENTION_INTERVAL_MS, RETENTION_KINDS, type Retention, type RetentionAges, startRetention } from "../outbox/retention.js";
import type { OutboxStore } from "../outbox/store.js";
import { retentionMetrics } from "../observability/metrics.js";
import { formatDuration } from "./durations.js";

/** The retention a runner applies: the ages of the kinds to purge, and how often. */
export interface RetentionSettings extends RetentionAges {
  /** Time between two passes (default 10 minutes). */
  readonly intervalMs?: number;
  /** Rows deleted per transaction (default 1000). */
  readonly batchSize?: number;
}

/** The retention in effect, for a start-up log line: each age given and the interval, or "off". */
export function describeRetention(settings: RetentionSettings | undefined): Readonly<Record<string, string>> | "off" {
  const kinds = RETENTION_KINDS.filter((kind) => settings?.[kind] !== undefined);
  if (settings === undefined || kinds.length === 0) return "off";
  return {
    ...Object.fromEntries(kinds.map((kind) => [kind, formatDuration(settings[kind] as number)])),
    every: formatDuration(settings.intervalMs ?? DEFAULT_RETENTION_INTERVAL_MS),
  };
}

/** Starts retention on `store` when the settings name at least one age; undefined when they name none. */
export function runRetention(
  store: OutboxStore<unknown>,
  settings: RetentionSettings | undefined,
  context: { readonly logger: Logger; readonly registry: Registry },
): Retention | undefined {
  const kinds = RETENTION_KINDS.filter((kind) => settings?.[kind] !== undefined);
  if (settings === undefined || kinds.length === 0) return undefined;
  const count = retentionMetrics(context.registry, kinds);
  const { logger } = context;
  return startRetention(store, {
    ...settings,
    onPass: (pass) => {
      count({ deleted: pass.deleted, failed: pass.failure !== undefined });
      const cutoffs = Object.fromEntries(Object.entries(pass.cutoffs).map(([kind, at]) => [kind, at.toISOString()]));
      const total = Object.values(pass.deleted).reduce((sum, n) => sum + (n ?? 0), 0);
      if (pass.failure !== undefined) {
        const { kind, error } = pass.failure;
        logger.warn({ kind, deleted: pass.deleted, err: error }, "retention pass failed; trying again at the next interval");
      } else if (total > 0) {
        logger.info({ deleted: pass.deleted, before: cutoffs, stopped: pass.stopped }, "retention purged old rows");
      } else {
        logger.debug({ before: cutoffs }, "retention: nothing old enough to purge");
      }
    },
  });
}
