// Recurring schedules: the cron expressions (read by croner), their checks and their ticks. The
// protocol (LeasedOutbox.fireSchedules) fires a tick by moving the schedule's next tick on with a
// compare-and-set in the same transaction as the tick's message, so each tick enqueues once
// however many schedulers look at the same moment; this module only says which ticks there are.

import { setImmediate } from "node:timers/promises";
import { Cron } from "croner";
import type { OutboxDriver, ScheduleRecord } from "./driver.js";
import { DuplicateMessageError, InvalidArgumentError } from "./errors.js";
import { type EventHub, publish } from "./events.js";
import type {
  FailedSchedule,
  FiredTick,
  JsonValue,
  NewMessage,
  OutboxMessage,
  Schedule,
  ScheduledMessage,
  ScheduleFiring,
  ScheduleOptions,
  SkippedTicks,
} from "./types.js";
import { checkText, shown, withAddedHeaders } from "./validate.js";

/** How late a tick may be found and still fire, unless a schedule says otherwise. */
export const DEFAULT_BACKFILL_MS = 60_000;
/** The shortest backfillMs: a scheduler finds a tick a little late (a poll, a busy machine, a lock), and a shorter one would skip ticks found on time. */
export const MIN_BACKFILL_MS = 10_000;
export const MAX_BACKFILL_MS = 31 * 24 * 3600 * 1000;
/** The longest schedule name: each tick's dedupe key ("schedule:<name>:<tick>") stays well under dedupeKey's 1,000. */
export const MAX_SCHEDULE_NAME = 200;
/** The most ticks one fireSchedules call fires (each is a transaction); it reports `more` when it stopped there. */
export const MAX_TICKS_PER_CALL = 1_000;

const CRON_HELP =
  'use five fields (minute hour day-of-month month day-of-week), or six with seconds first, e.g. "*/5 * * * *" (every 5 minutes) or "0 0 9 * * MON-FRI"';

export function checkScheduleName(name: unknown): string {
  const text = checkText(name, "a schedule's name", MAX_SCHEDULE_NAME);
  // biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is what this pattern is for
  if (/[\u0000-\u001f\u007f]/.test(text)) throw new InvalidArgumentError(`a schedule's name must not contain control characters (got ${shown(text)})`);
  return text;
}

/** The time zone as IANA names it ("utc" is "UTC"), or InvalidArgumentError naming it. */
export function checkTimezone(timezone: unknown): string {
  if (typeof timezone === "string" && timezone.trim() !== "") {
    try {
      return new Intl.DateTimeFormat("en-US", { timeZone: timezone }).resolvedOptions().timeZone;
    } catch {
      // named below
    }
  }
  throw new InvalidArgumentError(`timezone must be an IANA time zone name, e.g. "UTC", "Europe/Oslo" or "America/New_York" (got ${shown(timezone)})`);
}

export function checkBackfillMs(backfillMs: unknown): number {
  if (typeof backfillMs !== "number" || !Number.isSafeInteger(backfillMs) || backfillMs < MIN_BACKFILL_MS || backfillMs > MAX_BACKFILL_MS) {
    throw new InvalidArgumentError(
      `backfillMs must be a whole number of milliseconds from ${MIN_BACKFILL_MS} (10 seconds) to ${MAX_BACKFILL_MS} (31 days) (got ${shown(backfillMs)}): how late a tick may be found and still fire`,
    );
  }
  return backfillMs;
}

/** A schedule's timing, checked: its expression, read in its time zone, and its backfill. */
export interface ScheduleTiming {
  readonly cron: string;
  readonly timezone: string;
  readonly backfillMs: number;
}

/** Checks a cron expression and a schedule's options, or throws InvalidArgumentError naming what is wrong. */
export function checkScheduleTiming(name: string, cron: unknown, options: ScheduleOptions): ScheduleTiming {
  const timezone = checkTimezone(options.timezone ?? "UTC");
  const backfillMs = checkBackfillMs(options.backfillMs ?? DEFAULT_BACKFILL_MS);
  if (typeof cron !== "string" || cron.trim() === "" || cron.length > 200) {
    throw new InvalidArgumentError(
      `the cron expression of schedule ${shown(name)} must be a non-empty string of at most 200 characters (got ${shown(cron)}); ${CRON_HELP}`,
    );
  }
  const expression = cron.trim().replace(/\s+/g, " ");
  if (/^\d{4}-\d{2}-\d{2}|:/.test(expression)) {
    throw new InvalidArgumentError(
      `the cron expression ${shown(expression)} of schedule ${shown(name)} is a date, not a recurring expression: to send a message once at a time, enqueue it with availableAt; ${CRON_HELP}`,
    );
  }
  let parsed: Cron;
  try {
    parsed = new Cron(expression, cronOptions(timezone));
  } catch (error) {
    const why = error instanceof Error ? error.message.replace(/^CronPattern: /, "") : String(error);
    throw new InvalidArgumentError(`the cron expression ${shown(expression)} of schedule ${shown(name)} is not valid (${why}); ${CRON_HELP}`);
  }
  if (parsed.nextRun(new Date(0)) === null) {
    throw new InvalidArgumentError(
      `the cron expression ${shown(expression)} of schedule ${shown(name)} never fires (it names a day that does not exist, such as 30 February)`,
    );
  }
  remembered.set(`${timezone} ${expression}`, parsed);
  return { cron: expression, timezone, backfillMs };
}

