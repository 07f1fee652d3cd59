// `wassal schedule`: the outbox's recurring schedules: list them, add (or replace) one, remove one.
// A running worker or relay fires their ticks, each once across all of them.

import { Command, InvalidArgumentError as CommanderInvalidArgument } from "commander";
import { ScheduleNotFoundError } from "../outbox/errors.js";
import { formatDuration } from "../runtime/durations.js";
import type { JsonValue, Schedule, ScheduledMessage } from "../outbox/types.js";
import { withOutbox } from "../stores/open-outbox.js";
import { MAX_PRIORITY } from "../outbox/validate.js";
import { integer, minDuration } from "./options.js";
import { field, out, printJson } from "./output.js";
import { type AdminFlags, adminOptions, storeOptions } from "./shared-options.js";

type Common = AdminFlags;
const common = adminOptions;

/** A --header name=value, added to the ones before it. */
function header(value: string, previous: Record<string, string> | undefined): Record<string, string> {
  const at = value.indexOf("=");
  // The value is not echoed: a header may carry a token.
  if (at < 1) throw new CommanderInvalidArgument("expected name=value, e.g. --header team=ops (got no '=' after a name)");
  return { ...previous, [value.slice(0, at)]: value.slice(at + 1) };
}

function payload(value: string): JsonValue {
  try {
    return JSON.parse(value) as JsonValue;
  } catch (error) {
    throw new CommanderInvalidArgument(`expected JSON, e.g. '{"scope":"daily"}' (got ${JSON.stringify(value)}: ${(error as Error).message})`);
  }
}

function time(value: Date | null, none: string): string {
  return value === null ? none : value.toISOString();
}

function describe(schedule: Schedule): string {
  const { message } = schedule;
  return [
    `${field(schedule.name)}\t${field(schedule.cron)} (${field(schedule.timezone)})`,
    `next ${time(schedule.nextAt, "never")}`,
    `last ${time(schedule.lastTickAt, "-")}`,
    `type ${field(message.type)}${message.key === undefined ? "" : ` key ${field(message.key)}`}${message.priority === undefined ? "" : ` priority ${message.priority}`}`,
    `backfill ${formatDuration(schedule.backfillMs)}`,
  ].join("\t");
}

export function scheduleCommand(): Command {
  const schedule = new Command("schedule").description(
    "recurring schedules: each tick of a cron expression enqueues one message, once across every worker and polling relay that fires them (each fires the due ticks as they come; a --from-wal relay fires none)",
  );

  schedule.addCommand(
    common(new Command("list"))
      .description("every schedule, by name: its expression and time zone, next and last tick, message type and backfill")
      .action(async (options: Common) => {
        await withOutbox(options.db, storeOptions(options, "read"), async ({ store }) => {
          const schedules = await store.schedules();
          if (options.json) printJson(schedules);
          else if (schedules.length === 0) out("no schedules (add one with: wassal schedule add <name> <cron> --type <type>)\n");
          else out(`${schedules.map(describe).join("\n")}\n`);
        });
      }),
  );

  schedule.addCommand(
    common(new Command("add"))
      .description("add a schedule, or replace the one of that name (keeping its next tick when its expression and time zone are unchanged)")
      .argument("<name>", "the schedule's name (each tick's message has the dedupe key schedule:<name>:<tick>)")
      .argument("<cron>", 'five fields (minute hour day-of-month month day-of-week), or six with seconds first; quote it, e.g. "0 2 * * *"')
      .requiredOption("--type <type>", "the message type each tick enqueues")
      .option("--payload <json>", "the message's payload, as JSON", payload, {})
      .option("--key <key>", "the message's ordering key")
      .option("--destination <destination>", "where a relay delivers the message (topic, subject or queue)")
      .option("--header <name=value>", "a header of the message, given once per header", header)
      .option(
        "--priority <seconds>",
        `the message's head start in the claim order, in whole seconds from 0 (the default) to ${MAX_PRIORITY}`,
        integer(0, MAX_PRIORITY),
      )
      .option("--timezone <zone>", 'the IANA time zone the expression is read in, e.g. "Europe/Oslo"', "UTC")
      .option(
        "--backfill <duration>",
        "how late a tick may be found and still fire, e.g. 5m or 1d (older ticks, when no worker ran, are skipped)",
        minDuration(10_000, " (a worker finds a tick a little late)"),
        60_000,
      )
      .addHelpText(
        "after",
        '\nExamples:\n  wassal schedule add nightly-report "0 2 * * *" --db app.db --type report.build --payload \'{"scope":"daily"}\' --timezone Europe/Oslo\n  wassal schedule add heartbeat "*/10 * * * * *" --db app.db --type ping   # every 10 seconds',
      )
      .action(
        async (
          name: string,
          cron: string,
          options: Common & {
            type: string;
            payload: JsonValue;
            key?: string;
            destination?: string;
            header?: Record<string, string>;
            priority?: number;
            timezone: string;
            backfill: number;
          },
        ) => {
          const message: ScheduledMessage = {
            type: options.type,
            payload: options.payload,
            ...(options.key === undefined ? {} : { key: options.key }),
            ...(options.destination === undefined ? {} : { destination: options.destination }),
            ...(options.header === undefined ? {} : { headers: options.header }),
            ...(options.priority === undefined ? {} : { priority: options.priority }),
          };
          await withOutbox(options.db, storeOptions(options, "repair"), async ({ store }) => {
            const added = await store.schedule(name, cron, message, { timezone: options.timezone, backfillMs: Math.round(options.backfill) });
            if (options.json) printJson(added);
            else out(`schedule ${field(added.name)} added: next tick ${time(added.nextAt, "never")}; a running worker or relay fires it\n`);
          });
        },
      ),
  );

  schedule.addCommand(
    common(new Command("remove"))
      .description("remove a schedule (the messages it enqueued stay)")
      .argument("<name>", "the schedule's name (see: wassal schedule list)")
      .addHelpText("after", "\nExits 2 when the outbox has no schedule of that name.")
      .action(async (name: string, options: Common) => {
        await withOutbox(options.db, storeOptions(options, "repair"), async ({ store }) => {
          if (!(await store.unschedule(name)))
            throw new ScheduleNotFoundError(
              name,
              (await store.schedules()).map((s) => s.name),
            );
          if (options.json) printJson({ removed: name });
          else out(`schedule ${field(name)} removed\n`);
        });
      }),
  );

  return schedule;
}
