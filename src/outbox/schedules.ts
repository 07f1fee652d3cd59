// Recurring schedules: the cron expressions (read by croner), their checks and their ticks. The
// protocol (LeasedOutbox.fireSchedules) fires a tick by moving the schedule's next tick on with a
// compare-and-set in the same transaction as the tick's message, so each tick enqueues once
// however many schedulers look at the same moment; this module only says which ticks there are.

import { Cron } from "croner";
import type { OutboxDriver, ScheduleRecord } from "./driver.js";
import { DuplicateMessageError, InvalidArgumentError } from "./errors.js";
import { type EventHub, publish } from "./events.js";
import type { FiredTick, JsonValue, NewMessage, OutboxMessage, Schedule, ScheduledMessage, ScheduleFiring, ScheduleOptions, SkippedTicks } from "./types.js";
import { checkText, shown, withAddedHeaders } from "./validate.js";

/** How late a tick may be found and still fire, unless a schedule says otherwise. */
export const DEFAULT_BACKFILL_MS = 60_000;
/** The shortest backfillMs: a scheduler looks about once a second, so a shorter one would skip ticks found on time. */
export const MIN_BACKFILL_MS = 1_000;
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
      `backfillMs must be a whole number of milliseconds from ${MIN_BACKFILL_MS} (a second) to ${MAX_BACKFILL_MS} (31 days) (got ${shown(backfillMs)}): how late a tick may be found and still fire`,
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
  const expression = cron.trim();
  let parsed: Cron;
  try {
    parsed = new Cron(expression, { timezone, paused: true });
  } catch (error) {
    const why = error instanceof Error ? error.message.replace(/^CronPattern: /, "") : String(error);
    throw new InvalidArgumentError(`the cron expression ${shown(expression)} of schedule ${shown(name)} is not valid (${why}); ${CRON_HELP}`);
  }
  if (parsed.nextRun(new Date(0)) === null) {
    throw new InvalidArgumentError(
      `the cron expression ${shown(expression)} of schedule ${shown(name)} never fires (a date that does not exist, such as 30 February)`,
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
    found = new Cron(cron, { timezone, paused: true });
    remembered.set(id, found);
  }
  return found;
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
  return message;
}

/**
 * Fires one tick: in one transaction, the compare-and-set that moves the schedule's next tick from
 * `tick` to `next`, then the tick's message. The message's id; null when another scheduler moved
 * the tick first (nothing written); "duplicate" when the tick's message was in the outbox already
 * (the clock went back): the tick is then moved on without a second message.
 */
async function fireTick<Tx>(firer: ScheduleFirer<Tx>, schedule: ScheduleRecord, tick: Date, next: Date | null): Promise<string | null | "duplicate"> {
  const { driver } = firer;
  const move = (tx: Tx, fired: boolean) => driver.advanceSchedule({ tx, name: schedule.name, from: tick, to: next, fired });
  try {
    return await driver.transaction(async (tx) => ((await move(tx, true)) ? (await firer.enqueue(tx, tickMessage(schedule, tick))).id : null));
  } catch (error) {
    if (!(error instanceof DuplicateMessageError)) throw error;
    return (await driver.transaction((tx) => move(tx, false))) ? "duplicate" : null;
  }
}

/**
 * Fires every due tick of the schedules, each once across all schedulers, at most `limit` ticks:
 * see OutboxStore.fireSchedules. A tick found later than its schedule's backfillMs is skipped (one
 * compare-and-set moves the schedule past all such ticks); the rest fire oldest first, one
 * transaction each.
 */
export async function fireSchedules<Tx>(firer: ScheduleFirer<Tx>, owner: string, limit: number): Promise<ScheduleFiring> {
  const { driver, events } = firer;
  const { at, schedules } = await driver.nextSchedules({ limit: SCHEDULES_PER_READ });
  const fired: FiredTick[] = [];
  const skipped: SkippedTicks[] = [];
  let nextAt: Date | null = null;
  let budget = limit;
  const later = (tick: Date) => {
    if (nextAt === null || tick < nextAt) nextAt = tick;
  };
  for (const schedule of schedules) {
    let tick: Date | null = schedule.nextAt;
    const oldest = at.getTime() - schedule.backfillMs;
    if (tick !== null && tick <= at && tick.getTime() < oldest) {
      const kept = tickAfter(schedule, new Date(oldest - 1)); // the first tick no older than backfillMs
      const moved = await driver.transaction((tx) => driver.advanceSchedule({ tx, name: schedule.name, from: tick as Date, to: kept, fired: false }));
      if (!moved) continue; // another scheduler got there first, and fires what is left
      const passed: SkippedTicks = { schedule: schedule.name, reason: "too-late", from: tick, until: kept ?? at };
      skipped.push(passed);
      publish(events, { type: "schedule-skipped", at, owner, ...passed });
      tick = kept;
    }
    while (tick !== null && tick <= at && budget > 0) {
      budget -= 1;
      const next = tickAfter(schedule, tick);
      const outcome = await fireTick(firer, schedule, tick, next);
      if (outcome === null) {
        tick = null; // another scheduler moved this schedule on: it fires the rest
        break;
      }
      if (outcome === "duplicate") {
        const passed: SkippedTicks = { schedule: schedule.name, reason: "already-enqueued", from: tick, until: next ?? tick };
        skipped.push(passed);
        publish(events, { type: "schedule-skipped", at, owner, ...passed });
      } else {
        fired.push({ schedule: schedule.name, tick, messageId: outcome });
        publish(events, { type: "schedule-fired", at, owner, schedule: schedule.name, tick, messageId: outcome });
      }
      tick = next;
    }
    if (tick !== null) later(tick);
    if (budget === 0) break;
  }
  const last = schedules.at(-1);
  const unread = schedules.length === SCHEDULES_PER_READ && last?.nextAt != null && last.nextAt <= at;
  const more = (nextAt !== null && (nextAt as Date) <= at) || unread;
  return { at, fired, skipped, nextAt, more };
}
