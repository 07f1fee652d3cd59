// Renewing a lease: a held lease moves its expiry to now + leaseMs; a lost one changes nothing.

import { expect, it } from "vitest";
import { InvalidArgumentError } from "../../src/outbox/errors.js";
import { at, claimNext, describeEachStore, enqueueMessage, expectFinished, finishedHolder, mustGet, useStoreHarness } from "./stores.js";

const LEASE_MS = 30_000;

describeEachStore("renewing leases", (factory) => {
  const ctx = useStoreHarness(factory);

  it("extends the lease: the message is not claimable at the old expiry, only at the new one", async () => {
    const { store, clock } = ctx();
    const message = await enqueueMessage(store);
    const lease = await claimNext(store, "worker-a", LEASE_MS);
    clock.set(at(20_000));

    const result = await store.renew(lease, LEASE_MS);
    expect(result.outcome).toBe("renewed");
    if (result.outcome !== "renewed") return;
    expect(result.lease).toMatchObject({ messageId: message.id, owner: "worker-a", token: 1, lockedUntil: at(50_000) });
    expect(await mustGet(store, message.id)).toMatchObject({ status: "processing", lockedBy: "worker-a", lockedUntil: at(50_000), leaseToken: 1, attempts: 1 });

    clock.set(at(30_000)); // the old expiry
    expect(await store.claim("worker-b", { limit: 10, leaseMs: LEASE_MS })).toEqual([]);
    clock.set(at(49_999));
    expect(await store.claimMessage("worker-b", message.id, { leaseMs: LEASE_MS })).toMatchObject({
      outcome: "blocked",
      heldBy: "worker-a",
      lockedUntil: at(50_000),
    });

    clock.set(at(50_000)); // the new expiry
    const taken = await claimNext(store, "worker-b", LEASE_MS);
    expect(taken).toMatchObject({ messageId: message.id, token: 2, reclaimedFrom: "worker-a" });
  });

  it("keeps the token, so both the original and the renewed lease object can complete", async () => {
    const { store, clock, harness } = ctx();
    const message = await enqueueMessage(store);
    const lease = await claimNext(store, "worker-a", LEASE_MS);
    clock.advance(10_000);
    const renewed = await store.renew(lease, LEASE_MS);
    if (renewed.outcome !== "renewed") throw new Error("expected the renew to succeed");
    expect(renewed.lease.token).toBe(lease.token);

    expect((await store.complete(lease, (tx) => harness.businessWrite(tx, "done"))).outcome).toBe("completed");
    expect(await harness.countBusinessRows("done")).toBe(1);
    await expectFinished(store, factory, message.id);
  });

  it("returns lease-lost for a lease another owner has reclaimed, and changes nothing", async () => {
    const { store, clock } = ctx();
    const message = await enqueueMessage(store);
    const lost = await claimNext(store, "worker-a", LEASE_MS);
    clock.advance(LEASE_MS);
    const current = await claimNext(store, "worker-b", LEASE_MS);
    clock.advance(1_000);
    const before = await mustGet(store, message.id);

    const result = await store.renew(lost, 10 * LEASE_MS);
    expect(result).toEqual({
      outcome: "lease-lost",
      messageId: message.id,
      token: 1,
      current: { status: "processing", lockedBy: "worker-b", lockedUntil: current.lockedUntil, leaseToken: 2 },
    });
    expect(await store.getMessage(message.id)).toEqual(before);
    // worker-b's lease still ends when it did, not when worker-a asked.
    clock.set(current.lockedUntil);
    expect((await claimNext(store, "worker-c", LEASE_MS)).reclaimedFrom).toBe("worker-b");
  });

  it("refuses to extend a lease at or past its end that nobody reclaimed; its token may still complete it", async () => {
    const { store, clock } = ctx();
    const message = await enqueueMessage(store);
    const lease = await claimNext(store, "worker-a", LEASE_MS);
    clock.set(at(LEASE_MS - 1)); // one ms before the end: still held
    const renewed = await store.renew(lease, LEASE_MS);
    expect(renewed).toMatchObject({ outcome: "renewed", lease: { lockedUntil: at(2 * LEASE_MS - 1) } });

    clock.set(at(2 * LEASE_MS - 1)); // the renewed lease's end: expired, not yet reclaimed
    const before = await mustGet(store, message.id);
    const result = await store.renew(lease, LEASE_MS);
    expect(result).toEqual({
      outcome: "lease-lost",
      messageId: message.id,
      token: 1,
      current: { status: "processing", lockedBy: "worker-a", lockedUntil: at(2 * LEASE_MS - 1), leaseToken: 1 },
    });
    expect(await store.getMessage(message.id)).toEqual(before); // the refused renewal gave the lease no new life
    expect(await claimNext(store, "worker-b", LEASE_MS)).toMatchObject({ messageId: message.id, token: 2, reclaimedFrom: "worker-a" });
  });

  it("lets the token of an expired lease nobody reclaimed complete with its business write, though it cannot renew", async () => {
    const { store, clock, harness } = ctx();
    const message = await enqueueMessage(store);
    const lease = await claimNext(store, "worker-a", LEASE_MS);
    clock.set(at(LEASE_MS + 5_000));
    expect((await store.renew(lease, LEASE_MS)).outcome).toBe("lease-lost");
    expect((await store.complete(lease, (tx) => harness.businessWrite(tx, "late"))).outcome).toBe("completed");
    expect(await harness.countBusinessRows("late")).toBe(1);
    await expectFinished(store, factory, message.id);
  });

  it("returns lease-lost when renewing a lease whose message was already completed", async () => {
    const { store } = ctx();
    const message = await enqueueMessage(store);
    const lease = await claimNext(store, "worker-a", LEASE_MS);
    await store.complete(lease);
    await expectFinished(store, factory, message.id);
    const before = await store.getMessage(message.id); // undefined once deleted: the renew must not bring it back

    const result = await store.renew(lease, LEASE_MS);
    expect(result).toMatchObject({ outcome: "lease-lost", messageId: message.id, token: 1, current: finishedHolder(factory, { leaseToken: 1 }) });
    expect(await store.getMessage(message.id)).toEqual(before);
  });

  it("rejects an invalid lease length with InvalidArgumentError and leaves the lease as it was", async () => {
    const { store } = ctx();
    const message = await enqueueMessage(store);
    const lease = await claimNext(store, "worker-a", LEASE_MS);
    for (const leaseMs of [0, -1, 2.5, Number.NaN, Number.POSITIVE_INFINITY]) {
      await expect(store.renew(lease, leaseMs), `leaseMs ${leaseMs}`).rejects.toBeInstanceOf(InvalidArgumentError);
    }
    expect(await store.getMessage(message.id)).toEqual(lease.message);
  });
});
