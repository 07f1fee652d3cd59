// Per message type settings of a worker, on the manual clock: a maximum processing time (the
// attempt fails with ProcessingTimeoutError even when the handler ignores its signal, and a
// result it commits later is refused), a concurrency of its own, and a retry policy of its own.

import { expect, it } from "vitest";
import { InvalidArgumentError, ProcessingTimeoutError } from "../../src/outbox/errors.js";
import { at, describeEachStore, enqueueMessage, useStoreHarness } from "../conformance/stores.js";
import { EventLog, waitForStatus, waitUntil, useWorkers } from "./support.js";

const LEASE_MS = 30_000;
const NEVER_POLL_MS = 10_000_000;
const NO_JITTER = () => 0.5;

describeEachStore("worker settings per message type", (factory) => {
  const ctx = useStoreHarness(factory);
  const workers = useWorkers(() => ctx().clock);

  it("fails an attempt that runs past maxProcessingMs, aborts the handler's signal, and refuses the result it commits later", async () => {
    const { store, clock, harness } = ctx();
    const log = new EventLog(store);
    const message = await enqueueMessage(store, { type: "slow.report" });
    const slow = workers.blocking();
    await workers.start({
      store,
      clock,
      name: "reporter",
      handlers: { "slow.report": slow.handler },
      perType: { "slow.report": { maxProcessingMs: 5_000 } },
      retry: { maxAttempts: 3, baseDelayMs: 1_000, jitter: 0 },
      random: NO_JITTER,
      leaseMs: LEASE_MS,
      pollIntervalMs: NEVER_POLL_MS,
      wakeOnNewMessages: false,
    });
    await slow.waitForCalls(1);
    const call = slow.call(0);
    clock.advance(4_999);
    expect(call.signal.aborted).toBe(false);
    clock.advance(1);
    const failed = await waitForStatus(store, message.id, "pending");
    expect(failed.lastError).toMatch(
      /^ProcessingTimeoutError: the handler for message type "slow\.report" ran longer than its maximum processing time of 5000 ms/,
    );
    expect(failed.availableAt).toEqual(at(5_000 + 1_000)); // retried on the worker's backoff
    expect(call.signal.aborted).toBe(true);
    expect(call.signal.reason).toBeInstanceOf(ProcessingTimeoutError);
    // The handler ignored its signal and now returns a business write: it must not commit.
    call.release({ finalize: (tx) => harness.businessWrite(tx, "late-report") });
    await waitUntil("the late result refused", () => log.count("processing-finished", (e) => e.messageId === message.id && e.result === "lease-lost") === 1);
    expect(await harness.countBusinessRows("late-report")).toBe(0);
    expect((await store.getMessage(message.id))?.status).toBe("pending");
  });

  it("runs at most `concurrency` messages of a capped type at once, while other types use the free slots", async () => {
    const { store, clock } = ctx();
    for (let n = 0; n < 3; n += 1) await enqueueMessage(store, { type: "export.big", payload: n });
    const fast = [await enqueueMessage(store, { type: "mail.send", payload: 1 }), await enqueueMessage(store, { type: "mail.send", payload: 2 })];
    const exports = workers.blocking();
    const worker = await workers.start({
      store,
      clock,
      concurrency: 10,
      handlers: { "export.big": exports.handler, "mail.send": async () => ({}) },
      perType: { "export.big": { concurrency: 1 } },
      leaseMs: LEASE_MS,
      pollIntervalMs: NEVER_POLL_MS,
      wakeOnNewMessages: false,
    });
    for (const m of fast) await waitForStatus(store, m.id, "processed");
    await exports.waitForCalls(1);
    expect(exports.running).toBe(1);
    expect((await store.countByStatus()).pending).toBe(2);
    exports.call(0).release();
    await exports.waitForCalls(2);
    exports.call(1).release();
    await exports.waitForCalls(3);
    exports.call(2).release();
    await waitUntil("every export processed", async () => (await store.countByStatus()).processed === 5);
    expect(exports.maxRunning).toBe(1);
    // The completion commits before the worker frees its slot, so the count can lead it by a tick.
    await waitUntil("the worker's slots freed", () => worker.inFlight === 0);
    expect(worker.inFlight).toBe(0);
  });

  it("claims a capped type first: its old message does not wait behind a backlog of uncapped ones", async () => {
    const { store, clock } = ctx();
    const big = await enqueueMessage(store, { type: "export.big" });
    for (let n = 0; n < 6; n += 1) await enqueueMessage(store, { type: "mail.send", payload: n });
    const exports = workers.blocking();
    const mails = workers.blocking();
    await workers.start({
      store,
      clock,
      concurrency: 2,
      handlers: { "export.big": exports.handler, "mail.send": mails.handler },
      perType: { "export.big": { concurrency: 1 } },
      leaseMs: LEASE_MS,
      pollIntervalMs: NEVER_POLL_MS,
      wakeOnNewMessages: false,
    });
    await exports.waitForCalls(1);
    await mails.waitForCalls(1);
    expect(exports.call(0).message.id).toBe(big.id);
    expect(mails.calls.length).toBe(1); // the other slot
  });

  it("keeps a timed-out handler's slot until it returns, so a capped type never runs more than its cap", async () => {
    const { store, clock } = ctx();
    const first = await enqueueMessage(store, { type: "export.big", payload: 1 });
    await enqueueMessage(store, { type: "export.big", payload: 2 });
    const exports = workers.blocking();
    const worker = await workers.start({
      store,
      clock,
      handlers: { "export.big": exports.handler },
      perType: { "export.big": { concurrency: 1, maxProcessingMs: 1_000 } },
      retry: { baseDelayMs: 60_000, jitter: 0 },
      random: NO_JITTER,
      leaseMs: LEASE_MS,
      pollIntervalMs: 500,
      wakeOnNewMessages: false,
    });
    await exports.waitForCalls(1);
    clock.advance(1_000);
    await waitForStatus(store, first.id, "pending"); // failed by the limit, retried in a minute
    for (let n = 0; n < 4; n += 1) clock.advance(500); // polls: the slot is still the runaway handler's
    expect(exports.calls.length).toBe(1);
    expect(worker.inFlight).toBe(1);
    exports.call(0).release(); // it returns at last (its result is refused)
    await exports.waitForCalls(2);
    expect(exports.maxRunning).toBe(1);
  });

  it("does not time out a handler whose worker stopped: the timer is cancelled, nothing is written after the stop", async () => {
    const { store, clock } = ctx();
    const message = await enqueueMessage(store, { type: "export.big" });
    const exports = workers.blocking();
    const worker = await workers.start({
      store,
      clock,
      handlers: { "export.big": exports.handler },
      maxProcessingMs: 1_000,
      leaseMs: LEASE_MS,
      pollIntervalMs: NEVER_POLL_MS,
      wakeOnNewMessages: false,
    });
    await exports.waitForCalls(1);
    await worker.stop({ graceMs: 0 });
    const log = new EventLog(store);
    clock.advance(5_000);
    await waitUntil("the store settles", async () => (await store.getMessage(message.id))?.status === "pending");
    expect(log.count("retry-scheduled") + log.count("dead") + log.count("lease-lost")).toBe(0);
    expect((await store.getMessage(message.id))?.lastError).toBeNull();
  });

  it("gives a type its own retry policy: one attempt for it, the worker's for the others", async () => {
    const { store, clock } = ctx();
    const once = await enqueueMessage(store, { type: "charge.card" });
    const again = await enqueueMessage(store, { type: "mail.send" });
    await workers.start({
      store,
      clock,
      handlers: {
        "charge.card": async () => {
          throw new Error("card declined by the simulator");
        },
        "mail.send": async () => {
          throw new Error("smtp down");
        },
      },
      perType: { "charge.card": { retry: { maxAttempts: 1 } } },
      retry: { maxAttempts: 5, baseDelayMs: 1_000, jitter: 0 },
      random: NO_JITTER,
      leaseMs: LEASE_MS,
      pollIntervalMs: NEVER_POLL_MS,
      wakeOnNewMessages: false,
    });
    expect(await waitForStatus(store, once.id, "dead")).toMatchObject({ attempts: 1, lastError: "Error: card declined by the simulator" });
    expect(await waitForStatus(store, again.id, "pending")).toMatchObject({ attempts: 1, lastError: "Error: smtp down" });
  });

  it("refuses bad per-type settings, naming them", () => {
    const { store } = ctx();
    const handlers = { a: async () => ({}) };
    expect(() => workers.create({ store, handlers, perType: { a: { concurrency: 0 } } })).toThrow(
      new InvalidArgumentError('perType["a"].concurrency must be a whole number >= 1 (got 0)'),
    );
    expect(() => workers.create({ store, handlers, perType: { a: { maxProcessingMs: -5 } } })).toThrow(/perType\["a"\]\.maxProcessingMs must be/);
    expect(() => workers.create({ store, handlers, maxProcessingMs: 0 })).toThrow(/maxProcessingMs must be/);
    // Node fires a longer timer at once: it would fail every attempt.
    expect(() => workers.create({ store, handlers, maxProcessingMs: 3_000_000_000 })).toThrow(
      "maxProcessingMs must be a whole number of milliseconds from 1 to 2147483647 (got 3000000000)",
    );
    expect(() => workers.create({ store, handlers: {}, defaultHandler: async () => ({}), perType: { a: { concurrency: 2 } } })).toThrow(
      'perType["a"].concurrency needs the worker to claim named types (give types, or handlers without a defaultHandler)',
    );
    expect(() => workers.create({ store, handlers: {}, defaultHandler: "handle" as never })).toThrow(
      "defaultHandler must be a function (message, context) => Promise<HandlerResult | void> (an async function; returning nothing completes the message); got string",
    );
    expect(() => workers.create({ store, handlers: { a: 5 as never } })).toThrow(
      'the handler for "a" must be a function (message, context) => Promise<HandlerResult | void> (an async function; returning nothing completes the message); got number',
    );
  });
});
