// The WAL relay on a PostgreSQL server of the test file's own, started with wal_level = logical
// (the shared server runs wal_level = replica), and removed afterwards. Each test gets an outbox
// schema and a slot of its own. What must hold: every inserted message published once and
// completed, a key's messages in their order, the slot confirmed only past what is dealt with,
// one consumer per slot (a second relay waits and publishes nothing), a lost slot made again
// without losing what was inserted meanwhile, and the slot's lag reported while the relay is down.

import { randomBytes } from "node:crypto";
import { mkdtempSync } from "node:fs";
import { join } from "node:path";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import pg from "pg";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { freePort, releasePort } from "../../src/chaos/ports.js";
import { dashboardApp } from "../../src/dashboard/dashboard.js";
import { watchSlot } from "../../src/stores/open-outbox.js";
import { type PrivatePostgres, startPrivatePostgres } from "../../src/chaos/private-postgres.js";
import { PostgresOutboxStore } from "../../src/stores/postgres/postgres-outbox-store.js";
import { LogicalReplicationUnavailableError, openWalFeed } from "../../src/stores/postgres/wal-feed.js";
import type { InsertFeed } from "../../src/outbox/insert-feed.js";
import type { OnComplete } from "../../src/outbox/types.js";
import type { OutgoingMessage, Publisher, PublishReceipt } from "../../src/relay/publisher.js";
import { WalRelay, type WalRelayFeedEvent } from "../../src/relay/wal-relay.js";
import { errorLine } from "../support/assertions.js";
import { killAll, requireBuiltCli, runCli, startCli } from "../support/cli.js";
import { postgresAvailable, TEST_DATABASE_URL, withClient } from "../support/postgres.js";
import { natsAvailable, TEST_NATS_URL } from "../support/services.js";
import { tempDir } from "../support/temp.js";
import { until, within } from "../support/wait.js";

const pgUp = await postgresAvailable();
const natsUp = await natsAvailable();
let server: PrivatePostgres | undefined;
const cleanups: (() => Promise<void>)[] = [];

beforeAll(async () => {
  if (pgUp) server = await startPrivatePostgres({ settings: { wal_level: "logical", max_replication_slots: "10", max_wal_senders: "10" }, label: "wal-test" });
}, 60_000);

afterAll(() => server?.stop());

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A broker in memory that, like JetStream, acknowledges a repeated id as a duplicate. */
class RecordingPublisher implements Publisher {
  readonly description = "memory";
  readonly published: OutgoingMessage[] = [];
  readonly ids = new Set<string>();
  /** Every publish, repeats included: a relay that published a message twice shows here. */
  calls = 0;
  async publish(message: OutgoingMessage): Promise<PublishReceipt> {
    this.calls += 1;
    const duplicate = this.ids.has(message.id);
    if (!duplicate) {
      this.ids.add(message.id);
      this.published.push(message);
    }
    return { duplicate };
  }
  async close(): Promise<void> {}
}

async function outbox(onComplete: OnComplete = "keep") {
  const schema = `wal_${randomBytes(4).toString("hex")}`;
  const store = await PostgresOutboxStore.connect({ url: (server as PrivatePostgres).url, schema, onComplete });
  await store.migrate();
  cleanups.push(() => store.close());
  return { store, schema, slot: `${schema}_slot` };
}

/** The feed as the relay sees it, each position it is handed and each it confirms recorded. */
function watched(feed: InsertFeed) {
  const delivered: string[] = [];
  const confirmed: string[] = [];
  const watching: InsertFeed = {
    slot: feed.slot,
    start: (handlers) =>
      feed.start({
        ...handlers,
        batch: async (batch) => {
          delivered.push(batch.position);
          await handlers.batch(batch);
        },
      }),
    confirm: (position) => {
      confirmed.push(position);
      feed.confirm(position);
    },
    lag: () => feed.lag(),
    stop: () => feed.stop(),
  };
  return { feed: watching, delivered, confirmed };
}

