// Graceful shutdown (stop claiming, let running handlers finish within the grace period, release
// the rest) and store errors (reported, backed off, survived).

import { expect, it } from "vitest";
import { InvalidArgumentError, ShutdownError } from "../../src/outbox/errors.js";
import { Worker } from "../../src/outbox/worker.js";
import { at, describeEachStore, enqueueMessage, mustGet, START, useStoreHarness } from "../conformance/stores.js";
import { EventLog, settlesWithin, waitForSleepers, waitForStatus, useWorkers, withOverrides } from "./support.js";

const LEASE_MS = 30_000;
const NEVER_POLL_MS = 10_000_000;
const GRACE_MS = 5_000;

describeEachStore("worker graceful shutdown", (factory) => {
  const ctx = useStoreHarness(factory);
  const workers = useWorkers(() => ctx().clock);

  it("lets handlers finish within the grace period, then aborts and releases the rest with their attempts given back, and stops claiming", async () => {
    const { store, clock, harness } = ctx();
    const log = new EventLog(store);
    // C was claimed once before, by an owner that crashed: it has one attempt already.
    const c = await enqueueMessage(store, { payload: { name: "C" } });
    const crasher = await harness.connect();
    expect(await crasher.claim("crashed", { limit: 1, leaseMs: 1_000 })).toHaveLength(1);
    clock.advance(1_000);
    const a = await enqueueMessage(store, { payload: { name: "A" } });
    const b = await enqueueMessage(store, { payload: { name: "B" } });
    const startedAt = clock.now().getTime();

    const slow = workers.blocking();
    const worker = await workers.start({
      store,
      clock,
      name: "stopping-worker",
      concurrency: 3,
      handlers: { "test.message": slow.handler },
      leaseMs: LEASE_MS,
      shutdownGraceMs: GRACE_MS,
      pollIntervalMs: NEVER_POLL_MS,
      wakeOnNewMessages: true,
    });
    await slow.waitForCalls(3);
    await waitForSleepers(clock, 4); // the poll and three heartbeats (every 10 s)
    const callOf = (id: string) => {
      const call = slow.calls.find((candidate) => candidate.message.id === id);
      if (call === undefined) throw new Error(`no handler call for message ${id}`);
      return call;
    };
    expect(callOf(c.id).message.attempts).toBe(2);

    let stopped = false;
    const stopping = worker.stop().then(() => {
      stopped = true;
    });
    // The loop ends at once; then the grace period starts on the clock (three heartbeats + the grace timer).
    await waitForSleepers(clock, 4);
    // A message enqueued after stop() is not claimed, though the enqueue signals new messages.
    const late = await enqueueMessage(store, { payload: { name: "late" } });

    clock.advance(GRACE_MS - 1_000);
    callOf(a.id).release({ finalize: (tx) => harness.businessWrite(tx, "A") }); // finishes within the grace period
    await waitForStatus(store, a.id, "processed");
    await waitForSleepers(clock, 3, () => worker.inFlight === 2);
    expect(stopped).toBe(false);
    expect(callOf(b.id).signal.aborted).toBe(false);

    clock.advance(1_000); // the grace period is over
    await stopping;
    const stoppedAt = clock.now();
    expect(stoppedAt).toEqual(new Date(startedAt + GRACE_MS));

    expect(await mustGet(store, a.id)).toMatchObject({ status: "processed", lockedBy: "stopping-worker", leaseToken: 1, attempts: 1 });
    expect(await harness.countBusinessRows("A")).toBe(1);
    for (const call of [callOf(b.id), callOf(c.id)]) {
      expect(call.signal.aborted).toBe(true);
      expect(call.signal.reason).toBeInstanceOf(ShutdownError);
    }
    expect(await mustGet(store, b.id)).toMatchObject({
      status: "pending",
      attempts: 0,
      leaseToken: 1,
      lockedBy: null,
      lockedUntil: null,
      availableAt: stoppedAt,
    });
    expect(await mustGet(store, c.id)).toMatchObject({
      status: "pending",
      attempts: 1,
      leaseToken: 2,
      lockedBy: null,
      lockedUntil: null,
      availableAt: stoppedAt,
    });
    expect(await mustGet(store, late.id)).toMatchObject({ status: "pending", attempts: 0, leaseToken: 0 });
    expect(
      log
        .of("released")
        .map((e) => e.messageId)
        .sort(),
    ).toEqual([b.id, c.id].sort());
    expect(
      log
        .of("claim-won")
        .map((e) => e.messageId)
        .sort(),
    ).toEqual([a.id, b.id, c.id].sort());
    // At most the abandoned handlers' heartbeats wait on the clock: no claim loop, no grace timer.
    expect(clock.sleeping).toBeLessThanOrEqual(2);

    // Another worker takes them at once, long before the 30 s leases would have run out.
    const successor = await harness.connect();
    const taken = await successor.claim("successor", { limit: 10, leaseMs: LEASE_MS });
    expect(Object.fromEntries(taken.map((lease) => [lease.messageId, { token: lease.token, reclaimedFrom: lease.reclaimedFrom }]))).toEqual({
      [b.id]: { token: 2, reclaimedFrom: null },
      [c.id]: { token: 3, reclaimedFrom: null },
      [late.id]: { token: 1, reclaimedFrom: null },
    });
    expect(clock.now()).toEqual(stoppedAt);

    // The abandoned handlers return anyway: their results are refused.
    callOf(b.id).release({ finalize: (tx) => harness.businessWrite(tx, "B") });
    callOf(c.id).release({ finalize: (tx) => harness.businessWrite(tx, "C") });
    await log.waitFor("lease-lost", 2, (e) => e.operation === "complete");
    expect(await harness.countBusinessRows("B")).toBe(0);
    expect(await harness.countBusinessRows("C")).toBe(0);
    expect(log.count("claim-won", (e) => e.owner === "stopping-worker")).toBe(3);
  });

  it("waits for handlers that finish within the grace period and releases nothing", async () => {
    const { store, clock } = ctx();
    const log = new EventLog(store);
    const message = await enqueueMessage(store);
    const slow = workers.blocking();
    const worker = await workers.start({
      store,
      clock,
      concurrency: 2,
      handlers: { "test.message": slow.handler },
      leaseMs: LEASE_MS,
      shutdownGraceMs: GRACE_MS,
      pollIntervalMs: NEVER_POLL_MS,
      wakeOnNewMessages: true,
    });
    await slow.waitForCalls(1);
    await waitForSleepers(clock, 2);
    const stopping = worker.stop();
    await waitForSleepers(clock, 2); // the heartbeat and the grace timer
    slow.call(0).release({});
    expect(await settlesWithin(stopping, 5_000)).toBe(true);
    expect(await mustGet(store, message.id)).toMatchObject({ status: "processed", attempts: 1 });
    expect(log.count("released")).toBe(0);
    expect(slow.call(0).signal.aborted).toBe(false);
    expect(clock.now()).toEqual(START);
    expect(clock.sleeping).toBe(0);
  });
});

