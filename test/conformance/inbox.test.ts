// The inbox on every store: a received id recorded with the consumer's effect in one transaction;
// the same id again (from the same source) changes nothing; a rollback records nothing; a receive
// outside a transaction or with a bad id is refused; two connections receiving one id at once
// apply it once; and retention deletes only the old ids.

import { expect, it } from "vitest";
import { InvalidArgumentError, KeyNotBlockedError, NotInTransactionError } from "../../src/outbox/errors.js";
import { Inbox } from "../../src/relay/inbox.js";
import { describeEachStore, useStoreHarness } from "./stores.js";

describeEachStore("the inbox", (factory) => {
  const ctx = useStoreHarness(factory);

  it("applies a message once: the second receive of its id skips the effect", async () => {
    const { store, harness } = ctx();
    const inbox = new Inbox({ store, source: "orders" });
    const first = await inbox.handle("m-1", async (tx) => {
      await harness.businessWrite(tx, "m-1");
      return "applied";
    });
    const again = await inbox.handle("m-1", async (tx) => {
      await harness.businessWrite(tx, "m-1");
      return "applied";
    });
    expect(first).toEqual({ duplicate: false, result: "applied" });
    expect(again).toEqual({ duplicate: true });
    expect(await harness.countBusinessRows("m-1")).toBe(1);
    // The same id from another source is another message.
    expect(await new Inbox({ store, source: "payments" }).handle("m-1", () => "other")).toEqual({ duplicate: false, result: "other" });
  });

  it("an effect that throws records nothing: the message can come again and is applied then", async () => {
    const { store, harness } = ctx();
    const inbox = new Inbox({ store });
    await expect(
      inbox.handle("m-2", async (tx) => {
        await harness.businessWrite(tx, "m-2");
        throw new Error("the consumer failed");
      }),
    ).rejects.toThrow("the consumer failed");
    expect(await harness.countBusinessRows("m-2")).toBe(0);
    expect(await inbox.handle("m-2", (tx) => harness.businessWrite(tx, "m-2"))).toEqual({ duplicate: false, result: undefined });
    expect(await harness.countBusinessRows("m-2")).toBe(1);
  });

  it("refuses a receive outside a transaction, and an id or source no store can hold", async () => {
    const { store, harness } = ctx();
    await expect(store.receive(await harness.outsideTransaction(), "m-3")).rejects.toBeInstanceOf(NotInTransactionError);
    await store.transaction(async (tx) => {
      await expect(store.receive(tx, "")).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(store.receive(tx, "x".repeat(256))).rejects.toThrow("inbox message id must be a non-empty string of at most 255 characters");
      await expect(store.receive(tx, "a\u0000b")).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(store.receive(tx, "m-3", { source: 7 as unknown as string })).rejects.toThrow("inbox source");
    });
  });

  it("two connections receiving one id at once: one applies it, the other sees a duplicate", async () => {
    const { store, harness } = ctx();
    const other = await harness.connect();
    for (let round = 0; round < 10; round += 1) {
      const id = `race-${round}`;
      const results = await Promise.all(
        [store, other].map((s) => new Inbox({ store: s }).handle(id, async (tx) => harness.businessWrite(tx, id).then(() => "applied"))),
      );
      expect(results.filter((r) => !r.duplicate)).toHaveLength(1);
      expect(results.filter((r) => r.duplicate)).toHaveLength(1);
      expect(await harness.countBusinessRows(id)).toBe(1);
    }
  });

  it("purgeInbox deletes the ids received before the cutoff, in batches; a purged id would be applied again", async () => {
    const { store, clock } = ctx();
    const inbox = new Inbox({ store });
    for (const id of ["old-1", "old-2", "old-3"]) await inbox.handle(id, () => undefined);
    clock.advance(60_000);
    await inbox.handle("new-1", () => undefined);
    const progress: number[] = [];
    expect(await store.purgeInbox(new Date(clock.now().getTime() - 1_000), { batchSize: 2, onProgress: (n) => progress.push(n) })).toBe(3);
    expect(progress).toEqual([2, 3]);
    expect(await inbox.handle("new-1", () => "again")).toEqual({ duplicate: true });
    expect(await inbox.handle("old-1", () => "again")).toEqual({ duplicate: false, result: "again" });
  });
});