function relayOn(
  store: PostgresOutboxStore,
  slot: string,
  schema: string,
  publisher: Publisher,
  name: string,
  events: WalRelayFeedEvent[] = [],
  given?: InsertFeed,
) {
  const feed = given ?? openWalFeed({ url: (server as PrivatePostgres).url, schema, slot, statusIntervalMs: 200, retryMs: 100 });
  const relay = new WalRelay({ store, publisher, feed, name, routes: { default: "events" }, heartbeatMs: false, onFeedEvent: (event) => events.push(event) });
  cleanups.push(() => relay.stop({ graceMs: 0 }));
  return relay;
}

async function enqueueBatches(store: PostgresOutboxStore, keys: readonly string[], perKey: number, perTransaction: number) {
  const order: { key: string; n: number }[] = [];
  for (let n = 0; n < perKey; n += 1) for (const key of keys) order.push({ key, n });
  for (let i = 0; i < order.length; i += perTransaction) {
    await store.transaction(async (tx) => {
      for (const { key, n } of order.slice(i, i + perTransaction)) await store.enqueue(tx, { type: "t", key, payload: { key, n } });
    });
  }
}

async function slotRow(slot: string) {
  const client = new pg.Client({ connectionString: (server as PrivatePostgres).url });
  await client.connect();
  try {
    return (
      await client.query<{ active: boolean; confirmed: string }>(
        "SELECT active, confirmed_flush_lsn::text AS confirmed FROM pg_replication_slots WHERE slot_name = $1",
        [slot],
      )
    ).rows[0];
  } finally {
    await client.end();
  }
}

async function onPrivate<T>(work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: (server as PrivatePostgres).url });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

const lsnBefore = (a: string, b: string) =>
  onPrivate(async (client) => (await client.query<{ before: boolean }>("SELECT $1::pg_lsn < $2::pg_lsn AS before", [a, b])).rows[0]?.before);

async function dropSlot(slot: string) {
  const client = new pg.Client({ connectionString: (server as PrivatePostgres).url });
  await client.connect();
  try {
    await client.query("SELECT pg_drop_replication_slot($1)", [slot]);
  } finally {
    await client.end();
  }
}

function inKeyOrder(published: readonly OutgoingMessage[]): Record<string, number[]> {
  const byKey: Record<string, number[]> = {};
  for (const message of published) {
    const { key, n } = JSON.parse(message.body) as { key: string; n: number };
    byKey[key] = [...(byKey[key] ?? []), n];
  }
  return byKey;
}

