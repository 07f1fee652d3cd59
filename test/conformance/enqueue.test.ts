// Invariant 2, atomic: a message exists if and only if its business transaction committed.

import { expect, it } from "vitest";
import { DuplicateMessageError, InvalidArgumentError, NotInTransactionError } from "../../src/outbox/errors.js";
import type { JsonValue, NewMessage } from "../../src/outbox/types.js";
import { at, claimNext, enqueueMessage, mustGet, describeEachStore, useStoreHarness } from "./stores.js";

const EMPTY_COUNTS = { pending: 0, processing: 0, processed: 0, dead: 0, cancelled: 0 };

describeEachStore("atomic enqueue", (factory) => {
  const ctx = useStoreHarness(factory);

  it("commits the message together with the business write when the transaction succeeds", async () => {
    const { store, harness, clock } = ctx();
    const message = await store.transaction(async (tx) => {
      await harness.businessWrite(tx, "order-1");
      return store.enqueue(tx, { type: "order.placed", payload: { orderId: "order-1" }, dedupeKey: "order-1" });
    });

    expect(message).toMatchObject({
      type: "order.placed",
      dedupeKey: "order-1",
      payload: { orderId: "order-1" },
      status: "pending",
      lockedBy: null,
      lockedUntil: null,
      leaseToken: 0,
      attempts: 0,
      lastError: null,
      processedAt: null,
    });
    expect(message.createdAt).toEqual(clock.now());
    expect(message.availableAt).toEqual(clock.now());
    expect(await store.getMessage(message.id)).toEqual(message);
    expect(await harness.countBusinessRows("order-1")).toBe(1);
  });

  it("writes neither the message nor the business row when the transaction throws", async () => {
    const { store, harness } = ctx();
    const failure = new Error("business rule broken after the enqueue");
    await expect(
      store.transaction(async (tx) => {
        await harness.businessWrite(tx, "order-2");
        await store.enqueue(tx, { type: "order.placed", payload: { orderId: "order-2" }, dedupeKey: "order-2" });
        throw failure;
      }),
    ).rejects.toBe(failure);

    expect(await store.listMessages()).toEqual([]);
    expect(await store.countByStatus()).toEqual(EMPTY_COUNTS);
    expect(await harness.countBusinessRows("order-2")).toBe(0);
    expect(await store.claim("worker-a", { limit: 10, leaseMs: 30_000 })).toEqual([]);
  });

  it("lets the same dedupe key be enqueued again after the transaction that first used it rolled back", async () => {
    const { store } = ctx();
    await expect(
      store.transaction(async (tx) => {
        await store.enqueue(tx, { type: "order.placed", payload: 1, dedupeKey: "order-3" });
        throw new Error("rolled back");
      }),
    ).rejects.toThrow("rolled back");

    const message = await enqueueMessage(store, { dedupeKey: "order-3" });
    expect((await store.listMessages()).map((m) => m.id)).toEqual([message.id]);
  });

  it("returns the value of the work function once the transaction commits", async () => {
    const { store } = ctx();
    await expect(store.transaction(async () => "the result")).resolves.toBe("the result");
  });

  it("refuses to enqueue on a connection that is not inside a transaction, and writes nothing", async () => {
    const { store, harness } = ctx();
    const outside = await harness.outsideTransaction();
    await expect(store.enqueue(outside, { type: "order.placed", payload: 1 })).rejects.toBeInstanceOf(NotInTransactionError);
    expect(await store.listMessages()).toEqual([]);
  });

  it("refuses to enqueue outside a transaction even while another caller's transaction is open", async () => {
    const { store, harness } = ctx();
    await enqueueMessage(store, { dedupeKey: "held" });
    const lease = await claimNext(store, "worker-a", 30_000);
    let openGate!: () => void;
    const gate = new Promise<void>((resolve) => (openGate = resolve));
    // worker-a's completion holds its transaction open until the gate opens, then rolls back.
    const completing = store.complete(lease, async () => {
      await gate;
      throw new Error("finalize failed");
    });
    await new Promise((resolve) => setImmediate(resolve));

    const outside = await harness.outsideTransaction();
    const enqueued = store.enqueue(outside, { type: "test.message", payload: 1, dedupeKey: "outside" });
    const settled = enqueued.then(
      () => "enqueued",
      (error: unknown) => error,
    );
    openGate();
    await expect(completing).rejects.toThrow("finalize failed");

    expect(await settled).toBeInstanceOf(NotInTransactionError);
    expect((await store.listMessages()).map((m) => m.dedupeKey)).toEqual(["held"]);
  });

  it("refuses a second message with the same dedupe key, rolling back that transaction's business write", async () => {
    const { store, harness } = ctx();
    const first = await enqueueMessage(store, { dedupeKey: "payment-7" });

    const attempt = store.transaction(async (tx) => {
      await harness.businessWrite(tx, "second-try");
      await store.enqueue(tx, { type: "test.message", payload: 2, dedupeKey: "payment-7" });
    });
    await expect(attempt).rejects.toBeInstanceOf(DuplicateMessageError);
    await expect(attempt).rejects.toMatchObject({ code: "DUPLICATE_MESSAGE", dedupeKey: "payment-7" });

    expect((await store.listMessages()).map((m) => m.id)).toEqual([first.id]);
    expect(await harness.countBusinessRows("second-try")).toBe(0);
  });

  it("refuses a duplicate dedupe key within one transaction", async () => {
    const { store } = ctx();
    await expect(
      store.transaction(async (tx) => {
        await store.enqueue(tx, { type: "test.message", payload: 1, dedupeKey: "same" });
        await store.enqueue(tx, { type: "test.message", payload: 2, dedupeKey: "same" });
      }),
    ).rejects.toBeInstanceOf(DuplicateMessageError);
    expect(await store.listMessages()).toEqual([]);
  });

  it("accepts any number of messages without a dedupe key", async () => {
    const { store } = ctx();
    await enqueueMessage(store, { payload: 1 });
    await enqueueMessage(store, { payload: 1 });
    const messages = await store.listMessages();
    expect(messages).toHaveLength(2);
    expect(messages.map((m) => m.dedupeKey)).toEqual([null, null]);
  });

  it("does not let a delayed message be claimed before its availableAt", async () => {
    const { store, clock } = ctx();
    const message = await enqueueMessage(store, { availableAt: at(60_000) });
    expect(message.availableAt).toEqual(at(60_000));

    expect(await store.claim("worker-a", { limit: 10, leaseMs: 30_000 })).toEqual([]);
    expect(await store.claimMessage("worker-a", message.id, { leaseMs: 30_000 })).toEqual({
      outcome: "not-claimable",
      messageId: message.id,
      status: "pending",
    });
    clock.set(at(59_999));
    expect(await store.claim("worker-a", { limit: 10, leaseMs: 30_000 })).toEqual([]);

    clock.set(at(60_000));
    const lease = await claimNext(store, "worker-a", 30_000);
    expect(lease.messageId).toBe(message.id);
  });

  it("lets a message whose availableAt is already past be claimed at once", async () => {
    const { store, clock } = ctx();
    clock.advance(10_000);
    const message = await enqueueMessage(store, { availableAt: at(5_000) });
    const lease = await claimNext(store, "worker-a", 30_000);
    expect(lease.messageId).toBe(message.id);
  });

  it("returns the payload unchanged, as JSON", async () => {
    const { store } = ctx();
    const payload = { text: "مرحبا وصال ✓", nested: { list: [1, "two", null, true, { deep: 1.5 }] }, empty: {}, none: [] };
    const message = await enqueueMessage(store, { payload });
    expect(message.payload).toEqual(payload);
    expect((await mustGet(store, message.id)).payload).toEqual(payload);
    expect((await claimNext(store, "worker-a", 30_000)).message.payload).toEqual(payload);
  });

  it("rejects an invalid message type, payload or availableAt with InvalidArgumentError and writes nothing", async () => {
    const { store } = ctx();
    const bad: NewMessage[] = [
      { type: "", payload: 1 },
      { type: "   ", payload: 1 },
      { type: "t".repeat(201), payload: 1 },
      { type: 42 as unknown as string, payload: 1 },
      { type: "test.message", payload: undefined as unknown as JsonValue },
      { type: "test.message", payload: 1, availableAt: new Date(Number.NaN) },
    ];
    for (const message of bad) {
      await expect(
        store.transaction((tx) => store.enqueue(tx, message)),
        JSON.stringify(message),
      ).rejects.toBeInstanceOf(InvalidArgumentError);
    }
    expect(await store.listMessages()).toEqual([]);
  });
});

