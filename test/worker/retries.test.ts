// Failures: retries on the exponential backoff schedule (on the manual clock), dead messages after
// the last attempt, redrive, unknown message types, and attempts counted at claim.

import { describe, expect, it, vi } from "vitest";
import { Worker } from "../../src/outbox/worker.js";
import { UnrecoverableError } from "../../src/outbox/errors.js";
import { backoffDelay, checkRetryPolicy, DEFAULT_RETRY, type RetryPolicy } from "../../src/outbox/retry.js";
import { MAX_RETRY_DELAY_MS } from "../../src/outbox/validate.js";
import type { OutboxMessage } from "../../src/outbox/types.js";
import { at, describeEachStore, enqueueMessage, mustGet, START, useStoreHarness } from "../conformance/stores.js";
import { EventLog, waitForMessage, waitForSleepers, waitForStatus, useWorkers } from "./support.js";

const LEASE_MS = 30_000;
const POLL_MS = 60_000;
const NEVER_POLL_MS = 10_000_000;
const POLICY: RetryPolicy = { maxAttempts: 4, baseDelayMs: 1_000, maxDelayMs: 60_000, jitter: 0.2 };
/** The middle of the jitter range: every delay is exactly its nominal value. */
const NO_JITTER = () => 0.5;

describeEachStore("worker retries and dead messages", (factory) => {
  const ctx = useStoreHarness(factory);
  const workers = useWorkers(() => ctx().clock);

  /** A handler that throws "boom <attempt>" while `failing` says so, and otherwise writes `done`. */
  function flakyHandler(options: { failing: () => boolean }) {
    const calls: OutboxMessage[] = [];
    const handler = async (message: OutboxMessage) => {
      calls.push(message);
      if (options.failing()) throw new Error(`boom ${message.attempts}`);
      return { summary: "ok" };
    };
    return { calls, handler };
  }

  it("retries a failing message exactly on the backoff schedule, never a millisecond early, and records each error", async () => {
    const { store, clock } = ctx();
    const log = new EventLog(store);
    const message = await enqueueMessage(store);
    const flaky = flakyHandler({ failing: () => true });
    const worker = await workers.start({
      store,
      clock,
      name: "retrier",
      handlers: { "test.message": flaky.handler },
      retry: POLICY,
      random: NO_JITTER,
      leaseMs: LEASE_MS,
      pollIntervalMs: NEVER_POLL_MS,
      wakeOnNewMessages: false,
    });

    // The expected schedule, and the same numbers written out so a change to backoffDelay shows too.
    const delays = [1, 2, 3].map((attempt) => backoffDelay(attempt, POLICY, NO_JITTER));
    expect(delays).toEqual([1_000, 2_000, 4_000]);

    let claimedAt = START.getTime();
    for (let attempt = 1; attempt <= 3; attempt += 1) {
      await log.waitFor("retry-scheduled", attempt);
      // Idle: the claim loop's poll and the retry timer wait on the clock, no handler runs.
      await waitForSleepers(clock, 2, () => worker.inFlight === 0);
      const claim = log.of("claim-won")[attempt - 1];
      expect(claim).toMatchObject({ owner: "retrier", messageId: message.id, token: attempt, at: new Date(claimedAt) });
      const dueAt = new Date(claimedAt + delays[attempt - 1]!);
      expect(log.of("retry-scheduled")[attempt - 1]).toMatchObject({ at: new Date(claimedAt), availableAt: dueAt, error: `Error: boom ${attempt}` });
      expect(await mustGet(store, message.id)).toMatchObject({
        status: "pending",
        availableAt: dueAt,
        attempts: attempt,
        leaseToken: attempt,
        lastError: `Error: boom ${attempt}`,
        lockedBy: null,
        lockedUntil: null,
      });

      // One millisecond before it is due: even when woken, the worker finds nothing to claim.
      clock.set(dueAt.getTime() - 1);
      const emptyBefore = log.count("claim-empty");
      worker.wake();
      await log.waitFor("claim-empty", emptyBefore + 1);
      await waitForSleepers(clock, 2, () => worker.inFlight === 0);
      expect(log.of("claim-empty").at(-1)?.at).toEqual(new Date(dueAt.getTime() - 1));
      expect(log.count("claim-won")).toBe(attempt);
      expect(flaky.calls).toHaveLength(attempt);

      // Right at the due time the worker's own retry timer brings it back.
      clock.set(dueAt);
      await log.waitFor("claim-won", attempt + 1);
      claimedAt = dueAt.getTime();
    }

    // The fourth attempt is the last (maxAttempts 4): its failure is final.
    await log.waitFor("dead");
    expect(log.of("claim-won")[3]).toMatchObject({ token: 4, at: new Date(claimedAt) });
    expect(flaky.calls.map((m) => m.attempts)).toEqual([1, 2, 3, 4]);
    expect(await mustGet(store, message.id)).toMatchObject({ status: "dead", attempts: 4, leaseToken: 4, lastError: "Error: boom 4" });
    expect(log.count("retry-scheduled")).toBe(3);
    expect(at(7_000)).toEqual(new Date(claimedAt)); // 0 + 1 s + 2 s + 4 s
  });

  it("spreads each delay by the jitter drawn from the injected random source", async () => {
    const { store, clock } = ctx();
    const log = new EventLog(store);
    const message = await enqueueMessage(store);
    const flaky = flakyHandler({ failing: () => true });
    await workers.start({
      store,
      clock,
      handlers: { "test.message": flaky.handler },
      retry: { ...POLICY, jitter: 0.5 },
      random: () => 0,
      leaseMs: LEASE_MS,
      pollIntervalMs: NEVER_POLL_MS,
      wakeOnNewMessages: false,
    });
    await log.waitFor("retry-scheduled");
    // random() = 0 is the bottom of ±50 %: half the nominal 1 000 ms.
    expect((await mustGet(store, message.id)).availableAt).toEqual(at(500));
  });

  it("marks a message dead after the last attempt with the last error, never claims it again, and processes it after a redrive", async () => {
    const { store, clock, harness } = ctx();
    const log = new EventLog(store);
    const message = await enqueueMessage(store);
    let failing = true;
    const flaky = flakyHandler({ failing: () => failing });
    const worker = await workers.start({
      store,
      clock,
      name: "dlq-worker",
      handlers: { "test.message": flaky.handler },
      retry: { ...POLICY, maxAttempts: 2 },
      random: NO_JITTER,
      leaseMs: LEASE_MS,
      pollIntervalMs: POLL_MS,
      wakeOnNewMessages: false,
    });
    await log.waitFor("retry-scheduled");
    clock.advance(1_000);
    await log.waitFor("dead");
    await waitForSleepers(clock, 1, () => worker.inFlight === 0); // only the poll: no retry timer for a dead message
    expect(log.of("dead")).toEqual([expect.objectContaining({ owner: "dlq-worker", messageId: message.id, token: 2, error: "Error: boom 2", at: at(1_000) })]);
    expect(await mustGet(store, message.id)).toMatchObject({ status: "dead", attempts: 2, leaseToken: 2, lastError: "Error: boom 2", lockedUntil: null });

    // Ten polls later, nobody has claimed it.
    for (let poll = 0; poll < 10; poll += 1) {
      const empties = log.count("claim-empty");
      clock.advance(POLL_MS);
      await waitForSleepers(clock, 1, () => log.count("claim-empty") === empties + 1);
    }
    const other = await harness.connect();
    expect(await other.claim("someone-else", { limit: 10, leaseMs: LEASE_MS })).toEqual([]);
    expect(log.count("claim-won")).toBe(2);
    expect(flaky.calls).toHaveLength(2);
    expect(await mustGet(store, message.id)).toMatchObject({ status: "dead", attempts: 2, leaseToken: 2 });

    // The cause is fixed; redrive it.
    failing = false;
    expect(await store.redrive({ messageIds: [message.id] })).toEqual({ moved: 1, notMoved: [] });
    expect(await mustGet(store, message.id)).toMatchObject({ status: "pending", attempts: 0, availableAt: clock.now() });
    clock.advance(POLL_MS); // the next poll finds it
    const done = await waitForStatus(store, message.id, "processed");
    expect(done).toMatchObject({ lockedBy: "dlq-worker", attempts: 1, leaseToken: 3, lastError: null });
    expect(flaky.calls.map((m) => m.attempts)).toEqual([1, 2, 1]);
  });

  it("marks a message dead at once, with attempts left, when its handler throws an UnrecoverableError", async () => {
    const { store, clock } = ctx();
    const log = new EventLog(store);
    const message = await enqueueMessage(store);
    let runs = 0;
    const worker = await workers.start({
      store,
      clock,
      name: "strict-worker",
      handlers: {
        "test.message": async () => {
          runs += 1;
          throw new UnrecoverableError("MALFORMED_PAYLOAD", "payload has no amount");
        },
      },
      retry: POLICY,
      random: NO_JITTER,
      leaseMs: LEASE_MS,
      pollIntervalMs: NEVER_POLL_MS,
      wakeOnNewMessages: false,
    });
    const dead = await waitForStatus(store, message.id, "dead");
    expect(dead).toMatchObject({ attempts: 1, leaseToken: 1, lastError: "UnrecoverableError: payload has no amount" });
    await waitForSleepers(clock, 1, () => worker.inFlight === 0); // no retry timer
    expect(runs).toBe(1);
    expect(log.count("retry-scheduled")).toBe(0);
    expect(log.of("dead")).toEqual([expect.objectContaining({ owner: "strict-worker", token: 1, error: "UnrecoverableError: payload has no amount" })]);
  });

  it("lets the ordering key move on past a dead message of a type in keyMovesOnWhenDead, and keeps it blocked for other types", async () => {
    const { store, clock } = ctx();
    const order: string[] = [];
    const poison = async (message: OutboxMessage) => {
      order.push((message.payload as { label: string }).label);
      if ((message.payload as { label: string }).label.endsWith("1")) throw new UnrecoverableError("POISON", "cannot be handled");
      return {};
    };
    for (const [type, key, label] of [
      ["event.skippable", "s", "s1"],
      ["event.skippable", "s", "s2"],
      ["event.strict", "t", "t1"],
      ["event.strict", "t", "t2"],
    ] as const) {
      await enqueueMessage(store, { type, key, payload: { label } });
    }
    const worker = await workers.start({
      store,
      clock,
      handlers: { "event.skippable": poison, "event.strict": poison },
      keyMovesOnWhenDead: ["event.skippable"],
      retry: POLICY,
      random: NO_JITTER,
      leaseMs: LEASE_MS,
      pollIntervalMs: NEVER_POLL_MS,
      wakeOnNewMessages: false,
    });
    await waitForSleepers(clock, 1, () => worker.inFlight === 0 && order.length >= 3);
    // s1 died and was skipped, so s2 ran; t1 died and blocks t, so t2 never ran.
    expect([...order].sort()).toEqual(["s1", "s2", "t1"]);
    expect((await store.blockedKeys()).map((b) => b.key)).toEqual(["t"]);
  });

  it("claims only the types it has handlers for: a message of another type stays pending, for the service that handles it", async () => {
    const { store, clock } = ctx();
    const log = new EventLog(store);
    const other = await enqueueMessage(store, { type: "billing.invoice" });
    clock.advance(1);
    const mine = await enqueueMessage(store, { type: "known.type", payload: { n: 1 } });
    const worker = await workers.start({
      store,
      clock,
      name: "shipping-service",
      handlers: { "known.type": async () => ({}) },
      leaseMs: LEASE_MS,
      pollIntervalMs: NEVER_POLL_MS,
      wakeOnNewMessages: true,
    });
    expect(worker.types).toEqual(["known.type"]);
    await waitForStatus(store, mine.id, "processed");
    const later = await enqueueMessage(store, { type: "known.type", payload: { n: 2 } });
    await waitForStatus(store, later.id, "processed");
    expect(await store.getMessage(other.id)).toMatchObject({ status: "pending", attempts: 0, lockedBy: null });
    expect(log.count("processing-started", (e) => e.messageId === other.id)).toBe(0);
    // The service that handles it takes it.
    const billing = await workers.start({
      store,
      clock,
      name: "billing-service",
      handlers: { "billing.invoice": async () => ({}) },
      leaseMs: LEASE_MS,
      pollIntervalMs: 20,
    });
    await waitForStatus(store, other.id, "processed");
    expect((await store.getMessage(other.id))?.lockedBy).toBe(billing.name);
  });

  it("marks a message of a type it claims (types) but has no handler for dead with UnknownMessageTypeError, and keeps processing the others", async () => {
    const { store, clock } = ctx();
    const log = new EventLog(store);
    const mystery = await enqueueMessage(store, { type: "mystery.type" });
    clock.advance(1);
    const known1 = await enqueueMessage(store, { type: "known.type", payload: { n: 1 } });
    clock.advance(1);
    const known2 = await enqueueMessage(store, { type: "known.type", payload: { n: 2 } });
    const handled: string[] = [];
    await workers.start({
      store,
      clock,
      name: "picky-worker",
      concurrency: 1,
      types: ["known.type", "mystery.type"],
      handlers: {
        "known.type": async (message) => {
          handled.push(message.id);
          return {};
        },
      },
      retry: POLICY,
      random: NO_JITTER,
      leaseMs: LEASE_MS,
      pollIntervalMs: NEVER_POLL_MS,
      wakeOnNewMessages: true,
    });

    const dead = await waitForStatus(store, mystery.id, "dead");
    expect(dead.attempts).toBe(1);
    expect(dead.lastError).toMatch(/^UnknownMessageTypeError: no handler for message type "mystery\.type" \(this worker handles: known\.type\)/);
    await waitForStatus(store, known1.id, "processed");
    await waitForStatus(store, known2.id, "processed");

    // And it still takes new work afterwards.
    const known3 = await enqueueMessage(store, { type: "known.type", payload: { n: 3 } });
    await waitForStatus(store, known3.id, "processed");
    expect(handled).toEqual([known1.id, known2.id, known3.id]);
    expect(log.count("processing-started", (e) => e.messageId === mystery.id)).toBe(0);
    expect(log.count("retry-scheduled")).toBe(0);
    expect(log.of("dead").map((e) => e.messageId)).toEqual([mystery.id]);
  });

  it("marks dead, without running the handler, a message its crashed owners already claimed maxAttempts times", async () => {
    const { store, clock, harness } = ctx();
    const log = new EventLog(store);
    const message = await enqueueMessage(store);
    // Three owners claim it in turn and die: each lease just runs out.
    const crashers = await harness.connect();
    for (let crash = 1; crash <= 3; crash += 1) {
      const [lease] = await crashers.claim(`crashed-${crash}`, { limit: 1, leaseMs: 1_000 });
      expect(lease).toMatchObject({ messageId: message.id, token: crash });
      clock.advance(1_000);
    }
    expect(await mustGet(store, message.id)).toMatchObject({ status: "processing", attempts: 3, leaseToken: 3, lockedBy: "crashed-3" });

    let handlerRuns = 0;
    await workers.start({
      store,
      clock,
      name: "survivor",
      handlers: {
        "test.message": async () => {
          handlerRuns += 1;
          return {};
        },
      },
      retry: { ...POLICY, maxAttempts: 3 },
      random: NO_JITTER,
      leaseMs: LEASE_MS,
      pollIntervalMs: NEVER_POLL_MS,
      wakeOnNewMessages: false,
    });
    const dead = await waitForStatus(store, message.id, "dead");
    expect(dead).toMatchObject({ attempts: 4, leaseToken: 4, lockedBy: "survivor" });
    expect(dead.lastError).toMatch(/^AttemptsExhaustedError: claimed 4 times, more than the 3 allowed, without finishing/);
    expect(log.of("claim-won")).toEqual([expect.objectContaining({ owner: "survivor", token: 4, reclaimedFrom: "crashed-3" })]);
    // Published once the worker has the commit's answer, which may come after the poll above saw it.
    expect(await log.waitFor("dead")).toEqual([expect.objectContaining({ owner: "survivor", token: 4 })]);
    expect(handlerRuns).toBe(0);
    expect(log.count("processing-started")).toBe(0);
  });

  it("still runs the handler on the last allowed attempt after crashes, and its failure is final", async () => {
    const { store, clock, harness } = ctx();
    const log = new EventLog(store);
    const message = await enqueueMessage(store);
    const crashers = await harness.connect();
    for (let crash = 1; crash <= 2; crash += 1) {
      expect(await crashers.claim(`crashed-${crash}`, { limit: 1, leaseMs: 1_000 })).toHaveLength(1);
      clock.advance(1_000);
    }
    const flaky = flakyHandler({ failing: () => true });
    await workers.start({
      store,
      clock,
      handlers: { "test.message": flaky.handler },
      retry: { ...POLICY, maxAttempts: 3 },
      random: NO_JITTER,
      leaseMs: LEASE_MS,
      pollIntervalMs: NEVER_POLL_MS,
      wakeOnNewMessages: false,
    });
    const dead = await waitForMessage(store, message.id, "dead after its third attempt", (m) => m.status === "dead");
    expect(dead).toMatchObject({ attempts: 3, leaseToken: 3, lastError: "Error: boom 3" });
    expect(flaky.calls.map((m) => m.attempts)).toEqual([3]);
    expect(log.count("retry-scheduled")).toBe(0);
  });

  it("keeps a retry's timer from waking a worker that has stopped", async () => {
    const { store, clock } = ctx();
    const log = new EventLog(store);
    const message = await enqueueMessage(store);
    const flaky = flakyHandler({ failing: () => true });
    const worker = await workers.start({
      store,
      clock,
      handlers: { "test.message": flaky.handler },
      retry: POLICY,
      random: NO_JITTER,
      leaseMs: LEASE_MS,
      pollIntervalMs: NEVER_POLL_MS,
      wakeOnNewMessages: false,
    });
    await log.waitFor("retry-scheduled");
    await waitForSleepers(clock, 2, () => worker.inFlight === 0);
    await worker.stop();
    expect(clock.sleeping).toBe(0); // the poll and the retry timer were both cancelled
    clock.advance(1_000);
    expect(clock.sleeping).toBe(0);
    expect(log.count("claim-won")).toBe(1);
    expect((await mustGet(store, message.id)).status).toBe("pending");
  });
});

