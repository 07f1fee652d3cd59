// The sharded outbox: each message on the shard its ordering key (else dedupe key) hashes to, a
// transaction on that shard's database for the business row and its message, a refusal for a
// message handed to the wrong shard's transaction, a worker per shard with each key's order kept,
// and stats summed over the shards. On three SQLite files, and on two PostgreSQL schemas.

import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { InvalidArgumentError, WrongShardError } from "../../src/outbox/errors.js";
import type { OutboxStore } from "../../src/outbox/store.js";
import type { OutboxMessage } from "../../src/outbox/types.js";
import { shardOfKey } from "../../src/shards/key-hash.js";
import { ShardedOutbox } from "../../src/shards/sharded-outbox.js";
import { ShardWorkers } from "../../src/shards/shard-workers.js";
import { ShardRelays } from "../../src/relay/shard-relays.js";
import type { OutgoingMessage, Publisher } from "../../src/relay/publisher.js";
import { AddShardsRefusedError, addShards, planAddShards } from "../../src/shards/add-shards.js";
import { PostgresOutboxStore, type PostgresTx } from "../../src/stores/postgres/postgres-outbox-store.js";
import { SqliteOutboxStore, type SqliteTx } from "../../src/stores/sqlite/sqlite-outbox-store.js";
import { freshSchema, postgresAvailable, TEST_DATABASE_URL } from "../support/postgres.js";
import { tempDir } from "../support/temp.js";
import { until } from "../support/wait.js";

const opened: { close(): Promise<void> }[] = [];
afterEach(async () => {
  for (const outbox of opened.splice(0)) await outbox.close();
});

async function sqliteShards(count: number): Promise<ShardedOutbox<SqliteTx>> {
  const dir = tempDir("wassal-shards-");
  const stores: SqliteOutboxStore[] = [];
  for (let shard = 0; shard < count; shard += 1) {
    const store = new SqliteOutboxStore({ path: join(dir, `shard-${shard}.db`) });
    await store.migrate();
    await store.transaction((tx) => tx.exec("CREATE TABLE IF NOT EXISTS payments (id TEXT PRIMARY KEY)"));
    stores.push(store);
  }
  const outbox = new ShardedOutbox<SqliteTx>(stores);
  opened.push(outbox);
  return outbox;
}

function payments(store: SqliteOutboxStore): Promise<number> {
  return store.transaction((tx) => tx.prepare("SELECT count(*) FROM payments").pluck().get() as number);
}

/** The shards holding this message (ids are numbered per database, so the message's contents must match too). */
async function shardOf(outbox: ShardedOutbox<unknown>, message: OutboxMessage): Promise<number[]> {
  const found: number[] = [];
  const same = (other: OutboxMessage | undefined) =>
    other !== undefined && JSON.stringify([other.key, other.dedupeKey, other.payload]) === JSON.stringify([message.key, message.dedupeKey, message.payload]);
  for (const [shard, store] of outbox.shards.entries()) if (same(await store.getMessage(message.id))) found.push(shard);
  return found;
}

