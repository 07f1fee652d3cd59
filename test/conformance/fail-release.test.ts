// Failing (retry after a delay, or mark dead with the last error) and releasing (back to
// pending at once, the attempt given back).

import { expect, it } from "vitest";
import { InvalidArgumentError } from "../../src/outbox/errors.js";
import type { RetryDecision } from "../../src/outbox/types.js";
import { at, claimNext, describeEachStore, enqueueMessage, expectFinished, finishedHolder, mustGet, useStoreHarness } from "./stores.js";

const LEASE_MS = 30_000;
const YEAR_MS = 365 * 24 * 60 * 60 * 1000;

describeEachStore("failing and releasing", (factory) => {
  const ctx = useStoreHarness(factory);

  it("schedules a retry: pending, due after the delay, with the error recorded", async () => {
    const { store, clock } = ctx();
    const message = await enqueueMessage(store);
    const lease = await claimNext(store, "worker-a", LEASE_MS);
    clock.set(at(1_000));

    const result = await store.fail(lease, new Error("provider timed out"), { retryInMs: 5_000 });
    expect(result).toEqual({ outcome: "retry-scheduled", messageId: message.id, availableAt: at(6_000) });
    const failed = await mustGet(store, message.id);
    expect(failed).toMatchObject({ status: "pending", availableAt: at(6_000), lockedUntil: null, leaseToken: 1, attempts: 1, processedAt: null });
    expect(failed.lastError).toContain("provider timed out");
  });

  it("makes a retried message claimable only once its delay has passed", async () => {
    const { store, clock } = ctx();
    const message = await enqueueMessage(store);
    await store.fail(await claimNext(store, "worker-a", LEASE_MS), new Error("try later"), { retryInMs: 5_000 });

    expect(await store.claim("worker-b", { limit: 10, leaseMs: LEASE_MS })).toEqual([]);
    expect(await store.claimMessage("worker-b", message.id, { leaseMs: LEASE_MS })).toEqual({
      outcome: "not-claimable",
      messageId: message.id,
      status: "pending",
    });
    clock.set(at(4_999));
    expect(await store.claim("worker-b", { limit: 10, leaseMs: LEASE_MS })).toEqual([]);

    clock.set(at(5_000));
    const retry = await claimNext(store, "worker-b", LEASE_MS);
    expect(retry).toMatchObject({ messageId: message.id, owner: "worker-b", token: 2 });
    expect(retry.message.attempts).toBe(2);
  });

  it("retries at once when the delay is zero", async () => {
    const { store } = ctx();
    const message = await enqueueMessage(store);
    await store.fail(await claimNext(store, "worker-a", LEASE_MS), new Error("again"), { retryInMs: 0 });
    expect((await claimNext(store, "worker-b", LEASE_MS)).messageId).toBe(message.id);
  });

  it("marks a message dead with its last error, and never offers it again", async () => {
    const { store, clock } = ctx();
    const message = await enqueueMessage(store);
    const lease = await claimNext(store, "worker-a", LEASE_MS);

    expect(await store.fail(lease, new Error("poison message"), "dead")).toEqual({ outcome: "dead", messageId: message.id });
    const dead = await mustGet(store, message.id);
    expect(dead).toMatchObject({ status: "dead", lockedUntil: null, leaseToken: 1, attempts: 1, processedAt: null });
    expect(dead.lastError).toContain("poison message");

    clock.advance(YEAR_MS);
    expect(await store.claim("worker-b", { limit: 10, leaseMs: LEASE_MS })).toEqual([]);
    expect(await store.claimMessage("worker-b", message.id, { leaseMs: LEASE_MS })).toMatchObject({ outcome: "not-claimable", status: "dead" });
    expect(await store.countByStatus()).toEqual({ pending: 0, processing: 0, processed: 0, dead: 1, cancelled: 0 });
  });

  it("records a thrown value that is not an Error as text", async () => {
    const { store } = ctx();
    const message = await enqueueMessage(store);
    await store.fail(await claimNext(store, "worker-a", LEASE_MS), "plain text failure", "dead");
    expect((await mustGet(store, message.id)).lastError).toContain("plain text failure");
  });

  it("rejects a negative or non-finite retry delay with InvalidArgumentError and leaves the lease held", async () => {
    const { store } = ctx();
    const message = await enqueueMessage(store);
    const lease = await claimNext(store, "worker-a", LEASE_MS);
    const bad: RetryDecision[] = [
      { retryInMs: -1 },
      { retryInMs: Number.NaN },
      { retryInMs: Number.POSITIVE_INFINITY },
      { retryInMs: "5" as unknown as number },
    ];
    for (const decision of bad) {
      await expect(store.fail(lease, new Error("x"), decision), JSON.stringify(decision)).rejects.toBeInstanceOf(InvalidArgumentError);
    }
    expect(await store.getMessage(message.id)).toEqual(lease.message);
    expect((await store.complete(lease)).outcome).toBe("completed");
  });

  it("releases a message: pending, due now, its attempt given back, and claimable by another owner at once", async () => {
    const { store, clock } = ctx();
    const message = await enqueueMessage(store);
    const lease = await claimNext(store, "worker-a", LEASE_MS);
    clock.set(at(2_000));

    expect(await store.release(lease)).toEqual({ outcome: "released", messageId: message.id });
    expect(await mustGet(store, message.id)).toMatchObject({ status: "pending", availableAt: at(2_000), lockedUntil: null, attempts: 0, leaseToken: 1 });

    const next = await claimNext(store, "worker-b", LEASE_MS);
    expect(next).toMatchObject({ messageId: message.id, owner: "worker-b", token: 2, lockedUntil: at(2_000 + LEASE_MS) });
    expect(next.message.attempts).toBe(1);
  });

  it("gives back only the released claim's attempt, keeping earlier ones", async () => {
    const { store, clock } = ctx();
    const message = await enqueueMessage(store);
    await claimNext(store, "worker-a", LEASE_MS);
    clock.advance(LEASE_MS);
    const second = await claimNext(store, "worker-b", LEASE_MS);
    await store.release(second);
    expect(await mustGet(store, message.id)).toMatchObject({ status: "pending", attempts: 1, leaseToken: 2 });
  });

  it("refuses to fail or release a message that was already completed", async () => {
    const { store } = ctx();
    const message = await enqueueMessage(store);
    const lease = await claimNext(store, "worker-a", LEASE_MS);
    await store.complete(lease);
    await expectFinished(store, factory, message.id);
    const before = await store.getMessage(message.id); // undefined once deleted: a late fail or release must not bring it back

    expect(await store.fail(lease, new Error("late"), { retryInMs: 0 })).toMatchObject({ outcome: "lease-lost", current: finishedHolder(factory) });
    expect(await store.fail(lease, new Error("late"), "dead")).toMatchObject({ outcome: "lease-lost", current: finishedHolder(factory) });
    expect(await store.release(lease)).toMatchObject({ outcome: "lease-lost", current: finishedHolder(factory) });
    expect(await store.getMessage(message.id)).toEqual(before);
  });
});
