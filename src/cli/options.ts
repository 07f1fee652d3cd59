// Parsers for command-line option values: each rejects a bad value with a message naming the
// option and what would be valid (commander prints it and the command exits 2).

import { InvalidArgumentError as CommanderInvalidArgument } from "commander";
import { MAX_LIMIT_COUNT, MAX_RATE_INTERVAL_MS, MIN_RATE_INTERVAL_MS } from "../outbox/limits.js";
import type { Rate } from "../outbox/types.js";
import { durationExamples, formatDuration, parseDurationText } from "../runtime/durations.js";

/** A whole number in [min, max]. */
export function integer(min: number, max = Number.MAX_SAFE_INTEGER): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (!/^-?\d+$/.test(value.trim()) || !Number.isSafeInteger(n) || n < min || n > max) {
      throw new CommanderInvalidArgument(
        max === Number.MAX_SAFE_INTEGER ? `expected a whole number >= ${min}` : `expected a whole number from ${min} to ${max}`,
      );
    }
    return n;
  };
}

/** The longest duration taken: a century, far inside what a Date can hold. */
const MAX_DURATION_MS = 36_500 * 86_400_000;

/** A duration such as 500ms, 30s, 15m, 12h, 7d or 2w, in milliseconds. */
export function parseDuration(value: string): number {
  const ms = parseDurationText(value);
  if (ms === null) throw new CommanderInvalidArgument(`expected a duration ${durationExamples()}`);
  if (ms > MAX_DURATION_MS) throw new CommanderInvalidArgument(`expected a duration up to 100 years (36500d); got ${value.trim()}`);
  return ms;
}

/** A duration as parseDuration takes it, at least `min` ms (`why`: why so). */
export function minDuration(min: number, why = ""): (value: string) => number {
  return (value) => {
    const ms = parseDuration(value);
    if (ms < min) throw new CommanderInvalidArgument(`expected a duration of at least ${formatDuration(min)}${why}, ${durationExamples(min)}`);
    return ms;
  };
}

/** A share between 0 and 1, e.g. 0.05. */
export function share(value: string): number {
  const n = Number(value);
  if (!/^\d*\.?\d+$/.test(value.trim()) || !(n >= 0 && n <= 1)) throw new CommanderInvalidArgument("expected a share between 0 and 1, e.g. 0.05");
  return n;
}

/** One of the given words. */
export function oneOf<T extends string>(choices: readonly T[]): (value: string) => T {
  return (value) => {
    if (!(choices as readonly string[]).includes(value)) throw new CommanderInvalidArgument(`expected one of ${choices.join(", ")}`);
    return value as T;
  };
}

/** "a, b,c" → ["a", "b", "c"]: each a message type. */
export function typeList(value: string): string[] {
  const types = value.split(",").map((type) => type.trim());
  if (types.some((type) => type === "" || type.length > 200)) {
    throw new CommanderInvalidArgument(`give message types separated by commas, each 1 to 200 characters (got ${JSON.stringify(value)})`);
  }
  return [...new Set(types)];
}

/** A --rate count/duration, e.g. 100/1m: at most 100 claims in any minute. */
export function rateOption(value: string): Rate {
  const match = /^\s*(\d+)\s*\/\s*(.+)$/.exec(value);
  if (match === null) throw new CommanderInvalidArgument("expected claims per interval as count/duration, e.g. 100/1m or 5/1s");
  const count = integer(1, MAX_LIMIT_COUNT)(match[1] as string);
  const intervalMs = parseDuration(match[2] as string);
  if (intervalMs < MIN_RATE_INTERVAL_MS || intervalMs > MAX_RATE_INTERVAL_MS) {
    throw new CommanderInvalidArgument(
      `expected an interval from ${formatDuration(MIN_RATE_INTERVAL_MS)} to ${formatDuration(MAX_RATE_INTERVAL_MS)}, e.g. 100/1m (got ${formatDuration(intervalMs)})`,
    );
  }
  return { count, intervalMs: Math.round(intervalMs) };
}
