// enqueueMany: several messages in one statement, inside the caller's transaction. Each message
// behaves as enqueue would, in list order (ids, results, each key's turn); all of the list or none
// of it is written.

import pg from "pg";
import { expect, it } from "vitest";
import { DuplicateMessageError, InvalidArgumentError, NotInTransactionError, UnsupportedPayloadError } from "../../src/outbox/errors.js";
import type { OutboxStore } from "../../src/outbox/store.js";
import type { JsonValue, Lease, NewMessage } from "../../src/outbox/types.js";
import { MAX_ENQUEUE_MANY } from "../../src/outbox/validate.js";
import { PostgresOutboxStore } from "../../src/stores/postgres/postgres-outbox-store.js";
import { wakeChannel } from "../../src/stores/postgres/outbox-sql.js";
import { TEST_DATABASE_URL } from "../support/postgres.js";
import { until } from "../support/wait.js";
import { at, claimNext, describeEachStore, enqueueMessage, mustGet, useStoreHarness } from "./stores.js";

const LEASE_MS = 1_000;

const numbered = (count: number, change: (n: number) => Partial<NewMessage> = () => ({})): NewMessage[] =>
  Array.from({ length: count }, (_, n) => ({ type: "test.many", payload: { n }, ...change(n) }));

const labels = (leases: readonly Lease[]) => leases.map((l) => (l.message.payload as { label: string }).label);

/** Claims and completes one message at a time until nothing is claimable: the labels in claim order. */
async function drain(store: OutboxStore<unknown>): Promise<string[]> {
  const order: string[] = [];
  for (let leases = await store.claim("worker-a", { limit: 10, leaseMs: LEASE_MS }); leases.length > 0; ) {
    order.push(...labels(leases));
    for (const lease of leases) expect((await store.complete(lease)).outcome).toBe("completed");
    leases = await store.claim("worker-a", { limit: 10, leaseMs: LEASE_MS });
  }
  return order;
}

