// The worker's lease heartbeat: a slow handler keeps its lease for as long as it runs; a handler
// whose lease is lost is told through its AbortSignal and cannot write its result.

import { expect, it } from "vitest";
import { LeaseLostError, ShutdownError } from "../../src/outbox/errors.js";
import type { OutboxStore } from "../../src/outbox/store.js";
import { at, describeEachStore, enqueueMessage, expectFinished, mustGet, useStoreHarness } from "../conformance/stores.js";
import { defined, EventLog, Gate, waitForSleepers, waitUntil, useWorkers, withOverrides } from "./support.js";

const LEASE_MS = 3_000;
const RENEW_MS = 1_000;
/** Long enough that the claim loop never polls on its own while these tests move the clock. */
const NEVER_POLL_MS = 1_000_000;

describeEachStore("worker lease heartbeat", (factory) => {
  const ctx = useStoreHarness(factory);
  const workers = useWorkers(() => ctx().clock);

  /** A worker whose one handler blocks, heartbeat on and its claim loop quiet: returns it once its first handler runs. */
  async function startBlocked(store: OutboxStore<unknown>, name: string) {
    const { clock } = ctx();
    const slow = workers.blocking();
    const worker = await workers.start({
      store,
      clock,
      name,
      handlers: { "test.message": slow.handler },
      leaseMs: LEASE_MS,
      renewIntervalMs: RENEW_MS,
      pollIntervalMs: NEVER_POLL_MS,
      wakeOnNewMessages: false,
    });
    await slow.waitForCalls(1);
    await waitForSleepers(clock, 2); // the claim loop's poll and the handler's heartbeat
    return { worker, slow, first: slow.call(0) };
  }

  it("renews a slow handler's lease on every beat, so it outlives several lease lengths and then completes with token 1", async () => {
    const { store, clock, harness } = ctx();
    const log = new EventLog(store);
    const message = await enqueueMessage(store);
    const { worker, slow } = await startBlocked(store, "slow-worker");
    const intruder = await harness.connect();

    const beats = 10; // 10 s: more than three lease lengths
    for (let beat = 1; beat <= beats; beat += 1) {
      clock.advance(RENEW_MS);
      await log.waitFor("renewed", beat);
      await waitForSleepers(clock, 2); // the heartbeat sleeps again before the next step
      const now = clock.now().getTime();
      expect(log.of("renewed").at(-1)).toMatchObject({ owner: "slow-worker", messageId: message.id, token: 1, lockedUntil: new Date(now + LEASE_MS) });
      expect(await mustGet(store, message.id)).toMatchObject({
        status: "processing",
        lockedBy: "slow-worker",
        leaseToken: 1,
        lockedUntil: new Date(now + LEASE_MS),
      });
      // Without the renewals the first lease would have ended at 3 s: nobody else may take it.
      expect(await intruder.claim("intruder", { limit: 10, leaseMs: LEASE_MS })).toEqual([]);
    }
    expect(clock.now()).toEqual(at(beats * RENEW_MS));
    expect(slow.calls).toHaveLength(1);
    expect(slow.call(0).signal.aborted).toBe(false);

    slow.call(0).release({ finalize: (tx) => harness.businessWrite(tx, "slow-result") });
    await log.waitFor("completed");
    expect(await mustGet(store, message.id)).toMatchObject({
      status: "processed",
      lockedBy: "slow-worker",
      leaseToken: 1,
      attempts: 1,
      processedAt: at(beats * RENEW_MS),
    });
    expect(log.of("completed")).toEqual([expect.objectContaining({ owner: "slow-worker", messageId: message.id, token: 1 })]);
    expect(await harness.countBusinessRows("slow-result")).toBe(1);
    expect(log.count("lease-lost")).toBe(0);
    expect(log.count("claim-won")).toBe(1);
    expect(worker.inFlight).toBe(0);
  });

  it("aborts the signal of a handler whose lease was reclaimed, refuses its late completion, and lets the new owner complete", async () => {
    const { store, clock, harness } = ctx();
    const log = new EventLog(store);
    const message = await enqueueMessage(store);
    // Hold the heartbeat's renew until the test lets it through: the reclaim lands first.
    const renewGate = new Gate();
    let renewCalls = 0;
    const held = withOverrides(store, {
      renew: async (lease, leaseMs) => {
        renewCalls += 1;
        await renewGate.promise;
        return store.renew(lease, leaseMs);
      },
    });
    const { worker, first } = await startBlocked(held, "stalled-worker");
    expect(first.lease.token).toBe(1);

    clock.advance(LEASE_MS); // one jump to the lease's end: the heartbeat wakes once, its renew is held
    await waitUntil("the heartbeat's renew", () => renewCalls === 1);
    const rescuer = await harness.connect();
    const [taken] = await rescuer.claim("rescuer", { limit: 1, leaseMs: LEASE_MS });
    expect(taken).toMatchObject({ messageId: message.id, owner: "rescuer", token: 2, reclaimedFrom: "stalled-worker" });
    expect(first.signal.aborted).toBe(false);

    renewGate.open();
    await waitUntil("the first handler's signal to abort", () => first.signal.aborted);
    expect(first.signal.reason).toBeInstanceOf(LeaseLostError);
    expect(first.signal.reason).toMatchObject({ messageId: message.id, token: 1 });
    expect(log.of("lease-lost")).toEqual([
      expect.objectContaining({ owner: "stalled-worker", messageId: message.id, token: 1, operation: "renew", heldBy: "rescuer", currentToken: 2 }),
    ]);

    // The handler ignores the signal and returns its business write anyway: it must not commit.
    first.release({ finalize: (tx) => harness.businessWrite(tx, "stale-result"), summary: "late" });
    await log.waitFor("lease-lost", 2);
    expect(log.of("lease-lost")[1]).toMatchObject({ owner: "stalled-worker", token: 1, operation: "complete", heldBy: "rescuer", currentToken: 2 });
    await log.waitFor("processing-finished");
    expect(log.of("processing-finished")).toEqual([expect.objectContaining({ owner: "stalled-worker", token: 1, result: "lease-lost" })]);
    await waitUntil("the worker to drop the handler", () => worker.inFlight === 0);
    expect(await harness.countBusinessRows("stale-result")).toBe(0);
    // The worker recorded no failure: the message is the rescuer's, as it was.
    expect(await mustGet(store, message.id)).toMatchObject({ status: "processing", lockedBy: "rescuer", leaseToken: 2, attempts: 2, lastError: null });
    expect(log.count("retry-scheduled") + log.count("dead") + log.count("completed")).toBe(0);
    expect(renewCalls).toBe(1); // the heartbeat stopped at the loss

    const done = await rescuer.complete(defined(taken, "the rescuer's lease"), (tx) => harness.businessWrite(tx, "fresh-result"));
    expect(done.outcome).toBe("completed");
    expect(await mustGet(store, message.id)).toMatchObject({ status: "processed", lockedBy: "rescuer", leaseToken: 2, attempts: 2 });
    expect(await harness.countBusinessRows("fresh-result")).toBe(1);
    expect(await harness.countBusinessRows("stale-result")).toBe(0);
  });

  it("aborts the signal of a handler whose lease ended before its heartbeat renewed it, though nobody reclaimed it; its late result still commits once", async () => {
    const { store, clock, harness } = ctx();
    const log = new EventLog(store);
    const message = await enqueueMessage(store);
    const { first } = await startBlocked(store, "paused-worker");

    clock.advance(LEASE_MS); // a pause: the heartbeat wakes once, at the lease's end, too late
    await waitUntil("the handler's signal to abort", () => first.signal.aborted);
    expect(first.signal.reason).toBeInstanceOf(LeaseLostError);
    expect(String(first.signal.reason)).toMatch(/it expired before a heartbeat renewed it/);
    expect(log.of("lease-lost")).toEqual([
      expect.objectContaining({ owner: "paused-worker", messageId: message.id, token: 1, operation: "renew", heldBy: "paused-worker", currentToken: 1 }),
    ]);
    expect(log.count("renewed")).toBe(0);

    // Nobody took the message meanwhile: its token is still current, so the result commits, once.
    first.release({ finalize: (tx) => harness.businessWrite(tx, "late-result"), summary: "late" });
    await log.waitFor("completed");
    expect(await harness.countBusinessRows("late-result")).toBe(1);
    await expectFinished(store, factory, message.id);
  });

  it("records no failure for a handler that gives up when its signal aborts", async () => {
    const { store, clock, harness } = ctx();
    const log = new EventLog(store);
    const message = await enqueueMessage(store);
    const renewGate = new Gate();
    const held = withOverrides(store, {
      renew: async (lease, leaseMs) => {
        await renewGate.promise;
        return store.renew(lease, leaseMs);
      },
    });
    let sawAbort: unknown;
    const worker = await workers.start({
      store: held,
      clock,
      name: "polite-worker",
      handlers: {
        "test.message": (_message, { signal }) =>
          new Promise((_resolve, reject) => {
            signal.addEventListener(
              "abort",
              () => {
                sawAbort = signal.reason;
                reject(new Error("gave up: lease lost"));
              },
              { once: true },
            );
          }),
      },
      leaseMs: LEASE_MS,
      renewIntervalMs: RENEW_MS,
      pollIntervalMs: NEVER_POLL_MS,
      wakeOnNewMessages: false,
    });
    await log.waitFor("processing-started");
    await waitForSleepers(clock, 2);
    clock.advance(LEASE_MS);
    const rescuer = await harness.connect();
    expect(await rescuer.claim("rescuer", { limit: 1, leaseMs: LEASE_MS })).toHaveLength(1);
    renewGate.open();

    await log.waitFor("processing-finished");
    await waitUntil("the worker to drop the handler", () => worker.inFlight === 0);
    expect(sawAbort).toBeInstanceOf(LeaseLostError);
    expect(log.of("processing-finished")[0]).toMatchObject({ token: 1, result: "failed", detail: "gave up: lease lost" });
    // No fail() was attempted with the stale token, and the row is untouched.
    expect(log.of("lease-lost").map((e) => e.operation)).toEqual(["renew"]);
    expect(await mustGet(store, message.id)).toMatchObject({ status: "processing", lockedBy: "rescuer", leaseToken: 2, attempts: 2, lastError: null });
  });

  // The DESIGN's "same worker holds a stale and a fresh claim of one message": renewals fail, the
  // lease runs out under a running handler, and the worker's own loop reclaims the message. Each
  // claim must be tracked on its own, so the stale handler's end does not forget the fresh one.
  it("keeps tracking a fresh claim of the same message after the stale handler ends, and releases it on stop", async () => {
    const { store, clock } = ctx();
    const log = new EventLog(store);
    const message = await enqueueMessage(store);
    const broken = withOverrides(store, {
      renew: async () => {
        throw new Error("connection reset");
      },
    });
    const slow = workers.blocking();
    const worker = await workers.start({
      store: broken,
      clock,
      name: "double-worker",
      concurrency: 2,
      handlers: { "test.message": slow.handler },
      leaseMs: LEASE_MS,
      renewIntervalMs: RENEW_MS,
      pollIntervalMs: NEVER_POLL_MS,
      wakeOnNewMessages: false,
    });
    await slow.waitForCalls(1);
    await waitForSleepers(clock, 2);
    clock.advance(LEASE_MS); // the renew fails, the lease runs out
    await log.waitFor("store-error");
    worker.wake(); // the worker's own loop reclaims the expired message
    await slow.waitForCalls(2);
    expect(slow.call(1).lease).toMatchObject({ messageId: message.id, token: 2, reclaimedFrom: "double-worker" });

    slow.call(0).release({}); // the stale handler ends: its completion is refused
    await log.waitFor("processing-finished", 1, (e) => e.token === 1);
    await waitUntil("the stale handler's bookkeeping", () => slow.call(0).finished);
    await waitForSleepers(clock, 2, () => log.count("lease-lost", (e) => e.operation === "complete") === 1);

    // The fresh handler (token 2) is still running.
    expect(slow.call(1).finished).toBe(false);
    expect(worker.inFlight).toBe(1);
    await worker.stop({ graceMs: 0 });
    expect(slow.call(1).signal.reason).toBeInstanceOf(ShutdownError);
    expect(await mustGet(store, message.id)).toMatchObject({ status: "pending", lockedBy: null });
  });
});