/** Parsed expressions by time zone and expression: a scheduler reads the same few every second. */
const remembered = new Map<string, Cron>();

function parsed(cron: string, timezone: string): Cron {
  const id = `${timezone} ${cron}`;
  let found = remembered.get(id);
  if (found === undefined) {
    if (remembered.size >= 1_000) remembered.clear();
    try {
      found = new Cron(cron, cronOptions(timezone));
    } catch (error) {
      // A stored expression this croner no longer reads (it was read when it was added).
      throw new InvalidArgumentError(
        `the cron expression ${shown(cron)} cannot be read (${error instanceof Error ? error.message : String(error)}); add the schedule again with one this version reads`,
      );
    }
    remembered.set(id, found);
  }
  return found;
}

/** How every expression is read: five fields, or six with seconds first (no year, no one-off date). */
function cronOptions(timezone: string) {
  return { timezone, paused: true, mode: "5-or-6-parts" as const };
}

/** The expression's first tick after `after` (strictly), or null when it has none. */
export function tickAfter(timing: Pick<ScheduleTiming, "cron" | "timezone">, after: Date): Date | null {
  return parsed(timing.cron, timing.timezone).nextRun(after);
}

/** The dedupe key of a tick's message: one message per schedule and tick, whoever fires it. */
export function tickDedupeKey(name: string, tick: Date): string {
  return `schedule:${name}:${tick.toISOString()}`;
}

/** The headers a tick's message carries besides the schedule's own. */
export function tickHeaders(name: string, tick: Date): Readonly<Record<string, string>> {
  return { "wassal-schedule": name, "wassal-tick": tick.toISOString() };
}

/** How many schedules one fireSchedules call reads, earliest tick first. */
const SCHEDULES_PER_READ = 100;

/** What firing needs from the protocol: its driver, its checked enqueue, and its events. */
export interface ScheduleFirer<Tx> {
  readonly driver: OutboxDriver<Tx>;
  readonly enqueue: (tx: Tx, message: NewMessage) => Promise<OutboxMessage>;
  readonly events: EventHub;
}

/** A stored schedule as the library shows it: its message's payload and headers parsed. */
export function toSchedule(record: ScheduleRecord): Schedule {
  const message: { -readonly [K in keyof ScheduledMessage]: ScheduledMessage[K] } = { type: record.type, payload: JSON.parse(record.payload) as JsonValue };
  if (record.key !== null) message.key = record.key;
  if (record.headers !== null) message.headers = JSON.parse(record.headers) as Record<string, string>;
  if (record.destination !== null) message.destination = record.destination;
  if (record.priority !== 0) message.priority = record.priority;
  const { name, cron, timezone, backfillMs, nextAt, lastTickAt, createdAt, updatedAt } = record;
  return { name, cron, timezone, backfillMs, message, nextAt, lastTickAt, createdAt, updatedAt };
}

function tickMessage(schedule: ScheduleRecord, tick: Date): NewMessage {
  const given = schedule.headers === null ? null : (JSON.parse(schedule.headers) as Record<string, string>);
  const message: { -readonly [K in keyof NewMessage]: NewMessage[K] } = {
    type: schedule.type,
    payload: JSON.parse(schedule.payload) as JsonValue,
    dedupeKey: tickDedupeKey(schedule.name, tick),
    headers: withAddedHeaders(given, tickHeaders(schedule.name, tick)) as Record<string, string>,
  };
  if (schedule.key !== null) message.key = schedule.key;
  if (schedule.destination !== null) message.destination = schedule.destination;
  if (schedule.priority !== 0) message.priority = schedule.priority;
  return message;
}

/** What firing one tick did. */
type TickOutcome =
  | { readonly outcome: "fired"; readonly messageId: string }
  /** Another scheduler moved the tick first, or the schedule was replaced or removed: nothing written. */
  | { readonly outcome: "lost" }
  /** The compare-and-set passed but the tick's message was there already; `moved`: the tick was moved on without it. */
  | { readonly outcome: "duplicate"; readonly moved: boolean };

/**
 * Fires one tick: in one transaction, the compare-and-set that moves the schedule's next tick from
 * `tick` to `next` (only if the schedule is still the version read), then the tick's message. When
 * the compare-and-set passed and the message was there already (a clock that went back, or a
 * compare-and-set that let two schedulers through), that is said, and the tick is moved on without
 * a second message in a transaction of its own.
 */