describeEachStore("enqueueMany", (factory) => {
  const ctx = useStoreHarness(factory);

  it("commits every message with the business write, each as enqueue stores it, in list order", async () => {
    const { store, harness, clock } = ctx();
    const list: NewMessage[] = [
      { type: "order.placed", payload: { orderId: "o-1" }, dedupeKey: "placed-o-1", key: "o-1", headers: { "x-correlation-id": "c-1" }, destination: "orders" },
      { type: "order.paid", payload: [1, "two", null, true, { deep: 1.5 }] },
      { type: "order.later", payload: "text مرحبا ✓", availableAt: at(60_000), headers: {} },
      { type: "order.null", payload: null, destination: "elsewhere" },
    ];
    const stored = await store.transaction(async (tx) => {
      await harness.businessWrite(tx, "order-1");
      return store.enqueueMany(tx, list);
    });

    expect(stored).toHaveLength(4);
    for (const [n, message] of stored.entries()) {
      const given = list[n] as NewMessage;
      expect(message).toMatchObject({
        type: given.type,
        payload: given.payload,
        dedupeKey: given.dedupeKey ?? null,
        key: given.key ?? null,
        headers: given.headers ?? {},
        destination: given.destination ?? null,
        status: "pending",
        lockedBy: null,
        lockedUntil: null,
        leaseToken: 0,
        attempts: 0,
        lastError: null,
        processedAt: null,
      });
      expect(message.createdAt).toEqual(clock.now());
      expect(message.availableAt).toEqual(given.availableAt ?? clock.now());
      expect(await store.getMessage(message.id)).toEqual(message);
    }
    expect(await harness.countBusinessRows("order-1")).toBe(1);
    // The same messages one enqueue at a time store the same values (but for the place in the key's
    // order: the first of the list holds key o-1, numbered 1; this one waits behind it, unnumbered).
    const single = await store.transaction((tx) => store.enqueue(tx, { ...(list[0] as NewMessage), dedupeKey: "placed-o-1-again" }));
    expect(stored[0]?.keySeq).toBe(1);
    expect(single.keySeq).toBeNull();
    expect({ ...single, id: "", dedupeKey: "" }).toEqual({ ...stored[0], id: "", dedupeKey: "", keySeq: null });
  });

  it("gives ids ascending in list order and returns the messages in that order, for a long list too", async () => {
    const { store } = ctx();
    const first = await enqueueMessage(store, { payload: { n: -1 } });
    // Keys and delays mixed in, so that no column happens to sort the list for the store.
    const list = numbered(500, (n) => ({
      payload: { n },
      ...(n % 3 === 0 ? { key: `k${n % 7}` } : {}),
      ...(n % 5 === 0 ? { availableAt: at(10_000 - n) } : {}),
      ...(n % 4 === 0 ? { dedupeKey: `d${499 - n}` } : {}),
    }));
    const stored = await store.transaction((tx) => store.enqueueMany(tx, list));
    expect(stored.map((m) => (m.payload as { n: number }).n)).toEqual(list.map((_, n) => n));
    const ids = stored.map((m) => BigInt(m.id));
    expect(ids[0]).toBeGreaterThan(BigInt(first.id));
    for (let n = 1; n < ids.length; n += 1) expect(ids[n], `id of messages[${n}]`).toBeGreaterThan(ids[n - 1] as bigint);
    const listed = await store.listMessages();
    expect(listed.map((m) => (m.payload as { n: number }).n)).toEqual([-1, ...list.map((_, n) => n)]);
  });

  it("returns [] for an empty list and writes nothing", async () => {
    const { store, harness } = ctx();
    const result = await store.transaction(async (tx) => {
      await harness.businessWrite(tx, "empty");
      return store.enqueueMany(tx, []);
    });
    expect(result).toEqual([]);
    expect(await store.listMessages()).toEqual([]);
    expect(await harness.countBusinessRows("empty")).toBe(1);
  });

  it("refuses a connection outside a transaction, as enqueue does, even for an empty list, and writes nothing", async () => {
    const { store, harness } = ctx();
    const outside = await harness.outsideTransaction();
    await expect(store.enqueueMany(outside, numbered(3))).rejects.toBeInstanceOf(NotInTransactionError);
    await expect(store.enqueueMany(outside, numbered(3))).rejects.toThrow(/^enqueueMany needs an open transaction/);
    await expect(store.enqueueMany(outside, [])).rejects.toBeInstanceOf(NotInTransactionError);
    expect(await store.listMessages()).toEqual([]);
  });

  it("writes none of them when the business transaction rolls back", async () => {
    const { store, harness } = ctx();
    const failure = new Error("business rule broken after the enqueue");
    await expect(
      store.transaction(async (tx) => {
        await harness.businessWrite(tx, "order-2");
        await store.enqueueMany(
          tx,
          numbered(20, (n) => ({ dedupeKey: `r-${n}`, ...(n % 2 === 0 ? { key: "k" } : {}) })),
        );
        throw failure;
      }),
    ).rejects.toBe(failure);
    expect(await store.listMessages()).toEqual([]);
    expect(await harness.countBusinessRows("order-2")).toBe(0);
    expect(await store.claim("worker-a", { limit: 10, leaseMs: LEASE_MS })).toEqual([]);
    // The dedupe keys are free again.
    expect(
      await store.transaction((tx) =>
        store.enqueueMany(
          tx,
          numbered(2, (n) => ({ dedupeKey: `r-${n}` })),
        ),
      ),
    ).toHaveLength(2);
  });

  it.each<[string, number, Partial<NewMessage> | "not an object", RegExp]>([
    ["a bad type", 2, { type: "" }, /^messages\[2\]: message type must be a non-empty string of at most 200 characters/],
    ["a bad ordering key", 0, { key: "k".repeat(256) }, /^messages\[0\]: key \(the ordering key\) must be a non-empty string of at most 255 characters/],
    ["bad headers", 4, { headers: { "bad name": "x" } }, /^messages\[4\]: header name "bad name" is not a token/],
    ["a bad availableAt", 3, { availableAt: new Date(Number.NaN) }, /^messages\[3\]: availableAt of a test.many message must be a valid Date/],
    ["a bad dedupe key", 1, { dedupeKey: "" }, /^messages\[1\]: dedupeKey must be a non-empty string/],
    ["something that is not a message", 2, "not an object", /^messages\[2\]: message \(\{ type, payload \}\) must be an object \(got string\)/],
  ])("refuses %s at index i with InvalidArgumentError naming it, writing none of the list", async (_label, index, change, naming) => {
    const { store, harness } = ctx();
    const list: unknown[] = numbered(5);
    list[index] = change === "not an object" ? change : { ...(list[index] as NewMessage), ...change };
    let refused: unknown;
    // The caller catches the error and commits: the checks ran before anything was written.
    await store.transaction(async (tx) => {
      await harness.businessWrite(tx, "kept");
      refused = await store.enqueueMany(tx, list as NewMessage[]).catch((error: unknown) => error);
    });
    expect(refused).toBeInstanceOf(InvalidArgumentError);
    expect((refused as Error).message).toMatch(naming);
    expect((refused as Error).message).toMatch(/\(nothing of the list was written\)$/);
    expect(await store.listMessages()).toEqual([]);
    expect(await harness.countBusinessRows("kept")).toBe(1);
  });

  it("keeps an unsupported payload's error kind and path, with its index", async () => {
    const { store } = ctx();
    const list = numbered(3);
    list[1] = { type: "test.many", payload: { items: [{ amount: 10n as unknown as JsonValue }] } };
    const refused = await store.transaction((tx) => store.enqueueMany(tx, list)).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(InvalidArgumentError);
    expect(refused).toMatchObject({ code: "UNSUPPORTED_PAYLOAD" });
    expect((refused as Error).message).toMatch(/^messages\[1\]: payload value at \$\.items\[0\]\.amount cannot be stored faithfully/);
    expect((refused as Error).cause).toBeInstanceOf(UnsupportedPayloadError);
    expect(((refused as Error).cause as UnsupportedPayloadError).path).toBe("$.items[0].amount");
    expect(await store.listMessages()).toEqual([]);
  });

  it("refuses a list that is not a list, or longer than MAX_ENQUEUE_MANY", async () => {
    const { store } = ctx();
    await expect(store.transaction((tx) => store.enqueueMany(tx, { type: "t", payload: 1 } as never))).rejects.toThrow(
      new InvalidArgumentError("enqueueMany takes a list of messages (got object)"),
    );
    await expect(store.transaction((tx) => store.enqueueMany(tx, numbered(MAX_ENQUEUE_MANY + 1)))).rejects.toThrow(
      /^enqueueMany takes at most 10000 messages at once \(got 10001\)/,
    );
    expect(await store.listMessages()).toEqual([]);
  });

  it("refuses a dedupe key already taken, as enqueue does, naming it and its index: none of the list is written", async () => {
    const { store, harness } = ctx();
    const taken = await enqueueMessage(store, { dedupeKey: "payment-7" });
    const list = numbered(5, (n) => ({ dedupeKey: `payment-${n + 4}` })); // payment-7 is messages[3]
    const attempt = store.transaction(async (tx) => {
      await harness.businessWrite(tx, "second-try");
      await store.enqueueMany(tx, list);
    });
    await expect(attempt).rejects.toBeInstanceOf(DuplicateMessageError);
    await expect(attempt).rejects.toMatchObject({ code: "DUPLICATE_MESSAGE", dedupeKey: "payment-7" });
    await expect(attempt).rejects.toThrow(/^an outbox message with dedupe key "payment-7" \(messages\[3\]\) already exists/);
    expect((await store.listMessages()).map((m) => m.id)).toEqual([taken.id]);
    expect(await harness.countBusinessRows("second-try")).toBe(0);
  });

  it("refuses a dedupe key taken earlier in the same transaction, and writes none of the list even when the caller commits", async () => {
    const { store } = ctx();
    let refused: unknown;
    await store.transaction(async (tx) => {
      await store.enqueue(tx, { type: "test.message", payload: 0, dedupeKey: "same" });
      refused = await store
        .enqueueMany(
          tx,
          numbered(3, (n) => ({ dedupeKey: n === 2 ? "same" : `other-${n}` })),
        )
        .catch((error: unknown) => error);
    });
    expect(refused).toBeInstanceOf(DuplicateMessageError);
    expect(refused).toMatchObject({ dedupeKey: "same" });
    // SQLite undoes the refused statement alone (the earlier enqueue commits); PostgreSQL aborts the
    // whole transaction, as a refused enqueue does. Neither keeps a message of the list.
    const kept = await store.listMessages();
    expect(kept.filter((m) => m.type === "test.many")).toEqual([]);
  });

  it("refuses a dedupe key given twice in one list before writing anything, as two enqueues of it in one transaction end", async () => {
    const { store, harness } = ctx();
    let refused: unknown;
    await store.transaction(async (tx) => {
      await harness.businessWrite(tx, "kept");
      refused = await store
        .enqueueMany(
          tx,
          numbered(4, (n) => ({ dedupeKey: n === 1 || n === 3 ? "twice" : `once-${n}` })),
        )
        .catch((error: unknown) => error);
    });
    expect(refused).toBeInstanceOf(DuplicateMessageError);
    expect(refused).toMatchObject({ code: "DUPLICATE_MESSAGE", dedupeKey: "twice" });
    expect((refused as Error).message).toMatch(/^messages\[1\] and messages\[3\] have the same dedupe key "twice"/);
    // Refused before the database saw it: the transaction went on and committed its own write.
    expect(await store.listMessages()).toEqual([]);
    expect(await harness.countBusinessRows("kept")).toBe(1);
  });

  it("hands out each ordering key in list order: one message per key at a time, claims in list order", async () => {
    const { store } = ctx();
    const list = [
      ["a1", "a"],
      ["b1", "b"],
      ["a2", "a"],
      ["u1", undefined],
      ["a3", "a"],
      ["b2", "b"],
    ].map(([label, key]) => ({ type: "test.many", payload: { label }, ...(key === undefined ? {} : { key }) }) as NewMessage);
    const stored = await store.transaction((tx) => store.enqueueMany(tx, list));
    const firstClaim = await store.claim("worker-a", { limit: 10, leaseMs: LEASE_MS });
    expect(labels(firstClaim)).toEqual(["a1", "b1", "u1"]);
    expect(await store.claimMessage("worker-b", (stored[2] as { id: string }).id, { leaseMs: LEASE_MS })).toMatchObject({
      outcome: "not-claimable",
      status: "waiting",
    });
    for (const lease of firstClaim) await store.complete(lease);
    expect(await drain(store)).toEqual(["a2", "b2", "a3"]);
  });

  it("queues a list's keyed messages behind the key's holder already in the table, and later ones behind the list", async () => {
    const { store } = ctx();
    await enqueueMessage(store, { key: "a", payload: { label: "a0" } });
    const held = await claimNext(store, "worker-a", LEASE_MS);
    await store.transaction((tx) =>
      store.enqueueMany(tx, [
        { type: "test.many", key: "a", payload: { label: "a1" } },
        { type: "test.many", key: "c", payload: { label: "c1" } },
        { type: "test.many", key: "a", payload: { label: "a2" } },
      ]),
    );
    await enqueueMessage(store, { key: "a", payload: { label: "a3" } });
    expect(labels(await store.claim("worker-b", { limit: 10, leaseMs: LEASE_MS }))).toEqual(["c1"]);
    await store.complete(held);
    expect(await drain(store)).toEqual(["a1", "a2", "a3"]);
  });

  it("keeps each message's availableAt: a delayed one waits, the others are due at once", async () => {
    const { store, clock } = ctx();
    await store.transaction((tx) =>
      store.enqueueMany(tx, [
        { type: "test.many", payload: { label: "later" }, availableAt: at(60_000) },
        { type: "test.many", payload: { label: "now" } },
        { type: "test.many", payload: { label: "past" }, availableAt: at(-5_000) },
      ]),
    );
    expect(labels(await store.claim("worker-a", { limit: 10, leaseMs: 120_000 }))).toEqual(["past", "now"]);
    clock.set(at(59_999));
    expect(await store.claim("worker-a", { limit: 10, leaseMs: 120_000 })).toEqual([]);
    clock.set(at(60_000));
    expect(labels(await store.claim("worker-a", { limit: 10, leaseMs: 120_000 }))).toEqual(["later"]);
  });

  it("wakes listeners after the commit, not before, and not after a rollback", async () => {
    const { store } = ctx();
    let wakes = 0;
    const stop = await store.onNewMessages(() => {
      wakes += 1;
    });
    // Nothing told so far, checked without waiting for time to pass: SQLite wakes its listeners
    // in the commit's own call (and a wake before the commit, or after a rollback, would come in
    // the call that made it); PostgreSQL through NOTIFY, which every listener gets in the order
    // the notifications were sent, so a notification the test sends itself, once received, says
    // that no earlier one is on its way.
    const nothingToldYet = await nothingSentCheck(store, () => wakes);
    try {
      await expect(
        store.transaction(async (tx) => {
          await store.enqueueMany(tx, numbered(3));
          throw new Error("rolled back");
        }),
      ).rejects.toThrow("rolled back");
      await nothingToldYet("after the rollback");
      await store.transaction(async (tx) => {
        await store.enqueueMany(tx, numbered(3));
        await nothingToldYet("before the commit"); // nothing is told before the commit
      });
      const told = nothingToldYet.markers();
      await until("a wake after the commit", () => wakes > told, { timeoutMs: 5_000, intervalMs: 5 });
    } finally {
      await nothingToldYet.close();
      await stop();
    }
  });
});