describe.skipIf(!pgUp)("the WAL relay (logical replication, pgoutput)", () => {
  it.each(["keep", "delete"] as const)(
    "publishes each inserted message once, a key's in order, from the slot, and completes it (onComplete %s)",
    async (onComplete) => {
      const { store, schema, slot } = await outbox(onComplete);
      const publisher = new RecordingPublisher();
      const events: WalRelayFeedEvent[] = [];
      const relay = relayOn(store, slot, schema, publisher, "wal-a", events);
      await relay.start();
      expect(events.map((e) => e.type)).toEqual(["slot-created", "streaming"]);
      await enqueueBatches(store, ["k1", "k2", "k3"], 20, 7);
      await until("60 messages published", () => publisher.published.length === 60, { last: () => publisher.published.length });
      const expected = Array.from({ length: 20 }, (_, n) => n);
      expect(inKeyOrder(publisher.published)).toEqual({ k1: expected, k2: expected, k3: expected });
      expect(publisher.calls).toBe(60);
      // Every message came through the slot, and each batch's position was confirmed.
      expect(relay.stats.messages).toBe(60);
      await until("the 9 transactions' positions confirmed", () => relay.stats.confirmed >= 1 && relay.stats.batches === 9, { last: () => relay.stats });
      await until("every message completed", async () => (await store.countByStatus()).pending + (await store.countByStatus()).processing === 0);
      const counts = await store.countByStatus();
      expect(counts.processed).toBe(onComplete === "keep" ? 60 : 0);
      // The slot was confirmed as far as the last batch's end, and follows the log when idle.
      const lag = await until("the slot's lag settles under 64 KiB", async () => {
        const now = await relay.feed.lag();
        return now !== null && now.bytes < 65_536 ? now : undefined;
      });
      expect(lag.active).toBe(true);
    },
    60_000,
  );

  it("a second relay on the same slot waits, publishes nothing, and takes over when the first stops", async () => {
    const { store, schema, slot } = await outbox();
    const first = new RecordingPublisher();
    const second = new RecordingPublisher();
    const a = relayOn(store, slot, schema, first, "wal-a");
    await a.start();
    const secondEvents: WalRelayFeedEvent[] = [];
    const b = relayOn(store, slot, schema, second, "wal-b", secondEvents);
    const bStarted = b.start();
    await until("the second relay finds the slot busy", () => secondEvents.some((e) => e.type === "slot-busy"));
    await enqueueBatches(store, ["k"], 10, 1);
    await until("the first relay published 10", () => first.published.length === 10);
    expect(second.published).toEqual([]);
    expect(b.relay.worker.inFlight).toBe(0);
    await a.stop();
    await within("the second relay to take the slot", bStarted, 20_000);
    await enqueueBatches(store, ["k"], 5, 1);
    await until("the second relay published the next 5", () => second.published.length === 5, { last: () => second.published.length });
    expect({ first: inKeyOrder(first.published).k, second: inKeyOrder(second.published).k }).toEqual({
      first: Array.from({ length: 10 }, (_, n) => n),
      second: [0, 1, 2, 3, 4],
    });
  }, 60_000);

  it("reports the WAL the slot holds while the relay is down, and publishes the backlog on its return", async () => {
    const { store, schema, slot } = await outbox();
    const publisher = new RecordingPublisher();
    const a = relayOn(store, slot, schema, publisher, "wal-a");
    await a.start();
    await a.stop();
    await enqueueBatches(store, ["k1", "k2"], 50, 10);
    const feed = openWalFeed({ url: (server as PrivatePostgres).url, schema, slot });
    cleanups.push(() => feed.stop());
    const down = await feed.lag();
    expect(down?.active).toBe(false);
    expect(down?.bytes).toBeGreaterThan(10_000); // 100 messages' worth of log, kept for the slot
    const b = relayOn(store, slot, schema, publisher, "wal-b");
    await b.start();
    await until("the backlog published", () => publisher.published.length === 100, { last: () => publisher.published.length });
    const expected = Array.from({ length: 50 }, (_, n) => n);
    expect(inKeyOrder(publisher.published)).toEqual({ k1: expected, k2: expected });
    expect(publisher.calls).toBe(100);
    // The slot kept the 10 transactions for the relay and streamed them on its return.
    await until("the slot's 10 transactions streamed", () => b.stats.batches >= 10, { last: () => b.stats });
    await until("the slot catches up", async () => ((await feed.lag())?.bytes ?? Number.POSITIVE_INFINITY) < (down?.bytes ?? 0));
  }, 60_000);

  it("a lost slot is made again, and what was inserted while it was gone is published from the table", async () => {
    const { store, schema, slot } = await outbox();
    const publisher = new RecordingPublisher();
    const a = relayOn(store, slot, schema, publisher, "wal-a");
    await a.start();
    await enqueueBatches(store, ["k"], 5, 5);
    await until("5 published", () => publisher.published.length === 5);
    await a.stop();
    // A failover to a server without the slot: inserts before and after the slot is gone.
    await enqueueBatches(store, ["k"], 5, 5);
    await until("the slot inactive", async () => (await slotRow(slot))?.active === false);
    await dropSlot(slot);
    await enqueueBatches(store, ["k"], 5, 5);
    const events: WalRelayFeedEvent[] = [];
    const b = relayOn(store, slot, schema, publisher, "wal-b", events);
    await b.start();
    expect(events.map((e) => e.type)).toContain("slot-created");
    await enqueueBatches(store, ["k"], 5, 5);
    await until("all 20 published", () => publisher.published.length === 20, { last: () => publisher.published.length });
    // The 10 from the gap came through the relay's claim, the 5 after it through the new slot.
    expect(b.stats.published).toBe(15);
    expect(b.stats.messages).toBeGreaterThanOrEqual(5);
    expect(publisher.published.map((m) => (JSON.parse(m.body) as { n: number }).n)).toEqual([0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4]);
  }, 60_000);

  it("the slot is confirmed only past what is dealt with: a relay killed mid-batch leaves it where it was", async () => {
    const { store, schema, slot } = await outbox();
    let release!: () => void;
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    // A broker that never acknowledges: the relay holds its messages, so nothing is confirmed.
    const stuck: Publisher = { description: "stuck", publish: () => held.then(() => ({ duplicate: false })), close: async () => {} };
    const seen = watched(openWalFeed({ url: (server as PrivatePostgres).url, schema, slot, statusIntervalMs: 200, retryMs: 100 }));
    const a = relayOn(store, slot, schema, stuck, "wal-a", [], seen.feed);
    await a.start();
    await enqueueBatches(store, ["k1", "k2"], 3, 6);
    await until("both keys' first messages being published", () => a.relay.worker.inFlight === 2);
    expect(seen.delivered).toHaveLength(1);
    // Past a status report or two (every 200 ms): neither the relay nor the feed's keepalive
    // answers confirmed the batch, and the slot is still short of it.
    await new Promise((resolve) => setTimeout(resolve, 600));
    expect(seen.confirmed).toEqual([]);
    expect(await lsnBefore((await slotRow(slot))?.confirmed ?? "0/0", seen.delivered[0] as string)).toBe(true);
    await a.stop({ graceMs: 0 });
    release();
    const publisher = new RecordingPublisher();
    const b = relayOn(store, slot, schema, publisher, "wal-b");
    await b.start();
    await until("all 6 published by the next relay", () => publisher.published.length === 6);
    expect(inKeyOrder(publisher.published)).toEqual({ k1: [0, 1, 2], k2: [0, 1, 2] });
  }, 60_000);
});

