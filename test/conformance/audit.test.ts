// The audit trail: every claim, completion, failure and release is recorded with the token it
// used, in the same transaction as the change, so a checker can prove ownership afterwards.

import { afterEach, expect, it, vi } from "vitest";
import { MariaDbDriver } from "../../src/stores/mariadb/mariadb-outbox-store.js";
import { PostgresDriver } from "../../src/stores/postgres/postgres-outbox-store.js";
import { SqliteDriver } from "../../src/stores/sqlite/sqlite-outbox-store.js";
import { claimNext, describeEachStore, enqueueMessage, useStoreHarness } from "./stores.js";

/**
 * Makes every driver's refusal recorded apart (holder with `refused`, outside the refused write's
 * transaction) throw, as a crash between the two would stop it: a refusal must not need one.
 */
function forbidRefusalsApart(): void {
  for (const Driver of [SqliteDriver, PostgresDriver, MariaDbDriver]) {
    const holder = Driver.prototype.holder;
    vi.spyOn(Driver.prototype, "holder").mockImplementation(function (this: unknown, params: Parameters<typeof holder>[0]) {
      if (params.refused !== null && params.tx == null) throw new Error("a refusal was recorded apart from its refused write");
      return (holder as (p: typeof params) => ReturnType<typeof holder>).call(this, params);
    } as typeof holder);
  }
}

const LEASE_MS = 1_000;

