// The dashboard's throughput: finished messages per minute from its own readings of the counts,
// with a minute marked as a lower bound when it was partly watched, a reading failed, or a count fell.

import { describe, expect, it } from "vitest";
import { Pulse } from "../../src/dashboard/pulse.js";
import type { OutboxStore } from "../../src/outbox/store.js";
import type { OutboxStats } from "../../src/outbox/types.js";

const T0 = Date.parse("2026-12-01T09:00:00.000Z");

/** A store whose stats say what the test last set (or fail). */
function fakeStore() {
  const state = { processed: 0, dead: 0, fail: false };
  const store = {
    async stats(): Promise<OutboxStats> {
      if (state.fail) throw new Error("database is locked");
      return {
        now: new Date(),
        counts: { pending: 0, processing: 0, processed: state.processed, dead: state.dead, cancelled: 0 },
        oldestPendingCreatedAt: null,
        leasesByOwner: [],
        expiredLeases: 0,
      };
    },
  } as unknown as OutboxStore<unknown>;
  return { store, state };
}

describe("Pulse", () => {
  it("counts what finished in each minute, and marks a minute a count fell in, a failed reading, or the first one", async () => {
    const { store, state } = fakeStore();
    let now = T0 + 30_000; // the dashboard starts half-way through 09:00
    const pulse = new Pulse(store, 1000, () => now);
    await pulse.poll();
    const step = async (ms: number, processed: number, dead = state.dead) => {
      now += ms;
      state.processed = processed;
      state.dead = dead;
      await pulse.poll();
    };
    await step(30_000, 50); // 09:01:00: 50 finished in the second half of 09:00
    await step(30_000, 110, 2); // 09:01:30
    await step(30_000, 170, 3); // 09:02:00: 09:01 finished 120 processed, 3 dead
    await step(30_000, 20); // 09:02:30: a purge took 200 rows away
    await step(30_000, 80); // 09:03:00
    state.fail = true;
    now += 30_000; // 09:03:30: a failed reading
    await pulse.poll();
    expect(pulse.error).toBe("database is locked");
    state.fail = false;
    await step(30_000, 100); // 09:04:00
    await step(10_000, 130); // 09:04:10: this minute so far

    const minutes = pulse.throughput().slice(-5);
    expect(minutes.map((m) => [new Date(m.from).toISOString().slice(11, 16), m.processed, m.dead, m.whole])).toEqual([
      ["09:00", 50, 0, false], // partly watched
      ["09:01", 120, 3, true],
      ["09:02", 0, 0, false], // a count fell: 60 finished, but the purge hides them (a lower bound)
      ["09:03", 20, 0, false], // a failed reading
      ["09:04", 30, 0, false], // not over yet
    ]);
  });

  it("tells listeners when the counts change, not at every reading", async () => {
    const { store, state } = fakeStore();
    const pulse = new Pulse(store, 1000, () => T0);
    const heard: string[] = [];
    pulse.onChange((signature) => heard.push(signature));
    await pulse.poll();
    await pulse.poll();
    state.processed = 1;
    await pulse.poll();
    expect(heard).toHaveLength(2);
  });
});
