// Singletons and debounce: at most one message per type and singleton key that no worker has
// claimed yet. An enqueue while one waits joins it (the same message back, nothing new written);
// with debounceMs it replaces the waiting one's payload, headers, destination and priority and
// moves its due time to debounceMs after the enqueue.

import { expect, it } from "vitest";
import { InvalidArgumentError } from "../../src/outbox/errors.js";
import type { NewMessage, OutboxMessage } from "../../src/outbox/types.js";
import { at, describeEachStore, enqueueMessage, mustGet, useStoreHarness } from "./stores.js";

const LEASE_MS = 30_000;

describeEachStore("singletons and debounce", (factory) => {
  const ctx = useStoreHarness(factory);
  const sync = (n: number, more: Partial<NewMessage> = {}) => ({ type: "user.sync", payload: { n }, singletonKey: "user-42", ...more });

  it("joins the waiting message of its type and singleton key: the same message back, unchanged, nothing new written", async () => {
    const { store, clock } = ctx();
    const first = await enqueueMessage(store, sync(1, { headers: { a: "1" } }));
    clock.advance(1_000);
    const second = await enqueueMessage(store, sync(2, { headers: { a: "2" }, priority: 9 }));
    expect(second).toEqual(first);
    expect(first).toMatchObject({ singletonKey: "user-42", payload: { n: 1 }, priority: 0, status: "pending" });
    // Another type, or another key, is another singleton.
    const otherType = await enqueueMessage(store, { type: "user.mail", payload: 3, singletonKey: "user-42" });
    const otherKey = await enqueueMessage(store, sync(4, { singletonKey: "user-43" }));
    expect(new Set([first.id, otherType.id, otherKey.id]).size).toBe(3);
    expect((await store.countByStatus()).pending).toBe(3);
  });

  it("makes a new message once the waiting one is claimed, and keeps one waiting however the claimed one ends", async () => {
    const { store } = ctx();
    const first = await enqueueMessage(store, sync(1));
    const [lease] = await store.claim("w", { limit: 1, leaseMs: LEASE_MS });
    expect(lease?.messageId).toBe(first.id);
    const second = await enqueueMessage(store, sync(2));
    expect(second.id).not.toBe(first.id);
    expect((await enqueueMessage(store, sync(3))).id).toBe(second.id);
    // The claimed one back to pending (a retry) waits beside the unclaimed one: it has been claimed.
    expect((await store.fail(lease!, new Error("again"), { retryInMs: 0 })).outcome).toBe("retry-scheduled");
    expect((await enqueueMessage(store, sync(4))).id).toBe(second.id);
    expect((await store.countByStatus()).pending).toBe(2);
  });

  it("debounces: the waiting message takes the last enqueue's payload, headers, destination and priority, due debounceMs after it", async () => {
    const { store, clock } = ctx();
    const first = await enqueueMessage(store, sync(1, { debounceMs: 5_000 }));
    expect(first.availableAt).toEqual(at(5_000));
    clock.set(at(2_000));
    const last = await enqueueMessage(store, sync(2, { debounceMs: 5_000, headers: { v: "2" }, destination: "users", priority: 7 }));
    expect(last).toMatchObject({ id: first.id, payload: { n: 2 }, headers: { v: "2" }, destination: "users", priority: 7, availableAt: at(7_000) });
    expect(await mustGet(store, first.id)).toMatchObject({ payload: { n: 2 }, availableAt: at(7_000), createdAt: first.createdAt });
    clock.set(at(6_999));
    expect(await store.claim("w", { limit: 10, leaseMs: LEASE_MS })).toEqual([]);
    clock.set(at(7_000));
    const leases = await store.claim("w", { limit: 10, leaseMs: LEASE_MS });
    expect(leases.map((l) => [l.messageId, l.message.payload, l.message.singletonKey])).toEqual([[first.id, { n: 2 }, "user-42"]]);
  });

  // SQLite has one writer: a claim waits for any open transaction, so there is nothing to show there.
  it.skipIf(factory.name === "sqlite")("leaves the waiting message claimable while a joining transaction without a debounce is open", async () => {
    const { store } = ctx();
    const first = await enqueueMessage(store, sync(1));
    await store.transaction(async (tx) => {
      expect((await store.enqueue(tx, sync(2))).id).toBe(first.id);
      const leases = await store.claim("w", { limit: 1, leaseMs: LEASE_MS });
      expect(leases.map((lease) => lease.messageId)).toEqual([first.id]);
    });
  });

  it("leaves the waiting message as it was when the joining transaction rolls back", async () => {
    const { store, clock } = ctx();
    const first = await enqueueMessage(store, sync(1, { debounceMs: 1_000 }));
    clock.advance(500);
    await expect(
      store.transaction(async (tx) => {
        await store.enqueue(tx, sync(2, { debounceMs: 1_000 }));
        throw new Error("business write failed");
      }),
    ).rejects.toThrow("business write failed");
    expect(await mustGet(store, first.id)).toMatchObject({ payload: { n: 1 }, availableAt: first.availableAt });
  });

  it("joins only with the same ordering key, and refuses another key naming both, writing nothing", async () => {
    const { store } = ctx();
    const first = await enqueueMessage(store, sync(1, { key: "account-1", debounceMs: 1_000 }));
    expect((await enqueueMessage(store, sync(2, { key: "account-1", debounceMs: 1_000 }))).id).toBe(first.id);
    const refused = enqueueMessage(store, sync(3, { key: "account-2", debounceMs: 1_000 }));
    await expect(refused).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(refused).rejects.toThrow(/singletonKey "user-42" waits unclaimed with another ordering key than "account-2"/);
    await expect(enqueueMessage(store, sync(4, { debounceMs: 1_000 }))).rejects.toThrow(/another ordering key than null/);
    expect(await mustGet(store, first.id)).toMatchObject({ payload: { n: 2 }, key: "account-1" });
    expect((await store.countByStatus()).pending).toBe(1);
  });

  it("keeps one waiting message when many transactions enqueue the same singleton at once", async () => {
    const { store } = ctx();
    const joined: OutboxMessage[] = await Promise.all(Array.from({ length: 8 }, (_, n) => enqueueMessage(store, sync(n))));
    expect(new Set(joined.map((m) => m.id)).size).toBe(1);
    expect((await store.countByStatus()).pending).toBe(1);
  });

  it("refuses a singleton with a dedupe key, debounce without a singleton or with availableAt, bad values, and singletons in enqueueMany", async () => {
    const { store } = ctx();
    const refused = async (message: Partial<NewMessage>, pattern: RegExp) => {
      const attempt = enqueueMessage(store, { type: "user.sync", payload: 1, ...message });
      await expect(attempt).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(attempt).rejects.toThrow(pattern);
    };
    await refused({ singletonKey: "s", dedupeKey: "d" }, /takes a dedupeKey or a singletonKey, not both/);
    await refused({ debounceMs: 10 }, /debounceMs of a user\.sync message needs a singletonKey/);
    await refused({ singletonKey: "s", debounceMs: 10, availableAt: at(1) }, /takes debounceMs or availableAt, not both/);
    await refused({ singletonKey: "s", debounceMs: -1 }, /debounceMs of a user\.sync message must be a whole number of milliseconds from 0 to 86400000/);
    await refused({ singletonKey: "s", debounceMs: 1.5 }, /debounceMs .* must be a whole number/);
    await refused({ singletonKey: "" }, /singletonKey/);
    await refused({ singletonKey: "x".repeat(256) }, /singletonKey/);
    const list = store.transaction((tx) => store.enqueueMany(tx, [{ type: "a", payload: 1 }, sync(2)]));
    await expect(list).rejects.toThrow(/^messages\[1\]: enqueueMany takes no singletonKey/);
    expect((await store.countByStatus()).pending).toBe(0);
  });
});