async function fireTick<Tx>(firer: ScheduleFirer<Tx>, schedule: ScheduleRecord, tick: Date, next: Date | null): Promise<TickOutcome> {
  const { driver } = firer;
  const move = (tx: Tx, fired: boolean) => driver.advanceSchedule({ tx, name: schedule.name, version: schedule.version, from: tick, to: next, fired });
  try {
    return await driver.transaction(
      async (tx): Promise<TickOutcome> =>
        (await move(tx, true)) ? { outcome: "fired", messageId: (await firer.enqueue(tx, tickMessage(schedule, tick))).id } : { outcome: "lost" },
    );
  } catch (error) {
    if (!(error instanceof DuplicateMessageError)) throw error;
    return { outcome: "duplicate", moved: await driver.transaction((tx) => move(tx, false)) };
  }
}

/**
 * Fires every due tick of the schedules, each once across all schedulers, at most `limit` ticks:
 * see OutboxStore.fireSchedules. A tick found later than its schedule's backfillMs is skipped (one
 * compare-and-set moves the schedule past all such ticks); the rest fire oldest first, one
 * transaction each. A schedule that cannot fire (an expression this croner refuses, a message
 * the store refuses) is reported as failed, and the others fire. `signal` stops it between ticks.
 */
export async function fireSchedules<Tx>(firer: ScheduleFirer<Tx>, owner: string, limit: number, signal?: AbortSignal): Promise<ScheduleFiring> {
  const { driver, events } = firer;
  const { at, schedules } = await driver.nextSchedules({ limit: SCHEDULES_PER_READ });
  const fired: FiredTick[] = [];
  const skipped: SkippedTicks[] = [];
  const failed: FailedSchedule[] = [];
  let nextAt: Date | null = null;
  let budget = limit;
  let more = false;
  const later = (tick: Date | null) => {
    if (tick !== null && (nextAt === null || tick < nextAt)) nextAt = tick;
  };
  const skip = (passed: SkippedTicks) => {
    skipped.push(passed);
    publish(events, { type: "schedule-skipped", at, owner, ...passed });
  };
  for (const [index, schedule] of schedules.entries()) {
    if (budget === 0 || signal?.aborted) {
      // Stopped here: the rest of the list is read again next time.
      later(schedule.nextAt);
      // More is due if this one is, or if the schedule the limit stopped inside still is (said below, not undone here).
      if (schedule.nextAt !== null && schedule.nextAt <= at) more = true;
      break;
    }
    let tick: Date | null = schedule.nextAt;
    try {
      const oldest = at.getTime() - schedule.backfillMs;
      if (tick !== null && tick <= at && tick.getTime() < oldest) {
        const from = tick;
        const kept = tickAfter(schedule, new Date(oldest - 1)); // the first tick no older than backfillMs
        const moved = await driver.transaction((tx) =>
          driver.advanceSchedule({ tx, name: schedule.name, version: schedule.version, from, to: kept, fired: false }),
        );
        if (!moved) {
          later(kept); // another scheduler got there first, and fires what is left
          continue;
        }
        skip({ schedule: schedule.name, reason: "too-late", from, until: kept ?? at });
        tick = kept;
      }
      while (tick !== null && tick <= at && budget > 0 && !signal?.aborted) {
        budget -= 1;
        const next = tickAfter(schedule, tick);
        const done = await fireTick(firer, schedule, tick, next);
        // Lets timers and I/O run: on SQLite a free write lock is taken synchronously, so a long
        // run of ticks would otherwise hold the event loop.
        await setImmediate();
        if (done.outcome === "lost") {
          later(next); // no sooner than this: whoever moved it fires the rest
          tick = null;
          break;
        }
        if (done.outcome === "duplicate") {
          skip({ schedule: schedule.name, reason: "already-enqueued", from: tick, until: next ?? tick });
          if (!done.moved) {
            later(next);
            tick = null;
            break;
          }
        } else {
          fired.push({ schedule: schedule.name, tick, messageId: done.messageId });
          publish(events, { type: "schedule-fired", at, owner, schedule: schedule.name, tick, messageId: done.messageId });
        }
        tick = next;
      }
    } catch (error) {
      if (!(error instanceof InvalidArgumentError)) throw error;
      // This schedule alone cannot fire; the others go on.
      failed.push({ schedule: schedule.name, error: error.message });
      publish(events, { type: "store-error", at, owner, operation: `schedule ${JSON.stringify(schedule.name)}`, error: error.message });
      continue;
    }
    later(tick);
    if (tick !== null && tick <= at) more = true; // stopped by the limit or the signal
    if (index === schedules.length - 1 && schedules.length === SCHEDULES_PER_READ && schedule.nextAt !== null && schedule.nextAt <= at) more = true;
  }
  return { at, fired, skipped, failed, nextAt, more };
}