describeEachStore("audit trail", (factory) => {
  const ctx = useStoreHarness(factory);
  afterEach(() => {
    vi.restoreAllMocks();
  });

  it("records a claim with the new token and the state it took the message from", async () => {
    const { store, clock } = ctx();
    const message = await enqueueMessage(store);
    const lease = await claimNext(store, "worker-a", LEASE_MS);
    const [entry] = await store.auditTrail();
    expect(entry).toEqual({
      messageId: message.id,
      token: lease.token,
      owner: "worker-a",
      action: "claim",
      at: clock.now(),
      previousStatus: "pending",
      previousOwner: null,
      previousLockedUntil: null,
      operation: null,
    });
  });

  it("records a reclaim with the previous owner and the expiry it waited for", async () => {
    const { store, clock } = ctx();
    await enqueueMessage(store);
    const first = await claimNext(store, "worker-a", LEASE_MS);
    clock.advance(LEASE_MS);
    const second = await claimNext(store, "worker-b", LEASE_MS);
    const trail = await store.auditTrail();
    expect(trail.map((e) => [e.action, e.owner, e.token])).toEqual([
      ["claim", "worker-a", first.token],
      ["claim", "worker-b", second.token],
    ]);
    expect(trail[1]).toMatchObject({ previousStatus: "processing", previousOwner: "worker-a", previousLockedUntil: first.lockedUntil });
    expect(trail[1]!.at.getTime()).toBeGreaterThanOrEqual(first.lockedUntil.getTime());
  });

  it("records claimMessage claims like any other claim", async () => {
    const { store } = ctx();
    const message = await enqueueMessage(store);
    const result = await store.claimMessage("worker-a", message.id, { leaseMs: LEASE_MS });
    expect(result.outcome).toBe("claimed");
    expect((await store.auditTrail()).map((e) => [e.action, e.messageId, e.owner, e.token])).toEqual([["claim", message.id, "worker-a", 1]]);
  });

  it("records a completion with the token it was guarded by, and no completion for a refused one", async () => {
    const { store, clock } = ctx();
    await enqueueMessage(store);
    const stale = await claimNext(store, "worker-a", LEASE_MS);
    clock.advance(LEASE_MS);
    const fresh = await claimNext(store, "worker-a", LEASE_MS);
    expect((await store.complete(stale)).outcome).toBe("lease-lost");
    expect((await store.complete(fresh)).outcome).toBe("completed");
    const completions = (await store.auditTrail()).filter((e) => e.action === "complete");
    expect(completions.map((e) => [e.owner, e.token])).toEqual([["worker-a", fresh.token]]);
  });

  it("records each refused write of a stale lease, with the operation and who held the message then", async () => {
    const { store, clock } = ctx();
    const message = await enqueueMessage(store);
    const stale = await claimNext(store, "worker-a", LEASE_MS);
    clock.advance(LEASE_MS);
    const fresh = await claimNext(store, "worker-b", LEASE_MS);
    clock.advance(10);
    expect((await store.complete(stale)).outcome).toBe("lease-lost");
    expect((await store.renew(stale, LEASE_MS)).outcome).toBe("lease-lost");
    expect((await store.fail(stale, new Error("late"), { retryInMs: 0 })).outcome).toBe("lease-lost");
    expect((await store.release(stale)).outcome).toBe("lease-lost");
    const refused = (await store.auditTrail()).filter((e) => e.action === "refused");
    expect(refused.map((e) => e.operation)).toEqual(["complete", "renew", "fail", "release"]);
    for (const entry of refused) {
      expect(entry).toEqual({
        messageId: message.id,
        token: stale.token,
        owner: "worker-a",
        action: "refused",
        at: clock.now(),
        previousStatus: "processing",
        previousOwner: "worker-b",
        previousLockedUntil: fresh.lockedUntil,
        operation: entry.operation,
      });
    }
    // The refusals changed nothing: worker-b completes under its own token.
    expect((await store.complete(fresh)).outcome).toBe("completed");
  });

  it("records each refusal with its refused write, in the same transaction, for every way a stale lease writes", async () => {
    const { store, clock, harness } = ctx();
    forbidRefusalsApart();
    for (let n = 0; n < 4; n++) await enqueueMessage(store, n === 3 ? { dedupeKey: `m${n}`, key: "k" } : { dedupeKey: `m${n}` });
    const stale = await store.claim("worker-a", { limit: 4, leaseMs: LEASE_MS });
    clock.advance(LEASE_MS);
    const fresh = await store.claim("worker-b", { limit: 4, leaseMs: LEASE_MS });
    expect(fresh).toHaveLength(4);
    clock.advance(10);
    const [a, b, c, keyed] = stale as [(typeof stale)[0], (typeof stale)[0], (typeof stale)[0], (typeof stale)[0]];
    const lost = [
      await store.renew(a, LEASE_MS),
      await store.fail(a, new Error("late"), "dead"),
      await store.release(b),
      await store.complete(b), // alone, no business write: the one guarded statement
      await store.complete(c, (tx) => harness.businessWrite(tx, "c")), // with a business write
      await store.complete(keyed, (tx) => harness.businessWrite(tx, "keyed")), // keyed, with a business write
      ...(await store.completeMany([{ lease: a }, { lease: b }])), // in bulk
      ...(await store.completeMany([{ lease: a }, { lease: c, finalize: (tx) => harness.businessWrite(tx, "c") }])), // a group with writes
    ];
    for (const result of lost) {
      expect(result).toMatchObject({ outcome: "lease-lost", current: { status: "processing", lockedBy: "worker-b" } });
    }
    expect(await harness.countBusinessRows("c")).toBe(0);
    expect(await harness.countBusinessRows("keyed")).toBe(0);
    const refused = (await store.auditTrail()).filter((e) => e.action === "refused");
    expect(refused.map((e) => [e.messageId, e.operation])).toEqual([
      [a.messageId, "renew"],
      [a.messageId, "fail"],
      [b.messageId, "release"],
      [b.messageId, "complete"],
      [c.messageId, "complete"],
      [keyed.messageId, "complete"],
      [a.messageId, "complete"],
      [b.messageId, "complete"],
      [a.messageId, "complete"],
      [c.messageId, "complete"],
    ]);
    for (const entry of refused) expect(entry).toMatchObject({ owner: "worker-a", previousStatus: "processing", previousOwner: "worker-b", at: clock.now() });
  });

  it("records a refusal for a message that is gone, with no holder", async () => {
    const { store, clock } = ctx();
    forbidRefusalsApart();
    const message = await enqueueMessage(store);
    const stale = await claimNext(store, "worker-a", LEASE_MS);
    clock.advance(LEASE_MS);
    await store.cancel(message.id, { running: true });
    clock.advance(1);
    await store.purgeProcessed(clock.now()); // gone (in delete mode the cancel deleted it already)
    for (const result of [await store.complete(stale), ...(await store.completeMany([{ lease: stale }])), await store.renew(stale, LEASE_MS)]) {
      expect(result).toEqual({ outcome: "lease-lost", messageId: message.id, token: stale.token, current: null });
    }
    const refused = (await store.auditTrail()).filter((e) => e.action === "refused");
    expect(refused.map((e) => [e.operation, e.previousStatus, e.previousOwner, e.previousLockedUntil])).toEqual([
      ["complete", null, null, null],
      ["complete", null, null, null],
      ["renew", null, null, null],
    ]);
  });

  it("gives one message's trail alone when asked by id", async () => {
    const { store } = ctx();
    const first = await enqueueMessage(store);
    const second = await enqueueMessage(store);
    const a = await claimNext(store, "worker-a", LEASE_MS);
    const b = await claimNext(store, "worker-b", LEASE_MS);
    await store.complete(b);
    expect((await store.auditTrail({ messageId: second.id })).map((e) => [e.messageId, e.action])).toEqual([
      [second.id, "claim"],
      [second.id, "complete"],
    ]);
    expect((await store.auditTrail({ messageId: first.id })).map((e) => [e.action, e.token])).toEqual([["claim", a.token]]);
    expect(await store.auditTrail({ messageId: "999999" })).toEqual([]);
    await expect(store.auditTrail({ messageId: "not-an-id" })).rejects.toThrow(/message id/);
  });

  it("rolls the completion's audit row back with a business write that fails", async () => {
    const { store } = ctx();
    await enqueueMessage(store);
    const lease = await claimNext(store, "worker-a", LEASE_MS);
    await expect(
      store.complete(lease, () => {
        throw new Error("business write failed");
      }),
    ).rejects.toThrow("business write failed");
    expect((await store.auditTrail()).map((e) => e.action)).toEqual(["claim"]);
  });

  it("records retries, dead messages and releases with their tokens", async () => {
    const { store } = ctx();
    await enqueueMessage(store, { dedupeKey: "a" });
    await enqueueMessage(store, { dedupeKey: "b" });
    await enqueueMessage(store, { dedupeKey: "c" });
    const [a, b, c] = await store.claim("worker-a", { limit: 3, leaseMs: LEASE_MS });
    await store.fail(a!, new Error("try later"), { retryInMs: 10 });
    await store.fail(b!, new Error("give up"), "dead");
    await store.release(c!);
    const trail = (await store.auditTrail()).filter((e) => e.action !== "claim");
    expect(trail.map((e) => [e.action, e.messageId, e.token, e.owner])).toEqual([
      ["retry", a!.messageId, a!.token, "worker-a"],
      ["dead", b!.messageId, b!.token, "worker-a"],
      ["release", c!.messageId, c!.token, "worker-a"],
    ]);
  });
});

describeEachStore("audit trail: redrive", (factory) => {
  const ctx = useStoreHarness(factory);

  it("records a redrive of a dead message under its last token, as the operator's act", async () => {
    const { store } = ctx();
    await enqueueMessage(store, { dedupeKey: "a" });
    await enqueueMessage(store, { dedupeKey: "b" });
    const [a, b] = await store.claim("worker-a", { limit: 2, leaseMs: LEASE_MS });
    await store.fail(a!, new Error("x"), "dead");
    await store.fail(b!, new Error("y"), "dead");
    expect(await store.redrive({ messageIds: [a!.messageId] })).toEqual({ moved: 1, notMoved: [] });
    expect(await store.redrive("all")).toEqual({ moved: 1, notMoved: [] });
    const redrives = (await store.auditTrail()).filter((e) => e.action === "redrive");
    expect(redrives.map((e) => [e.messageId, e.token, e.owner])).toEqual([
      [a!.messageId, a!.token, "redrive"],
      [b!.messageId, b!.token, "redrive"],
    ]);
  });
});