describeEachStore("the message envelope: ordering key, headers, destination", (factory) => {
  const ctx = useStoreHarness(factory);
  const envelope = {
    key: "order-42",
    headers: { "x-correlation-id": "c-1", traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "content-type": "application/json" },
    destination: "orders.events",
  };

  it("stores the key, headers and destination and returns them from enqueue, reads and claims", async () => {
    const { store } = ctx();
    const enqueued = await enqueueMessage(store, envelope);
    expect(enqueued).toMatchObject(envelope);
    expect(await mustGet(store, enqueued.id)).toMatchObject(envelope);
    expect((await store.listMessages())[0]).toMatchObject(envelope);
    const lease = await claimNext(store, "worker-a", 30_000);
    expect(lease.message).toMatchObject(envelope);
    await store.release(lease);
    const one = await store.claimMessage("worker-b", enqueued.id, { leaseMs: 30_000 });
    expect(one.outcome === "claimed" && one.lease.message).toMatchObject(envelope);
  });

  it("gives a message without them a null key and destination and empty headers, as before", async () => {
    const { store } = ctx();
    const plain = await enqueueMessage(store, { headers: {} });
    expect(plain).toMatchObject({ key: null, headers: {}, destination: null });
    expect((await claimNext(store, "worker-a", 30_000)).message).toMatchObject({ key: null, headers: {}, destination: null });
  });

  it.each<[string, Record<string, unknown>, RegExp]>([
    ["a key that is not a string", { key: 42 }, /key \(the ordering key\) must be a non-empty string of at most 255 characters/],
    ["a key that is too long", { key: "k".repeat(256) }, /key \(the ordering key\) must be a non-empty string of at most 255 characters/],
    ["a key with a NUL character", { key: "a\u0000" }, /key \(the ordering key\) contains a NUL character/],
    ["headers that are a list", { headers: [["a", "b"]] }, /headers must be a plain object of string values \(got an array\)/],
    ["a header name that is not a token", { headers: { "bad name": "x" } }, /header name "bad name" is not a token/],
    ["an empty header name", { headers: { "": "x" } }, /header name "" is not a token/],
    ["a header value that is not a string", { headers: { "x-n": 1 } }, /header x-n must be a string \(got 1\)/],
    ["a header value with a line break", { headers: { "x-a": "a\r\nx-injected: 1" } }, /header x-a contains a control character/],
    ["a header value that is too long", { headers: { "x-a": "v".repeat(4097) } }, /header x-a is longer than 4096 characters/],
    ["too many headers", { headers: Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`h${i}`, "v"])) }, /at most 64 headers are allowed \(got 65\)/],
    ["a destination with a control character", { destination: "orders\n" }, /destination contains a control character/],
    ["a destination that is too long", { destination: "d".repeat(256) }, /destination must be a non-empty string of at most 255 characters/],
  ])("refuses %s with InvalidArgumentError, writing nothing", async (_label, change, naming) => {
    const { store, harness } = ctx();
    const attempt = store.transaction(async (tx) => {
      await harness.businessWrite(tx, "order");
      await store.enqueue(tx, { type: "test.message", payload: 1, ...change } as NewMessage);
    });
    await expect(attempt).rejects.toThrow(naming);
    await expect(attempt).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(await store.listMessages()).toEqual([]);
    expect(await harness.countBusinessRows("order")).toBe(0);
  });
});

