// FIFO per ordering key, under leases, on every store: a message with a key is claimable only when
// no earlier message of its key is unfinished (pending, waiting for a retry, processing even under
// an expired lease, or dead). So at most one message per key is in flight, and a retry, a reclaim
// or a dead message holds its key. Messages without a key are claimed exactly as before.

import { expect, it } from "vitest";
import { KeyNotBlockedError } from "../../src/outbox/errors.js";
import type { OutboxStore } from "../../src/outbox/store.js";
import type { Lease } from "../../src/outbox/types.js";
import { claimNext, describeEachStore, enqueueMessage, useStoreHarness } from "./stores.js";

const LEASE_MS = 1_000;

/** What a claim of up to 10 returns, as "payload.n" labels in claim order. */
async function claimAll(store: OutboxStore<unknown>, owner = "worker-a", leaseMs = LEASE_MS): Promise<Lease[]> {
  return store.claim(owner, { limit: 10, leaseMs });
}

const labels = (leases: readonly Lease[]) => leases.map((l) => (l.message.payload as { label: string }).label);

/** Claims and completes until nothing is claimable, expecting one message per claim (one key in play): the labels in order. */
async function drainOneKey(store: OutboxStore<unknown>): Promise<string[]> {
  const order: string[] = [];
  for (let leases = await claimAll(store); leases.length > 0; leases = await claimAll(store)) {
    expect(leases).toHaveLength(1);
    order.push(...labels(leases));
    await store.complete(leases[0]!);
  }
  return order;
}

async function enqueueKeyed(store: OutboxStore<unknown>, label: string, key?: string, availableAt?: Date) {
  return enqueueMessage(store, { payload: { label }, ...(key === undefined ? {} : { key }), ...(availableAt === undefined ? {} : { availableAt }) });
}

