// The one table of duration units: what a start-up log writes, the --retain-* and purge options
// read back, and an error's examples are each at least the least duration the option takes.

import { describe, expect, it } from "vitest";
import { durationExamples, formatDuration, parseDurationText } from "../../src/runtime/durations.js";

describe("durations", () => {
  it("reads each unit, and fractions of one", () => {
    expect(["250ms", "30s", "15m", "12h", "7d", "2w", "1.5h", " 90m "].map(parseDurationText)).toEqual([
      250, 30_000, 900_000, 43_200_000, 604_800_000, 1_209_600_000, 5_400_000, 5_400_000,
    ]);
    expect(["", "7", "7x", "-1s", "1e3s", "s", "7 d"].map(parseDurationText)).toEqual([null, null, null, null, null, null, null]);
  });

  it("writes the longest unit that divides a duration, and reads back what it wrote", () => {
    const cases: [number, string][] = [
      [1_500, "1500ms"],
      [5_400_000, "90m"],
      [604_800_000, "1w"],
      [86_400_000 * 30, "30d"],
      [3_600_000, "1h"],
      [1, "1ms"],
    ];
    for (const [ms, text] of cases) {
      expect(formatDuration(ms)).toBe(text);
      expect(parseDurationText(text)).toBe(ms);
    }
  });

  it("gives as examples only durations at least the least one taken", () => {
    expect(durationExamples()).toBe("such as 500ms, 30s, 15m, 12h, 7d or 2w");
    expect(durationExamples(1_000)).toBe("such as 30s, 15m, 12h, 7d or 2w");
    expect(durationExamples(3_600_000)).toBe("such as 12h, 7d or 2w");
    expect(durationExamples(604_800_000)).toBe("such as 7d or 2w");
    expect(durationExamples(30 * 86_400_000)).toBe("such as 30d");
  });
});
