// Claiming (invariants 3 and 4): atomic, oldest first, within the limit; a held message is
// exclusive until its lease expires, then exactly one other claimer takes it with a new token.

import { expect, it } from "vitest";
import { InvalidArgumentError } from "../../src/outbox/errors.js";
import type { ClaimOptions, Lease } from "../../src/outbox/types.js";
import { at, claimNext, describeEachStore, enqueueMessage, enqueueMessages, finishedStatus, mustGet, useStoreHarness } from "./stores.js";

const LEASE_MS = 30_000;

describeEachStore("claiming", (factory) => {
  const ctx = useStoreHarness(factory);

  it("claims the oldest claimable messages first", async () => {
    const { store, clock } = ctx();
    const [a, b, c] = await enqueueMessages(store, clock, 3, 1_000);

    const first = await store.claim("worker-a", { limit: 2, leaseMs: LEASE_MS });
    expect(first.map((lease) => lease.messageId)).toEqual([a!.id, b!.id]);
    const second = await store.claim("worker-a", { limit: 2, leaseMs: LEASE_MS });
    expect(second.map((lease) => lease.messageId)).toEqual([c!.id]);
  });

  it("claims messages in the order they became due, not the order they were enqueued", async () => {
    const { store, clock } = ctx();
    const late = await enqueueMessage(store, { availableAt: at(10_000) });
    clock.advance(1_000);
    const early = await enqueueMessage(store);

    clock.set(at(20_000));
    expect((await claimNext(store, "worker-a", LEASE_MS)).messageId).toBe(early.id);
    expect((await claimNext(store, "worker-a", LEASE_MS)).messageId).toBe(late.id);
  });

  it("claims messages due at the same instant in the order they were enqueued", async () => {
    const { store } = ctx();
    const ids = await store.transaction(async (tx) => {
      const out: string[] = [];
      for (let n = 0; n < 5; n += 1) out.push((await store.enqueue(tx, { type: "test.message", payload: n })).id);
      return out;
    });
    const leases = await store.claim("worker-a", { limit: 5, leaseMs: LEASE_MS });
    expect(leases.map((lease) => lease.messageId)).toEqual(ids);
  });

  it("never claims more messages than the limit", async () => {
    const { store, clock } = ctx();
    const messages = await enqueueMessages(store, clock, 7);
    const sizes: number[] = [];
    const claimed: string[] = [];
    for (let round = 0; round < 4; round += 1) {
      const leases = await store.claim("worker-a", { limit: 3, leaseMs: LEASE_MS });
      sizes.push(leases.length);
      claimed.push(...leases.map((lease) => lease.messageId));
    }
    expect(sizes).toEqual([3, 3, 1, 0]);
    expect(claimed).toEqual(messages.map((m) => m.id));
  });

  it("sets the owner, an expiry of now + leaseMs, a new token and one more attempt on each claimed message", async () => {
    const { store, clock } = ctx();
    const message = await enqueueMessage(store);
    clock.advance(5_000);

    const lease = await claimNext(store, "worker-a", LEASE_MS);
    const expiry = at(5_000 + LEASE_MS);
    expect(lease).toMatchObject({ messageId: message.id, owner: "worker-a", token: 1, lockedUntil: expiry, reclaimedFrom: null });
    expect(lease.message).toMatchObject({
      id: message.id,
      status: "processing",
      lockedBy: "worker-a",
      lockedUntil: expiry,
      leaseToken: 1,
      attempts: 1,
      createdAt: message.createdAt,
      payload: message.payload,
    });
    expect(await store.getMessage(message.id)).toEqual(lease.message);
  });

  it("returns an empty array when nothing is claimable", async () => {
    const { store, clock } = ctx();
    expect(await store.claim("worker-a", { limit: 10, leaseMs: LEASE_MS })).toEqual([]);

    await enqueueMessages(store, clock, 2);
    await claimNext(store, "worker-a", LEASE_MS);
    const done = await claimNext(store, "worker-a", LEASE_MS);
    await store.complete(done);
    // One message is held, the other processed: nothing to claim.
    expect(await store.claim("worker-b", { limit: 10, leaseMs: LEASE_MS })).toEqual([]);
  });

  it("rejects an invalid owner, limit or lease length with InvalidArgumentError and claims nothing", async () => {
    const { store } = ctx();
    const message = await enqueueMessage(store);
    const badOwners: unknown[] = ["", "   ", "w".repeat(201), 7, null, undefined];
    const badOptions: unknown[] = [
      { limit: 0, leaseMs: LEASE_MS },
      { limit: -1, leaseMs: LEASE_MS },
      { limit: 1.5, leaseMs: LEASE_MS },
      { limit: 1001, leaseMs: LEASE_MS },
      { limit: Number.NaN, leaseMs: LEASE_MS },
      { limit: "3", leaseMs: LEASE_MS },
      { limit: 1, leaseMs: 0 },
      { limit: 1, leaseMs: -1_000 },
      { limit: 1, leaseMs: 1.5 },
      { limit: 1, leaseMs: Number.POSITIVE_INFINITY },
      { limit: 1, leaseMs: 2_147_483_648 },
      { limit: 1, leaseMs: undefined },
    ];
    for (const owner of badOwners) {
      await expect(store.claim(owner as string, { limit: 1, leaseMs: LEASE_MS }), `owner ${String(owner)}`).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(store.claimMessage(owner as string, message.id, { leaseMs: LEASE_MS }), `owner ${String(owner)}`).rejects.toBeInstanceOf(
        InvalidArgumentError,
      );
    }
    for (const options of badOptions) {
      await expect(store.claim("worker-a", options as ClaimOptions), JSON.stringify(options)).rejects.toBeInstanceOf(InvalidArgumentError);
    }
    for (const leaseMs of [0, -1, 1.5, Number.NaN]) {
      await expect(store.claimMessage("worker-a", message.id, { leaseMs }), `leaseMs ${leaseMs}`).rejects.toBeInstanceOf(InvalidArgumentError);
    }
    expect(await store.getMessage(message.id)).toEqual(message);
  });

  it("accepts the largest limit and a 200-character owner", async () => {
    const { store } = ctx();
    await enqueueMessage(store);
    const owner = "w".repeat(200);
    const leases = await store.claim(owner, { limit: 1000, leaseMs: 2_147_483_647 });
    expect(leases.map((lease) => lease.owner)).toEqual([owner]);
  });

  it("counts every claim as an attempt, including reclaims after a holder vanished", async () => {
    const { store, clock } = ctx();
    const message = await enqueueMessage(store);
    for (let n = 1; n <= 3; n += 1) {
      const lease = await claimNext(store, `worker-${n}`, LEASE_MS);
      expect(lease.message.attempts).toBe(n);
      expect(lease.token).toBe(n);
      clock.advance(LEASE_MS); // the holder crashed: its lease runs out
    }
    expect(await mustGet(store, message.id)).toMatchObject({ attempts: 3, leaseToken: 3, lockedBy: "worker-3" });
  });
});

