// outbox-021-cancelled widens the message status (a cancelled message keeps its row). A database
// migrated before it keeps every row as it was, its claim order and its ids (SQLite rebuilds the
// table: the copy must keep AUTOINCREMENT's sequence and every index), and cancels afterwards.

import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ManualClock } from "../../src/outbox/clock.js";
import type { OutboxStore } from "../../src/outbox/store.js";
import type { OutboxMessage } from "../../src/outbox/types.js";
import { MariaDbOutboxStore } from "../../src/stores/mariadb/mariadb-outbox-store.js";
import { OUTBOX_MIGRATIONS as MARIADB_MIGRATIONS } from "../../src/stores/mariadb/outbox-sql.js";
import { outboxMigrations } from "../../src/stores/postgres/outbox-sql.js";
import { PostgresOutboxStore } from "../../src/stores/postgres/postgres-outbox-store.js";
import { OUTBOX_MIGRATIONS } from "../../src/stores/sqlite/outbox-sql.js";
import { SqliteOutboxStore } from "../../src/stores/sqlite/sqlite-outbox-store.js";
import { freshDatabase, mariadbAvailable } from "../support/mariadb.js";
import { freshSchema, postgresAvailable, TEST_DATABASE_URL, withClient } from "../support/postgres.js";
import { tempDir } from "../support/temp.js";

const PG = await postgresAvailable();
const MARIADB = await mariadbAvailable();
const dir = tempDir();
const BEFORE_021 = (name: string) => name !== "outbox-021-cancelled";
const LEASE_MS = 30_000;

interface Before {
  readonly rows: readonly (OutboxMessage | undefined)[];
  readonly ids: readonly string[];
}

/** Before the upgrade: a processed message, a keyed holder and the one waiting behind it, one unkeyed pending, and the newest deleted. */
async function fill(store: OutboxStore<unknown>, deleteNewest: () => Promise<void>): Promise<Before> {
  const enqueue = (payload: number, key?: string) => store.transaction((tx) => store.enqueue(tx, { type: "t", payload, ...(key ? { key } : {}) }));
  const done = await enqueue(1);
  const [lease] = await store.claim("old-worker", { limit: 1, leaseMs: LEASE_MS });
  await store.complete(lease!);
  const holder = await enqueue(2, "k");
  const waiting = await enqueue(3, "k");
  const plain = await enqueue(4);
  await enqueue(5); // deleted below: the next id must still be past it
  await deleteNewest();
  const ids = [done.id, holder.id, waiting.id, plain.id];
  return { ids, rows: await Promise.all(ids.map((id) => store.getMessage(id))) };
}

/** After the upgrade: the rows unchanged, ids go on past the deleted newest, and a cancel keeps its row as cancelled. */
async function expectUpgraded(store: OutboxStore<unknown>, before: Before): Promise<void> {
  expect(await Promise.all(before.ids.map((id) => store.getMessage(id)))).toEqual(before.rows);
  const [, holder, waiting, plain] = before.ids;
  const next = await store.transaction((tx) => store.enqueue(tx, { type: "t", payload: 6 }));
  expect(Number(next.id)).toBe(Number(plain) + 2);
  const cancelled = await store.cancel(holder!, { reason: "upgrade" });
  expect(cancelled.handedOn).toBe(true);
  expect(await store.getMessage(holder!)).toMatchObject({ status: "cancelled", lockedBy: "cancel: upgrade", lockedUntil: null });
  // The key moved on to its waiting message; the claim order is as it was.
  const claimed = await store.claim("new-worker", { limit: 10, leaseMs: LEASE_MS });
  expect(claimed.map((lease) => lease.messageId)).toEqual([waiting, plain, next.id]);
  expect((await store.stats()).counts).toMatchObject({ processed: 1, processing: 3, cancelled: 1 });
}

describe("cancelled status upgrade (outbox-021-cancelled)", () => {
  it("sqlite: the table is rebuilt with its rows, ids, sequence and indexes kept", async () => {
    const clock = new ManualClock(new Date("2026-12-01T09:00:00.000Z"));
    const store = new SqliteOutboxStore({ path: join(dir, "upgrade.db"), clock });
    const fresh = new SqliteOutboxStore({ path: join(dir, "fresh.db"), clock });
    try {
      await store.applyMigrations(OUTBOX_MIGRATIONS.filter((m) => BEFORE_021(m.name)));
      const before = await fill(store, async () => {
        store.db.prepare("DELETE FROM outbox_messages WHERE id = (SELECT max(id) FROM outbox_messages)").run();
      });
      await store.migrate();
      await fresh.migrate();
      // Exactly the schema a database migrated from scratch has (the rebuild missed no index).
      const schema = (s: SqliteOutboxStore) =>
        s.db.prepare("SELECT type, name, sql FROM sqlite_schema WHERE tbl_name = 'outbox_messages' ORDER BY name").all() as { sql: string | null }[];
      const fromScratch = schema(fresh);
      expect(fromScratch.length).toBeGreaterThanOrEqual(5);
      expect(schema(store)).toEqual(fromScratch);
      // Created under its own name, as written (a table renamed into place would read CREATE TABLE "outbox_messages").
      expect(fromScratch.find((row) => row.sql?.startsWith("CREATE TABLE"))?.sql).toMatch(/^CREATE TABLE outbox_messages \(/);
      expect(store.db.prepare("PRAGMA integrity_check").pluck().get()).toBe("ok");
      await expectUpgraded(store, before);
    } finally {
      await store.close();
      await fresh.close();
    }
  });

  it.skipIf(!PG)("postgres: the status constraint is widened, rows kept", async () => {
    const schema = freshSchema("wassal_cancel_upgrade");
    const clock = new ManualClock(new Date("2026-12-01T09:00:00.000Z"));
    const store = await PostgresOutboxStore.connect({ url: TEST_DATABASE_URL, schema, clock, maxConnections: 2 });
    try {
      await store.applyMigrations(outboxMigrations(schema).filter((m) => BEFORE_021(m.name)));
      const before = await fill(store, async () => {
        await withClient((client) => client.query(`DELETE FROM ${schema}.outbox_messages WHERE id = (SELECT max(id) FROM ${schema}.outbox_messages)`));
      });
      await store.migrate();
      await expectUpgraded(store, before);
    } finally {
      await store.close();
      await withClient((client) => client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`));
    }
  });

  it.skipIf(!MARIADB)("mariadb: the status column's check is widened, rows kept, and running it again changes nothing", async () => {
    const database = await freshDatabase();
    const clock = new ManualClock(new Date("2026-12-01T09:00:00.000Z"));
    const store = await MariaDbOutboxStore.connect({ url: database.url, clock, maxConnections: 2 });
    try {
      await store.applyMigrations(MARIADB_MIGRATIONS.filter((m) => BEFORE_021(m.name)));
      const before = await fill(store, async () => {
        await store.pool.query("DELETE FROM outbox_messages ORDER BY id DESC LIMIT 1");
      });
      await store.migrate();
      // MariaDB's DDL does not roll back: a migration cut short is run again from its start.
      const [redefine] = MARIADB_MIGRATIONS.filter((m) => !BEFORE_021(m.name)).flatMap((m) => m.statements);
      await store.pool.query(redefine!);
      await expectUpgraded(store, before);
    } finally {
      await store.close();
      await database.drop();
    }
  });
});