/**
 * A check that no wake-up has been sent for `store` since it was made. PostgreSQL: a LISTEN
 * connection of the test's own on the store's channel; the check sends a notification of its own
 * (a marker, which wakes the store's listener too) and waits until both listeners got it: a
 * listener gets notifications in the order they were sent, so any other notification would have
 * come first, to the test (named) and to the store (one wake more than the markers). SQLite: its
 * wakes are called in the call that makes them, so the count needs no waiting.
 */
async function nothingSentCheck(
  store: OutboxStore<unknown>,
  wakes: () => number,
): Promise<((when: string) => Promise<void>) & { close(): Promise<void>; markers(): number }> {
  if (!(store instanceof PostgresOutboxStore)) {
    const check = async (when: string) => {
      expect(wakes(), `wakes ${when}`).toBe(0);
    };
    return Object.assign(check, { close: async () => undefined, markers: () => 0 });
  }
  const channel = wakeChannel(store.schema);
  const client = new pg.Client({ connectionString: TEST_DATABASE_URL });
  await client.connect();
  const received: string[] = [];
  client.on("notification", (n) => received.push(n.payload ?? ""));
  await client.query(`LISTEN ${channel}`);
  let sent = 0;
  const check = async (when: string) => {
    const marker = `test-marker-${++sent}`;
    await client.query("SELECT pg_notify($1, $2)", [channel, marker]);
    await until(`the test's own notification ${marker}`, () => received.includes(marker), { timeoutMs: 10_000, intervalMs: 2 });
    expect(
      received.filter((p) => !p.startsWith("test-marker-")),
      `notifications ${when}`,
    ).toEqual([]);
    await until(`the store's listener to get ${marker}`, () => wakes() >= sent, { timeoutMs: 10_000, intervalMs: 2 });
    expect(wakes(), `wakes ${when} (${sent} of them the test's own markers)`).toBe(sent);
  };
  return Object.assign(check, { close: () => client.end(), markers: () => sent });
}

