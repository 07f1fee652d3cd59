// The inbox on every store: a received id recorded with the consumer's effect in one transaction;
// the same id again (from the same source) changes nothing; a rollback records nothing; a receive
// outside a transaction or with a bad id is refused; two connections receiving one id at once
// apply it once; and retention deletes only the old ids.

import { expect, it } from "vitest";
import { InvalidArgumentError, NotInTransactionError } from "../../src/outbox/errors.js";
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
