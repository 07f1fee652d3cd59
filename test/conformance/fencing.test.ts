// Invariant 5, fenced: a result is written only under the current lease, identified by its token.
// The owner name alone is not enough: one worker can hold a stale and a fresh claim of the same
// message at once (its handler was slow, the lease expired, its own loop reclaimed the message).

import { expect, it, vi } from "vitest";
import { LeaseLostError } from "../../src/outbox/errors.js";
import type { OutboxStore } from "../../src/outbox/store.js";
import type { Lease, OutboxMessage } from "../../src/outbox/types.js";
import { assertHeld } from "../../src/outbox/validate.js";
import type { ManualClock } from "../../src/outbox/clock.js";
import { claimNext, describeEachStore, enqueueMessage, expectFinished, finishedHolder, useStoreHarness } from "./stores.js";

const LEASE_MS = 10_000;
const OWNER = "worker-1";

/** One worker holding a stale claim (token 1) and a fresh claim (token 2) of the same message. */
async function staleAndFresh(store: OutboxStore<unknown>, clock: ManualClock): Promise<{ message: OutboxMessage; stale: Lease; fresh: Lease }> {
  const message = await enqueueMessage(store);
  const stale = await claimNext(store, OWNER, LEASE_MS);
  clock.advance(LEASE_MS);
  const fresh = await claimNext(store, OWNER, LEASE_MS);
  return { message, stale, fresh };
}

