// Owners and their heartbeats, on every store: a worker registers (heartbeat), and when its
// heartbeat stops for longer than it said it stays alive, a peer's reap expires its leases at once,
// so its messages are claimed again after about that time instead of after a whole lease. A reaped
// lease is an expired lease in every way (token, attempts, ordering keys, fencing); owners that
// never registered are never reaped.

import { expect, it, vi } from "vitest";
import type { OutboxEvent } from "../../src/outbox/events.js";
import type { Lease } from "../../src/outbox/types.js";
import { claimNext, describeEachStore, enqueueMessage, mustGet, START, useStoreHarness } from "./stores.js";

const LEASE_MS = 30_000;
const ALIVE_MS = 3_000;

describeEachStore("owners' heartbeats and the reap of dead owners", (factory) => {
  const ctx = useStoreHarness(factory);

  it("registers an owner with its kind and types, keeps its start on later beats, and drops it on signOff", async () => {
    const { store, clock } = ctx();
    expect(await store.heartbeat("relay-1", { aliveMs: ALIVE_MS, kind: "relay" })).toEqual({ at: START, aliveUntil: new Date(START.getTime() + ALIVE_MS) });
    clock.advance(2_000);
    await store.heartbeat("relay-1", { aliveMs: ALIVE_MS, kind: "relay" });
    await store.heartbeat("worker-1", { aliveMs: 5_000, takes: ["b.type", "a.type"] });
    expect(await store.owners()).toEqual([
      { owner: "relay-1", kind: "relay", takes: null, startedAt: START, heartbeatAt: clock.now(), aliveUntil: new Date(clock.now().getTime() + ALIVE_MS) },
      {
        owner: "worker-1",
        kind: "worker",
        takes: ["b.type", "a.type"],
        startedAt: clock.now(),
        heartbeatAt: clock.now(),
        aliveUntil: new Date(clock.now().getTime() + 5_000),
      },
    ]);
    expect(await store.signOff("relay-1")).toBe(true);
    expect(await store.signOff("relay-1")).toBe(false);
    expect((await store.owners()).map((o) => o.owner)).toEqual(["worker-1"]);
  });

  it("never shortens an owner's alive time: a process sharing its name with shorter settings cannot make it look dead", async () => {
    const { store, clock } = ctx();
    await enqueueMessage(store);
    await store.heartbeat("shared", { aliveMs: 60_000 });
    const [lease] = await store.claim("shared", { limit: 1, leaseMs: LEASE_MS });
    expect(lease).toBeDefined();
    // The namesake beats with a 3 s alive time, then dies; the 60 s one is still alive at 10 s.
    expect(await store.heartbeat("shared", { aliveMs: ALIVE_MS })).toEqual({ at: START, aliveUntil: new Date(START.getTime() + ALIVE_MS) });
    clock.advance(10_000);
    expect(await store.reapDeadOwners("peer")).toEqual([]);
    expect(await store.claim("peer", { limit: 1, leaseMs: LEASE_MS })).toEqual([]);
    expect((await store.owners())[0]?.aliveUntil).toEqual(new Date(START.getTime() + 60_000));
  });

  it("refuses a heartbeat with a bad aliveMs, kind or types, naming the option", async () => {
    const { store } = ctx();
    await expect(store.heartbeat("w", { aliveMs: 0 })).rejects.toThrow(/aliveMs must be a whole number of milliseconds from 1/);
    await expect(store.heartbeat("w", { aliveMs: 1.5 })).rejects.toThrow(/aliveMs/);
    await expect(store.heartbeat("w", { aliveMs: 1_000, kind: "" })).rejects.toThrow(/kind/);
    await expect(store.heartbeat("w", { aliveMs: 1_000, takes: [] })).rejects.toThrow(/types must be a list/);
    await expect(store.heartbeat("", { aliveMs: 1_000 })).rejects.toThrow(/owner/);
  });

  it("an owner whose heartbeat stopped: once its alive time passes, a peer's reap frees its leases and the peer claims them long before the lease ends", async () => {
    const { store, clock } = ctx();
    const events: OutboxEvent[] = [];
    store.events.subscribe((event) => events.push(event));
    const first = await enqueueMessage(store, { payload: { n: 1 } });
    const second = await enqueueMessage(store, { payload: { n: 2 } });
    await store.heartbeat("dead", { aliveMs: ALIVE_MS });
    const held = await store.claim("dead", { limit: 10, leaseMs: LEASE_MS });
    expect(held).toHaveLength(2);
    await store.heartbeat("peer", { aliveMs: ALIVE_MS });

    clock.advance(ALIVE_MS - 1); // "dead" is still alive for 1 ms
    await store.heartbeat("peer", { aliveMs: ALIVE_MS });
    expect(await store.reapDeadOwners("peer")).toEqual([]);
    expect(await store.claim("peer", { limit: 10, leaseMs: LEASE_MS })).toEqual([]);

    clock.advance(1);
    await store.heartbeat("peer", { aliveMs: ALIVE_MS });
    expect(await store.reapDeadOwners("peer")).toEqual([{ owner: "dead", expired: 2 }]);
    expect(events.filter((e) => e.type === "owners-reaped")).toEqual([
      { type: "owners-reaped", at: clock.now(), owner: "peer", reaped: [{ owner: "dead", expired: 2 }] },
    ]);
    expect((await store.owners()).map((o) => o.owner)).toEqual(["peer"]);
    const stats = await store.stats();
    expect(stats.leasesByOwner).toEqual([{ owner: "dead", held: 0, expired: 2 }]); // an expired lease, as any other

    const taken = await store.claim("peer", { limit: 10, leaseMs: LEASE_MS });
    expect(taken.map((l) => [l.messageId, l.token, l.reclaimedFrom, l.message.attempts])).toEqual([
      [first.id, 2, "dead", 2],
      [second.id, 2, "dead", 2],
    ]);
    expect(clock.now().getTime() - START.getTime()).toBe(ALIVE_MS); // not LEASE_MS
    // A second reap finds nobody: the dead owner's row went with the first.
    expect(await store.reapDeadOwners("peer")).toEqual([]);
  });

  it("a reaped lease counts its attempt as an expired lease does", async () => {
    const { store, clock } = ctx();
    const reaped = await enqueueMessage(store, { payload: { n: 1 } });
    const expired = await enqueueMessage(store, { payload: { n: 2 } });
    await store.heartbeat("dead", { aliveMs: ALIVE_MS });
    await store.claimMessage("dead", reaped.id, { leaseMs: LEASE_MS });
    await store.claimMessage("bare", expired.id, { leaseMs: ALIVE_MS }); // no heartbeat: runs out on its own
    clock.advance(ALIVE_MS);
    expect(await store.reapDeadOwners("peer")).toEqual([{ owner: "dead", expired: 1 }]);
    const taken = await store.claim("peer", { limit: 10, leaseMs: LEASE_MS });
    expect(taken.map((l) => [l.messageId, l.message.attempts, l.token])).toEqual([
      [reaped.id, 2, 2],
      [expired.id, 2, 2],
    ]);
  });

  it("never reaps a live owner: beating within its alive time keeps its leases through many reaps", async () => {
    const { store, clock } = ctx();
    const message = await enqueueMessage(store);
    await store.heartbeat("live", { aliveMs: ALIVE_MS });
    let lease = await claimNext(store, "live", LEASE_MS);
    for (let beat = 0; beat < 12; beat += 1) {
      clock.advance(ALIVE_MS - 1);
      await store.heartbeat("live", { aliveMs: ALIVE_MS });
      const renewed = await store.renew(lease, LEASE_MS); // 12 beats outlast the first lease: renewed as a worker does
      if (renewed.outcome !== "renewed") throw new Error(`the live owner lost its lease: ${JSON.stringify(renewed)}`);
      lease = renewed.lease;
      expect(await store.reapDeadOwners("peer")).toEqual([]);
      expect(await store.claim("peer", { limit: 10, leaseMs: LEASE_MS })).toEqual([]);
    }
    expect((await mustGet(store, message.id)).lockedBy).toBe("live");
    expect((await store.complete(lease)).outcome).toBe("completed");
  });

  it("never reaps an owner that did not register: its leases run to their end", async () => {
    const { store, clock } = ctx();
    const bare = await enqueueMessage(store, { payload: { n: 1 } });
    const registered = await enqueueMessage(store, { payload: { n: 2 } });
    await store.claimMessage("bare", bare.id, { leaseMs: LEASE_MS });
    await store.heartbeat("dead", { aliveMs: ALIVE_MS });
    await store.claimMessage("dead", registered.id, { leaseMs: LEASE_MS });
    clock.advance(ALIVE_MS * 5);
    expect(await store.reapDeadOwners("peer")).toEqual([{ owner: "dead", expired: 1 }]);
    expect((await store.claim("peer", { limit: 10, leaseMs: LEASE_MS })).map((l) => l.messageId)).toEqual([registered.id]);
    expect((await mustGet(store, bare.id)).lockedBy).toBe("bare");
    clock.set(new Date(START.getTime() + LEASE_MS)); // its own lease ends: claimable as ever
    expect((await store.claim("peer", { limit: 10, leaseMs: LEASE_MS })).map((l) => [l.messageId, l.reclaimedFrom])).toEqual([[bare.id, "bare"]]);
  });

  it("fences the reaped owner: its late completion is refused (lease-lost, nothing written, a refused row in the audit trail), and so is its renewal", async () => {
    const { store, clock, harness } = ctx();
    const message = await enqueueMessage(store);
    await store.heartbeat("paused", { aliveMs: ALIVE_MS });
    const stale = await claimNext(store, "paused", LEASE_MS);
    clock.advance(ALIVE_MS);
    await store.reapDeadOwners("peer");
    const fresh = await claimNext(store, "peer", LEASE_MS);

    // The paused owner wakes up, still within its lease as it believes.
    const finalize = vi.fn(async (tx: unknown) => harness.businessWrite(tx, "late-result"));
    const late = await store.complete(stale, finalize);
    expect(late).toMatchObject({ outcome: "lease-lost", current: { lockedBy: "peer", leaseToken: fresh.token } });
    expect(finalize).not.toHaveBeenCalled();
    expect(await harness.countBusinessRows("late-result")).toBe(0);
    expect((await store.renew(stale, LEASE_MS)).outcome).toBe("lease-lost");
    const trail = await store.auditTrail({ messageId: message.id });
    expect(trail.map((e) => [e.action, e.owner, e.token])).toEqual([
      ["claim", "paused", 1],
      ["claim", "peer", 2],
      ["refused", "paused", 1],
      ["refused", "paused", 1],
    ]);
    expect(trail[1]).toMatchObject({ previousStatus: "processing", previousOwner: "paused" });
    expect((await store.complete(fresh)).outcome).toBe("completed");

    // Its next beat registers it again, as a new owner with no leases.
    await store.heartbeat("paused", { aliveMs: ALIVE_MS });
    expect((await store.owners()).map((o) => [o.owner, o.startedAt])).toEqual([["paused", clock.now()]]);
  });

  it("an ordering key behaves as on expiry: the reaped holder is claimed again first, and the next message of its key waits for it", async () => {
    const { store, clock } = ctx();
    const a = await enqueueMessage(store, { key: "k", payload: { label: "a" } });
    const b = await enqueueMessage(store, { key: "k", payload: { label: "b" } });
    await store.heartbeat("dead", { aliveMs: ALIVE_MS });
    const held: Lease = await claimNext(store, "dead", LEASE_MS);
    expect(held.messageId).toBe(a.id);
    clock.advance(ALIVE_MS);
    expect(await store.reapDeadOwners("peer")).toEqual([{ owner: "dead", expired: 1 }]);
    const again = await store.claim("peer", { limit: 10, leaseMs: LEASE_MS });
    expect(again.map((l) => [l.messageId, l.message.keySeq])).toEqual([[a.id, 1]]);
    expect((await store.complete(again[0]!)).outcome).toBe("completed");
    const next = await store.claim("peer", { limit: 10, leaseMs: LEASE_MS });
    expect(next.map((l) => [l.messageId, l.message.keySeq])).toEqual([[b.id, 2]]);
  });
});
