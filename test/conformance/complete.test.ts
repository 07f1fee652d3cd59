// Completing: the guarded update and the caller's business writes commit in one transaction,
// or neither does; a completed message is finished for good. With onComplete "delete" finished
// means its row is gone rather than kept as processed: expectFinished checks whichever applies.

import { expect, it, vi } from "vitest";
import { claimNext, describeEachStore, enqueueMessage, expectFinished, finishedHolder, finishedStatus, mustGet, useStoreHarness } from "./stores.js";

const LEASE_MS = 30_000;

describeEachStore("completing", (factory) => {
  const ctx = useStoreHarness(factory);

  it("rolls back both the business write and the completion when finalize throws, keeping the lease", async () => {
    const { store, harness } = ctx();
    const message = await enqueueMessage(store);
    const lease = await claimNext(store, "worker-a", LEASE_MS);
    const failure = new Error("business write refused");

    await expect(
      store.complete(lease, async (tx) => {
        await harness.businessWrite(tx, "effect");
        throw failure;
      }),
    ).rejects.toBe(failure);

    expect(await harness.countBusinessRows("effect")).toBe(0);
    expect(await store.getMessage(message.id)).toEqual(lease.message);
    expect(await store.claim("worker-b", { limit: 10, leaseMs: LEASE_MS })).toEqual([]);

    // The same lease still holds the message and can complete it.
    expect((await store.complete(lease, (tx) => harness.businessWrite(tx, "effect"))).outcome).toBe("completed");
    expect(await harness.countBusinessRows("effect")).toBe(1);
    await expectFinished(store, factory, message.id);
  });

  it("rolls back the completion when finalize throws synchronously", async () => {
    const { store } = ctx();
    const message = await enqueueMessage(store);
    const lease = await claimNext(store, "worker-a", LEASE_MS);

    await expect(
      store.complete(lease, () => {
        throw new Error("sync failure");
      }),
    ).rejects.toThrow("sync failure");
    expect(await store.getMessage(message.id)).toEqual(lease.message);
  });

  it("never shows another caller's uncommitted completion to readers", async () => {
    const { store } = ctx();
    const message = await enqueueMessage(store);
    const lease = await claimNext(store, "worker-a", LEASE_MS);
    let openGate!: () => void;
    const gate = new Promise<void>((resolve) => (openGate = resolve));
    // The completion's guarded update has run, but its transaction stays open until the gate
    // opens, and then rolls back: nobody may ever have seen the message processed.
    const completing = store.complete(lease, async () => {
      await gate;
      throw new Error("finalize failed");
    });
    await new Promise((resolve) => setImmediate(resolve));

    const reads = Promise.all([store.getMessage(message.id), store.listMessages({ status: ["processed"] }), store.countByStatus()]);
    openGate();
    await expect(completing).rejects.toThrow("finalize failed");

    const [seen, processed, counts] = await reads;
    expect(seen?.status).toBe("processing");
    expect(processed).toEqual([]);
    expect(counts).toMatchObject({ processing: 1, processed: 0 });
  });

  it("marks the message processed now, keeps who did the work and clears the lease expiry", async () => {
    const { store, clock, harness } = ctx();
    const message = await enqueueMessage(store);
    const lease = await claimNext(store, "worker-a", LEASE_MS);
    clock.advance(1_234);
    const finalize = vi.fn(async (tx: unknown) => harness.businessWrite(tx, "done"));

    const result = await store.complete(lease, finalize);
    expect(result).toEqual({ outcome: "completed", messageId: message.id, processedAt: clock.now() });
    expect(finalize).toHaveBeenCalledTimes(1);
    expect(await harness.countBusinessRows("done")).toBe(1);
    // In delete mode there is no row left to show who did the work; the result above says when.
    await expectFinished(store, factory, message.id, {
      processedAt: clock.now(),
      lockedBy: "worker-a",
      lockedUntil: null,
      leaseToken: 1,
      attempts: 1,
      payload: message.payload,
    });
  });

  it("completes without any business write when no finalize is given", async () => {
    const { store } = ctx();
    const message = await enqueueMessage(store);
    expect((await store.complete(await claimNext(store, "worker-a", LEASE_MS))).outcome).toBe("completed");
    await expectFinished(store, factory, message.id);
  });

  it("never lets a completed message be claimed again, however far the clock moves", async () => {
    const { store, clock } = ctx();
    const message = await enqueueMessage(store);
    await store.complete(await claimNext(store, "worker-a", LEASE_MS));

    clock.advance(365 * 24 * 60 * 60 * 1000);
    expect(await store.claim("worker-b", { limit: 10, leaseMs: LEASE_MS })).toEqual([]);
    expect(await store.claimMessage("worker-b", message.id, { leaseMs: LEASE_MS })).toMatchObject({
      outcome: "not-claimable",
      status: finishedStatus(factory),
    });
    await expectFinished(store, factory, message.id, { attempts: 1, leaseToken: 1, lockedBy: "worker-a" });
  });

  it("refuses to complete the same lease twice, and never runs the second finalize", async () => {
    const { store, harness } = ctx();
    const message = await enqueueMessage(store);
    const lease = await claimNext(store, "worker-a", LEASE_MS);
    await store.complete(lease, (tx) => harness.businessWrite(tx, "once"));
    const second = vi.fn(async (tx: unknown) => harness.businessWrite(tx, "once"));

    expect(await store.complete(lease, second)).toMatchObject({ outcome: "lease-lost", messageId: message.id, token: 1, current: finishedHolder(factory) });
    expect(second).not.toHaveBeenCalled();
    expect(await harness.countBusinessRows("once")).toBe(1);
  });

  it("completes each of several claimed messages on its own", async () => {
    const { store, harness } = ctx();
    const [first, second] = [await enqueueMessage(store), await enqueueMessage(store)];
    const leases = await store.claim("worker-a", { limit: 2, leaseMs: LEASE_MS });
    expect(leases).toHaveLength(2);
    await expect(
      store.complete(leases[0]!, () => {
        throw new Error("first fails");
      }),
    ).rejects.toThrow("first fails");
    await store.complete(leases[1]!, (tx) => harness.businessWrite(tx, "second"));

    expect((await mustGet(store, first!.id)).status).toBe("processing");
    await expectFinished(store, factory, second!.id);
    expect(await harness.countBusinessRows("second")).toBe(1);
  });
});
