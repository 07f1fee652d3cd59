// Reading the outbox: counts per status, filtered lists, single messages and the schema.

import { expect, it } from "vitest";
import type { OutboxStore } from "../../src/outbox/store.js";
import type { OutboxMessage } from "../../src/outbox/types.js";
import { claimNext, describeEachStore, enqueueMessage, enqueueMessages, expectFinished, mustGet, useStoreHarness, whenKept } from "./stores.js";

const LEASE_MS = 30_000;

/**
 * One message in each status; returned in enqueue order. In delete mode the "processed" one is
 * completed too, but its completion deleted its row.
 */
async function oneOfEach(store: OutboxStore<unknown>): Promise<Record<"pending" | "processing" | "processed" | "dead", OutboxMessage>> {
  const processed = await enqueueMessage(store, { dedupeKey: "processed" });
  const dead = await enqueueMessage(store, { dedupeKey: "dead" });
  const processing = await enqueueMessage(store, { dedupeKey: "processing" });
  const pending = await enqueueMessage(store, { dedupeKey: "pending" });
  await store.complete(await claimNext(store, "worker-a", LEASE_MS));
  await store.fail(await claimNext(store, "worker-a", LEASE_MS), new Error("poison"), "dead");
  await claimNext(store, "worker-a", LEASE_MS);
  return { processed, dead, processing, pending };
}

describeEachStore("inspection", (factory) => {
  const ctx = useStoreHarness(factory);
  /** The dedupe keys of oneOfEach's messages a listing shows: without "processed" in delete mode, where its row is gone. */
  const shown = (dedupeKeys: string[]) =>
    whenKept(
      factory,
      dedupeKeys,
      dedupeKeys.filter((key) => key !== "processed"),
    );

  it("counts zero for every status in an empty outbox", async () => {
    const { store } = ctx();
    expect(await store.countByStatus()).toEqual({ pending: 0, processing: 0, processed: 0, dead: 0, cancelled: 0 });
  });

  it("counts messages per status", async () => {
    const { store } = ctx();
    await oneOfEach(store);
    await enqueueMessage(store);
    expect(await store.countByStatus()).toEqual({ pending: 2, processing: 1, processed: whenKept(factory, 1, 0), dead: 1, cancelled: 0 });
  });

  it("counts pending messages per type, the most numerous first, then by type, up to a limit", async () => {
    const { store } = ctx();
    expect(await store.pendingByType()).toEqual([]);
    await oneOfEach(store); // one pending message of the default type; the others are not pending
    for (const type of ["order.placed", "order.placed", "order.placed", "b.two", "b.two", "a.two", "a.two"]) await enqueueMessage(store, { type });
    const defaultType = (await store.listMessages({ status: ["pending"] }))[0]!.type;
    expect(await store.pendingByType()).toEqual([
      { type: "order.placed", count: 3 },
      { type: "a.two", count: 2 },
      { type: "b.two", count: 2 },
      { type: defaultType, count: 1 },
    ]);
    expect(await store.pendingByType({ limit: 2 })).toEqual([
      { type: "order.placed", count: 3 },
      { type: "a.two", count: 2 },
    ]);
    for (const limit of [0, 1001, 1.5]) await expect(store.pendingByType({ limit })).rejects.toThrow(/limit must be a whole number from 1 to 1000/);
  });

  it("lists every message in enqueue order when no filter is given", async () => {
    const { store } = ctx();
    const all = await oneOfEach(store);
    const listed = await store.listMessages();
    expect(listed.map((m) => m.dedupeKey)).toEqual(shown(["processed", "dead", "processing", "pending"]));
    expect(listed.map((m) => m.status)).toEqual(shown(["processed", "dead", "processing", "pending"]));
    expect(listed.at(-1)).toEqual(all.pending);
  });

  it("lists only the statuses asked for", async () => {
    const { store } = ctx();
    await oneOfEach(store);
    expect((await store.listMessages({ status: ["pending", "dead"] })).map((m) => m.dedupeKey)).toEqual(["dead", "pending"]);
    expect((await store.listMessages({ status: ["processing"] })).map((m) => m.dedupeKey)).toEqual(["processing"]);
    expect(await store.listMessages({ status: [] })).toEqual([]);
  });

  it("lists no more messages than the limit", async () => {
    const { store } = ctx();
    await oneOfEach(store);
    expect((await store.listMessages({ limit: 2 })).map((m) => m.dedupeKey)).toEqual(shown(["processed", "dead", "processing"]).slice(0, 2));
    expect((await store.listMessages({ status: ["processing", "pending", "dead"], limit: 1 })).map((m) => m.dedupeKey)).toEqual(["dead"]);
  });

  it("finds a message by id, and returns undefined for an id that does not exist", async () => {
    const { store } = ctx();
    const message = await enqueueMessage(store);
    expect(await store.getMessage(message.id)).toEqual(message);
    expect(await store.getMessage("999999")).toBeUndefined();
  });

  it("finds messages by id, dedupe key or ordering key, processed ones too, by id and within the limit", async () => {
    const { store } = ctx();
    const first = await enqueueMessage(store, { key: "order-7" });
    const second = await enqueueMessage(store, { key: "order-7", dedupeKey: "pay-42" });
    const other = await enqueueMessage(store, { key: "order-8", dedupeKey: "order-7" });
    await store.complete(await claimNext(store, "worker-a", LEASE_MS)); // the first: processed (or deleted), its key handed on
    const ids = async (text: string, limit?: number) => (await store.findMessages(text, limit === undefined ? {} : { limit })).map((m) => m.id);
    // A dedupe key equal to another message's ordering key: both are found, in id order.
    // In delete mode the first message's row is gone, so it is found neither by key nor by id.
    const found = whenKept(factory, [first.id, second.id, other.id], [second.id, other.id]);
    expect(await ids("order-7")).toEqual(found);
    expect(await ids("order-7", 2)).toEqual(found.slice(0, 2));
    expect(await ids("order-7", 1)).toEqual(found.slice(0, 1));
    expect(await ids("pay-42")).toEqual([second.id]);
    expect(await ids(other.id)).toEqual([other.id]);
    if (factory.onComplete === "keep") expect((await store.findMessages(first.id))[0]).toMatchObject({ id: first.id, status: "processed", key: "order-7" });
    else expect(await ids(first.id)).toEqual([]);
    expect(await ids("nothing-here")).toEqual([]);
    expect(await ids("99999999999999999999")).toEqual([]); // digits, but no id: looked up as a key only
    await expect(store.findMessages("")).rejects.toThrow(/text to find .*1|non-empty/);
    await expect(store.findMessages("x".repeat(256))).rejects.toThrow(/at most 255/);
  });

  it("describes its schema with DDL that creates outbox_messages and its lease columns", async () => {
    const { store } = ctx();
    const schema = await store.describeSchema();
    expect(schema).toMatch(/CREATE TABLE[^;]*outbox_messages/i);
    for (const column of ["dedupe_key", "available_at", "locked_by", "locked_until", "lease_token", "attempts", "last_error", "processed_at"]) {
      expect(schema).toContain(column);
    }
  });

  it("can migrate again on every start without touching existing messages", async () => {
    const { store } = ctx();
    const message = await enqueueMessage(store);
    await store.migrate();
    await store.migrate();
    expect(await store.listMessages()).toEqual([message]);
  });
});