describeEachStore("worker store errors", (factory) => {
  const ctx = useStoreHarness(factory);
  const workers = useWorkers(() => ctx().clock);

  it("reports a failed claim as a store-error event, backs off on the clock, and carries on", async () => {
    const { store, clock } = ctx();
    const log = new EventLog(store);
    const message = await enqueueMessage(store);
    const claimTimes: number[] = [];
    const flaky = withOverrides(store, {
      claim: async (owner, options) => {
        claimTimes.push(clock.now().getTime() - START.getTime());
        if (claimTimes.length <= 2) throw new Error("connection reset by peer");
        return store.claim(owner, options);
      },
    });
    await workers.start({
      store: flaky,
      clock,
      name: "resilient",
      handlers: { "test.message": async () => ({}) },
      leaseMs: LEASE_MS,
      pollIntervalMs: NEVER_POLL_MS,
      wakeOnNewMessages: false,
    });

    await waitForSleepers(clock, 1, () => log.count("store-error") === 1);
    expect(log.of("store-error")).toEqual([
      { type: "store-error", at: START, owner: "resilient", operation: "claim", error: "Error: connection reset by peer" },
    ]);
    clock.advance(99);
    expect(clock.sleeping).toBe(1); // still backing off
    clock.advance(1);
    await waitForSleepers(clock, 1, () => log.count("store-error") === 2);
    expect(claimTimes).toEqual([0, 100]);
    clock.advance(199); // the backoff doubled
    expect(clock.sleeping).toBe(1);
    clock.advance(1);
    await waitForStatus(store, message.id, "processed");
    expect(claimTimes.slice(0, 3)).toEqual([0, 100, 300]);
    expect(log.count("store-error")).toBe(2);
    expect(log.of("claim-won")).toEqual([expect.objectContaining({ owner: "resilient", at: at(300) })]);
  });

  it("keeps the lease through a failed renewal when the next one lands", async () => {
    const { store, clock, harness } = ctx();
    const log = new EventLog(store);
    const message = await enqueueMessage(store);
    let renewCalls = 0;
    const flaky = withOverrides(store, {
      renew: async (lease, leaseMs) => {
        renewCalls += 1;
        if (renewCalls === 1) throw new Error("connection reset by peer");
        return store.renew(lease, leaseMs);
      },
    });
    const slow = workers.blocking();
    await workers.start({
      store: flaky,
      clock,
      name: "resilient",
      handlers: { "test.message": slow.handler },
      leaseMs: 3_000,
      renewIntervalMs: 1_000,
      pollIntervalMs: NEVER_POLL_MS,
      wakeOnNewMessages: false,
    });
    await slow.waitForCalls(1);
    await waitForSleepers(clock, 2);
    clock.advance(1_000);
    await waitForSleepers(clock, 2, () => log.count("store-error") === 1);
    expect(log.of("store-error")[0]).toMatchObject({ operation: "renew", error: "Error: connection reset by peer", at: at(1_000) });
    clock.advance(1_000);
    await log.waitFor("renewed");
    expect(log.of("renewed")[0]).toMatchObject({ token: 1, lockedUntil: at(5_000) });
    expect(slow.call(0).signal.aborted).toBe(false);
    slow.call(0).release({ finalize: (tx) => harness.businessWrite(tx, "kept") });
    await waitForStatus(store, message.id, "processed");
    expect(await harness.countBusinessRows("kept")).toBe(1);
    expect(log.count("lease-lost")).toBe(0);
  });

  it("leaves a message whose failure could not be recorded to expire, then takes it again and finishes it", async () => {
    const { store, clock } = ctx();
    const log = new EventLog(store);
    const message = await enqueueMessage(store);
    const flaky = withOverrides(store, {
      fail: async () => {
        throw new Error("connection reset by peer");
      },
    });
    let runs = 0;
    const worker = await workers.start({
      store: flaky,
      clock,
      name: "resilient",
      handlers: {
        "test.message": async () => {
          runs += 1;
          if (runs === 1) throw new Error("provider timeout");
          return {};
        },
      },
      leaseMs: LEASE_MS,
      pollIntervalMs: LEASE_MS,
      wakeOnNewMessages: false,
    });
    await waitForSleepers(clock, 1, () => log.count("store-error") === 1 && worker.inFlight === 0);
    expect(log.of("store-error")[0]).toMatchObject({ operation: "fail", error: "Error: connection reset by peer" });
    expect(await mustGet(store, message.id)).toMatchObject({ status: "processing", attempts: 1, leaseToken: 1, lockedUntil: at(LEASE_MS) });
    clock.advance(LEASE_MS); // the lease runs out; the next poll takes it back
    const done = await waitForStatus(store, message.id, "processed");
    expect(done).toMatchObject({ attempts: 2, leaseToken: 2, lockedBy: "resilient" });
    expect(log.of("claim-won")[1]).toMatchObject({ token: 2, reclaimedFrom: "resilient", at: at(LEASE_MS) });
  });

  it("stops promptly while backing off after a store error", async () => {
    const { store, clock } = ctx();
    const log = new EventLog(store);
    const broken = withOverrides(store, {
      claim: async () => {
        throw new Error("connection refused");
      },
    });
    const worker = await workers.start({
      store: broken,
      clock,
      handlers: { "test.message": async () => ({}) },
      leaseMs: LEASE_MS,
      pollIntervalMs: NEVER_POLL_MS,
      wakeOnNewMessages: false,
    });
    await waitForSleepers(clock, 1, () => log.count("store-error") === 1);
    expect(await settlesWithin(worker.stop(), 1_000)).toBe(true);
  });
});

