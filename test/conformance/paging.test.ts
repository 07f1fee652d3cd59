// Browsing messages page by page (store.pageMessages), on every store: filtered by status, type
// and ordering key, newest or oldest first, paged by a keyset cursor (a message id), so that the
// pages stay put while messages are added, and the previous page is the one before.

import { expect, it } from "vitest";
import type { OutboxStore } from "../../src/outbox/store.js";
import type { MessagePage } from "../../src/outbox/types.js";
import { claimNext, describeEachStore, enqueueMessage, useStoreHarness, whenKept } from "./stores.js";

const ids = (page: MessagePage) => page.messages.map((m) => m.id);

async function enqueueN(store: OutboxStore<unknown>, count: number, fields: { type?: string; key?: string } = {}): Promise<string[]> {
  const out: string[] = [];
  for (let n = 0; n < count; n += 1) out.push((await enqueueMessage(store, { payload: { n }, ...fields })).id);
  return out;
}

describeEachStore("pageMessages: a filtered list, paged by a keyset cursor", (factory) => {
  const ctx = useStoreHarness(factory);

  it("pages the newest first by default, then next and previous give the neighbouring pages", async () => {
    const { store } = ctx();
    const all = await enqueueN(store, 7);
    const newest = [...all].reverse();
    const first = await store.pageMessages({ limit: 3 });
    expect(ids(first)).toEqual(newest.slice(0, 3));
    expect(first.previous).toBeNull();
    expect(first.next).toBe(newest[2]);
    expect(first.messages[0]).not.toHaveProperty("payload");
    const second = await store.pageMessages({ limit: 3, after: first.next! });
    expect(ids(second)).toEqual(newest.slice(3, 6));
    expect(second.previous).toBe(newest[3]);
    const third = await store.pageMessages({ limit: 3, after: second.next! });
    expect(ids(third)).toEqual(newest.slice(6));
    expect(third.next).toBeNull();
    const back = await store.pageMessages({ limit: 3, before: third.previous! });
    expect(ids(back)).toEqual(newest.slice(3, 6));
    expect(back.next).toBe(newest[5]);
    const start = await store.pageMessages({ limit: 3, before: back.previous! });
    expect(ids(start)).toEqual(newest.slice(0, 3));
    expect(start.previous).toBeNull();
  });

  it("pages the oldest first when asked", async () => {
    const { store } = ctx();
    const all = await enqueueN(store, 5);
    const first = await store.pageMessages({ order: "oldest", limit: 2 });
    expect(ids(first)).toEqual(all.slice(0, 2));
    const second = await store.pageMessages({ order: "oldest", limit: 2, after: first.next! });
    expect(ids(second)).toEqual(all.slice(2, 4));
    expect(ids(await store.pageMessages({ order: "oldest", limit: 2, before: second.previous! }))).toEqual(all.slice(0, 2));
  });

  it("keeps its pages stable while messages are added", async () => {
    const { store } = ctx();
    const all = await enqueueN(store, 6);
    const first = await store.pageMessages({ limit: 2 });
    await enqueueN(store, 3);
    const second = await store.pageMessages({ limit: 2, after: first.next! });
    expect(ids(second)).toEqual([all[3], all[2]]);
    const third = await store.pageMessages({ limit: 2, after: second.next! });
    expect(ids(third)).toEqual([all[1], all[0]]);
    expect(third.next).toBeNull();
  });

  it("filters by status, type and ordering key, alone and together", async () => {
    const { store } = ctx();
    const orders = await enqueueN(store, 3, { type: "order.placed", key: "customer-1" });
    const refunds = await enqueueN(store, 2, { type: "refund.issued", key: "customer-2" });
    const plain = await enqueueN(store, 1, { type: "order.placed" });
    const lease = await claimNext(store, "w", 1_000);
    await store.complete(lease);
    const running = await claimNext(store, "w", 1_000);
    // In delete mode the completed message (the first order) has no row left to list.
    const listed = (messageIds: string[]) =>
      whenKept(
        factory,
        messageIds,
        messageIds.filter((id) => id !== lease.messageId),
      );
    const byType = await store.pageMessages({ type: "order.placed" });
    expect(ids(byType)).toEqual(listed([...plain, ...orders].sort((a, b) => Number(b) - Number(a))));
    expect(ids(await store.pageMessages({ key: "customer-2" }))).toEqual([...refunds].reverse());
    expect(ids(await store.pageMessages({ status: "processed" }))).toEqual(listed([lease.messageId]));
    expect(ids(await store.pageMessages({ status: "processing" }))).toEqual([running.messageId]);
    const pending = await store.pageMessages({ status: "pending", type: "order.placed", key: "customer-1", order: "oldest" });
    expect(pending.messages.every((m) => m.status === "pending" && m.type === "order.placed" && m.key === "customer-1")).toBe(true);
    expect(ids(await store.pageMessages({ status: "dead" }))).toEqual([]);
    expect(ids(await store.pageMessages({ type: "nothing.of.this" }))).toEqual([]);
  });

  it("refuses bad queries, naming what is valid", async () => {
    const { store } = ctx();
    await expect(store.pageMessages({ status: "gone" as never })).rejects.toThrow(/status must be one of pending, processing, processed, dead, cancelled/);
    await expect(store.pageMessages({ order: "sideways" as never })).rejects.toThrow(/order must be "newest" or "oldest"/);
    await expect(store.pageMessages({ limit: 0 })).rejects.toThrow(/limit must be a whole number from 1 to 1000/);
    await expect(store.pageMessages({ after: "abc" })).rejects.toThrow(/message id/);
    await expect(store.pageMessages({ after: "1", before: "2" })).rejects.toThrow(/not both/);
  });
});