describeEachStore("exclusive, expiring leases", (factory) => {
  const ctx = useStoreHarness(factory);

  it("lets nobody, not even the holder, claim a message while its lease is unexpired", async () => {
    const { store, clock } = ctx();
    const message = await enqueueMessage(store);
    const lease = await claimNext(store, "worker-a", LEASE_MS);

    expect(await store.claim("worker-b", { limit: 10, leaseMs: LEASE_MS })).toEqual([]);
    expect(await store.claim("worker-a", { limit: 10, leaseMs: LEASE_MS })).toEqual([]);
    clock.set(new Date(lease.lockedUntil.getTime() - 1));
    expect(await store.claim("worker-b", { limit: 10, leaseMs: LEASE_MS })).toEqual([]);
    expect(await store.getMessage(message.id)).toEqual(lease.message);
  });

  it("reports who blocks a held message when it is claimed by id", async () => {
    const { store, clock } = ctx();
    const message = await enqueueMessage(store);
    const lease = await claimNext(store, "worker-a", LEASE_MS);
    clock.advance(LEASE_MS - 1);

    const result = await store.claimMessage("worker-b", message.id, { leaseMs: LEASE_MS });
    expect(result).toEqual({ outcome: "blocked", messageId: message.id, heldBy: "worker-a", lockedUntil: lease.lockedUntil, token: 1 });
    expect(await store.getMessage(message.id)).toEqual(lease.message);
  });

  it("lets exactly one other claimer take the message when the lease expires, with the next token", async () => {
    const { store, clock } = ctx();
    const message = await enqueueMessage(store);
    const first = await claimNext(store, "worker-a", LEASE_MS);

    clock.set(first.lockedUntil);
    const second = await claimNext(store, "worker-b", LEASE_MS);
    expect(second).toMatchObject({ messageId: message.id, owner: "worker-b", token: 2, reclaimedFrom: "worker-a", lockedUntil: at(2 * LEASE_MS) });
    expect(second.message).toMatchObject({ status: "processing", lockedBy: "worker-b", leaseToken: 2, attempts: 2 });

    expect(await store.claim("worker-c", { limit: 10, leaseMs: LEASE_MS })).toEqual([]);
    expect(await store.claimMessage("worker-c", message.id, { leaseMs: LEASE_MS })).toMatchObject({ outcome: "blocked", heldBy: "worker-b", token: 2 });
  });

  it("lets claimMessage take a message whose lease expired, naming the previous owner", async () => {
    const { store, clock } = ctx();
    const message = await enqueueMessage(store);
    await claimNext(store, "worker-a", LEASE_MS);
    clock.advance(LEASE_MS);

    const result = await store.claimMessage("worker-b", message.id, { leaseMs: 10_000 });
    expect(result.outcome).toBe("claimed");
    const lease = (result as { lease: Lease }).lease;
    expect(lease).toMatchObject({ messageId: message.id, owner: "worker-b", token: 2, reclaimedFrom: "worker-a", lockedUntil: at(LEASE_MS + 10_000) });
    expect(await store.getMessage(message.id)).toEqual(lease.message);
  });

  it("lets claimMessage take a pending message that is due", async () => {
    const { store } = ctx();
    const message = await enqueueMessage(store);
    const result = await store.claimMessage("worker-a", message.id, { leaseMs: LEASE_MS });
    expect(result).toMatchObject({
      outcome: "claimed",
      lease: { messageId: message.id, owner: "worker-a", token: 1, reclaimedFrom: null, lockedUntil: at(LEASE_MS) },
    });
  });

  it("gives each message to exactly one of several connections claiming at the same time", async () => {
    const { harness, clock } = ctx();
    const stores = [harness.store, ...(await Promise.all([1, 2, 3].map(() => harness.connect())))];
    const messages = await enqueueMessages(harness.store, clock, 20, 0);

    const claimed: Lease[] = [];
    for (let round = 0; round < 20; round += 1) {
      const batches = await Promise.all(stores.map((store, n) => store.claim(`worker-${n}`, { limit: 3, leaseMs: LEASE_MS })));
      const won = batches.flat();
      if (won.length === 0) break;
      claimed.push(...won);
    }
    const ids = claimed.map((lease) => lease.messageId);
    expect(new Set(ids).size).toBe(ids.length);
    expect([...ids].sort()).toEqual(messages.map((m) => m.id).sort());
    expect(claimed.every((lease) => lease.token === 1)).toBe(true);
  });

  it("gives a contested message to exactly one of several connections claiming it by id at the same time", async () => {
    const { harness } = ctx();
    const stores = [harness.store, ...(await Promise.all([1, 2, 3, 4].map(() => harness.connect())))];
    const message = await enqueueMessage(harness.store);

    const results = await Promise.all(stores.map((store, n) => store.claimMessage(`worker-${n}`, message.id, { leaseMs: LEASE_MS })));
    const winners = results.filter((result) => result.outcome === "claimed");
    expect(winners).toHaveLength(1);
    const winner = (winners[0] as { lease: Lease }).lease.owner;
    expect(results.filter((result) => result.outcome === "blocked")).toHaveLength(4);
    expect(results.filter((result) => result.outcome === "blocked").every((result) => result.outcome === "blocked" && result.heldBy === winner)).toBe(true);
    expect(await mustGet(harness.store, message.id)).toMatchObject({ lockedBy: winner, leaseToken: 1, attempts: 1 });
  });

  it("says a processed message is not claimable", async () => {
    const { store, clock } = ctx();
    const message = await enqueueMessage(store);
    await store.complete(await claimNext(store, "worker-a", LEASE_MS));
    clock.advance(10 * LEASE_MS);
    expect(await store.claimMessage("worker-b", message.id, { leaseMs: LEASE_MS })).toEqual({
      outcome: "not-claimable",
      messageId: message.id,
      status: finishedStatus(factory),
    });
  });

  it("says a dead message is not claimable", async () => {
    const { store, clock } = ctx();
    const message = await enqueueMessage(store);
    await store.fail(await claimNext(store, "worker-a", LEASE_MS), new Error("poison"), "dead");
    clock.advance(10 * LEASE_MS);
    expect(await store.claimMessage("worker-b", message.id, { leaseMs: LEASE_MS })).toEqual({
      outcome: "not-claimable",
      messageId: message.id,
      status: "dead",
    });
  });

  it("says a message id that does not exist is missing", async () => {
    const { store } = ctx();
    await enqueueMessage(store);
    for (const id of ["999999", "9223372036854775807"]) {
      expect(await store.claimMessage("worker-a", id, { leaseMs: LEASE_MS })).toEqual({ outcome: "not-claimable", messageId: id, status: "missing" });
    }
  });
});