describeEachStore("worker lifecycle", (factory) => {
  const ctx = useStoreHarness(factory);
  const workers = useWorkers(() => ctx().clock);

  it("refuses a second start() made while the first is still subscribing, so only one claim loop runs", async () => {
    const { store, clock } = ctx();
    const unsubscribes: (() => Promise<void>)[] = [];
    const tracked = withOverrides(store, {
      onNewMessages: async (wake) => {
        const unsubscribe = await store.onNewMessages(wake);
        unsubscribes.push(unsubscribe);
        return unsubscribe;
      },
    });
    const worker = workers.create({
      store: tracked,
      clock,
      handlers: { "test.message": async () => ({}) },
      leaseMs: LEASE_MS,
      pollIntervalMs: NEVER_POLL_MS,
      wakeOnNewMessages: true,
    });
    try {
      const results = await Promise.allSettled([worker.start(), worker.start()]);
      expect(results.map((result) => result.status)).toEqual(["fulfilled", "rejected"]);
      expect(unsubscribes).toHaveLength(1);
    } finally {
      await worker.stop({ graceMs: 0 });
      for (const unsubscribe of unsubscribes) await unsubscribe(); // a leaked subscription must not outlive the test
      clock.advance(NEVER_POLL_MS); // a leaked claim loop wakes, sees the worker stopping, and ends
    }
  });

  it("refuses start() once started", async () => {
    const { store, clock } = ctx();
    const worker = await workers.start({ store, clock, handlers: {}, types: ["t"], pollIntervalMs: NEVER_POLL_MS, wakeOnNewMessages: true });
    await expect(worker.start()).rejects.toBeInstanceOf(InvalidArgumentError);
  });
});

describeEachStore("worker lifecycle: stop before start", (factory) => {
  const ctx = useStoreHarness(factory);

  it("refuses to start a worker that was stopped first, and subscribes to nothing", async () => {
    const { store, clock } = ctx();
    let subscribed = 0;
    const tracked = withOverrides(store, {
      onNewMessages: async (wake) => {
        subscribed += 1;
        return store.onNewMessages(wake);
      },
    });
    const worker = new Worker({ store: tracked, clock, handlers: {}, types: ["t"], leaseMs: LEASE_MS, pollIntervalMs: NEVER_POLL_MS });
    await worker.stop({ graceMs: 0 });
    await expect(worker.start()).rejects.toThrow(/stopped before it started/);
    expect(subscribed).toBe(0);
  });
});
