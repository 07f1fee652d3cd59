// How the worker claims: never more than its free slots, never more handlers at once than its
// concurrency, and promptly when a message is enqueued (without waiting for a poll).

import { expect, it, vi } from "vitest";
import type { OutboxStore } from "../../src/outbox/store.js";
import type { Lease } from "../../src/outbox/types.js";
import { Worker } from "../../src/outbox/worker.js";
import { describeEachStore, enqueueMessage, enqueueMessages, START, useStoreHarness } from "../conformance/stores.js";
import { EventLog, waitForSleepers, waitForStatus, waitUntil, useWorkers, withOverrides } from "./support.js";

const LEASE_MS = 30_000;
const NEVER_POLL_MS = 10_000_000;

interface ClaimCall {
  readonly limit: number;
  /** Handlers the worker was running when it asked. */
  readonly inFlight: number;
  readonly won: readonly Lease[];
  /** claim-won events the store emitted during this call. */
  readonly wonEvents: number;
}

describeEachStore("worker claiming", (factory) => {
  const ctx = useStoreHarness(factory);
  const workers = useWorkers(() => ctx().clock);

  it("runs at most `concurrency` handlers at once and never claims more than its free slots", async () => {
    const { store, clock } = ctx();
    const log = new EventLog(store);
    const concurrency = 3;
    const total = 8;
    const messages = await enqueueMessages(store, clock, total);
    const calls: ClaimCall[] = [];
    let worker: Worker<unknown> | undefined;
    const counted: OutboxStore<unknown> = withOverrides(store, {
      claim: async (owner, options) => {
        const inFlight = worker?.inFlight ?? -1;
        const before = log.count("claim-won");
        const won = await store.claim(owner, options);
        calls.push({ limit: options.limit, inFlight, won, wonEvents: log.count("claim-won") - before });
        return won;
      },
    });
    const slow = workers.blocking();
    worker = workers.create({
      store: counted,
      clock,
      name: "bounded",
      concurrency,
      handlers: { "test.message": slow.handler },
      leaseMs: LEASE_MS,
      pollIntervalMs: NEVER_POLL_MS,
      wakeOnNewMessages: false,
    });
    await worker.start();

    await slow.waitForCalls(concurrency);
    // Full: the loop sleeps (one poll, three heartbeats) instead of claiming more.
    await waitForSleepers(clock, 1 + concurrency);
    expect(calls).toEqual([expect.objectContaining({ limit: concurrency, inFlight: 0, wonEvents: concurrency })]);
    expect(await store.countByStatus()).toMatchObject({ processing: concurrency, pending: total - concurrency });
    expect(slow.calls.map((c) => c.message.id)).toEqual(messages.slice(0, concurrency).map((m) => m.id)); // oldest first

    // Free one slot at a time, then two at once, then the rest: each freed slot is refilled
    // without any poll (the clock never moves).
    let released = 0;
    const release = async (count: number) => {
      for (let n = 0; n < count; n += 1) slow.call(released + n).release({});
      released += count;
      const expected = Math.min(total, released + concurrency);
      await slow.waitForCalls(expected);
      await log.waitFor("completed", released);
      await waitUntil("the worker to settle", () => worker!.inFlight === expected - released && slow.running === expected - released);
    };
    await release(1);
    await release(1);
    await release(2);
    await release(1);
    await release(3);
    await waitUntil("every message processed", async () => (await store.countByStatus()).processed === total);

    expect(slow.calls).toHaveLength(total);
    expect(slow.maxRunning).toBe(concurrency);
    expect(new Set(slow.calls.map((c) => c.message.id)).size).toBe(total);
    expect(clock.now()).toEqual(new Date(START.getTime() + total - 1)); // only enqueueMessages moved it
    for (const call of calls) {
      expect(call.limit, `claim asked for ${call.limit} with ${call.inFlight} running`).toBe(concurrency - call.inFlight);
      expect(call.limit).toBeGreaterThanOrEqual(1);
      expect(call.won.length).toBeLessThanOrEqual(call.limit);
      expect(call.wonEvents).toBe(call.won.length);
    }
    expect(calls.reduce((sum, call) => sum + call.won.length, 0)).toBe(total);
    expect(log.count("claim-won")).toBe(total);
  });

  it("claims a message enqueued through store.transaction at once, without a poll, when woken by new messages", async () => {
    const { store, clock, harness } = ctx();
    const log = new EventLog(store);
    const handled: string[] = [];
    const worker = await workers.start({
      store,
      clock,
      name: "listener",
      handlers: {
        "test.message": async (message) => {
          handled.push(message.id);
          return {};
        },
      },
      leaseMs: LEASE_MS,
      pollIntervalMs: 60_000,
      wakeOnNewMessages: true,
    });
    await log.waitFor("claim-empty");
    await waitForSleepers(clock, 1); // idle until the next poll, a minute away, which never comes

    const message = await store.transaction(async (tx) => {
      const enqueued = await store.enqueue(tx, { type: "test.message", payload: { n: 1 } });
      await harness.businessWrite(tx, "payment-1");
      return enqueued;
    });
    await waitForStatus(store, message.id, "processed");
    expect(handled).toEqual([message.id]);
    expect(clock.now()).toEqual(START);
    expect(log.of("claim-won")).toEqual([expect.objectContaining({ owner: "listener", messageId: message.id, at: START })]);
    // The commit is visible to the poll above before the worker has read its own COMMIT's answer.
    await waitUntil("the worker to be done with the message", () => worker.inFlight === 0);
  });

  it("completes messages whose handler returns nothing, with and without group commit", async () => {
    const { store, clock } = ctx();
    const log = new EventLog(store);
    for (const groupCommit of [true, false]) {
      const ran: string[] = [];
      const messages = await enqueueMessages(store, clock, 3);
      const worker = await workers.start({
        store,
        clock,
        name: `quiet-${groupCommit}`,
        groupCommit,
        handlers: {
          "test.message": async (message) => {
            ran.push(message.id); // returns undefined
          },
        },
        leaseMs: LEASE_MS,
        pollIntervalMs: 60_000,
        wakeOnNewMessages: false,
      });
      for (const message of messages) await waitForStatus(store, message.id, "processed");
      await waitUntil("the worker to be done with its messages", () => worker.inFlight === 0);
      expect(ran.sort()).toEqual(messages.map((m) => m.id).sort());
      await worker.stop();
    }
    expect(log.count("retry-scheduled")).toBe(0);
    expect(log.count("processing-finished", (e) => e.result !== "completed")).toBe(0);
  });

  it("is woken by a message another store connection enqueues", async () => {
    const { store, clock, harness } = ctx();
    const log = new EventLog(store);
    await workers.start({
      store,
      clock,
      name: "listener",
      handlers: { "test.message": async () => ({}) },
      leaseMs: LEASE_MS,
      pollIntervalMs: 60_000,
      wakeOnNewMessages: true,
    });
    await log.waitFor("claim-empty");
    await waitForSleepers(clock, 1);
    const producer = await harness.connect();
    const message = await enqueueMessage(producer);
    await waitForStatus(store, message.id, "processed");
    expect(clock.now()).toEqual(START);
  });

  it("is woken when a completion on another connection hands it a key (no new message, yet new work)", async () => {
    const { store, clock, harness } = ctx();
    const log = new EventLog(store);
    const producer = await harness.connect();
    await enqueueMessage(producer, { key: "order-1", payload: { n: 1 } });
    const second = await enqueueMessage(producer, { key: "order-1", payload: { n: 2 } });
    const [first] = await producer.claim("elsewhere", { limit: 10, leaseMs: LEASE_MS });
    await workers.start({
      store,
      clock,
      name: "listener",
      handlers: { "test.message": async () => ({}) },
      leaseMs: LEASE_MS,
      pollIntervalMs: 60_000,
      wakeOnNewMessages: true,
    });
    await log.waitFor("claim-empty"); // the second message waits behind the first
    await waitForSleepers(clock, 1);
    expect((await producer.complete(first!)).outcome).toBe("completed");
    await waitForStatus(store, second.id, "processed");
    expect(clock.now()).toEqual(START);
  });

  it("finds a message that nothing announced at the next poll", async () => {
    const { store, clock, harness } = ctx();
    const log = new EventLog(store);
    await workers.start({
      store,
      clock,
      name: "poller",
      handlers: { "test.message": async () => ({}) },
      leaseMs: LEASE_MS,
      pollIntervalMs: 60_000,
      wakeOnNewMessages: false,
    });
    await log.waitFor("claim-empty");
    await waitForSleepers(clock, 1);
    const message = await enqueueMessage(await harness.connect());
    clock.advance(59_999);
    expect(clock.sleeping).toBe(1); // not yet
    clock.advance(1);
    await waitForStatus(store, message.id, "processed");
    expect(log.of("claim-won")[0]?.at).toEqual(new Date(START.getTime() + 60_000));
  });
});

describeEachStore("worker claiming: very large concurrency", (factory) => {
  const ctx = useStoreHarness(factory);

  it("never asks a store for more than it may claim at once, so a worker with concurrency above 1000 still works", async () => {
    const { store, clock } = ctx();
    const messages = await Promise.all([1, 2, 3].map((n) => enqueueMessage(store, { dedupeKey: `big-${n}` })));
    const worker = new Worker({
      store,
      clock,
      concurrency: 1500,
      handlers: { "test.message": async () => ({}) },
      leaseMs: 30_000,
      pollIntervalMs: 60_000,
      wakeOnNewMessages: false,
    });
    await worker.start();
    try {
      await vi.waitFor(
        async () => {
          for (const m of messages) expect((await store.getMessage(m.id))?.status).toBe("processed");
        },
        { timeout: 10_000 },
      );
    } finally {
      await worker.stop({ graceMs: 0 });
    }
  });
});
