// Parsers for command-line option values: each rejects a bad value with a message naming the
// option and what would be valid (commander prints it and the command exits 2).

import { InvalidArgumentError as CommanderInvalidArgument } from "commander";

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

const UNITS: Readonly<Record<string, number>> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 };

/** A duration such as 500ms, 30s, 15m, 12h, 7d or 2w, in milliseconds. */
export function parseDuration(value: string): number {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m|h|d|w)$/.exec(value.trim());
  const unit = match?.[2];
  if (match === null || unit === undefined) {
    throw new CommanderInvalidArgument("expected a duration such as 500ms, 30s, 15m, 12h, 7d or 2w");
  }
  const ms = Math.round(Number(match[1]) * (UNITS[unit] ?? 1));
  if (ms > MAX_DURATION_MS) throw new CommanderInvalidArgument(`expected a duration up to 100 years (36500d); got ${value.trim()}`);
  return ms;
}

/** A duration as parseDuration takes it, at least `min` ms (`shown` says the least one, e.g. "1h"; `why`, why so). */
export function minDuration(min: number, shown: string, why = ""): (value: string) => number {
  return (value) => {
    const ms = parseDuration(value);
    if (ms < min) throw new CommanderInvalidArgument(`expected a duration of at least ${shown}${why}, such as 30s, 15m, 12h, 7d or 2w`);
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
