// Invariant 7, accounted: every claim (won, empty, blocked) and every lease outcome reaches the
// store's event hub, with the owner, message and token it concerns. Ledgers are built from it.

import { expect, it } from "vitest";
import type { OutboxEvent } from "../../src/outbox/events.js";
import type { OutboxStore } from "../../src/outbox/store.js";
import { at, claimNext, enqueueMessage, describeEachStore, useStoreHarness } from "./stores.js";

const LEASE_MS = 30_000;

function record(store: OutboxStore<unknown>): OutboxEvent[] {
  const events: OutboxEvent[] = [];
  store.events.subscribe((event) => events.push(event));
  return events;
}

describeEachStore("events", (factory) => {
  const ctx = useStoreHarness(factory);

  it("emits claim-empty with the owner and the limit when nothing is claimable", async () => {
    const { store, clock } = ctx();
    clock.advance(42);
    const events = record(store);
    await store.claim("worker-a", { limit: 5, leaseMs: LEASE_MS });
    expect(events).toEqual([{ type: "claim-empty", at: at(42), owner: "worker-a", limit: 5 }]);
  });

  it("emits one claim-won per claimed message, with owner, message id, token and expiry, and no claim-empty", async () => {
    const { store } = ctx();
    const first = await enqueueMessage(store);
    const second = await enqueueMessage(store);
    const events = record(store);

    await store.claim("worker-a", { limit: 10, leaseMs: LEASE_MS });
    expect(events).toEqual([
      { type: "claim-won", at: at(0), owner: "worker-a", messageId: first.id, token: 1, lockedUntil: at(LEASE_MS), reclaimedFrom: null },
      { type: "claim-won", at: at(0), owner: "worker-a", messageId: second.id, token: 1, lockedUntil: at(LEASE_MS), reclaimedFrom: null },
    ]);
  });

  it("emits claim-won naming the previous owner when an expired lease is reclaimed", async () => {
    const { store, clock } = ctx();
    const message = await enqueueMessage(store);
    await claimNext(store, "worker-a", LEASE_MS);
    clock.advance(LEASE_MS);
    const events = record(store);

    await store.claim("worker-b", { limit: 1, leaseMs: LEASE_MS });
    expect(events).toEqual([
      { type: "claim-won", at: at(LEASE_MS), owner: "worker-b", messageId: message.id, token: 2, lockedUntil: at(2 * LEASE_MS), reclaimedFrom: "worker-a" },
    ]);
  });

  it("emits claim-won when a message is claimed by id", async () => {
    const { store } = ctx();
    const message = await enqueueMessage(store);
    const events = record(store);
    await store.claimMessage("worker-a", message.id, { leaseMs: LEASE_MS });
    expect(events).toEqual([
      { type: "claim-won", at: at(0), owner: "worker-a", messageId: message.id, token: 1, lockedUntil: at(LEASE_MS), reclaimedFrom: null },
    ]);
  });

  it("emits claim-blocked with the holder and its expiry when a held message is claimed by id", async () => {
    const { store, clock } = ctx();
    const message = await enqueueMessage(store);
    await claimNext(store, "worker-a", LEASE_MS);
    clock.advance(1_000);
    const events = record(store);

    await store.claimMessage("worker-b", message.id, { leaseMs: LEASE_MS });
    expect(events).toEqual([{ type: "claim-blocked", at: at(1_000), owner: "worker-b", messageId: message.id, heldBy: "worker-a", lockedUntil: at(LEASE_MS) }]);
  });

  it("emits completed with the owner, message id and token once the completion commits", async () => {
    const { store, clock } = ctx();
    const message = await enqueueMessage(store);
    const lease = await claimNext(store, "worker-a", LEASE_MS);
    clock.advance(500);
    const events = record(store);

    await store.complete(lease);
    expect(events).toEqual([{ type: "completed", at: at(500), owner: "worker-a", messageId: message.id, token: 1 }]);
  });

  it("emits nothing when finalize throws and the completion rolls back", async () => {
    const { store } = ctx();
    await enqueueMessage(store);
    const lease = await claimNext(store, "worker-a", LEASE_MS);
    const events = record(store);

    await expect(
      store.complete(lease, () => {
        throw new Error("rolled back");
      }),
    ).rejects.toThrow("rolled back");
    expect(events).toEqual([]);
  });

  it("emits lease-lost with the operation, the current holder and its token for each refused operation", async () => {
    const { store, clock } = ctx();
    const message = await enqueueMessage(store);
    const stale = await claimNext(store, "worker-a", LEASE_MS);
    clock.advance(LEASE_MS);
    await claimNext(store, "worker-b", LEASE_MS);
    clock.advance(10);
    const events = record(store);

    await store.complete(stale);
    await store.renew(stale, LEASE_MS);
    await store.fail(stale, new Error("x"), { retryInMs: 0 });
    await store.fail(stale, new Error("x"), "dead");
    await store.release(stale);

    const base = { type: "lease-lost", at: at(LEASE_MS + 10), owner: "worker-a", messageId: message.id, token: 1, heldBy: "worker-b", currentToken: 2 };
    expect(events).toEqual([
      { ...base, operation: "complete" },
      { ...base, operation: "renew" },
      { ...base, operation: "fail" },
      { ...base, operation: "fail" },
      { ...base, operation: "release" },
    ]);
  });

  it("emits renewed, retry-scheduled, dead and released for the other lease operations", async () => {
    const { store, clock } = ctx();
    const [a, b, c] = [await enqueueMessage(store), await enqueueMessage(store), await enqueueMessage(store)];
    const [la, lb, lc] = await store.claim("worker-a", { limit: 3, leaseMs: LEASE_MS });
    clock.advance(100);
    const events = record(store);

    await store.renew(la!, LEASE_MS);
    await store.fail(la!, new Error("later"), { retryInMs: 1_000 });
    await store.fail(lb!, new Error("poison"), "dead");
    await store.release(lc!);

    expect(events).toMatchObject([
      { type: "renewed", at: at(100), owner: "worker-a", messageId: a!.id, token: 1, lockedUntil: at(100 + LEASE_MS) },
      { type: "retry-scheduled", at: at(100), owner: "worker-a", messageId: a!.id, token: 1, availableAt: at(1_100) },
      { type: "dead", at: at(100), owner: "worker-a", messageId: b!.id, token: 1 },
      { type: "released", at: at(100), owner: "worker-a", messageId: c!.id, token: 1 },
    ]);
    expect(events[1]).toMatchObject({ error: expect.stringContaining("later") });
    expect(events[2]).toMatchObject({ error: expect.stringContaining("poison") });
  });

  it("stops delivering events to a listener once it unsubscribes", async () => {
    const { store } = ctx();
    const events: OutboxEvent[] = [];
    const unsubscribe = store.events.subscribe((event) => events.push(event));
    await store.claim("worker-a", { limit: 1, leaseMs: LEASE_MS });
    unsubscribe();
    await store.claim("worker-a", { limit: 1, leaseMs: LEASE_MS });
    expect(events.map((event) => event.type)).toEqual(["claim-empty"]);
  });
});