describeEachStore("ordered per key", (factory) => {
  const ctx = useStoreHarness(factory);

  it("claims only the first unfinished message of each key; messages without a key are claimed as before", async () => {
    const { store } = ctx();
    await enqueueKeyed(store, "a1", "a");
    const a2 = await enqueueKeyed(store, "a2", "a");
    await enqueueKeyed(store, "b1", "b");
    await enqueueKeyed(store, "u1");
    await enqueueKeyed(store, "a3", "a");
    expect(labels(await claimAll(store))).toEqual(["a1", "b1", "u1"]);
    expect(await claimAll(store, "worker-b")).toEqual([]);
    expect(await store.claimMessage("worker-b", a2.id, { leaseMs: LEASE_MS })).toEqual({ outcome: "not-claimable", messageId: a2.id, status: "waiting" });
  });

  it("hands the key on when its message completes, in enqueue order, one at a time", async () => {
    const { store } = ctx();
    for (const label of ["a1", "a2", "a3"]) await enqueueKeyed(store, label, "a");
    const seen: string[] = [];
    for (;;) {
      const leases = await claimAll(store);
      if (leases.length === 0) break;
      expect(leases).toHaveLength(1);
      seen.push(...labels(leases));
      expect((await store.complete(leases[0]!)).outcome).toBe("completed");
    }
    expect(seen).toEqual(["a1", "a2", "a3"]);
  });

  it("a retry holds its key until it succeeds: the next message of the key waits", async () => {
    const { store, clock } = ctx();
    await enqueueKeyed(store, "a1", "a");
    await enqueueKeyed(store, "a2", "a");
    const [a1] = await claimAll(store);
    expect((await store.fail(a1!, new Error("try later"), { retryInMs: 5_000 })).outcome).toBe("retry-scheduled");
    expect(await claimAll(store)).toEqual([]);
    clock.advance(5_000);
    const again = await claimAll(store);
    expect(labels(again)).toEqual(["a1"]);
    await store.complete(again[0]!);
    expect(labels(await claimAll(store))).toEqual(["a2"]);
  });

  it("a lease that expired still holds its key: the reclaim takes the same message, not the next", async () => {
    const { store, clock } = ctx();
    await enqueueKeyed(store, "a1", "a");
    await enqueueKeyed(store, "a2", "a");
    const [first] = await claimAll(store, "worker-a", 100);
    clock.advance(200);
    const reclaimed = await claimAll(store, "worker-b");
    expect(labels(reclaimed)).toEqual(["a1"]);
    expect(reclaimed[0]!.reclaimedFrom).toBe("worker-a");
    expect((await store.complete(first!)).outcome).toBe("lease-lost"); // the stale owner hands nothing on
    expect(await claimAll(store, "worker-c")).toEqual([]);
  });

  it("a release gives the message back with its key still held", async () => {
    const { store } = ctx();
    await enqueueKeyed(store, "a1", "a");
    await enqueueKeyed(store, "a2", "a");
    const [a1] = await claimAll(store);
    await store.release(a1!);
    expect(labels(await claimAll(store))).toEqual(["a1"]);
  });

  it("a dead message blocks its key: the next one waits, and so does one enqueued later", async () => {
    const { store } = ctx();
    await enqueueKeyed(store, "a1", "a");
    await enqueueKeyed(store, "a2", "a");
    await enqueueKeyed(store, "b1", "b");
    const leases = await claimAll(store);
    const a1 = leases.find((l) => labels([l])[0] === "a1")!;
    await store.fail(a1, new Error("poison"), "dead");
    await enqueueKeyed(store, "a3", "a");
    expect(labels(await claimAll(store))).toEqual([]);
    // Redriven, it holds the key again and goes first.
    await store.redrive({ messageIds: [a1.messageId] });
    expect(labels(await claimAll(store))).toEqual(["a1"]);
  });

  it("a key whose messages all finished is free: the next one enqueued is claimable at once", async () => {
    const { store } = ctx();
    await enqueueKeyed(store, "a1", "a");
    await store.complete(await claimNext(store, "worker-a", LEASE_MS));
    await enqueueKeyed(store, "a2", "a");
    expect(labels(await claimAll(store))).toEqual(["a2"]);
  });

  it("a delayed first message holds its key: a later one, due now, waits for it", async () => {
    const { store, clock } = ctx();
    await enqueueKeyed(store, "a1", "a", new Date(clock.now().getTime() + 10_000));
    await enqueueKeyed(store, "a2", "a");
    expect(await claimAll(store)).toEqual([]);
    clock.advance(10_000);
    expect(labels(await claimAll(store))).toEqual(["a1"]);
  });

  it("group commit with business writes that all succeed hands every key on", async () => {
    const { store, harness } = ctx();
    for (const label of ["a1", "b1", "a2", "b2"]) await enqueueKeyed(store, label, label[0]);
    const [a1, b1] = await claimAll(store);
    const results = await store.completeMany([
      { lease: a1!, finalize: (tx: unknown) => harness.businessWrite(tx, "a") },
      { lease: b1!, finalize: (tx: unknown) => harness.businessWrite(tx, "b") },
    ]);
    expect(results.map((r) => r.outcome)).toEqual(["completed", "completed"]);
    expect(labels(await claimAll(store)).sort()).toEqual(["a2", "b2"]);
  });

  it("group commit hands each completed key on, and a member whose business write fails hands nothing on", async () => {
    const { store, harness } = ctx();
    for (const label of ["a1", "b1", "c1", "a2", "b2", "c2"]) await enqueueKeyed(store, label, label[0]);
    const [a1, b1, c1] = await claimAll(store);
    expect(labels([a1!, b1!, c1!])).toEqual(["a1", "b1", "c1"]);
    const results = await store.completeMany([
      { lease: a1! },
      { lease: b1!, finalize: (tx: unknown) => harness.businessWrite(tx, "b") },
      {
        lease: c1!,
        finalize: async () => {
          throw new Error("constraint violated");
        },
      },
    ]);
    expect(results.map((r) => r.outcome)).toEqual(["completed", "completed", "failed"]);
    expect(labels(await claimAll(store)).sort()).toEqual(["a2", "b2"]);
    // c1 is still held (processing) by its owner: c2 waits.
    expect((await store.complete(c1!)).outcome).toBe("completed");
    expect(labels(await claimAll(store))).toEqual(["c2"]);
  });
});

