// onComplete "delete": a completion removes the message's row in the same guarded statement. It
// gives up the row, not a guarantee: the lease token still guards the completion, the business
// write still commits with it or not at all, keys are still handed on in order, dead messages stay
// until redriven, and the audit trail keeps the history. What changes is the dedupe key, which is
// free again once its message is gone.

import { expect, it } from "vitest";
import { InvalidArgumentError } from "../../src/outbox/errors.js";
import { SqliteOutboxStore } from "../../src/stores/sqlite/sqlite-outbox-store.js";
import { claimNext, describeEachStoreDeleting, drain, enqueueKeyed, enqueueMessage, enqueueMessages, useStoreHarness } from "./stores.js";

const LEASE_MS = 1_000;

describeEachStoreDeleting("a completion deletes the row", (factory) => {
  const ctx = useStoreHarness(factory);

  it("deletes the row with the business write in one transaction, and rolls both back together", async () => {
    const { store, harness, clock } = ctx();
    expect(store.onComplete).toBe("delete");
    const message = await enqueueMessage(store);
    const lease = await claimNext(store, "worker-a", LEASE_MS);

    await expect(
      store.complete(lease, async (tx) => {
        await harness.businessWrite(tx, "effect");
        throw new Error("business write refused");
      }),
    ).rejects.toThrow("business write refused");
    expect(await harness.countBusinessRows("effect")).toBe(0);
    expect(await store.getMessage(message.id)).toMatchObject({ status: "processing", leaseToken: lease.token });

    expect(await store.complete(lease, (tx) => harness.businessWrite(tx, "effect"))).toEqual({
      outcome: "completed",
      messageId: message.id,
      processedAt: clock.now(),
    });
    expect(await harness.countBusinessRows("effect")).toBe(1);
    expect(await store.getMessage(message.id)).toBeUndefined();
    expect(await store.countByStatus()).toEqual({ pending: 0, processing: 0, processed: 0, dead: 0, cancelled: 0 });
  });

  it("deletes lone and bulk completions without business writes, and only the rows whose lease is current", async () => {
    const { store, clock } = ctx();
    await enqueueMessages(store, clock, 4);
    const lone = await claimNext(store, "worker-a", LEASE_MS);
    expect((await store.completeMany([{ lease: lone }]))[0]?.outcome).toBe("completed");
    expect(await store.getMessage(lone.messageId)).toBeUndefined();

    const stale = await claimNext(store, "worker-a", LEASE_MS);
    const [b, c] = await store.claim("worker-a", { limit: 2, leaseMs: LEASE_MS * 10 });
    clock.advance(LEASE_MS);
    const fresh = await claimNext(store, "worker-b", LEASE_MS);
    expect(fresh.messageId).toBe(stale.messageId);
    const results = await store.completeMany([{ lease: stale }, { lease: b! }, { lease: c! }]);
    expect(results.map((r) => r.outcome)).toEqual(["lease-lost", "completed", "completed"]);
    expect(results[0]).toMatchObject({ current: { status: "processing", lockedBy: "worker-b", leaseToken: fresh.token } });
    expect(await store.getMessage(b!.messageId)).toBeUndefined();
    expect(await store.getMessage(c!.messageId)).toBeUndefined();
    expect(await store.getMessage(stale.messageId)).toMatchObject({ status: "processing", lockedBy: "worker-b" });
  });

  it("group commit with business writes: a failing write keeps its row and lease, its neighbours' rows go", async () => {
    const { store, clock, harness } = ctx();
    await enqueueMessages(store, clock, 3);
    const [a, b, c] = await store.claim("worker-a", { limit: 3, leaseMs: LEASE_MS });
    const results = await store.completeMany([
      { lease: a!, finalize: (tx: unknown) => harness.businessWrite(tx, "a") },
      {
        lease: b!,
        finalize: async (tx: unknown) => {
          await harness.businessWrite(tx, "b");
          throw new Error("constraint violated");
        },
      },
      { lease: c!, finalize: (tx: unknown) => harness.businessWrite(tx, "c") },
    ]);
    expect(results.map((r) => r.outcome)).toEqual(["completed", "failed", "completed"]);
    expect([await harness.countBusinessRows("a"), await harness.countBusinessRows("b"), await harness.countBusinessRows("c")]).toEqual([1, 0, 1]);
    expect(await store.getMessage(a!.messageId)).toBeUndefined();
    expect(await store.getMessage(b!.messageId)).toMatchObject({ status: "processing", leaseToken: b!.token });
    expect(await store.getMessage(c!.messageId)).toBeUndefined();
  });

  it("refuses a stale owner's completion, before and after the new owner's deleted the row; only one business write commits", async () => {
    const { store, clock, harness } = ctx();
    const message = await enqueueMessage(store);
    const stale = await claimNext(store, "worker-a", LEASE_MS);
    clock.advance(LEASE_MS);
    const fresh = await claimNext(store, "worker-b", LEASE_MS);

    expect(await store.complete(stale, (tx) => harness.businessWrite(tx, "effect"))).toMatchObject({
      outcome: "lease-lost",
      current: { status: "processing", leaseToken: fresh.token },
    });
    expect((await store.complete(fresh, (tx) => harness.businessWrite(tx, "effect"))).outcome).toBe("completed");
    // The row is gone: the stale lease finds nothing, and writes nothing.
    expect(await store.complete(stale, (tx) => harness.businessWrite(tx, "effect"))).toEqual({
      outcome: "lease-lost",
      messageId: message.id,
      token: stale.token,
      current: null,
    });
    expect(await store.fail(stale, new Error("late"), "dead")).toMatchObject({ outcome: "lease-lost", current: null });
    expect(await store.release(stale)).toMatchObject({ outcome: "lease-lost", current: null });
    expect(await store.claimMessage("worker-c", message.id, { leaseMs: LEASE_MS })).toMatchObject({ outcome: "not-claimable", status: "missing" });
    expect(await harness.countBusinessRows("effect")).toBe(1);
  });

  it("hands each ordering key on in order, and the key's numbering goes on after its rows are gone", async () => {
    const { store } = ctx();
    for (const name of ["a1", "a2", "a3"]) await enqueueKeyed(store, name, "k");
    await enqueueKeyed(store, "b1", "other");
    expect(await drain(store)).toEqual(["a1#1", "b1#1", "a2#2", "a3#3"]);
    expect(await store.listMessages({})).toEqual([]);
    // The key is free and remembers its next number.
    const next = await enqueueKeyed(store, "a4", "k");
    expect(next.keySeq).toBe(4);
  });

  it("keeps dead messages, which still hold their keys, until redriven; then the completion deletes them", async () => {
    const { store } = ctx();
    const first = await enqueueKeyed(store, "first", "k");
    await enqueueKeyed(store, "second", "k");
    const lease = await claimNext(store, "worker-a", LEASE_MS);
    expect((await store.fail(lease, new Error("boom"), "dead")).outcome).toBe("dead");
    expect(await store.getMessage(first.id)).toMatchObject({ status: "dead" });
    expect(await store.claim("worker-a", { limit: 10, leaseMs: LEASE_MS })).toEqual([]); // the key waits behind its dead holder

    expect((await store.redrive({ messageIds: [first.id] })).moved).toBe(1);
    expect(await drain(store)).toEqual(["first#1", "second#2"]);
    expect(await store.listMessages({})).toEqual([]);
  });

  it("frees a dedupe key once its message is completed: refused while pending or running, taken again after", async () => {
    const { store } = ctx();
    const first = await enqueueMessage(store, { dedupeKey: "order-7" });
    await expect(enqueueMessage(store, { dedupeKey: "order-7" })).rejects.toMatchObject({ name: "DuplicateMessageError" });
    const lease = await claimNext(store, "worker-a", LEASE_MS);
    await expect(enqueueMessage(store, { dedupeKey: "order-7" })).rejects.toMatchObject({ name: "DuplicateMessageError" });
    expect((await store.complete(lease)).outcome).toBe("completed");

    const again = await enqueueMessage(store, { dedupeKey: "order-7" });
    expect(again.id).not.toBe(first.id);
  });

  it("keeps the history in the audit trail: each claim and completion of a deleted message", async () => {
    const { store, clock } = ctx();
    const message = await enqueueMessage(store);
    const first = await claimNext(store, "worker-a", LEASE_MS);
    clock.advance(LEASE_MS);
    const second = await claimNext(store, "worker-b", LEASE_MS);
    await store.complete(second);
    await store.complete(first);
    const trail = (await store.auditTrail({ messageId: message.id })).map((e) => [e.action, e.owner, e.token]);
    expect(trail).toEqual([
      ["claim", "worker-a", first.token],
      ["claim", "worker-b", second.token],
      ["complete", "worker-b", second.token],
      ["refused", "worker-a", first.token],
    ]);
  });
});

it("refuses an onComplete that is neither keep nor delete, naming both", () => {
  expect(() => new SqliteOutboxStore({ path: ":memory:", onComplete: "purge" as "delete" })).toThrow(InvalidArgumentError);
  expect(() => new SqliteOutboxStore({ path: ":memory:", onComplete: "purge" as "delete" })).toThrow(
    'onComplete must be "keep" (a completed message stays as processed) or "delete" (its row is deleted) (got "purge")',
  );
  expect(new SqliteOutboxStore({ path: ":memory:" }).onComplete).toBe("keep");
});
