// Each keyed message's place in its key's order (keySeq), on every store: 1, 2, 3… given when the
// message becomes its key's holder, with no gap among the messages a relay publishes. A completed
// holder passes its number + 1 on; a skipped (dead) one passes its own number on, since it was never
// published; a dead holder that is redriven keeps its number. A consumer's inbox applies number n
// of a key only after n − 1, so these numbers are what keeps each key's effects in order.

import { expect, it } from "vitest";
import type { OutboxStore } from "../../src/outbox/store.js";
import type { Lease } from "../../src/outbox/types.js";
import { describeEachStore, drain, enqueueKeyed, expectFinished, label, mustGet, useStoreHarness, whenKept } from "./stores.js";

const LEASE_MS = 1_000;

async function claimOne(store: OutboxStore<unknown>): Promise<Lease> {
  const [lease] = await store.claim("w", { limit: 1, leaseMs: LEASE_MS });
  if (lease === undefined) throw new Error("nothing to claim");
  return lease;
}

describeEachStore("each key's messages are numbered 1, 2, 3… as their turns come", (factory) => {
  const ctx = useStoreHarness(factory);

  it("numbers a key's holder at enqueue and each next message when the key is handed on; unkeyed and waiting messages have none", async () => {
    const { store } = ctx();
    const a1 = await enqueueKeyed(store, "a1", "a");
    const a2 = await enqueueKeyed(store, "a2", "a");
    const u = await enqueueKeyed(store, "u");
    expect([a1.keySeq, a2.keySeq, u.keySeq]).toEqual([1, null, null]);
    expect((await mustGet(store, a2.id)).keySeq).toBeNull();
    const first = await claimOne(store);
    expect([label(first), first.message.keySeq]).toEqual(["a1", 1]);
    await store.complete(first);
    expect((await mustGet(store, a2.id)).keySeq).toBe(2);
    await expectFinished(store, factory, a1.id, { keySeq: 1 }); // kept on the processed row (none in delete mode)
    await enqueueKeyed(store, "a3", "a");
    expect(await drain(store)).toEqual(["a2#2", "u#null", "a3#3"]);
  });

  it("a key whose queue emptied goes on from its next number, also after its processed messages were purged", async () => {
    const { store, clock } = ctx();
    await enqueueKeyed(store, "a1", "a");
    await enqueueKeyed(store, "b1", "b");
    expect(await drain(store)).toEqual(["a1#1", "b1#1"]);
    expect((await enqueueKeyed(store, "a2", "a")).keySeq).toBe(2);
    expect(await drain(store)).toEqual(["a2#2"]);
    clock.advance(60_000);
    // In delete mode the completions already deleted the rows: the numbers live on in the keys alone.
    expect(await store.purgeProcessed(clock.now())).toBe(whenKept(factory, 3, 0));
    expect((await enqueueKeyed(store, "a3", "a")).keySeq).toBe(3);
    expect((await enqueueKeyed(store, "b2", "b")).keySeq).toBe(2);
    expect((await enqueueKeyed(store, "c1", "c")).keySeq).toBe(1);
  });

  it("a retry, a release and a reclaim keep the holder's number", async () => {
    const { store, clock } = ctx();
    await enqueueKeyed(store, "a1", "a");
    await enqueueKeyed(store, "a2", "a");
    let lease = await claimOne(store);
    await store.fail(lease, new Error("transient"), { retryInMs: 10 });
    clock.advance(10);
    lease = await claimOne(store);
    expect([label(lease), lease.message.keySeq]).toEqual(["a1", 1]);
    await store.release(lease);
    lease = await claimOne(store);
    clock.advance(LEASE_MS + 1);
    const reclaimed = await claimOne(store);
    expect([label(reclaimed), reclaimed.message.keySeq, reclaimed.reclaimedFrom]).toEqual(["a1", 1, "w"]);
    await store.complete(reclaimed);
    expect(await drain(store)).toEqual(["a2#2"]);
  });

  it("a skipped dead holder gives its number to the next message, whether one waits or comes later", async () => {
    const { store } = ctx();
    for (const n of [1, 2, 3]) await enqueueKeyed(store, `a${n}`, "a");
    await store.complete(await claimOne(store)); // a1 is 1
    await store.fail(await claimOne(store), new Error("poison"), "dead"); // a2 was 2, blocks
    await store.unblockKey("a", "skip");
    expect(await drain(store)).toEqual(["a3#2"]);
    // Nobody waiting: the next enqueue takes the skipped number.
    await enqueueKeyed(store, "a4", "a");
    const a4 = await claimOne(store);
    await store.fail(a4, new Error("poison"), "dead-and-skip");
    expect((await enqueueKeyed(store, "a5", "a")).keySeq).toBe(3);
    expect(await drain(store)).toEqual(["a5#3"]);
  });

  it("a redriven dead holder keeps its number; a skipped message redriven later is numbered when its turn comes", async () => {
    const { store } = ctx();
    for (const n of [1, 2]) await enqueueKeyed(store, `a${n}`, "a");
    const a1 = await claimOne(store);
    await store.fail(a1, new Error("poison"), "dead");
    await store.unblockKey("a", "redrive");
    expect(await drain(store)).toEqual(["a1#1", "a2#2"]);
    // b1 skipped while b2 waits: b2 takes 1; b1 redriven rejoins behind b2 and is numbered 2 at its turn.
    for (const n of [1, 2, 3]) await enqueueKeyed(store, `b${n}`, "b");
    const b1 = await claimOne(store);
    await store.fail(b1, new Error("poison"), "dead-and-skip");
    const b2 = await claimOne(store);
    expect([label(b2), b2.message.keySeq]).toEqual(["b2", 1]);
    expect((await store.redrive({ messageIds: [b1.messageId] })).moved).toBe(1);
    expect((await mustGet(store, b1.messageId)).keySeq).toBeNull();
    await store.complete(b2);
    expect(await drain(store)).toEqual(["b1#2", "b3#3"]);
    // A skipped message redriven when its key is free holds it at once, with the key's next number.
    await enqueueKeyed(store, "c1", "c");
    const c1 = await claimOne(store);
    await store.fail(c1, new Error("poison"), "dead-and-skip");
    expect((await store.redrive("all")).moved).toBe(1);
    expect((await mustGet(store, c1.messageId)).keySeq).toBe(1);
    expect(await drain(store)).toEqual(["c1#1"]);
  });

  it("enqueueMany numbers the first message of each free key, and group commits (with and without business writes) hand each key on with the next number", async () => {
    const { store, harness } = ctx();
    const listed = await store.transaction((tx) =>
      store.enqueueMany(tx, [
        { type: "t", payload: { label: "a1" }, key: "a" },
        { type: "t", payload: { label: "b1" }, key: "b" },
        { type: "t", payload: { label: "a2" }, key: "a" },
        { type: "t", payload: { label: "u" } },
        { type: "t", payload: { label: "b2" }, key: "b" },
      ]),
    );
    expect(listed.map((m) => m.keySeq)).toEqual([1, 1, null, null, null]);
    const first = await store.claim("w", { limit: 10, leaseMs: LEASE_MS });
    expect(first.map((l) => `${label(l)}#${l.message.keySeq}`)).toEqual(["a1#1", "b1#1", "u#null"]);
    // a1 with a business write, b1 without: the savepoint path and the bulk path in one group.
    const results = await store.completeMany([
      { lease: first[0]!, finalize: (tx) => harness.businessWrite(tx, "a1") },
      { lease: first[1]! },
      { lease: first[2]! },
    ]);
    expect(results.map((r) => r.outcome)).toEqual(["completed", "completed", "completed"]);
    expect(await drain(store)).toEqual(["a2#2", "b2#2"]);
    // a2 and b2 were completed together with nobody waiting: both keys remember their next number.
    const next = await store.transaction((tx) =>
      store.enqueueMany(tx, [
        { type: "t", payload: { label: "a3" }, key: "a" },
        { type: "t", payload: { label: "b3" }, key: "b" },
      ]),
    );
    expect(next.map((m) => m.keySeq)).toEqual([3, 3]);
  });
  it("a key's place can be read a page at a time and carried to another outbox, where the key goes on from it (never back)", async () => {
    const { store, clock } = ctx();
    for (const key of ["a", "a", "b", "c"]) await enqueueKeyed(store, key, key);
    await drain(store);
    expect(await store.keySequences()).toEqual([
      { key: "a", nextSeq: 3 },
      { key: "b", nextSeq: 2 },
      { key: "c", nextSeq: 2 },
    ]);
    expect(await store.keySequences({ after: "a", limit: 1 })).toEqual([{ key: "b", nextSeq: 2 }]);
    expect(await store.keySequences({ after: "c" })).toEqual([]);

    const other = await factory.create(clock);
    try {
      await other.store.carryKeySequences([]);
      await other.store.carryKeySequences((await store.keySequences()).filter((turn) => turn.key !== "c"));
      await other.store.carryKeySequences([{ key: "a", nextSeq: 2 }]); // lower: the higher number stays
      await other.store.carryKeySequences([
        { key: "e", nextSeq: 4 },
        { key: "e", nextSeq: 6 },
      ]); // a key twice in one call: its highest number
      expect(await other.store.keySequences({ after: "d" })).toEqual([{ key: "e", nextSeq: 6 }]);
      expect((await enqueueKeyed(other.store, "a", "a")).keySeq).toBe(3);
      expect((await enqueueKeyed(other.store, "b", "b")).keySeq).toBe(2);
      expect((await enqueueKeyed(other.store, "c", "c")).keySeq).toBe(1);
      await expect(other.store.carryKeySequences([{ key: "d", nextSeq: 0 }])).rejects.toThrow(/keySeq .* must be a whole number >= 1 \(got 0\)/);
      await expect(other.store.keySequences({ limit: 0 })).rejects.toThrow(/limit must be a whole number from 1 to 100000 \(got 0\)/);
    } finally {
      await other.close();
    }
  });
});