describeEachStore("ordered per key, with enqueues racing completions on several connections", (factory) => {
  const ctx = useStoreHarness(factory);

  it("never hands out two messages of one key at once, completes them in enqueue order, and leaves none waiting", async () => {
    const { store, harness } = ctx();
    const others = [await harness.connect(), await harness.connect()];
    const PER_WRITER = 15;
    const writers = [store, ...others].map(async (writer, w) => {
      for (let n = 0; n < PER_WRITER; n += 1) {
        // Business writes after the enqueue keep the transaction open a while: the window in which
        // a completion must not miss the waiting message this transaction is about to commit.
        await writer.transaction(async (tx) => {
          await writer.enqueue(tx, { type: "test.message", key: "hot", payload: { label: `w${w}-${n}` } });
          await harness.businessWrite(tx, `w${w}-${n}`);
          await harness.businessWrite(tx, `w${w}-${n}`);
        });
      }
    });
    const completedIds: number[] = [];
    let writing = true;
    const worker = (async () => {
      for (let idle = 0; idle < 50; ) {
        const leases = await others[0]!.claim("worker", { limit: 10, leaseMs: 60_000 });
        expect(leases.length).toBeLessThanOrEqual(1);
        if (leases.length === 0) {
          if (!writing) idle += 1;
          await new Promise((resolve) => setImmediate(resolve));
          continue;
        }
        expect((await others[1]!.complete(leases[0]!)).outcome).toBe("completed");
        completedIds.push(Number(leases[0]!.messageId));
      }
    })();
    await Promise.all(writers);
    writing = false;
    await worker;
    expect(completedIds).toHaveLength(3 * PER_WRITER);
    expect(completedIds).toEqual([...completedIds].sort((a, b) => a - b));
    expect((await store.countByStatus()).pending).toBe(0);
  });
});

describeEachStore("ordered per key: retention", (factory) => {
  const ctx = useStoreHarness(factory);

  it("purgeDead keeps a dead message that blocks its key (deleting it would strand the messages behind it)", async () => {
    const { store, clock } = ctx();
    await enqueueKeyed(store, "a1", "a");
    await enqueueKeyed(store, "a2", "a");
    await enqueueKeyed(store, "u1");
    for (const lease of await claimAll(store)) await store.fail(lease, new Error("poison"), "dead");
    clock.advance(1);
    expect(await store.purgeDead(clock.now())).toBe(1); // u1 only
    expect((await store.listMessages({ status: ["dead"] })).map((m) => (m.payload as { label: string }).label)).toEqual(["a1"]);
  });
});