describeEachStore("retention", (factory) => {
  const ctx = useStoreHarness(factory);

  it("purges dead messages by when they died and audit rows by when they were written, in batches; the rest stays", async () => {
    const { store, clock } = ctx();
    const [early, late] = await enqueueMessages(store, clock, 3);
    const [a, b, c] = await store.claim("worker-a", { limit: 3, leaseMs: 60_000 });
    await store.fail(a!, new Error("early death"), "dead");
    clock.advance(10_000);
    const cutoff = clock.now();
    clock.advance(1);
    await store.fail(b!, new Error("late death"), "dead");
    await store.complete(c!);
    const auditBefore = (await store.auditTrail()).filter((e) => e.at < cutoff).length;
    expect(auditBefore).toBeGreaterThan(0);

    const progress: number[] = [];
    expect(await store.purgeDead(cutoff, { batchSize: 1, onProgress: (n) => progress.push(n) })).toBe(1);
    expect(progress).toEqual([1, 1]);
    expect(await store.getMessage(early!.id)).toBeUndefined();
    expect((await store.getMessage(late!.id))?.status).toBe("dead");
    // purgeDead leaves processed rows alone (in delete mode the completion left none).
    expect((await store.countByStatus()).processed).toBe(whenKept(factory, 1, 0));
    await expectFinished(store, factory, c!.messageId);

    expect(await store.purgeAudit(cutoff, { batchSize: 2 })).toBe(auditBefore);
    const audit = await store.auditTrail();
    expect(audit.length).toBeGreaterThan(0);
    expect(audit.every((e) => e.at >= cutoff)).toBe(true);
  });

  // About purging processed rows in batches: in delete mode there are none to purge.
  it.runIf(factory.onComplete === "keep")("a purge stops after the batch in progress once its signal aborts, and an aborted one deletes nothing", async () => {
    const { store, clock } = ctx();
    await enqueueMessages(store, clock, 5);
    await store.completeMany((await store.claim("worker-a", { limit: 5, leaseMs: 60_000 })).map((lease) => ({ lease })));
    clock.advance(1);
    const stop = new AbortController();
    const progress: number[] = [];
    const deleted = await store.purgeProcessed(clock.now(), {
      batchSize: 2,
      signal: stop.signal,
      onProgress: (n) => {
        progress.push(n);
        stop.abort(); // during the first batch's report: no second batch starts
      },
    });
    expect(deleted).toBe(2);
    expect(progress).toEqual([2]);
    expect((await store.countByStatus()).processed).toBe(3);
    expect(await store.purgeProcessed(clock.now(), { signal: AbortSignal.abort() })).toBe(0);
    expect((await store.countByStatus()).processed).toBe(3);
    expect(await store.purgeProcessed(clock.now(), { batchSize: 2 })).toBe(3);
  });

  it("frees a purged message's dedupe key: a new message may take it", async () => {
    const { store, clock } = ctx();
    await enqueueMessage(store, { dedupeKey: "order-1" });
    await store.complete(await claimNext(store, "worker-a", 60_000));
    clock.advance(1);
    // In delete mode the completion already freed the key, and left no row to purge.
    expect(await store.purgeProcessed(clock.now())).toBe(whenKept(factory, 1, 0));
    const again = await enqueueMessage(store, { dedupeKey: "order-1" });
    expect((await mustGet(store, again.id)).dedupeKey).toBe("order-1");
  });
});