describeEachStore("enqueueMany through another library's transaction (enqueueManyIn)", (factory) => {
  const ctx = useStoreHarness(factory);

  it("commits the messages with the business write, in list order, keyed ones in their key's order", async () => {
    const { store, harness, clock } = ctx();
    const list = numbered(5, (n) => ({ payload: { label: `m${n}` }, ...(n % 2 === 0 ? { key: "k" } : {}), headers: { "x-n": String(n) } }));
    const stored = await store.transaction(async (tx) => {
      await harness.businessWrite(tx, "order-f");
      return store.enqueueManyIn(harness.foreign(tx), list);
    });
    expect(stored.map((m) => (m.payload as { label: string }).label)).toEqual(["m0", "m1", "m2", "m3", "m4"]);
    for (const [n, message] of stored.entries()) {
      expect(message).toMatchObject({ type: "test.many", key: n % 2 === 0 ? "k" : null, headers: { "x-n": String(n) }, status: "pending" });
      expect(message.createdAt).toEqual(clock.now());
      expect(await mustGet(store, message.id)).toEqual(message);
    }
    expect(await harness.countBusinessRows("order-f")).toBe(1);
    expect(await drain(store)).toEqual(["m0", "m1", "m3", "m2", "m4"]);
  });

  it("writes none when the transaction throws, refuses a taken dedupe key naming it, and a closed transaction", async () => {
    const { store, harness } = ctx();
    await expect(
      store.transaction(async (tx) => {
        await store.enqueueManyIn(
          harness.foreign(tx),
          numbered(3, (n) => ({ dedupeKey: `f${n}` })),
        );
        throw new Error("rolled back");
      }),
    ).rejects.toThrow("rolled back");
    expect(await store.listMessages()).toEqual([]);
    await store.transaction((tx) => store.enqueueIn(harness.foreign(tx), { type: "test.message", payload: 0, dedupeKey: "f2" }));
    const attempt = store.transaction((tx) =>
      store.enqueueManyIn(
        harness.foreign(tx),
        numbered(3, (n) => ({ dedupeKey: `f${n}` })),
      ),
    );
    await expect(attempt).rejects.toBeInstanceOf(DuplicateMessageError);
    await expect(attempt).rejects.toMatchObject({ dedupeKey: "f2" });
    expect(await store.listMessages()).toHaveLength(1);

    const outside = harness.foreign(await harness.outsideTransaction());
    await expect(store.enqueueManyIn(outside, numbered(2))).rejects.toBeInstanceOf(NotInTransactionError);
    await expect(store.enqueueManyIn({} as never, numbered(2))).rejects.toThrow(/^enqueueManyIn needs a ForeignTransaction/);
    expect(await store.listMessages()).toHaveLength(1);
  });
});