/** The shared server's wal_level: the refusal below is checked only where logical replication is off (as on this machine's). */
const sharedWalLevel = pgUp ? await withClient(async (client) => (await client.query<{ wal_level: string }>("SHOW wal_level")).rows[0]?.wal_level) : undefined;

describe.skipIf(!pgUp || sharedWalLevel === "logical")("the WAL feed on a server without logical replication", () => {
  it("refuses to start, naming the setting to change", async () => {
    const feed = openWalFeed({ url: TEST_DATABASE_URL, schema: "wassal", slot: "never_made" });
    const error = await feed.start({ batch: async () => undefined }).catch((e: unknown) => e);
    await feed.stop();
    expect(error).toBeInstanceOf(LogicalReplicationUnavailableError);
    expect((error as Error).message).toMatch(/wal_level = logical/);
  });

  it("names bad options", () => {
    expect(() => openWalFeed({ url: TEST_DATABASE_URL, slot: "Bad-Slot" })).toThrow(
      /slot must be 1 to 63 lowercase letters, digits or underscores \(got "Bad-Slot"\)/,
    );
    expect(() => openWalFeed({ url: TEST_DATABASE_URL, statusIntervalMs: 0 })).toThrow(/statusIntervalMs must be a whole number of milliseconds >= 1/);
  });
});

describe.skipIf(!pgUp)("the dashboard's slot (--slot)", () => {
  it("shows the log the slot holds and whether a relay streams from it, and says when there is no slot", async () => {
    const { store, schema, slot } = await outbox();
    const url = (server as PrivatePostgres).url;
    const watch = watchSlot(url, { schema, slot });
    cleanups.push(() => watch.close());
    const { app, pulse } = dashboardApp({ store, database: "private", slot: watch });
    cleanups.push(async () => pulse.stop());
    const page = async () => (await app.request("http://127.0.0.1/")).text();
    expect(await page()).toContain(`There is no replication slot ${slot}`);
    const relay = relayOn(store, slot, schema, new RecordingPublisher(), "wal-a");
    await relay.start();
    expect(await page()).toContain('data-slot-active="yes"');
    await relay.stop();
    await enqueueBatches(store, ["k"], 20, 20);
    const held = await page();
    expect(held).toContain('data-slot-active="no"');
    expect(held).toContain("No relay streams from this slot");
    expect(Number(/data-slot-lag="(\d+)"/.exec(held)?.[1])).toBeGreaterThan(1_000);
  }, 60_000);
});

