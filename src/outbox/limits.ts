// Flow control across processes: a concurrency limit and a rate limit per message type, held in
// the database. A claim of a limited type runs in one transaction that locks the type's limit row,
// counts the type's leases still held and its claims inside the rate's window, and claims at most
// the room left (the driver's claimLimited). Every claim of a store obeys the limits, whoever
// makes it (a Worker, a relay, a hand-written loop). claimMessage, the claim of one named
// message, is an operator's act: no limit refuses it, and its lease counts as running (a limited
// claim records every lease of its type in flight first), never as a start.

import { InvalidArgumentError } from "./errors.js";
import type { LimitOptions, Rate, TypeLimit } from "./types.js";
import { checkKnownKeys, shown } from "./validate.js";

/** The most leases a concurrency limit allows, and the most claims a rate allows per interval. */
export const MAX_LIMIT_COUNT = 100_000;
/** A rate's shortest and longest interval. */
export const MIN_RATE_INTERVAL_MS = 100;
export const MAX_RATE_INTERVAL_MS = 86_400_000;

/** How long a store trusts its list of limited types before reading it again (a new limit reaches other processes within this). */
export const LIMITED_TYPES_TTL_MS = 1000;

/** A limit as a driver stores it. */
export interface LimitRecord {
  readonly type: string;
  readonly concurrency: number | null;
  readonly rateCount: number | null;
  readonly rateIntervalMs: number | null;
  readonly createdAt: Date;
  readonly updatedAt: Date;
}

/** What a type's claims hold now: leases unexpired, and claims inside the rate's window. */
export interface LimitUse {
  readonly running: number;
  readonly started: number;
}

function checkCount(value: unknown, what: string, meaning: string): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 1 || value > MAX_LIMIT_COUNT) {
    throw new InvalidArgumentError(`${what} must be a whole number from 1 to ${MAX_LIMIT_COUNT}: ${meaning} (got ${shown(value)})`);
  }
  return value;
}

/** A limit's options, checked: a concurrency, a rate, or both (null for the one not given). */
export function checkLimitOptions(options: LimitOptions, type: string): { readonly concurrency: number | null; readonly rate: Rate | null } {
  const what = `the limit of ${shown(type)}`;
  checkKnownKeys(options, what, ["concurrency", "rate"]);
  const concurrency =
    options.concurrency == null
      ? null
      : checkCount(options.concurrency, `${what}: concurrency`, "how many of its messages may hold a lease at once, across every process");
  let rate: Rate | null = null;
  if (options.rate != null) {
    const given = checkKnownKeys(options.rate, `${what}: rate`, ["count", "intervalMs"]);
    const count = checkCount(given.count, `${what}: rate.count`, "how many claims may start in any intervalMs");
    const { intervalMs } = given;
    if (typeof intervalMs !== "number" || !Number.isSafeInteger(intervalMs) || intervalMs < MIN_RATE_INTERVAL_MS || intervalMs > MAX_RATE_INTERVAL_MS) {
      throw new InvalidArgumentError(
        `${what}: rate.intervalMs must be a whole number of milliseconds from ${MIN_RATE_INTERVAL_MS} to ${MAX_RATE_INTERVAL_MS} (one day) (got ${shown(intervalMs)})`,
      );
    }
    rate = { count, intervalMs };
  }
  if (concurrency === null && rate === null) {
    throw new InvalidArgumentError(`${what} needs a concurrency, a rate ({ count, intervalMs }) or both; to lift a limit, use store.unlimit(type)`);
  }
  return { concurrency, rate };
}

/** How many a claim of `wanted` may take under `limit`, given what the type holds now. */
export function limitRoom(limit: LimitRecord, use: LimitUse, wanted: number): number {
  let room = wanted;
  if (limit.concurrency !== null) room = Math.min(room, limit.concurrency - use.running);
  if (limit.rateCount !== null) room = Math.min(room, limit.rateCount - use.started);
  return Math.max(0, room);
}

/**
 * The start of a limit's rate window at `now`: claims after it count; `now` itself when it has no
 * rate. (Claims made before the limit was last set never count: putLimit moves their records to
 * the epoch, where they count as running only.)
 */
export function windowStart(limit: LimitRecord, now: number): number {
  return limit.rateIntervalMs === null ? now : now - limit.rateIntervalMs;
}

export function toTypeLimit(record: LimitRecord): TypeLimit {
  const { type, concurrency, rateCount, rateIntervalMs, createdAt, updatedAt } = record;
  return {
    type,
    concurrency,
    rate: rateCount === null || rateIntervalMs === null ? null : { count: rateCount, intervalMs: rateIntervalMs },
    createdAt,
    updatedAt,
  };
}

/** How one claim splits when some types are limited: a claim of each limited type, then one of the rest. */
export interface ClaimSplit {
  readonly limited: readonly string[];
  /** The other types to claim: null for every type but `except`; an empty list for none. */
  readonly rest: readonly string[] | null;
  readonly except: readonly string[] | null;
}

/** Splits a claim of `types` (null: every type) by the limited ones. */
export function splitClaim(types: readonly string[] | null, limited: ReadonlySet<string>): ClaimSplit {
  if (types === null) return { limited: [...limited], rest: null, except: [...limited] };
  return { limited: types.filter((type) => limited.has(type)), rest: types.filter((type) => !limited.has(type)), except: null };
}