describeEachStore("fencing by lease token", (factory) => {
  const ctx = useStoreHarness(factory);

  it("gives the same owner a new token when it reclaims its own expired message", async () => {
    const { store, clock } = ctx();
    const { message, stale, fresh } = await staleAndFresh(store, clock);
    expect(stale).toMatchObject({ messageId: message.id, owner: OWNER, token: 1 });
    expect(fresh).toMatchObject({ messageId: message.id, owner: OWNER, token: 2, reclaimedFrom: OWNER });
  });

  it("refuses to complete with the stale lease of the same owner: lease-lost, finalize never runs, nothing is written", async () => {
    const { store, clock, harness } = ctx();
    const { message, stale, fresh } = await staleAndFresh(store, clock);
    const finalize = vi.fn(async (tx: unknown) => harness.businessWrite(tx, "stale-result"));

    const result = await store.complete(stale, finalize);
    expect(result).toEqual({
      outcome: "lease-lost",
      messageId: message.id,
      token: 1,
      current: { status: "processing", lockedBy: OWNER, lockedUntil: fresh.lockedUntil, leaseToken: 2 },
    });
    expect(finalize).not.toHaveBeenCalled();
    expect(await harness.countBusinessRows("stale-result")).toBe(0);
    expect(await store.getMessage(message.id)).toEqual(fresh.message);
  });

  it("refuses a lease that matches the current one in everything but its older token", async () => {
    const { store, clock, harness } = ctx();
    const { message, fresh } = await staleAndFresh(store, clock);
    // Same owner, same expiry, same message snapshot: only the token tells it apart.
    const stale: Lease = { ...fresh, token: fresh.token - 1 };
    const finalize = vi.fn(async (tx: unknown) => harness.businessWrite(tx, "stale-result"));

    expect((await store.complete(stale, finalize)).outcome).toBe("lease-lost");
    expect(finalize).not.toHaveBeenCalled();
    expect(await harness.countBusinessRows("stale-result")).toBe(0);
    expect(await store.getMessage(message.id)).toEqual(fresh.message);
  });

  it("completes with the fresh lease, writing the business row and the processed status together", async () => {
    const { store, clock, harness } = ctx();
    const { message, stale, fresh } = await staleAndFresh(store, clock);
    expect((await store.complete(stale, (tx) => harness.businessWrite(tx, "stale-result"))).outcome).toBe("lease-lost");
    clock.advance(500);

    const result = await store.complete(fresh, (tx) => harness.businessWrite(tx, "fresh-result"));
    expect(result).toEqual({ outcome: "completed", messageId: message.id, processedAt: clock.now() });
    expect(await harness.countBusinessRows("fresh-result")).toBe(1);
    expect(await harness.countBusinessRows("stale-result")).toBe(0);
    await expectFinished(store, factory, message.id, { lockedBy: OWNER, leaseToken: 2, attempts: 2, processedAt: clock.now() });
  });

  it("turns the lost result into a LeaseLostError with assertHeld, and passes a held result through", async () => {
    const { store, clock } = ctx();
    const { message, stale, fresh } = await staleAndFresh(store, clock);
    const lost = await store.complete(stale);

    expect(() => assertHeld(lost)).toThrow(LeaseLostError);
    try {
      assertHeld(lost);
    } catch (error) {
      expect(error).toMatchObject({ code: "LEASE_LOST", messageId: message.id, token: 1 });
      expect((error as Error).message).toContain(`held by ${OWNER} under token 2`);
    }
    const completed = await store.complete(fresh);
    expect(assertHeld(completed)).toBe(completed);
  });

  it("refuses to fail with a stale token, for a retry and for marking dead, and changes nothing", async () => {
    const { store, clock } = ctx();
    const { message, stale, fresh } = await staleAndFresh(store, clock);

    expect(await store.fail(stale, new Error("stale retry"), { retryInMs: 0 })).toMatchObject({
      outcome: "lease-lost",
      messageId: message.id,
      token: 1,
      current: { leaseToken: 2 },
    });
    expect(await store.fail(stale, new Error("stale dead"), "dead")).toMatchObject({
      outcome: "lease-lost",
      messageId: message.id,
      token: 1,
      current: { leaseToken: 2 },
    });
    expect(await store.getMessage(message.id)).toEqual(fresh.message);
    expect(await store.claim("worker-2", { limit: 10, leaseMs: LEASE_MS })).toEqual([]);
  });

  it("refuses to release with a stale token, and changes nothing", async () => {
    const { store, clock } = ctx();
    const { message, stale, fresh } = await staleAndFresh(store, clock);

    expect(await store.release(stale)).toMatchObject({
      outcome: "lease-lost",
      messageId: message.id,
      token: 1,
      current: { status: "processing", leaseToken: 2 },
    });
    expect(await store.getMessage(message.id)).toEqual(fresh.message);
    expect(await store.claim("worker-2", { limit: 10, leaseMs: LEASE_MS })).toEqual([]);
  });

  it("refuses to renew with a stale token, and changes nothing", async () => {
    const { store, clock } = ctx();
    const { message, stale, fresh } = await staleAndFresh(store, clock);
    clock.advance(1_000);

    expect(await store.renew(stale, 10 * LEASE_MS)).toMatchObject({ outcome: "lease-lost", messageId: message.id, token: 1, current: { leaseToken: 2 } });
    expect(await store.getMessage(message.id)).toEqual(fresh.message);
  });

  it("still refuses the stale lease after the fresh one has finished", async () => {
    const { store, clock, harness } = ctx();
    const { message, stale, fresh } = await staleAndFresh(store, clock);
    await store.complete(fresh, (tx) => harness.businessWrite(tx, "fresh-result"));
    const finalize = vi.fn(async (tx: unknown) => harness.businessWrite(tx, "stale-result"));

    expect(await store.complete(stale, finalize)).toMatchObject({ outcome: "lease-lost", current: finishedHolder(factory, { leaseToken: 2 }) });
    expect(finalize).not.toHaveBeenCalled();
    expect(await harness.countBusinessRows("stale-result")).toBe(0);
    expect(await harness.countBusinessRows("fresh-result")).toBe(1);
    await expectFinished(store, factory, message.id);
  });

  it("refuses a lease token that was never issued", async () => {
    const { store, harness } = ctx();
    const message = await enqueueMessage(store);
    const lease = await claimNext(store, OWNER, LEASE_MS);
    const forged = { ...lease, token: lease.token + 1 };
    const finalize = vi.fn(async (tx: unknown) => harness.businessWrite(tx, "forged"));

    expect((await store.complete(forged, finalize)).outcome).toBe("lease-lost");
    expect(finalize).not.toHaveBeenCalled();
    expect(await store.getMessage(message.id)).toEqual(lease.message);
  });

  it("accepts a lease that expired but was not reclaimed, because its token is still current", async () => {
    const { store, clock, harness } = ctx();
    const message = await enqueueMessage(store);
    const lease = await claimNext(store, OWNER, LEASE_MS);
    clock.advance(3 * LEASE_MS);

    expect((await store.complete(lease, (tx) => harness.businessWrite(tx, "late"))).outcome).toBe("completed");
    expect(await harness.countBusinessRows("late")).toBe(1);
    await expectFinished(store, factory, message.id);
  });
});