describe.skipIf(!pgUp || !natsUp)("wassal relay --from-wal", () => {
  const cwd = tempDir("wassal-wal-cli-");
  beforeAll(requireBuiltCli);
  afterEach(killAll);

  it("publishes from the slot to NATS, serves the slot's lag as metrics, and a second relay on the slot waits as a standby", async () => {
    const { store, schema, slot } = await outbox();
    const run = randomBytes(4).toString("hex");
    const stream = `WALCLI_${run}`;
    const nats = await connect({ servers: TEST_NATS_URL });
    const jsm = await jetstreamManager(nats);
    await jsm.streams.add({ name: stream, subjects: [`${stream}.>`] });
    cleanups.push(async () => {
      await jsm.streams.delete(stream).catch(() => undefined);
      await nats.close();
    });
    const port = await freePort();
    cleanups.push(async () => releasePort(port));
    const url = (server as PrivatePostgres).url;
    const args = ["relay", "--db", url, "--schema", schema, "--from-wal", slot, "--to", TEST_NATS_URL, "--destination", `${stream}.{type}`];
    const dir = mkdtempSync(join(cwd, "run-"));
    const first = startCli([...args, "--name", "wal-cli-a", "--metrics-port", String(port)], { cwd: dir });
    await first.waitForStderr("reading new messages from the replication slot", 30_000);
    const second = startCli([...args, "--name", "wal-cli-b"], { cwd: dir });
    await second.waitForStderr("waiting for it as a standby", 30_000);
    await enqueueBatches(store, ["k1", "k2"], 10, 4);
    await until("20 messages in the stream", async () => (await jsm.streams.info(stream)).state.messages === 20, { timeoutMs: 30_000 });
    await until("every message completed", async () => (await store.countByStatus()).processed === 20);
    const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    expect(metrics).toMatch(new RegExp(`wassal_relay_slot_lag_bytes\\{slot="${slot}"\\} \\d+`));
    expect(metrics).toContain(`wassal_relay_slot_active{slot="${slot}"} 1`);
    expect(metrics).toContain('wassal_relay_published_total{duplicate="false"} 20');
    for (const relay of [first, second]) relay.signal("SIGTERM");
    expect((await first.waitForExit(20_000)).code).toBe(0);
    expect((await second.waitForExit(20_000)).code).toBe(0);
    // The standby published nothing, and stopped without complaint.
    expect(second.stderr()).toContain('"published":0');
    expect(second.stderr()).not.toContain('"level":50');
  }, 90_000);

  it("exits 2 with one line for a SQLite outbox, or a server without logical replication", async () => {
    const dir = mkdtempSync(join(cwd, "bad-"));
    const dashboard = await runCli(["dashboard", "--db", join(dir, "app.db"), "--slot", "s", "--port", "0"], { cwd: dir });
    expect(dashboard.code).toBe(2);
    expect(errorLine(dashboard.stderr)).toMatch(/--slot watches a PostgreSQL replication slot, and .*app\.db is a sqlite database: leave --slot out/);
    const sqlite = await runCli(["relay", "--db", join(dir, "app.db"), "--from-wal", "--to", TEST_NATS_URL, "--destination", "x.{type}"], { cwd: dir });
    expect(sqlite.code).toBe(2);
    expect(errorLine(sqlite.stderr)).toMatch(
      /--from-wal reads a PostgreSQL replication slot, and .*app\.db is a sqlite database: run the relay without --from-wal/,
    );
    const schema = `walno_${randomBytes(4).toString("hex")}`;
    const shared = await PostgresOutboxStore.connect({ url: TEST_DATABASE_URL, schema });
    await shared.migrate();
    await shared.close();
    const replica = await runCli(["relay", "--db", TEST_DATABASE_URL, "--schema", schema, "--from-wal", "--to", TEST_NATS_URL, "--destination", "x.{type}"], {
      cwd: dir,
    });
    await new pg.Pool({ connectionString: TEST_DATABASE_URL, max: 1 }).query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => undefined);
    expect(replica.code).toBe(2);
    expect(replica.stderr.split("\n").filter((line) => line.startsWith("wassal:"))).toHaveLength(1);
    expect(replica.stderr).toMatch(/wal_level = replica, and reading the outbox from the WAL needs wal_level = logical/);
  }, 60_000);
});
