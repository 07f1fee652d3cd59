// Cancelling a pending message (store.cancel), on every store: the row becomes cancelled (or, in
// a store that deletes finished rows, is deleted), so the message is never delivered; a leased (running) one only with `running: true`, when its holder's every
// write is refused; without it, a running, processed or dead message, or an unknown id, is refused
// with a named error and nothing changes. A cancelled key holder hands its key on as a skip does
// (the next message takes its number: no gap in the key's numbers); a cancelled waiting message
// leaves its key's order and numbers as they were. A cancel and a claim at the same time never
// both succeed.

import { expect, it } from "vitest";
import { MessageNotFoundError, MessageNotPendingError, MessageRunningError } from "../../src/outbox/errors.js";
import type { Lease } from "../../src/outbox/types.js";
import { at, claimNext, describeEachStore, drain, enqueueKeyed, enqueueMessage, expectCancelled, useStoreHarness } from "./stores.js";

const LEASE_MS = 1_000;

describeEachStore("cancel a pending message", (factory) => {
  const ctx = useStoreHarness(factory);

  it("cancels a pending message: it is never claimed, its row says cancelled (or is gone in delete mode), the others go on", async () => {
    const { store, clock } = ctx();
    const doomed = await enqueueMessage(store, { payload: { label: "doomed" }, dedupeKey: "order-1" });
    await enqueueKeyed(store, "other");
    clock.set(at(5_000));
    const done = await store.cancel(doomed.id, { reason: "customer withdrew" });
    expect(done).toMatchObject({ outcome: "cancelled", messageId: doomed.id, type: "test.message", key: null, handedOn: false, reason: "customer withdrew" });
    await expectCancelled(store, factory, doomed.id, { lockedBy: "cancel: customer withdrew", processedAt: at(5_000), leaseToken: 0, attempts: 0 });
    expect(await drain(store)).toEqual(["other#null"]);
    expect((await store.stats()).counts.cancelled).toBe(factory.onComplete === "keep" ? 1 : 0);
    if (factory.onComplete === "keep") expect((await store.listMessages({ status: ["cancelled"] })).map((m) => m.id)).toEqual([doomed.id]);
  });

  it("keeps a kept cancelled message's dedupe key taken until purgeProcessed deletes it (free at once in delete mode)", async () => {
    const { store, clock } = ctx();
    const doomed = await enqueueMessage(store, { payload: { label: "doomed" }, dedupeKey: "order-1" });
    await store.cancel(doomed.id);
    const retry = () => enqueueMessage(store, { payload: { label: "again" }, dedupeKey: "order-1" });
    if (factory.onComplete === "keep") {
      await expect(retry()).rejects.toThrow(/order-1/);
      clock.advance(1_000);
      expect(await store.purgeProcessed(clock.now())).toBe(1); // cancelled rows go with the processed ones
      expect(await store.getMessage(doomed.id)).toBeUndefined();
    }
    const again = await retry();
    expect(again.id).not.toBe(doomed.id);
  });

  it("refuses to cancel a cancelled message again (MessageNotPendingError kept, MessageNotFoundError once deleted), changing nothing", async () => {
    const { store } = ctx();
    const message = await enqueueMessage(store);
    await store.cancel(message.id, { reason: "once" });
    const before = await store.getMessage(message.id);
    const again = await store.cancel(message.id, { running: true, reason: "twice" }).catch((error: unknown) => error);
    if (factory.onComplete === "keep") {
      expect(again).toBeInstanceOf(MessageNotPendingError);
      expect((again as Error).message).toMatch(/was already cancelled/);
    } else expect(again).toBeInstanceOf(MessageNotFoundError);
    expect(await store.getMessage(message.id)).toEqual(before);
  });

  it("refuses a running (leased) message with MessageRunningError, changing nothing", async () => {
    const { store } = ctx();
    const message = await enqueueKeyed(store, "m");
    const lease = await claimNext(store, "worker-a", LEASE_MS);
    const refused = await store.cancel(message.id).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(MessageRunningError);
    expect((refused as MessageRunningError).code).toBe("MESSAGE_RUNNING");
    expect((refused as Error).message).toMatch(/is running \(leased by "worker-a".*pass \{ running: true \}/);
    expect((await store.getMessage(message.id))?.status).toBe("processing");
    expect((await store.complete(lease)).outcome).toBe("completed");
  });

  it("with running: true cancels a running message: its holder's completion with a business write, renewal, failure and release are refused", async () => {
    const { store, harness } = ctx();
    const message = await enqueueKeyed(store, "m");
    const lease = await claimNext(store, "worker-a", LEASE_MS);
    const done = await store.cancel(message.id, { running: true, reason: "operator" });
    expect(done).toMatchObject({ outcome: "cancelled", messageId: message.id, runningOwner: "worker-a", reason: "operator" });
    await expectCancelled(store, factory, message.id, { lockedBy: "cancel: operator", leaseToken: 1, attempts: 1 });
    const completed = await store.complete(lease, (tx) => harness.businessWrite(tx, "cancelled-effect"));
    const current = factory.onComplete === "keep" ? { status: "cancelled", lockedBy: "cancel: operator", lockedUntil: null, leaseToken: 1 } : null;
    expect(completed).toMatchObject({ outcome: "lease-lost", messageId: message.id, current });
    expect(await harness.countBusinessRows("cancelled-effect")).toBe(0);
    expect((await store.renew(lease, LEASE_MS)).outcome).toBe("lease-lost");
    expect((await store.fail(lease, new Error("late"), { retryInMs: 0 })).outcome).toBe("lease-lost");
    expect((await store.release(lease)).outcome).toBe("lease-lost");
    expect(await store.auditTrail({ messageId: message.id })).toMatchObject([
      { action: "claim", owner: "worker-a" },
      { action: "dead", owner: "cancel: operator", previousStatus: "processing", previousOwner: "worker-a" },
      { action: "refused" },
      { action: "refused" },
      { action: "refused" },
      { action: "refused" },
    ]);
  });

  it("a running key holder cancelled hands its key on: the next message of the key goes", async () => {
    const { store } = ctx();
    const first = await enqueueKeyed(store, "first", "k");
    await enqueueKeyed(store, "second", "k");
    const lease = await claimNext(store, "worker-a", LEASE_MS);
    expect(lease.messageId).toBe(first.id);
    expect(await store.claim("w", { limit: 10, leaseMs: LEASE_MS })).toEqual([]); // behind its holder
    expect((await store.cancel(first.id, { running: true })).handedOn).toBe(true);
    expect(await drain(store)).toEqual(["second#1"]);
  });

  it("publishes a cancelled event naming the run it cancelled", async () => {
    const { store } = ctx();
    const pending = await enqueueKeyed(store, "p");
    const running = await enqueueKeyed(store, "r");
    await claimNext(store, "worker-a", LEASE_MS); // p, the older
    const lease = await claimNext(store, "worker-b", LEASE_MS);
    const seen: unknown[] = [];
    const stop = store.events.subscribe((event) => {
      if (event.type === "cancelled") seen.push(event);
    });
    try {
      await store.cancel(running.id, { running: true });
      await expect(store.cancel(pending.id)).rejects.toBeInstanceOf(MessageRunningError);
    } finally {
      stop();
    }
    expect(seen).toMatchObject([{ type: "cancelled", messageId: running.id, token: lease.token, runningOwner: "worker-b", owner: "cancel", reason: null }]);
    await expect(store.cancel(running.id, { running: "yes" } as never)).rejects.toThrow(/running must be true/);
    await expect(store.cancel(pending.id, { runing: true } as never)).rejects.toThrow(/has no "runing"/);
  });

  it("refuses a processed or a dead message with MessageNotPendingError, and an unknown id with MessageNotFoundError", async () => {
    const { store } = ctx();
    const processed = await enqueueKeyed(store, "p");
    await store.complete(await claimNext(store, "w", LEASE_MS));
    const dead = await enqueueKeyed(store, "d");
    await store.fail(await claimNext(store, "w", LEASE_MS), new Error("boom"), "dead");
    if (factory.onComplete === "keep") {
      await expect(store.cancel(processed.id)).rejects.toMatchObject({ name: "MessageNotPendingError", status: "processed" });
    } else {
      // Its completion deleted the row: there is nothing left to cancel.
      await expect(store.cancel(processed.id)).rejects.toBeInstanceOf(MessageNotFoundError);
    }
    await expect(store.cancel(dead.id)).rejects.toBeInstanceOf(MessageNotPendingError);
    expect((await store.getMessage(dead.id))?.status).toBe("dead");
    await expect(store.cancel("999999")).rejects.toBeInstanceOf(MessageNotFoundError);
    await expect(store.cancel("not-an-id")).rejects.toMatchObject({ code: "INVALID_ARGUMENT" });
  });

  it("a cancelled key holder hands its key on: the next message goes, numbered as the cancelled one was", async () => {
    const { store } = ctx();
    const a1 = await enqueueKeyed(store, "a1", "a");
    await enqueueKeyed(store, "a2", "a");
    await enqueueKeyed(store, "a3", "a");
    expect(a1.keySeq).toBe(1);
    expect(await store.cancel(a1.id)).toMatchObject({ key: "a", handedOn: true });
    expect(await drain(store)).toEqual(["a2#1", "a3#2"]);
  });

  it("a holder that failed back to pending can be cancelled; the key moves on from its number", async () => {
    const { store, clock } = ctx();
    await enqueueKeyed(store, "a1", "a");
    await store.complete(await claimNext(store, "w", LEASE_MS));
    const a2 = await enqueueKeyed(store, "a2", "a");
    await enqueueKeyed(store, "a3", "a");
    await store.fail(await claimNext(store, "w", LEASE_MS), new Error("try later"), { retryInMs: 10 });
    clock.advance(10);
    await store.cancel(a2.id);
    expect(await drain(store)).toEqual(["a3#2"]);
  });

  it("a cancelled waiting message leaves its key's order and numbers as they were", async () => {
    const { store } = ctx();
    await enqueueKeyed(store, "a1", "a");
    const a2 = await enqueueKeyed(store, "a2", "a");
    await enqueueKeyed(store, "a3", "a");
    expect(await store.cancel(a2.id)).toMatchObject({ key: "a", handedOn: false });
    expect(await drain(store)).toEqual(["a1#1", "a3#2"]);
  });

  it("the last message of a key cancelled: the key remembers the number for its next enqueue", async () => {
    const { store } = ctx();
    await enqueueKeyed(store, "a1", "a");
    await store.complete(await claimNext(store, "w", LEASE_MS));
    const a2 = await enqueueKeyed(store, "a2", "a");
    expect(a2.keySeq).toBe(2);
    await store.cancel(a2.id);
    const a3 = await enqueueKeyed(store, "a3", "a");
    expect(a3.keySeq).toBe(2);
    expect(await drain(store)).toEqual(["a3#2"]);
  });

  it("a holder cancelled while a message of its key is enqueued on another connection: the key never stalls", async () => {
    const { harness } = ctx();
    const other = await harness.connect();
    try {
      const a1 = await enqueueKeyed(harness.store, "a1", "a");
      await Promise.all([harness.store.cancel(a1.id), enqueueKeyed(other, "a2", "a")]);
      expect(await drain(harness.store)).toEqual(["a2#1"]);
    } finally {
      await other.close();
    }
  });

  it("records the cancel in the audit trail: a dead row by owner cancel, with the reason", async () => {
    const { store } = ctx();
    const plain = await enqueueKeyed(store, "m");
    const reasoned = await enqueueKeyed(store, "n");
    await store.cancel(plain.id);
    await store.cancel(reasoned.id, { reason: "duplicate order" });
    expect(await store.auditTrail({ messageId: plain.id })).toMatchObject([{ action: "dead", owner: "cancel", previousStatus: "pending" }]);
    expect(await store.auditTrail({ messageId: reasoned.id })).toMatchObject([{ action: "dead", owner: "cancel: duplicate order" }]);
    await expect(store.cancel(plain.id, { reason: "x".repeat(181) })).rejects.toMatchObject({ code: "INVALID_ARGUMENT" });
  });

  it("a cancel and a claim of the same message at the same time: exactly one wins", async () => {
    const { harness } = ctx();
    const other = await harness.connect();
    try {
      for (let round = 0; round < 10; round += 1) {
        const message = await enqueueKeyed(harness.store, `m${round}`, round % 2 === 0 ? "k" : undefined);
        const [cancel, claim] = await Promise.allSettled([harness.store.cancel(message.id), other.claimMessage("w", message.id, { leaseMs: LEASE_MS })]);
        const claimed = claim.status === "fulfilled" && claim.value.outcome === "claimed";
        const cancelled = cancel.status === "fulfilled";
        expect(claimed !== cancelled, `round ${round}: cancelled ${cancelled}, claimed ${claimed}`).toBe(true);
        if (!cancelled) expect((cancel as PromiseRejectedResult).reason).toBeInstanceOf(MessageRunningError);
        if (claimed) await harness.store.complete((claim as PromiseFulfilledResult<{ outcome: "claimed"; lease: Lease }>).value.lease);
        else await expectCancelled(harness.store, factory, message.id, { leaseToken: 0 });
      }
    } finally {
      await other.close();
    }
  });
});