describe("a sharded outbox on three SQLite files", () => {
  it("puts each keyed message on its key's shard, every message of a key on the same one", async () => {
    const outbox = await sqliteShards(3);
    const keys = Array.from({ length: 30 }, (_, n) => `account-${n}`);
    const seen = new Set<number>();
    for (const key of keys) {
      for (const step of [1, 2]) {
        const message = await outbox.enqueue({ type: "t", key, payload: { step } });
        expect(await shardOf(outbox, message)).toEqual([shardOfKey(key, 3)]);
        seen.add(shardOfKey(key, 3));
      }
    }
    expect([...seen].sort()).toEqual([0, 1, 2]);
    const stats = await outbox.stats();
    expect(stats.total.counts.pending).toBe(60);
    expect(stats.shards.map((shard) => shard.counts.pending).reduce((a, b) => a + b)).toBe(60);
  });

  it("routes an unkeyed message by its dedupe key (so a repeat is refused on the same shard), else round-robin, else to a named shard", async () => {
    const outbox = await sqliteShards(3);
    const first = await outbox.enqueue({ type: "t", dedupeKey: "pay-77", payload: {} });
    expect(await shardOf(outbox, first)).toEqual([shardOfKey("pay-77", 3)]);
    await expect(outbox.enqueue({ type: "t", dedupeKey: "pay-77", payload: {} })).rejects.toMatchObject({ name: "DuplicateMessageError" });
    const spread: number[] = [];
    for (let n = 0; n < 6; n += 1) spread.push(...(await shardOf(outbox, await outbox.enqueue({ type: "t", payload: { n } }))));
    expect(spread).toEqual([0, 1, 2, 0, 1, 2]);
    expect(await shardOf(outbox, await outbox.enqueue({ type: "t", payload: { named: true } }, { shard: 2 }))).toEqual([2]);
    expect(() => outbox.shardIndex({ shard: 3 })).toThrow(/shard must be a whole number from 0 to 2 \(got 3\)/);
    expect(() => outbox.shardIndex({ shard: -1 })).toThrow(InvalidArgumentError);
    expect(() => outbox.shardIndex({ key: "a", shard: 1 })).toThrow(/a keyed message goes to its key's shard/);
    await expect(outbox.enqueue({ type: "t", key: "a", payload: {} }, { shard: 1 })).rejects.toThrow(/give one or the other/);
    expect(() => outbox.shardIndex(undefined as unknown as { shard: number })).toThrow(/a shard route/);
    await expect(outbox.enqueue({ type: "t", key: 7 as unknown as string, payload: {} })).rejects.toThrow(InvalidArgumentError);
  });

  it("routes an unkeyed singleton by its singleton key, so that its enqueues join one waiting message", async () => {
    const outbox = await sqliteShards(3);
    const joined: OutboxMessage[] = [];
    for (let n = 0; n < 4; n += 1) joined.push(await outbox.enqueue({ type: "search.reindex", singletonKey: "u-17", payload: { n } }));
    expect(new Set(joined.map((m) => m.id)).size).toBe(1);
    expect(await shardOf(outbox, joined[0]!)).toEqual([shardOfKey("u-17", 3)]);
    expect((await outbox.stats()).total.counts.pending).toBe(1);
    const other = shardOfKey("u-17", 3) === 0 ? 1 : 0;
    await expect(outbox.transaction({ shard: other }, (shard) => shard.enqueue({ type: "search.reindex", singletonKey: "u-17", payload: {} }))).rejects.toThrow(
      /singleton key "u-17"/,
    );
  });

  it("commits the business row and its message together on the key's shard, and refuses a message that belongs on another shard, writing neither", async () => {
    const outbox = await sqliteShards(3);
    const key = "account-1";
    const home = shardOfKey(key, 3);
    const homeStore = outbox.shards[home] as SqliteOutboxStore;
    await outbox.transaction({ key }, async (shard) => {
      expect(shard.shard).toBe(home);
      shard.tx.prepare("INSERT INTO payments (id) VALUES (?)").run("p1");
      await shard.enqueue({ type: "payment.created", key, payload: { id: "p1" } });
    });
    expect([await payments(homeStore), (await homeStore.stats()).counts.pending]).toEqual([1, 1]);

    const elsewhere = ["account-2", "account-3", "account-4", "account-5", "account-6"].find((other) => shardOfKey(other, 3) !== home);
    if (elsewhere === undefined) throw new Error("every candidate key hashed to the same shard");
    const refused = outbox.transaction({ key }, async (shard) => {
      shard.tx.prepare("INSERT INTO payments (id) VALUES (?)").run("p2");
      await shard.enqueue({ type: "payment.created", key: elsewhere, payload: { id: "p2" } });
    });
    await expect(refused).rejects.toBeInstanceOf(WrongShardError);
    await expect(refused).rejects.toThrow(`belongs on shard ${shardOfKey(elsewhere, 3)}, not on shard ${home}`);
    expect([await payments(homeStore), (await outbox.stats()).total.counts.pending]).toEqual([1, 1]);
  });

  it("refuses an empty list of shards and the same store twice", async () => {
    const outbox = await sqliteShards(1);
    expect(() => new ShardedOutbox([])).toThrow(/one or more outbox stores/);
    const only = outbox.shards[0] as OutboxStore<SqliteTx>;
    expect(() => new ShardedOutbox([only, only])).toThrow(/the same store is listed twice/);
  });

  it("a worker per shard processes every message once, each key's in its order", async () => {
    const outbox = await sqliteShards(3);
    const keys = Array.from({ length: 12 }, (_, n) => `k${n}`);
    for (let step = 0; step < 5; step += 1) for (const key of keys) await outbox.enqueue({ type: "step", key, payload: { step } });
    const done: Record<string, number[]> = {};
    const workers = new ShardWorkers(outbox, {
      name: "test",
      concurrency: 4,
      pollIntervalMs: 20,
      handlers: {
        step: async (message) => {
          const { key, payload } = message as OutboxMessage<{ step: number }>;
          const steps = done[key ?? ""] ?? [];
          steps.push(payload.step);
          done[key ?? ""] = steps;
        },
      },
    });
    expect(workers.workers.map((worker) => worker.name)).toEqual(["test-shard0", "test-shard1", "test-shard2"]);
    await workers.start();
    try {
      await until("every message processed", async () => (await outbox.stats()).total.counts.processed === 60, { timeoutMs: 20_000 });
    } finally {
      await workers.stop();
    }
    for (const key of keys) expect(done[key]).toEqual([0, 1, 2, 3, 4]);
  });
});

describe("a relay per shard, one broker", () => {
  it("publishes every shard's messages once, each shard's ids prefixed, where unprefixed ids collide and the broker's window would drop them", async () => {
    const outbox = await sqliteShards(2);
    for (let n = 0; n < 30; n += 1) await outbox.enqueue({ type: "step", key: `k${n % 6}`, payload: { n } });
    const plain = await Promise.all(outbox.shards.map(async (store) => (await store.listMessages()).map((m) => m.id)));
    // Each shard numbers its messages from 1: the same ids on both.
    expect(plain[0]?.filter((id) => plain[1]?.includes(id)).length).toBeGreaterThan(0);
    // A broker with a duplicate window: an id it has seen is acknowledged as a duplicate and not stored again.
    const stored = new Map<string, OutgoingMessage>();
    const publisher: Publisher = {
      description: "a broker with a duplicate window",
      async publish(message) {
        const duplicate = stored.has(message.id);
        if (!duplicate) stored.set(message.id, message);
        return { duplicate };
      },
      async close() {},
    };
    const relays = new ShardRelays(outbox, { publisher, routes: { default: "events.{type}" }, name: "fan", idPrefix: "orders-", pollIntervalMs: 20 });
    expect(relays.relays.map((relay) => relay.name)).toEqual(["fan-shard0", "fan-shard1"]);
    await relays.start();
    try {
      await until("every message published", async () => (await outbox.stats()).total.counts.processed === 30, { timeoutMs: 20_000 });
    } finally {
      await relays.stop();
    }
    expect(stored.size).toBe(30);
    expect([...stored.keys()].filter((id) => id.startsWith("orders-shard0-")).length).toBe(plain[0]?.length);
    expect([...stored.keys()].filter((id) => id.startsWith("orders-shard1-")).length).toBe(plain[1]?.length);
  });
});

describe("adding a shard", () => {
  /** Keys of the form k<n> that move from 2 shards to 3, and keys that stay. */
  const keys = Array.from({ length: 40 }, (_, n) => `k${n}`);
  const moving = keys.filter((key) => shardOfKey(key, 3) === 2);
  const staying = keys.filter((key) => shardOfKey(key, 3) !== 2);

  async function processAll(outbox: ShardedOutbox<SqliteTx>): Promise<void> {
    for (const store of outbox.shards) {
      for (
        let leases = await store.claim("w", { limit: 100, leaseMs: 1000 });
        leases.length > 0;
        leases = await store.claim("w", { limit: 100, leaseMs: 1000 })
      ) {
        await store.completeMany(leases.map((lease) => ({ lease })));
      }
    }
  }

  it("refuses while a key that would move has unfinished messages, naming it, and writes nothing", async () => {
    const outbox = await sqliteShards(2);
    const [added] = (await sqliteShards(1)).shards;
    if (added === undefined || moving.length < 2) throw new Error("setup: expected keys that move");
    const busy = moving[0] as string;
    await outbox.enqueue({ type: "t", key: busy, payload: {} });
    await outbox.enqueue({ type: "t", key: busy, payload: {} });
    const plan = await planAddShards(outbox, [added]);
    expect(plan).toEqual({ shardsBefore: 2, shardsAfter: 3, busyKeys: [{ key: busy, from: shardOfKey(busy, 2), to: 2, unfinished: 2 }], notEmpty: [] });
    const refused = addShards(outbox, [added]);
    await expect(refused).rejects.toBeInstanceOf(AddShardsRefusedError);
    await expect(refused).rejects.toThrow(`1 key(s) that would move have unfinished messages: "${busy}" (2 on shard ${shardOfKey(busy, 2)})`);
    expect(await added.keySequences()).toEqual([]);
    await expect(planAddShards(outbox, [])).rejects.toThrow(/one or more stores/);
    await expect(planAddShards(outbox, [outbox.shards[0] as OutboxStore<SqliteTx>])).rejects.toThrow(/already a shard/);
  });

  it("refuses a new shard that already holds messages", async () => {
    const outbox = await sqliteShards(2);
    const spare = await sqliteShards(1);
    await spare.enqueue({ type: "t", payload: {} });
    await expect(addShards(outbox, spare.shards)).rejects.toThrow(/new shard\(s\) 2 already hold messages/);
  });

  it("refuses a new shard that remembers key numbers from earlier use, and on a second addition carries only the keys that move", async () => {
    const outbox = await sqliteShards(2);
    const [third, fourth] = (await sqliteShards(2)).shards;
    if (third === undefined || fourth === undefined) throw new Error("setup");
    for (const key of keys) await outbox.enqueue({ type: "t", key, payload: {} });
    await processAll(outbox);
    const used = await sqliteShards(1);
    await used.enqueue({ type: "t", key: "old", payload: {} });
    await processAll(used);
    await used.shards[0]?.purgeProcessed(new Date(Date.now() + 60_000));
    await expect(addShards(outbox, used.shards)).rejects.toThrow(/new shard\(s\) 2 already hold messages or key numbers/);

    const three = await addShards(outbox, [third]);
    expect(three.carried).toBe(moving.length);
    const four = await addShards(three.outbox, [fourth]);
    expect(four.carried).toBe(keys.filter((key) => shardOfKey(key, 4) === 3).length);
    expect((await fourth.keySequences()).map((turn) => turn.key).sort()).toEqual(keys.filter((key) => shardOfKey(key, 4) === 3).sort());
  });

  it("carries each idle moving key's place to the new shard: its next message there goes on from it, and keys that stay are untouched", async () => {
    const outbox = await sqliteShards(2);
    const [added] = (await sqliteShards(1)).shards;
    if (added === undefined) throw new Error("setup");
    for (const key of keys) for (let n = 0; n < 3; n += 1) await outbox.enqueue({ type: "t", key, payload: { n } });
    await processAll(outbox);
    const grown = await addShards(outbox, [added]);
    expect([grown.carried, grown.busyAfter, grown.outbox.shards.length]).toEqual([moving.length, [], 3]);
    expect((await added.keySequences({ limit: 1000 })).map((turn) => turn.key).sort()).toEqual([...moving].sort());
    for (const key of [...moving.slice(0, 3), ...staying.slice(0, 3)]) {
      const message = await grown.outbox.enqueue({ type: "t", key, payload: { after: true } });
      expect([key, message.keySeq, await shardOf(grown.outbox, message)]).toEqual([key, 4, [shardOfKey(key, 3)]]);
    }
  });
});

const PG = await postgresAvailable();

describe.runIf(PG)("a sharded outbox on two PostgreSQL schemas", () => {
  it("routes, commits with the business row, and sums the stats as on SQLite", async () => {
    const stores: PostgresOutboxStore[] = [];
    for (let shard = 0; shard < 2; shard += 1) {
      const schema = freshSchema("wassal_shard");
      const store = await PostgresOutboxStore.connect({ url: TEST_DATABASE_URL, schema, maxConnections: 2 });
      await store.migrate();
      await store.transaction((tx) => tx.query(`CREATE TABLE ${schema}.payments (id text PRIMARY KEY)`));
      stores.push(store);
    }
    const outbox = new ShardedOutbox<PostgresTx>(stores);
    opened.push(outbox);
    for (let n = 0; n < 20; n += 1) {
      const key = `account-${n}`;
      await outbox.transaction({ key }, async (shard) => {
        await shard.tx.query(`INSERT INTO ${stores[shard.shard]?.schema}.payments (id) VALUES ($1)`, [key]);
        await shard.enqueue({ type: "payment.created", key, payload: {} });
      });
    }
    const stats = await outbox.stats();
    const expected = [0, 1].map((shard) => Array.from({ length: 20 }, (_, n) => shardOfKey(`account-${n}`, 2)).filter((s) => s === shard).length);
    expect(stats.shards.map((shard) => shard.counts.pending)).toEqual(expected);
    expect(stats.total.counts.pending).toBe(20);
  });
});
