// Durations as people write them (500ms, 30s, 15m, 12h, 7d, 2w): one table of units, read by the
// command-line parsers and written by the start-up logs, so that what a log shows can be given back.

/** The units, longest first, each with its length in milliseconds. */
export const DURATION_UNITS: readonly (readonly [unit: string, ms: number])[] = [
  ["w", 604_800_000],
  ["d", 86_400_000],
  ["h", 3_600_000],
  ["m", 60_000],
  ["s", 1_000],
  ["ms", 1],
];

/** One duration of each unit, shortest first, for error messages and help texts. */
const EXAMPLES = ["500ms", "30s", "15m", "12h", "7d", "2w"] as const;

/** "7d" → 604800000, "1.5h" → 5400000; null for text that is not a number followed by a unit. */
export function parseDurationText(text: string): number | null {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m|h|d|w)$/.exec(text.trim());
  const size = DURATION_UNITS.find(([unit]) => unit === match?.[2])?.[1];
  return match === null || size === undefined ? null : Math.round(Number(match[1]) * size);
}

/** 604800000 → "7d", 5400000 → "90m", 1500 → "1500ms": the longest unit that divides it. */
export function formatDuration(ms: number): string {
  const found = DURATION_UNITS.find(([, size]) => ms >= size && ms % size === 0);
  return found === undefined ? `${ms}ms` : `${ms / found[1]}${found[0]}`;
}

/** "such as 30s, 15m, 12h, 7d or 2w": the examples of at least `min` ms (every one when min is 0). */
export function durationExamples(min = 0): string {
  const shown = EXAMPLES.filter((example) => (parseDurationText(example) ?? 0) >= min);
  const list = shown.length > 0 ? shown : [formatDuration(min)];
  return list.length === 1 ? `such as ${list[0]}` : `such as ${list.slice(0, -1).join(", ")} or ${list[list.length - 1]}`;
}