describeEachStore("the inbox in each key's order", (factory) => {
  const ctx = useStoreHarness(factory);
  const keyed = (id: string, key: string, keySeq: number) => ({ id, key, keySeq });

  it("applies a key's number n only after n − 1: an early one is held back with nothing applied, and applied when it comes again in its turn", async () => {
    const { store, harness, clock } = ctx();
    const inbox = new Inbox({ store, source: "orders" });
    const apply = (id: string) => (tx: unknown) => harness.businessWrite(tx, id).then(() => id);
    expect(await inbox.handle(keyed("m-2", "acct-1", 2), apply("m-2"))).toEqual({ duplicate: false, early: true, waitingFor: 1 });
    expect(await harness.countBusinessRows("m-2")).toBe(0);
    const since = clock.now();
    expect(await inbox.blockedKeys()).toEqual([{ source: "orders", key: "acct-1", appliedSeq: 0, waitingFor: 1, heldSeq: 2, heldSince: since }]);
    clock.advance(1_000);
    expect(await inbox.handle(keyed("m-3", "acct-1", 3), apply("m-3"))).toMatchObject({ early: true, waitingFor: 1 });
    // The lowest number held, and since its first hold.
    expect(await inbox.blockedKeys()).toMatchObject([{ heldSeq: 2, heldSince: since }]);
    expect(await inbox.handle(keyed("m-1", "acct-1", 1), apply("m-1"))).toEqual({ duplicate: false, early: false, late: false, result: "m-1" });
    expect(await inbox.blockedKeys()).toEqual([]); // 2 is next now: no gap left
    expect(await inbox.handle(keyed("m-2", "acct-1", 2), apply("m-2"))).toMatchObject({ early: false, result: "m-2" });
    expect(await inbox.handle(keyed("m-3", "acct-1", 3), apply("m-3"))).toMatchObject({ early: false, result: "m-3" });
    for (const id of ["m-1", "m-2", "m-3"]) expect(await harness.countBusinessRows(id)).toBe(1);
    // A redelivery is a duplicate. Another message given a number the key has passed is applied
    // late (rather than lost), the key's number unchanged; other keys and sources are apart.
    expect(await inbox.handle(keyed("m-2", "acct-1", 2), apply("m-2"))).toEqual({ duplicate: true, early: false });
    expect(await inbox.handle(keyed("other", "acct-1", 1), apply("other"))).toEqual({ duplicate: false, early: false, late: true, result: "other" });
    expect(await inbox.handle(keyed("other", "acct-1", 1), apply("other"))).toEqual({ duplicate: true, early: false });
    expect(await inbox.handle(keyed("m-4", "acct-1", 4), apply("m-4"))).toMatchObject({ early: false, late: false });
    expect(await inbox.handle(keyed("b-1", "acct-2", 1), apply("b-1"))).toMatchObject({ result: "b-1" });
    expect(await new Inbox({ store, source: "payments" }).handle(keyed("p-1", "acct-1", 1), apply("p-1"))).toMatchObject({ result: "p-1" });
    expect(await harness.countBusinessRows("other")).toBe(1);
  });

  it("keeps the gap visible while a later number stays held, and a skip lets the key go on from the held one", async () => {
    const { store, harness } = ctx();
    const inbox = new Inbox({ store, source: "s" });
    await inbox.handle(keyed("k-1", "k", 1), () => undefined);
    expect(await inbox.handle(keyed("k-5", "k", 5), () => undefined)).toMatchObject({ early: true, waitingFor: 2 });
    // Number 2 comes: 3 and 4 are still missing, so the key stays listed.
    await inbox.handle(keyed("k-2", "k", 2), () => undefined);
    expect(await inbox.blockedKeys()).toMatchObject([{ key: "k", appliedSeq: 2, waitingFor: 3, heldSeq: 5 }]);
    expect(await store.inboxBlockedKeys({ source: "elsewhere" })).toEqual([]);
    expect(await store.inboxBlockedKeys()).toHaveLength(1);
    expect(await inbox.unblockKey("k", "skip")).toEqual({ key: "k", skipped: [3, 4] });
    expect(await inbox.blockedKeys()).toEqual([]);
    expect(await inbox.handle(keyed("k-5", "k", 5), (tx) => harness.businessWrite(tx, "k-5"))).toMatchObject({ early: false });
    expect(await harness.countBusinessRows("k-5")).toBe(1);
    // Number 3 arriving after the skip is applied late, out of its place, rather than lost.
    expect(await inbox.handle(keyed("k-3", "k", 3), (tx) => harness.businessWrite(tx, "k-3"))).toMatchObject({ late: true });
    expect(await harness.countBusinessRows("k-3")).toBe(1);
    await expect(inbox.unblockKey("k", "skip")).rejects.toBeInstanceOf(KeyNotBlockedError);
    await expect(inbox.unblockKey("k", "skip")).rejects.toThrow(/holds nothing back at the inbox \(source "s"\)/);
    await expect(inbox.unblockKey("k", "redrive" as "skip")).rejects.toThrow(/redrive the missing message in the producer's outbox/);
  });

  it("an effect that throws applies nothing and the key's number stays: the message is applied when it comes again", async () => {
    const { store, harness } = ctx();
    const inbox = new Inbox({ store });
    await expect(inbox.handle(keyed("e-1", "k", 1), () => Promise.reject(new Error("the consumer failed")))).rejects.toThrow("the consumer failed");
    expect(await inbox.handle(keyed("e-2", "k", 2), () => undefined)).toMatchObject({ early: true, waitingFor: 1 });
    expect(await inbox.handle(keyed("e-1", "k", 1), (tx) => harness.businessWrite(tx, "e-1"))).toMatchObject({ early: false });
    expect(await harness.countBusinessRows("e-1")).toBe(1);
  });

  it("a message without a number, or for an inbox with keyOrder false, is applied by its id alone; a number whose id was received without one moves the key on as a duplicate", async () => {
    const { store } = ctx();
    const inbox = new Inbox({ store });
    expect(await inbox.handle({ id: "plain", key: "k", keySeq: null }, () => "x")).toEqual({ duplicate: false, early: false, late: false, result: "x" });
    expect(await inbox.handle("n-1", () => "y")).toEqual({ duplicate: false, result: "y" });
    expect(await inbox.handle(keyed("n-1", "k", 1), () => "z")).toEqual({ duplicate: true, early: false });
    expect(await inbox.handle(keyed("n-2", "k", 2), () => "w")).toMatchObject({ early: false, result: "w" });
    const unordered = new Inbox({ store, source: "one-route-of-many", keyOrder: false });
    expect(await unordered.handle(keyed("u-5", "k", 5), () => "five")).toEqual({ duplicate: false, early: false, late: false, result: "five" });
    expect(await unordered.handle(keyed("u-5", "k", 5), () => "again")).toEqual({ duplicate: true, early: false });
    expect(await unordered.blockedKeys()).toEqual([]);
    expect(() => new Inbox({ store, keyOrder: "yes" as unknown as boolean })).toThrow("keyOrder must be true or false");
  });

  it("two connections receiving one key's numbers at once apply them in order, once each", async () => {
    const { store, harness } = ctx();
    const other = await harness.connect();
    const order: number[] = [];
    const inboxes = [new Inbox({ store, source: "race" }), new Inbox({ store: other, source: "race" })];
    // Each of 20 numbers is offered to both connections at once, until one applies it.
    for (let n = 1; n <= 20; n += 1) {
      const results = await Promise.all(
        inboxes.map((inbox, i) =>
          inbox.handle(keyed(`r-${n}`, "k", n), async (tx) => {
            await harness.businessWrite(tx, `r-${n}`);
            order.push(n);
            return i;
          }),
        ),
      );
      expect(results.filter((r) => !r.duplicate && !r.early)).toHaveLength(1);
      expect(await harness.countBusinessRows(`r-${n}`)).toBe(1);
    }
    expect(order).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
  });

  it("refuses a receive in order outside a transaction, and a key or number no store can hold", async () => {
    const { store, harness } = ctx();
    await expect(store.receiveInOrder(await harness.outsideTransaction(), keyed("x", "k", 1))).rejects.toBeInstanceOf(NotInTransactionError);
    await store.transaction(async (tx) => {
      await expect(store.receiveInOrder(tx, keyed("x", "k", 0))).rejects.toThrow(
        "keySeq (the message's number in its key's order) must be a whole number >= 1 (got 0)",
      );
      await expect(store.receiveInOrder(tx, keyed("x", "k", 1.5))).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(store.receiveInOrder(tx, keyed("x", "", 1))).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(store.receiveInOrder(tx, keyed("", "k", 1))).rejects.toBeInstanceOf(InvalidArgumentError);
    });
    await expect(store.skipInboxGap("")).rejects.toBeInstanceOf(InvalidArgumentError);
  });
});
