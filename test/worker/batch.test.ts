// Batch handlers: one call per claim for a type's messages (up to maxBatch each), each message
// under its own lease, with a result per message: a failure retries that message alone, and the
// completions share the worker's group commit (with finalizeTogether, one business write call).

import { expect, it } from "vitest";
import { finalizeTogether } from "../../src/outbox/write-together.js";
import { InvalidArgumentError } from "../../src/outbox/errors.js";
import type { OutboxMessage } from "../../src/outbox/types.js";
import { Worker } from "../../src/outbox/worker.js";
import { describeEachStore, useStoreHarness } from "../conformance/stores.js";
import { EventLog, Gate, waitForStatus, waitUntil, useWorkers } from "./support.js";

const LEASE_MS = 30_000;
const NEVER_POLL_MS = 10_000_000;

describeEachStore("batch handlers", (factory) => {
  const ctx = useStoreHarness(factory);
  const workers = useWorkers(() => ctx().clock);

  async function enqueueAll(count: number): Promise<OutboxMessage[]> {
    const { store } = ctx();
    return store.transaction(async (tx) => {
      const out: OutboxMessage[] = [];
      for (let n = 0; n < count; n += 1) out.push(await store.enqueue(tx, { type: "mail.send", payload: { n } }));
      return out;
    });
  }

  it("calls the batch handler once per maxBatch of a claim's messages, and completes each with its own business write, the writes in one call", async () => {
    const { store, clock, harness } = ctx();
    const messages = await enqueueAll(5);
    const calls: string[][] = [];
    const writes: string[][] = [];
    const writer = async (tx: unknown, ids: readonly string[]) => {
      writes.push([...ids]);
      for (const id of ids) await harness.businessWrite(tx, `sent-${id}`);
    };
    await workers.start({
      store,
      clock,
      handlers: {},
      batchHandlers: {
        "mail.send": {
          maxBatch: 3,
          handle: async (batch) => {
            calls.push(batch.map((m) => m.id));
            return batch.map((m) => ({ finalize: finalizeTogether(writer, m.id) }));
          },
        },
      },
      concurrency: 10,
      leaseMs: LEASE_MS,
      pollIntervalMs: NEVER_POLL_MS,
      wakeOnNewMessages: false,
    });
    await waitUntil("every message processed", async () => (await store.countByStatus()).processed === 5);
    const ids = messages.map((m) => m.id);
    expect(calls).toEqual([ids.slice(0, 3), ids.slice(3)]);
    for (const id of ids) expect(await harness.countBusinessRows(`sent-${id}`)).toBe(1);
    expect(writes.flat().sort()).toEqual([...ids].sort());
    expect(writes.length).toBeLessThan(5); // written together, not one call per message
  });

  it("retries a message whose result is an Error alone, and completes the others", async () => {
    const { store, clock } = ctx();
    const [a, b, c] = await enqueueAll(3);
    const calls: string[][] = [];
    await workers.start({
      store,
      clock,
      handlers: {},
      batchHandlers: {
        "mail.send": {
          maxBatch: 10,
          handle: async (batch) => {
            calls.push(batch.map((m) => m.id));
            return batch.map((m) => (m.id === b!.id && m.attempts === 1 ? new Error("mailbox full") : undefined));
          },
        },
      },
      retry: { maxAttempts: 3, baseDelayMs: 1_000, jitter: 0 },
      leaseMs: LEASE_MS,
      pollIntervalMs: NEVER_POLL_MS,
      wakeOnNewMessages: false,
    });
    await waitForStatus(store, a!.id, "processed");
    await waitForStatus(store, c!.id, "processed");
    await waitUntil("b failed once", async () => /mailbox full/.test((await store.getMessage(b!.id))?.lastError ?? ""));
    expect((await store.getMessage(b!.id))?.status).toBe("pending");
    clock.advance(1_000);
    await waitForStatus(store, b!.id, "processed");
    expect(calls).toEqual([[a!.id, b!.id, c!.id], [b!.id]]);
  });

  it("fails them all when the handler throws, or returns another number of results than messages", async () => {
    const { store, clock } = ctx();
    const [a, b] = await enqueueAll(2);
    let call = 0;
    await workers.start({
      store,
      clock,
      handlers: {},
      batchHandlers: {
        "mail.send": {
          maxBatch: 10,
          handle: async () => {
            call += 1;
            if (call === 1) throw new Error("smtp down");
            return [undefined];
          },
        },
      },
      retry: { maxAttempts: 2, baseDelayMs: 1_000, jitter: 0 },
      leaseMs: LEASE_MS,
      pollIntervalMs: NEVER_POLL_MS,
      wakeOnNewMessages: false,
    });
    for (const m of [a!, b!]) await waitUntil(`${m.id} failed once`, async () => /smtp down/.test((await store.getMessage(m.id))?.lastError ?? ""));
    expect(call).toBe(1);
    clock.advance(1_000);
    for (const m of [a!, b!]) {
      expect((await waitForStatus(store, m.id, "dead")).lastError).toMatch(/the batch handler of mail\.send returned 1 results for 2 messages/);
    }
  });

  it("aborts the call's signal when the worker stops, releases its messages, and refuses the results it returns later", async () => {
    const { store, clock, harness } = ctx();
    const [a, b] = await enqueueAll(2);
    const log = new EventLog(store);
    const called = new Gate<AbortSignal>();
    const release = new Gate();
    const worker = await workers.start({
      store,
      clock,
      handlers: {},
      batchHandlers: {
        "mail.send": {
          maxBatch: 10,
          handle: async (batch, { signal }) => {
            called.open(signal);
            await release.promise;
            return batch.map((m) => ({ finalize: (tx: unknown) => harness.businessWrite(tx, `late-${m.id}`) }));
          },
        },
      },
      leaseMs: LEASE_MS,
      pollIntervalMs: NEVER_POLL_MS,
      wakeOnNewMessages: false,
    });
    const signal = await called.promise;
    expect(signal.aborted).toBe(false);
    await worker.stop({ graceMs: 0 });
    expect(signal.aborted).toBe(true);
    for (const m of [a!, b!]) expect((await store.getMessage(m.id))?.status).toBe("pending");
    release.open();
    await waitUntil("both late results refused", () => log.count("processing-finished", (e) => e.result === "lease-lost") === 2);
    for (const m of [a!, b!]) expect(await harness.countBusinessRows(`late-${m.id}`)).toBe(0);
  });

  it("refuses a bad batch handler naming it", () => {
    const { store } = ctx();
    const attempt =
      (batchHandlers: unknown, handlers: Record<string, () => Promise<void>> = {}) =>
      () =>
        new Worker({ store, handlers, batchHandlers: batchHandlers as never });
    const handle = async () => [];
    expect(attempt({ "mail.send": { maxBatch: 0, handle } })).toThrow(
      /batchHandlers\["mail\.send"\]\.maxBatch must be a whole number from 1 to 1000 \(got 0\)/,
    );
    expect(attempt({ "mail.send": { maxBatch: 1001, handle } })).toThrow(InvalidArgumentError);
    expect(attempt({ "mail.send": { maxBatch: 5 } })).toThrow(/\.handle must be a function/);
    expect(attempt({ "mail.send": { maxBatch: 5, handle } }, { "mail.send": async () => undefined })).toThrow(/has a handler too/);
    expect(attempt([])).toThrow(/batchHandlers must be an object/);
  });
});
