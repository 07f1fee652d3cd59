// The Worker's owner heartbeat: it registers before it claims, beats and reaps peers whose
// heartbeat stopped (their leases then taken at once), and signs off when it stops. Its options
// are checked, each error naming the option and what it takes.

import { expect, it } from "vitest";
import { InvalidArgumentError } from "../../src/outbox/errors.js";
import { Worker } from "../../src/outbox/worker.js";
import { describeEachStore, enqueueMessage, useStoreHarness } from "../conformance/stores.js";
import { advanceUntil } from "../relay/support.js";
import { useWorkers, waitForStatus, waitUntil } from "./support.js";

describeEachStore("worker owner heartbeat", (factory) => {
  const ctx = useStoreHarness(factory);
  const workers = useWorkers(() => ctx().clock);

  it("registers before its first claim, reaps a peer whose heartbeat stopped and takes its message at once, and signs off on stop", async () => {
    const { store, clock } = ctx();
    const message = await enqueueMessage(store);
    // A peer that registered, claimed under a 30 s lease, and died (no more beats).
    await store.heartbeat("dead-peer", { aliveMs: 3_000 });
    await store.claim("dead-peer", { limit: 1, leaseMs: 30_000 });
    clock.advance(3_000);

    const worker = await workers.start({
      store,
      clock,
      name: "survivor",
      handlers: { "test.message": async () => undefined },
      heartbeatMs: 1_000,
      ownerDeadAfterMs: 3_000,
      leaseMs: 30_000,
      pollIntervalMs: 1_000,
      wakeOnNewMessages: false,
    });
    // Its first beat reaped the peer, and it claimed the message at once: 3 s after the claim, not 30.
    const done = await waitForStatus(store, message.id, "processed");
    expect(done).toMatchObject({ lockedBy: "survivor", leaseToken: 2, attempts: 2 });
    expect(await store.owners()).toEqual([
      expect.objectContaining({ owner: "survivor", kind: "worker", takes: ["test.message"], aliveUntil: new Date(clock.now().getTime() + 3_000) }),
    ]);
    await worker.stop();
    expect(await store.owners()).toEqual([]);
  });

  it("stays alive to its peers while it stops: a handler finishing in its grace is never reaped and run twice", async () => {
    const { store, clock } = ctx();
    const message = await enqueueMessage(store);
    let release!: () => void;
    const handlerDone = new Promise<void>((resolve) => (release = resolve));
    let calls = 0;
    const worker = await workers.start({
      store,
      clock,
      name: "stopping",
      handlers: {
        "test.message": async () => {
          calls += 1;
          await handlerDone;
        },
      },
      heartbeatMs: 1_000,
      ownerDeadAfterMs: 3_000,
      leaseMs: 30_000,
      pollIntervalMs: 1_000,
      wakeOnNewMessages: false,
    });
    await waitUntil("the handler runs", () => calls === 1);
    const stopped = worker.stop({ graceMs: 20_000 });
    // Well past its dead-after, within its grace: a peer's reap finds it alive, and nothing to claim.
    await waitUntil("the last beat", async () => ((await store.owners())[0]?.aliveUntil.getTime() ?? 0) >= clock.now().getTime() + 20_000);
    clock.advance(10_000);
    expect(await store.reapDeadOwners("peer")).toEqual([]);
    expect(await store.claim("peer", { limit: 1, leaseMs: 30_000 })).toEqual([]);
    release();
    await stopped;
    expect(await store.getMessage(message.id)).toMatchObject({ status: "processed", lockedBy: "stopping", leaseToken: 1 });
    expect(calls).toBe(1);
  });

  it("keeps no heartbeat row when given a ManualClock without heartbeatMs, or heartbeatMs false", async () => {
    const { store, clock } = ctx();
    const message = await enqueueMessage(store);
    await workers.start({ store, clock, name: "quiet", handlers: { "test.message": async () => undefined }, wakeOnNewMessages: false });
    await workers.start({ store, clock, name: "off", handlers: { other: async () => undefined }, heartbeatMs: false, wakeOnNewMessages: false });
    // The clock moves (a claim that failed under load is tried again at the next poll), and still no beat.
    await advanceUntil(clock, waitForStatus(store, message.id, "processed"));
    await waitUntil("both claim loops ran", async () => (await store.owners()).length === 0);
    expect(await store.owners()).toEqual([]);
  });

  it("refuses heartbeat options out of range, naming the option", () => {
    const { store } = ctx();
    const make = (extra: Record<string, unknown>) => () => new Worker({ store, handlers: { t: async () => undefined }, ...extra });
    expect(make({ heartbeatMs: 0 })).toThrow(InvalidArgumentError);
    expect(make({ heartbeatMs: 0 })).toThrow(/heartbeatMs must be a whole number of milliseconds from 1/);
    expect(make({ ownerDeadAfterMs: 1.5 })).toThrow(/ownerDeadAfterMs must be a whole number/);
    expect(make({ heartbeatMs: 2_000, ownerDeadAfterMs: 3_000 })).toThrow(
      /ownerDeadAfterMs \(3000\) must be at least twice the heartbeat.*give it 4000 or more/,
    );
    expect(make({ pollIntervalMs: 5_000, ownerDeadAfterMs: 9_000 })).toThrow(/give it 10000 or more/);
    expect(make({ ownerKind: "" })).toThrow(/ownerKind/);
    // Without ownerDeadAfterMs, a long poll makes the default longer instead of failing.
    expect(new Worker({ store, handlers: { t: async () => undefined }, pollIntervalMs: 60_000 }).ownerDeadAfterMs).toBe(180_000);
    expect(new Worker({ store, handlers: { t: async () => undefined } })).toMatchObject({ heartbeatMs: 2_000, ownerDeadAfterMs: 10_000 });
  });
});
