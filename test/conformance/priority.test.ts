// Priorities: whole seconds of head start in the claim order. Due messages are claimed by their
// due time less their priority, then by id; a priority never passes an earlier message of its
// ordering key, never makes a message claimable before it is due, and gives a held lease no head
// start (an expired lease ranks at its end).

import { expect, it } from "vitest";
import { InvalidArgumentError } from "../../src/outbox/errors.js";
import type { Lease } from "../../src/outbox/types.js";
import { at, describeEachStore, enqueueMessage, mustGet, useStoreHarness } from "./stores.js";

const LEASE_MS = 30_000;
const ids = (leases: readonly Lease[]) => leases.map((lease) => lease.messageId);

describeEachStore("priorities", (factory) => {
  const ctx = useStoreHarness(factory);

  it("claims by due time less priority: a head start over later messages, none over earlier ones", async () => {
    const { store, clock } = ctx();
    const a = await enqueueMessage(store); // due at 0: rank 0
    clock.set(at(10_000));
    const b = await enqueueMessage(store); // due at 10 s: rank 10 s
    clock.set(at(12_000));
    const c = await enqueueMessage(store, { priority: 5 }); // due at 12 s: rank 7 s
    const d = await enqueueMessage(store, { priority: 86_400 }); // rank 12 s less a day

    const leases = await store.claim("w", { limit: 10, leaseMs: LEASE_MS });
    expect(ids(leases)).toEqual([d.id, a.id, c.id, b.id]);
    expect(leases.map((lease) => lease.message.priority)).toEqual([86_400, 0, 5, 0]);
  });

  it("keeps the claim order across claims of one message at a time", async () => {
    const { store, clock } = ctx();
    const plain = await enqueueMessage(store);
    clock.advance(1_000);
    const urgent = await enqueueMessage(store, { priority: 60 });
    const first = await store.claim("w", { limit: 1, leaseMs: LEASE_MS });
    const second = await store.claim("w", { limit: 1, leaseMs: LEASE_MS });
    expect([...ids(first), ...ids(second)]).toEqual([urgent.id, plain.id]);
  });

  it("orders the same way in a claim of named types, and in a claim of more than 100 (PostgreSQL's other form of the claim)", async () => {
    const { store, clock } = ctx();
    const plain = await store.transaction(async (tx) => {
      const out: string[] = [];
      for (let n = 0; n < 120; n += 1) out.push((await store.enqueue(tx, { type: "test.message", payload: n })).id);
      return out;
    });
    clock.advance(1_000);
    const urgent = await enqueueMessage(store, { priority: 2 });
    const other = await enqueueMessage(store, { type: "other.type", priority: 600 });
    const few = await store.claim("w", { limit: 3, leaseMs: LEASE_MS, types: ["test.message"] });
    expect(ids(few)).toEqual([urgent.id, plain[0], plain[1]]);
    const many = await store.claim("w", { limit: 200, leaseMs: LEASE_MS, types: ["test.message", "other.type"] });
    expect(ids(many)).toEqual([other.id, ...plain.slice(2)]);
  });

  it("ties in rank go by id, as messages due at the same instant do", async () => {
    const { store, clock } = ctx();
    clock.set(at(5_000));
    const x = await enqueueMessage(store, { priority: 5 }); // rank 0
    const y = await enqueueMessage(store, { availableAt: at(0) }); // rank 0, a later id
    const leases = await store.claim("w", { limit: 2, leaseMs: LEASE_MS });
    expect(ids(leases)).toEqual([x.id, y.id]);
  });

  it("never claims a prioritised message before it is due", async () => {
    const { store, clock } = ctx();
    const later = await enqueueMessage(store, { availableAt: at(10_000), priority: 3_600 });
    expect(await store.claim("w", { limit: 10, leaseMs: LEASE_MS })).toEqual([]);
    clock.set(at(9_999));
    expect(await store.claim("w", { limit: 10, leaseMs: LEASE_MS })).toEqual([]);
    clock.set(at(10_000));
    expect(ids(await store.claim("w", { limit: 10, leaseMs: LEASE_MS }))).toEqual([later.id]);
  });

  it("never passes an earlier message of its ordering key", async () => {
    const { store, clock } = ctx();
    const first = await enqueueMessage(store, { key: "order-1" });
    clock.advance(1_000);
    const second = await enqueueMessage(store, { key: "order-1", priority: 3_600 });
    clock.advance(1_000);
    const other = await enqueueMessage(store);

    const leases = await store.claim("w", { limit: 10, leaseMs: LEASE_MS });
    expect(ids(leases)).toEqual([first.id, other.id]);
    await store.completeMany(leases.map((lease) => ({ lease })));
    const next = await store.claim("w", { limit: 10, leaseMs: LEASE_MS });
    expect(ids(next)).toEqual([second.id]);
    expect(next[0]?.message.keySeq).toBe(2);
  });

  it("gives a held lease no head start: an expired one ranks at its lease's end", async () => {
    const { store, clock } = ctx();
    const urgent = await enqueueMessage(store, { priority: 3_600 });
    const [held] = await store.claim("crashed", { limit: 1, leaseMs: LEASE_MS });
    expect(held?.messageId).toBe(urgent.id);
    clock.set(at(20_000));
    const plain = await enqueueMessage(store); // rank 20 s, before the lease's end (30 s), after its end less the priority
    clock.set(at(40_000));
    const leases = await store.claim("w", { limit: 10, leaseMs: LEASE_MS });
    expect(ids(leases)).toEqual([plain.id, urgent.id]);
    expect(leases[1]?.reclaimedFrom).toBe("crashed");
  });

  it("keeps the head start on a retry: due after the retry delay, ranked by it less the priority", async () => {
    const { store, clock } = ctx();
    const urgent = await enqueueMessage(store, { priority: 30 });
    const [lease] = await store.claim("w", { limit: 1, leaseMs: LEASE_MS });
    await store.fail(lease!, new Error("try again"), { retryInMs: 10_000 }); // due at 10 s: rank -20 s
    const plain = await enqueueMessage(store); // rank 0
    clock.set(at(9_999));
    expect(ids(await store.claim("w", { limit: 1, leaseMs: LEASE_MS }))).toEqual([plain.id]);
    const other = await enqueueMessage(store); // rank 9.999 s
    clock.set(at(10_000));
    expect(ids(await store.claim("w", { limit: 10, leaseMs: LEASE_MS }))).toEqual([urgent.id, other.id]);
  });

  it("stores the priority: read back from enqueue, enqueueMany and the message, 0 by default", async () => {
    const { store } = ctx();
    const one = await enqueueMessage(store, { priority: 7 });
    const many = await store.transaction((tx) =>
      store.enqueueMany(tx, [
        { type: "test.message", payload: 1, priority: 120 },
        { type: "test.message", payload: 2 },
      ]),
    );
    expect([one.priority, ...many.map((m) => m.priority)]).toEqual([7, 120, 0]);
    expect((await mustGet(store, one.id)).priority).toBe(7);
    expect((await mustGet(store, many[0]!.id)).priority).toBe(120);
    expect((await store.getMessageState(many[1]!.id))?.priority).toBe(0);
    const leases = await store.claim("w", { limit: 10, leaseMs: LEASE_MS });
    expect(ids(leases)).toEqual([many[0]!.id, one.id, many[1]!.id]);
  });

  it("refuses a priority that is not a whole number of seconds from 0 to 86,400, naming it", async () => {
    const { store } = ctx();
    for (const priority of [-1, 1.5, 86_401, Number.NaN, "5", 2 ** 53]) {
      const attempt = store.transaction((tx) => store.enqueue(tx, { type: "test.message", payload: 1, priority: priority as number }));
      await expect(attempt, String(priority)).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(attempt, String(priority)).rejects.toThrow(/priority of a test\.message message must be a whole number of seconds from 0 .* to 86400/);
    }
    const list = store.transaction((tx) =>
      store.enqueueMany(tx, [
        { type: "test.message", payload: 1 },
        { type: "test.message", payload: 2, priority: -5 },
      ]),
    );
    await expect(list).rejects.toThrow(/^messages\[1\]: priority of a test\.message message/);
    expect((await store.countByStatus()).pending).toBe(0);
  });
});