describeEachStore("ordered per key: blocked keys, skip and redrive", (factory) => {
  const ctx = useStoreHarness(factory);

  async function blockKeyA(store: OutboxStore<unknown>): Promise<Lease> {
    await enqueueKeyed(store, "a1", "a");
    await enqueueKeyed(store, "a2", "a");
    await enqueueKeyed(store, "a3", "a");
    const [a1] = await claimAll(store);
    await store.fail(a1!, new Error("poison"), "dead");
    return a1!;
  }

  it("lists a key its dead message blocks, with the message and how many wait behind it", async () => {
    const { store, clock } = ctx();
    const a1 = await blockKeyA(store);
    expect(await store.blockedKeys()).toEqual([
      { key: "a", messageId: a1.messageId, type: "test.message", lastError: "Error: poison", diedAt: clock.now(), waiting: 2 },
    ]);
  });

  it("skip: the dead message stays dead, the next one of the key goes, and the key is no longer blocked", async () => {
    const { store } = ctx();
    const a1 = await blockKeyA(store);
    expect(await store.unblockKey("a", "skip")).toEqual({ key: "a", messageId: a1.messageId, action: "skip" });
    expect((await store.getMessage(a1.messageId))?.status).toBe("dead");
    expect(await store.blockedKeys()).toEqual([]);
    expect(labels(await claimAll(store))).toEqual(["a2"]);
  });

  it("redrive: the dead message goes first again, then the rest in order", async () => {
    const { store } = ctx();
    const a1 = await blockKeyA(store);
    expect(await store.unblockKey("a", "redrive")).toEqual({ key: "a", messageId: a1.messageId, action: "redrive" });
    const order = await drainOneKey(store);
    expect(order).toEqual(["a1", "a2", "a3"]);
  });

  it("refuses to unblock a key that is not blocked (KeyNotBlockedError), changing nothing", async () => {
    const { store } = ctx();
    await enqueueKeyed(store, "b1", "b");
    for (const action of ["skip", "redrive"] as const) {
      await expect(store.unblockKey("b", action)).rejects.toBeInstanceOf(KeyNotBlockedError);
      await expect(store.unblockKey("nobody", action)).rejects.toThrow(/ordering key "nobody" is not blocked/);
    }
    expect(labels(await claimAll(store))).toEqual(["b1"]);
  });

  it('"dead-and-skip": a message of a type whose dead messages let their key move on', async () => {
    const { store } = ctx();
    await enqueueKeyed(store, "a1", "a");
    await enqueueKeyed(store, "a2", "a");
    const [a1] = await claimAll(store);
    expect((await store.fail(a1!, new Error("not worth keeping order for"), "dead-and-skip")).outcome).toBe("dead");
    expect(await store.blockedKeys()).toEqual([]);
    expect(labels(await claimAll(store))).toEqual(["a2"]);
  });

  it("a skipped message redriven later rejoins its key behind the holder, or holds it when the key is free", async () => {
    const { store } = ctx();
    const a1 = await blockKeyA(store);
    await store.unblockKey("a", "skip");
    expect((await store.redrive({ messageIds: [a1.messageId] })).moved).toBe(1);
    // a2 holds the key now: a1 waits behind it (and behind a3, by id order it goes before a3).
    const order = await drainOneKey(store);
    expect(order).toEqual(["a2", "a1", "a3"]);
    // Free key: skipped twice, redriven together, one holds the key and the other waits.
    await enqueueKeyed(store, "c1", "c");
    await enqueueKeyed(store, "c2", "c");
    for (let n = 0; n < 2; n += 1) {
      const [lease] = await claimAll(store);
      await store.fail(lease!, new Error("x"), "dead-and-skip");
    }
    expect((await store.redrive("all")).moved).toBe(2);
    const again = await drainOneKey(store);
    expect(again).toEqual(["c1", "c2"]);
  });
});

describeEachStore("ordered per key: a completion and an enqueue of the same key at the same moment", (factory) => {
  const ctx = useStoreHarness(factory);

  it("the message enqueued while its key's holder completes is handed the key, not stranded waiting", async () => {
    const { store, harness } = ctx();
    const completer = await harness.connect();
    await enqueueKeyed(store, "h", "k");
    const [holder] = await claimAll(store);
    // An application transaction enqueues to the key while the holder is still processing, and
    // stays open until told to commit.
    let commit: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => {
      commit = resolve;
    });
    let enqueued: () => void = () => undefined;
    const inserted = new Promise<void>((resolve) => {
      enqueued = resolve;
    });
    const writer = store.transaction(async (tx) => {
      await store.enqueue(tx, { type: "test.message", key: "k", payload: { label: "w" } });
      enqueued();
      await gate;
    });
    await inserted;
    // Now the holder completes on another connection. It must not hand the key on without seeing
    // the waiting message: it either waits for that transaction, or sees it.
    const completing = completer.complete(holder!);
    await Promise.race([completing, new Promise((resolve) => setTimeout(resolve, 300))]);
    commit();
    await writer;
    expect((await completing).outcome).toBe("completed");
    expect(labels(await claimAll(completer))).toEqual(["w"]);
  });
});

