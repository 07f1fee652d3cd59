// The Worker fires the schedules' ticks: every schedulePollMs at most, and sooner when the next
// tick is nearer, so a tick's message is enqueued (and handled) at its tick; a worker on a clock of
// its own fires none unless schedulePollMs is given; a failing fire is a store-error event and the
// worker carries on. The option is checked, naming it.

import { expect, it } from "vitest";
import { InvalidArgumentError } from "../../src/outbox/errors.js";
import type { OutboxEvent } from "../../src/outbox/events.js";
import { Worker } from "../../src/outbox/worker.js";
import { describeEachStore, START, useStoreHarness } from "../conformance/stores.js";
import { useWorkers, waitForSleepers, waitUntil, withOverrides } from "./support.js";

describeEachStore("worker fires schedules", (factory) => {
  const ctx = useStoreHarness(factory);
  const workers = useWorkers(() => ctx().clock);

  it("fires each tick at its time and runs its handler; waits for the nearer of the next tick and schedulePollMs", async () => {
    const { store, clock } = ctx();
    await store.schedule("pulse", "*/10 * * * * *", { type: "pulse", payload: { n: 1 } });
    const handled: string[] = [];
    await workers.start({
      store,
      clock,
      handlers: { pulse: async (message) => void handled.push(message.headers["wassal-tick"] ?? "") },
      schedulePollMs: 60_000,
      pollIntervalMs: 60_000,
    });
    // Nothing is due at 09:00:00; the scheduler sleeps until 09:00:10, the next tick (not 60 s).
    await waitForSleepers(clock, 2);
    clock.advance(10_000);
    await waitUntil("the 09:00:10 tick handled", () => handled.length === 1);
    expect(handled).toEqual([new Date(START.getTime() + 10_000).toISOString()]);
    await waitForSleepers(clock, 2);
    clock.advance(10_000);
    await waitUntil("the 09:00:20 tick handled", () => handled.length === 2);
    expect((await store.schedules())[0]?.lastTickAt).toEqual(new Date(START.getTime() + 20_000));
  });

  it("fires nothing on a clock of its own unless schedulePollMs is given", async () => {
    const { store, clock } = ctx();
    await store.schedule("pulse", "* * * * * *", { type: "pulse", payload: null });
    const worker = await workers.start({ store, clock, handlers: { pulse: async () => undefined }, pollIntervalMs: 1_000 });
    expect(worker.schedulePollMs).toBeNull();
    await waitForSleepers(clock, 1);
    clock.advance(5_000);
    await waitForSleepers(clock, 1);
    expect(await store.countByStatus()).toMatchObject({ pending: 0, processed: 0 });
    expect(new Worker({ store, handlers: { pulse: async () => undefined } }).schedulePollMs).toBe(1_000);
    expect(new Worker({ store, handlers: { pulse: async () => undefined }, schedulePollMs: false }).schedulePollMs).toBeNull();
  });

  it("reports a failing fire as a store-error event and carries on", async () => {
    const { store, clock } = ctx();
    await store.schedule("pulse", "* * * * * *", { type: "pulse", payload: null });
    let failures = 1;
    const flaky = withOverrides(store, {
      fireSchedules: (options) => (failures-- > 0 ? Promise.reject(new Error("connection reset")) : store.fireSchedules(options)),
    });
    const events: OutboxEvent[] = [];
    store.events.subscribe((event) => events.push(event));
    await workers.start({ store: flaky, clock, handlers: { pulse: async () => undefined }, schedulePollMs: 1_000, pollIntervalMs: 1_000 });
    await waitUntil("the store error", () => events.some((e) => e.type === "store-error"));
    expect(events.find((e) => e.type === "store-error")).toMatchObject({ operation: "schedule", error: expect.stringContaining("connection reset") });
    await waitForSleepers(clock, 2);
    clock.advance(1_000);
    await waitUntil("a tick fired after the error", () => events.some((e) => e.type === "schedule-fired"));
  });

  it("refuses a schedulePollMs that is not a whole number of milliseconds, naming it", () => {
    const { store } = ctx();
    for (const bad of [0, -1, 1.5, Number.NaN]) {
      expect(() => new Worker({ store, handlers: { t: async () => undefined }, schedulePollMs: bad })).toThrow(InvalidArgumentError);
    }
    expect(() => new Worker({ store, handlers: { t: async () => undefined }, schedulePollMs: 0 })).toThrow(/schedulePollMs/);
  });
});
