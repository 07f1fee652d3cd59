// Invariant 1, durable: a committed message survives a restart of any process.

import { expect, it } from "vitest";
import { claimNext, describeEachStore, enqueueMessage, expectFinished, mustGet, useStoreHarness, whenKept } from "./stores.js";

describeEachStore("durability", (factory) => {
  const ctx = useStoreHarness(factory);

  it("keeps committed messages and their state across a close and reopen", async () => {
    const { harness, clock } = ctx();
    const store = harness.store;
    const pending = await enqueueMessage(store, { dedupeKey: "pending", payload: { kind: "pending" } });
    const processing = await enqueueMessage(store, { dedupeKey: "processing" });
    const processed = await enqueueMessage(store, { dedupeKey: "processed" });
    const dead = await enqueueMessage(store, { dedupeKey: "dead" });
    const retrying = await enqueueMessage(store, { dedupeKey: "retrying" });

    const claimed = async (id: string) => {
      const result = await store.claimMessage("worker-a", id, { leaseMs: 60_000 });
      if (result.outcome !== "claimed") throw new Error(`expected to claim ${id}, got ${result.outcome}`);
      return result.lease;
    };
    await claimed(processing.id);
    clock.advance(1_000);
    expect((await store.complete(await claimed(processed.id), (tx) => harness.businessWrite(tx, "processed"))).outcome).toBe("completed");
    expect((await store.fail(await claimed(dead.id), new Error("poison message"), "dead")).outcome).toBe("dead");
    expect((await store.fail(await claimed(retrying.id), new Error("try later"), { retryInMs: 10_000 })).outcome).toBe("retry-scheduled");

    const before = await store.listMessages();
    // In delete mode the completed message has no row to keep; the business row still proves it ran.
    expect(before.map((m) => [m.dedupeKey, m.status])).toEqual([
      ["pending", "pending"],
      ["processing", "processing"],
      ...whenKept(factory, [["processed", "processed"]], []),
      ["dead", "dead"],
      ["retrying", "pending"],
    ]);

    const reopened = await harness.reopen();
    expect(reopened).not.toBe(store);
    expect(await reopened.listMessages()).toEqual(before);
    expect(await reopened.countByStatus()).toEqual({ pending: 2, processing: 1, processed: whenKept(factory, 1, 0), dead: 1, cancelled: 0 });
    expect(await harness.countBusinessRows("processed")).toBe(1);
    await expectFinished(reopened, factory, processed.id);
    expect((await mustGet(reopened, pending.id)).payload).toEqual({ kind: "pending" });
  });

  it("keeps a lease across a restart: the holder still blocks others and can still complete", async () => {
    const { harness } = ctx();
    const message = await enqueueMessage(harness.store);
    const lease = await claimNext(harness.store, "worker-a", 60_000);

    const reopened = await harness.reopen();
    expect(await reopened.claim("worker-b", { limit: 10, leaseMs: 60_000 })).toEqual([]);
    expect(await reopened.claimMessage("worker-b", message.id, { leaseMs: 60_000 })).toMatchObject({ outcome: "blocked", heldBy: "worker-a", token: 1 });

    const result = await reopened.complete(lease, (tx) => harness.businessWrite(tx, "after-restart"));
    expect(result.outcome).toBe("completed");
    expect(await harness.countBusinessRows("after-restart")).toBe(1);
    await expectFinished(reopened, factory, message.id);
  });

  it("still offers an expired lease's message for reclaim after a restart, with the next token", async () => {
    const { harness, clock } = ctx();
    const message = await enqueueMessage(harness.store);
    await claimNext(harness.store, "worker-a", 60_000);

    const reopened = await harness.reopen();
    clock.advance(60_000);
    const lease = await claimNext(reopened, "worker-b", 60_000);
    expect(lease).toMatchObject({ messageId: message.id, token: 2, reclaimedFrom: "worker-a" });
  });

  it("does not bring back a rolled-back message after a restart", async () => {
    const { harness } = ctx();
    await expect(
      harness.store.transaction(async (tx) => {
        await harness.store.enqueue(tx, { type: "test.message", payload: 1 });
        throw new Error("rolled back");
      }),
    ).rejects.toThrow("rolled back");

    const reopened = await harness.reopen();
    expect(await reopened.listMessages()).toEqual([]);
  });

  it("shows a committed message to another connection while the writer is still open", async () => {
    const { harness } = ctx();
    const other = await harness.connect();
    const message = await enqueueMessage(harness.store, { dedupeKey: "seen-elsewhere" });

    expect(await other.getMessage(message.id)).toEqual(message);
    const lease = await claimNext(other, "worker-b", 30_000);
    expect(lease.messageId).toBe(message.id);
    expect((await mustGet(harness.store, message.id)).lockedBy).toBe("worker-b");
  });
});