describeEachStore("enqueue through another library's transaction (enqueueIn)", (factory) => {
  const ctx = useStoreHarness(factory);

  it("commits the message with the business write, as enqueue does, and returns it as stored", async () => {
    const { store, harness, clock } = ctx();
    const message = await store.transaction(async (tx) => {
      await harness.businessWrite(tx, "order-f1");
      return store.enqueueIn(harness.foreign(tx), {
        type: "order.placed",
        payload: { orderId: "order-f1" },
        dedupeKey: "f1",
        key: "order-f1",
        headers: { "x-trace": "t1" },
        destination: "orders",
      });
    });
    expect(message).toMatchObject({
      type: "order.placed",
      payload: { orderId: "order-f1" },
      dedupeKey: "f1",
      key: "order-f1",
      headers: { "x-trace": "t1" },
      destination: "orders",
      status: "pending",
      leaseToken: 0,
      attempts: 0,
    });
    expect(message.createdAt).toEqual(clock.now());
    expect(await store.getMessage(message.id)).toEqual(message);
    expect(await harness.countBusinessRows("order-f1")).toBe(1);
  });

  it("writes neither when the transaction throws, and refuses a dedupe key already taken", async () => {
    const { store, harness } = ctx();
    await expect(
      store.transaction(async (tx) => {
        await harness.businessWrite(tx, "order-f2");
        await store.enqueueIn(harness.foreign(tx), { type: "order.placed", payload: 2, dedupeKey: "f2" });
        throw new Error("rolled back");
      }),
    ).rejects.toThrow("rolled back");
    expect(await store.listMessages()).toEqual([]);
    expect(await harness.countBusinessRows("order-f2")).toBe(0);
    await store.transaction((tx) => store.enqueueIn(harness.foreign(tx), { type: "order.placed", payload: 3, dedupeKey: "f3" }));
    await expect(store.transaction((tx) => store.enqueueIn(harness.foreign(tx), { type: "order.placed", payload: 4, dedupeKey: "f3" }))).rejects.toBeInstanceOf(
      DuplicateMessageError,
    );
  });

  it("refuses a connection outside a transaction (the store asks the database where it can), and writes nothing", async () => {
    const { store, harness } = ctx();
    const outside = harness.foreign(await harness.outsideTransaction());
    await expect(store.enqueueIn(outside, { type: "order.placed", payload: 1 })).rejects.toBeInstanceOf(NotInTransactionError);
    await expect(store.enqueueIn(outside, { type: "order.placed", payload: 1, key: "k" })).rejects.toBeInstanceOf(NotInTransactionError);
    expect(await store.listMessages()).toEqual([]);
  });

  it("refuses something that is not a ForeignTransaction, naming what is expected", async () => {
    const { store } = ctx();
    await expect(store.enqueueIn({} as never, { type: "t", payload: 1 })).rejects.toThrow(
      new InvalidArgumentError("enqueueIn needs a ForeignTransaction ({ placeholders, problem, query }): make one with an integration such as fromKysely(trx)"),
    );
    await expect(store.enqueueIn({ placeholders: "colon" as never, problem: () => null, query: async () => [] }, { type: "t", payload: 1 })).rejects.toThrow(
      'a ForeignTransaction\'s placeholders must be "numbered" or "question" (got "colon")',
    );
  });
});
