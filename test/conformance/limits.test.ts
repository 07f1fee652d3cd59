// Flow control across processes: a type's concurrency limit (leases held at once) and rate limit
// (claims in any interval), held in the database, obeyed by every claim of every store on it. A
// lease counts until its message is completed, failed, released or its lease ends.

import { expect, it } from "vitest";
import { InvalidArgumentError } from "../../src/outbox/errors.js";
import type { OutboxStore } from "../../src/outbox/store.js";
import type { Lease } from "../../src/outbox/types.js";
import { describeEachStore, enqueueMessage, useStoreHarness } from "./stores.js";

const LEASE_MS = 30_000;
const LIMITED = "limited.type";

async function enqueueOf(store: OutboxStore<unknown>, type: string, count: number): Promise<string[]> {
  const ids: string[] = [];
  for (let n = 0; n < count; n += 1) ids.push((await enqueueMessage(store, { type, payload: { n } })).id);
  return ids;
}

const typesOf = (leases: readonly Lease[]) => leases.map((lease) => lease.message.type);

describeEachStore("limits", (factory) => {
  const ctx = useStoreHarness(factory);

  it("sets, replaces, lists and lifts a type's limit", async () => {
    const { store } = ctx();
    expect(await store.limits()).toEqual([]);
    const set = await store.limit(LIMITED, { concurrency: 3 });
    expect(set).toMatchObject({ type: LIMITED, concurrency: 3, rate: null });
    await store.limit("a.type", { rate: { count: 10, intervalMs: 1_000 } });
    const replaced = await store.limit(LIMITED, { concurrency: 2, rate: { count: 5, intervalMs: 60_000 } });
    expect(replaced).toMatchObject({ type: LIMITED, concurrency: 2, rate: { count: 5, intervalMs: 60_000 } });
    expect((await store.limits()).map((limit) => [limit.type, limit.concurrency, limit.rate])).toEqual([
      ["a.type", null, { count: 10, intervalMs: 1_000 }],
      [LIMITED, 2, { count: 5, intervalMs: 60_000 }],
    ]);
    expect(await store.unlimit(LIMITED)).toBe(true);
    expect(await store.unlimit(LIMITED)).toBe(false);
    expect((await store.limits()).map((limit) => limit.type)).toEqual(["a.type"]);
  });

  it("holds at most `concurrency` leases of the type, and frees a slot at completion, failure and release", async () => {
    const { store } = ctx();
    await store.limit(LIMITED, { concurrency: 2 });
    await enqueueOf(store, LIMITED, 6);
    const first = await store.claim("w", { limit: 10, leaseMs: LEASE_MS });
    expect(first).toHaveLength(2);
    expect(await store.claim("w", { limit: 10, leaseMs: LEASE_MS })).toEqual([]);

    await store.complete(first[0]!, async () => {});
    const second = await store.claim("w", { limit: 10, leaseMs: LEASE_MS });
    expect(second).toHaveLength(1);

    await store.fail(first[1]!, new Error("try again"), { retryInMs: 0 });
    const third = await store.claim("w", { limit: 10, leaseMs: LEASE_MS });
    expect(third).toHaveLength(1);

    await store.release(second[0]!);
    expect(await store.claim("w", { limit: 10, leaseMs: LEASE_MS })).toHaveLength(1);
    expect(await store.claim("w", { limit: 10, leaseMs: LEASE_MS })).toEqual([]);
  });

  it("counts the leases held when the limit is set as running, not as claims in the rate's window", async () => {
    const { store } = ctx();
    await enqueueOf(store, LIMITED, 5);
    expect(await store.claim("early", { limit: 3, leaseMs: LEASE_MS })).toHaveLength(3);
    await store.limit(LIMITED, { concurrency: 5, rate: { count: 1, intervalMs: 60_000 } });
    expect(await store.claim("w", { limit: 10, leaseMs: LEASE_MS })).toHaveLength(1); // the rate's one claim
    await store.limit(LIMITED, { concurrency: 4 });
    expect(await store.claim("w", { limit: 10, leaseMs: LEASE_MS })).toEqual([]); // 3 + 1 running
  });

  it("counts the leases a store took before it saw a new limit (its list of limited types read within the last second)", async () => {
    const { store, harness } = ctx();
    const other = await harness.connect();
    try {
      await other.limits(); // reads: no limited types, trusted for a second
      await store.limit(LIMITED, { concurrency: 2 });
      await enqueueOf(store, LIMITED, 6);
      expect(await other.claim("stale", { limit: 3, leaseMs: LEASE_MS })).toHaveLength(3); // as if unlimited
      expect(await store.claim("w", { limit: 10, leaseMs: LEASE_MS })).toEqual([]); // the three count
    } finally {
      await (other as { close(): Promise<void> }).close();
    }
  });

  it("frees a killed worker's slots when their leases end, not before", async () => {
    const { store, clock } = ctx();
    await store.limit(LIMITED, { concurrency: 2 });
    await enqueueOf(store, LIMITED, 2);
    expect(await store.claim("dead", { limit: 10, leaseMs: LEASE_MS })).toHaveLength(2);
    clock.advance(LEASE_MS - 1);
    expect(await store.claim("alive", { limit: 10, leaseMs: LEASE_MS })).toEqual([]);
    clock.advance(1);
    const after = await store.claim("alive", { limit: 10, leaseMs: LEASE_MS });
    expect(after).toHaveLength(2);
    expect(after.every((lease) => lease.reclaimedFrom === "dead")).toBe(true);
  });

  it("keeps a renewed lease counted", async () => {
    const { store, clock } = ctx();
    await store.limit(LIMITED, { concurrency: 1 });
    await enqueueOf(store, LIMITED, 2);
    const [lease] = await store.claim("w", { limit: 10, leaseMs: LEASE_MS });
    clock.advance(LEASE_MS - 1_000);
    await store.renew(lease!, LEASE_MS);
    clock.advance(2_000); // past the first lease's end, inside the renewed one
    expect(await store.claim("w", { limit: 10, leaseMs: LEASE_MS })).toEqual([]);
  });

  it("gives a paused holder's slot away for good once its lease ends: the expired lease cannot be renewed back over the limit", async () => {
    const { store, clock } = ctx();
    await store.limit(LIMITED, { concurrency: 1 });
    await enqueueOf(store, LIMITED, 2);
    const [paused] = await store.claim("paused", { limit: 10, leaseMs: LEASE_MS });
    clock.advance(LEASE_MS); // its lease ends while its process is paused; nobody reclaims it
    const [other] = await store.claim("alive", { limit: 10, leaseMs: LEASE_MS });
    expect(other?.messageId).not.toBe(paused?.messageId); // the slot went to the other message
    expect((await store.renew(paused!, LEASE_MS)).outcome).toBe("lease-lost");
    clock.advance(1_000);
    expect((await store.renew(other!, LEASE_MS)).outcome).toBe("renewed");
    // One lease held, as the limit says: the other message's.
    const held = (await Promise.all([paused!, other!].map((lease) => store.getMessage(lease.messageId)))).filter(
      (message) => message?.status === "processing" && message.lockedUntil !== null && message.lockedUntil > clock.now(),
    );
    expect(held.map((message) => message?.id)).toEqual([other!.messageId]);
  });

  it("allows at most `rate.count` claims in any `rate.intervalMs`: a sliding window", async () => {
    const { store, clock } = ctx();
    await store.limit(LIMITED, { rate: { count: 3, intervalMs: 1_000 } });
    await enqueueOf(store, LIMITED, 10);
    const at0 = await store.claim("w", { limit: 2, leaseMs: LEASE_MS });
    expect(at0).toHaveLength(2);
    clock.advance(500);
    expect(await store.claim("w", { limit: 10, leaseMs: LEASE_MS })).toHaveLength(1);
    for (const lease of at0) await store.complete(lease, async () => {}); // completing frees no rate
    expect(await store.claim("w", { limit: 10, leaseMs: LEASE_MS })).toEqual([]);
    clock.advance(499); // 999 ms after the first two
    expect(await store.claim("w", { limit: 10, leaseMs: LEASE_MS })).toEqual([]);
    clock.advance(1); // the first two leave the window; the one at 500 ms is still in it
    expect(await store.claim("w", { limit: 10, leaseMs: LEASE_MS })).toHaveLength(2);
    clock.advance(500);
    expect(await store.claim("w", { limit: 10, leaseMs: LEASE_MS })).toHaveLength(1);
  });

  it("counts a retry's claim as a start", async () => {
    const { store, clock } = ctx();
    await store.limit(LIMITED, { rate: { count: 1, intervalMs: 10_000 } });
    await enqueueOf(store, LIMITED, 1);
    const [lease] = await store.claim("w", { limit: 10, leaseMs: LEASE_MS });
    await store.fail(lease!, new Error("again"), { retryInMs: 0 });
    expect(await store.claim("w", { limit: 10, leaseMs: LEASE_MS })).toEqual([]);
    clock.advance(10_000);
    expect(await store.claim("w", { limit: 10, leaseMs: LEASE_MS })).toHaveLength(1);
  });

  it("applies both limits together: the tighter one wins", async () => {
    const { store } = ctx();
    await store.limit(LIMITED, { concurrency: 5, rate: { count: 2, intervalMs: 60_000 } });
    await enqueueOf(store, LIMITED, 6);
    expect(await store.claim("w", { limit: 10, leaseMs: LEASE_MS })).toHaveLength(2);
    await store.limit(LIMITED, { concurrency: 1, rate: { count: 100, intervalMs: 60_000 } });
    expect(await store.claim("w", { limit: 10, leaseMs: LEASE_MS })).toEqual([]);
  });

  it("leaves other types unlimited, in a claim of every type and in a claim of named types", async () => {
    const { store } = ctx();
    await store.limit(LIMITED, { concurrency: 1 });
    await enqueueOf(store, LIMITED, 3);
    await enqueueOf(store, "free.type", 3);
    const all = await store.claim("w", { limit: 10, leaseMs: LEASE_MS });
    expect(typesOf(all).sort()).toEqual(["free.type", "free.type", "free.type", LIMITED]);
    await enqueueOf(store, "free.type", 2);
    const named = await store.claim("w", { limit: 10, leaseMs: LEASE_MS, types: [LIMITED, "free.type"] });
    expect(typesOf(named)).toEqual(["free.type", "free.type"]);
    expect(await store.claim("w", { limit: 10, leaseMs: LEASE_MS, types: [LIMITED] })).toEqual([]);
  });

  it("claims without limit once the limit is lifted", async () => {
    const { store } = ctx();
    await store.limit(LIMITED, { concurrency: 1 });
    await enqueueOf(store, LIMITED, 3);
    expect(await store.claim("w", { limit: 10, leaseMs: LEASE_MS })).toHaveLength(1);
    await store.unlimit(LIMITED);
    expect(await store.claim("w", { limit: 10, leaseMs: LEASE_MS })).toHaveLength(2);
  });

  it("holds across stores on one database: concurrent claims from two instances never pass the limit", async () => {
    const { store, harness } = ctx();
    const other = await harness.connect();
    try {
      await store.limit(LIMITED, { concurrency: 3 });
      await other.limits(); // the other instance reads the limited types now, not within a second
      await enqueueOf(store, LIMITED, 20);
      const claims = await Promise.all(Array.from({ length: 8 }, (_, n) => (n % 2 === 0 ? store : other).claim(`w${n}`, { limit: 2, leaseMs: LEASE_MS })));
      expect(claims.flat()).toHaveLength(3);
    } finally {
      await (other as { close(): Promise<void> }).close();
    }
  });

  it("names bad limits and what is valid", async () => {
    const { store } = ctx();
    const bad: [unknown, RegExp][] = [
      [{}, /needs a concurrency, a rate/],
      [{ concurrency: 0 }, /concurrency must be a whole number from 1 to 100000/],
      [{ concurrency: 1.5 }, /concurrency must be a whole number/],
      [{ rate: { count: -1, intervalMs: 1_000 } }, /rate\.count must be a whole number from 1/],
      [{ rate: { count: 5, intervalMs: 10 } }, /rate\.intervalMs must be a whole number of milliseconds from 100/],
      [{ rate: { count: 5 } }, /rate\.intervalMs/],
      [{ rate: 5 }, /rate .* must be an object/],
      [{ concurency: 2 }, /has no "concurency"/],
      [null, /must be an object/],
    ];
    for (const [options, message] of bad) {
      await expect(store.limit(LIMITED, options as never), JSON.stringify(options)).rejects.toThrow(message);
      await expect(store.limit(LIMITED, options as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    }
    await expect(store.limit("", { concurrency: 1 })).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(await store.limits()).toEqual([]);
  });
});