describeEachStore("ordered per key: a skip and a redrive of the same dead message at the same moment", (factory) => {
  const ctx = useStoreHarness(factory);

  it("whichever goes first, the key ends with one holder: no two of its messages are ever claimable at once, and none is stranded", async () => {
    const { store, harness } = ctx();
    const skipper = await harness.connect();
    const rediver = await harness.connect();
    // Each order is forced (one side returns before the other starts), so both outcomes happen by
    // construction; the third form starts both at once and may land either way.
    const MODES = ["skip first", "redrive first", "together"] as const;
    const ROUNDS = 24;
    const outcomes = new Map<string, number>();
    for (let round = 0; round < ROUNDS; round += 1) {
      const key = `race-${round}`;
      const mode = MODES[round % MODES.length]!;
      // A dead holder with one (or, every other round, no) message waiting behind it.
      const dead = await enqueueKeyed(store, `${key}-1`, key);
      if (round % 2 === 0) await enqueueKeyed(store, `${key}-2`, key);
      const [lease] = await claimAll(store);
      expect(lease?.messageId).toBe(dead.id);
      await store.fail(lease!, new Error("poison"), "dead");

      const skipNow = () => skipper.unblockKey(key, "skip");
      const redriveNow = () => rediver.redrive({ messageIds: [dead.id] });
      let skip: PromiseSettledResult<unknown>;
      let redrive: PromiseSettledResult<unknown>;
      if (mode === "skip first") {
        [skip] = await Promise.allSettled([skipNow()]);
        [redrive] = await Promise.allSettled([redriveNow()]);
      } else if (mode === "redrive first") {
        [redrive] = await Promise.allSettled([redriveNow()]);
        [skip] = await Promise.allSettled([skipNow()]);
      } else {
        [skip, redrive] = await Promise.allSettled([skipNow(), redriveNow()]);
      }
      // The redrive always finds the message dead (skipped or not); the skip finds it only if it came first.
      expect(redrive).toMatchObject({ status: "fulfilled", value: { moved: 1, notMoved: [] } });
      if (skip.status === "rejected") expect(skip.reason).toBeInstanceOf(KeyNotBlockedError);
      const outcome = skip.status === "fulfilled" ? "skip first" : "redrive first";
      if (mode !== "together") expect(outcome, `round ${round}: forced ${mode}`).toBe(mode);
      outcomes.set(`${mode}: ${outcome}`, (outcomes.get(`${mode}: ${outcome}`) ?? 0) + 1);

      // One at a time, and everything of the key is processed: the redriven message either kept
      // its turn (redrive first) or rejoined behind the message that was handed the key.
      const order = await drainOneKey(store);
      expect([...order].sort()).toEqual(round % 2 === 0 ? [`${key}-1`, `${key}-2`] : [`${key}-1`]);
      if (skip.status === "rejected") expect(order[0]).toBe(`${key}-1`);
      expect(await store.blockedKeys()).toEqual([]);
    }
    expect((await store.countByStatus()).pending).toBe(0);
    // Both outcomes happened, each with and without a message waiting behind the dead one.
    expect(outcomes.get("skip first: skip first"), "forced skip-first rounds").toBe(ROUNDS / MODES.length);
    expect(outcomes.get("redrive first: redrive first"), "forced redrive-first rounds").toBe(ROUNDS / MODES.length);
    console.info(`[ordering] ${factory.name}: skip vs redrive, ${ROUNDS} rounds: ${[...outcomes].map(([k, v]) => `${k} ${v}`).join("; ")}`);
  });
});