describeEachStore("claiming: the order of the returned leases", (factory) => {
  const ctx = useStoreHarness(factory);

  it("returns the leases of one claim in the order the messages became due, not in id order", async () => {
    const { store, clock } = ctx();
    const later = await enqueueMessage(store);
    const earlier = await enqueueMessage(store, { availableAt: new Date(clock.now().getTime() - 1) });
    const leases = await store.claim("worker-a", { limit: 2, leaseMs: LEASE_MS });
    expect(leases.map((l) => l.messageId)).toEqual([earlier.id, later.id]);
  });

  it("returns a reclaimed expired lease before a newer pending message in the same claim", async () => {
    const { store, clock } = ctx();
    const first = await enqueueMessage(store);
    clock.advance(1);
    const second = await enqueueMessage(store);
    await claimNext(store, "worker-a", 10);
    clock.advance(10);
    const leases = await store.claim("worker-b", { limit: 2, leaseMs: LEASE_MS });
    // first's lease ran out at t+10, later than second became due (t+1): second comes first.
    expect(leases.map((l) => l.messageId)).toEqual([second.id, first.id]);
  });
});

describeEachStore("claiming by type", (factory) => {
  const ctx = useStoreHarness(factory);

  it("claims only the types asked for, oldest first, and leaves the others pending for whoever handles them", async () => {
    const { store, clock } = ctx();
    const invoice = await enqueueMessage(store, { type: "billing.invoice" });
    clock.advance(1);
    const ship1 = await enqueueMessage(store, { type: "order.ship" });
    clock.advance(1);
    const refund = await enqueueMessage(store, { type: "order.refund" });
    clock.advance(1);
    const ship2 = await enqueueMessage(store, { type: "order.ship" });
    const leases = await store.claim("shipping", { limit: 10, leaseMs: 30_000, types: ["order.ship", "order.refund"] });
    expect(leases.map((l) => l.messageId)).toEqual([ship1.id, refund.id, ship2.id]);
    expect(await store.getMessage(invoice.id)).toMatchObject({ status: "pending", attempts: 0 });
    expect((await store.claim("billing", { limit: 10, leaseMs: 30_000, types: ["billing.invoice"] })).map((l) => l.messageId)).toEqual([invoice.id]);
    expect(await store.claim("nobody", { limit: 10, leaseMs: 30_000, types: ["no.such.type"] })).toEqual([]);
  });

  it("refuses a types list that is empty, too long, or holds something that is not a message type", async () => {
    const { store } = ctx();
    for (const types of [[], "order.ship", [""], [7], Array.from({ length: 1001 }, (_, i) => `t${i}`)]) {
      await expect(store.claim("w", { limit: 1, leaseMs: 1_000, types: types as string[] }), JSON.stringify(types).slice(0, 40)).rejects.toBeInstanceOf(
        InvalidArgumentError,
      );
    }
    await expect(store.claim("w", { limit: 1, leaseMs: 1_000, types: [] })).rejects.toThrow("types must be a list of 1 to 1000 message types (got [])");
  });
});