describeEachStore("worker retries: many at once", (factory) => {
  const ctx = useStoreHarness(factory);

  it("schedules many pending retries without piling listeners on one signal (no MaxListenersExceededWarning)", async () => {
    const { store, clock } = ctx();
    const warnings: string[] = [];
    const onWarning = (warning: Error) => warnings.push(warning.name);
    process.on("warning", onWarning);
    const worker = new Worker({
      store,
      clock,
      concurrency: 20,
      pollIntervalMs: 600_000,
      wakeOnNewMessages: false,
      retry: { baseDelayMs: 60_000, maxAttempts: 5 },
      handlers: {
        "test.message": async () => {
          throw new Error("provider down");
        },
      },
    });
    try {
      await Promise.all(Array.from({ length: 15 }, (_, n) => enqueueMessage(store, { dedupeKey: `retry-${n}` })));
      await worker.start();
      await vi.waitFor(async () => expect((await store.countByStatus()).pending).toBe(15), { timeout: 10_000 });
      await vi.waitFor(async () => expect((await store.listMessages({ status: ["pending"] })).every((m) => m.attempts === 1)).toBe(true), { timeout: 10_000 });
      await new Promise((resolve) => setImmediate(resolve)); // warnings are emitted on the next tick
      expect(warnings).not.toContain("MaxListenersExceededWarning");
    } finally {
      process.off("warning", onWarning);
      await worker.stop({ graceMs: 0 });
    }
  });
});

describe("retry policy bounds", () => {
  it("refuses a maxDelayMs past one year (a retry time no store could hold), and accepts one year", () => {
    expect(() => checkRetryPolicy({ ...DEFAULT_RETRY, maxDelayMs: MAX_RETRY_DELAY_MS + 1 })).toThrow(
      /maxDelayMs must be a number of milliseconds from baseDelayMs to \d+ \(one year\)/,
    );
    expect(checkRetryPolicy({ ...DEFAULT_RETRY, maxDelayMs: MAX_RETRY_DELAY_MS }).maxDelayMs).toBe(MAX_RETRY_DELAY_MS);
  });
});
