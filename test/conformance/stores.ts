// The stores the conformance suite runs against. Every *.test.ts file in this folder loops over
// `storeFactories`, so each behaviour is checked once per store, with the store's name in the
// describe title. To add a store, add one factory to ALL_STORES below.
//
// WASSAL_TEST_STORES=sqlite,postgres,mariadb picks which stores run (comma-separated names; default: all);
// one that names an unknown store, or leaves none that can run here, fails the file.
//
// A factory builds a fresh, empty, migrated database per test and hands back a StoreHarness:
// the store under test, plus the few things a store-agnostic test cannot do by itself (a business
// write inside the caller's transaction, counting committed business rows, restarting the store,
// opening more connections). Business writes need store-specific SQL, which is fine here.
// Every store here keeps the audit trail (audit: true), so the audit trail is checked everywhere.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterEach, beforeEach, describe, expect } from "vitest";
import { ManualClock } from "../../src/outbox/clock.js";
import { ON_COMPLETE_MODES } from "../../src/outbox/types.js";
import type { OutboxStore } from "../../src/outbox/store.js";
import type { ForeignTransaction, JsonValue, Lease, MessageHolder, NewMessage, OnComplete, OutboxMessage } from "../../src/outbox/types.js";
import { SqliteOutboxStore, type SqliteTx } from "../../src/stores/sqlite/sqlite-outbox-store.js";
import { PostgresOutboxStore, type PostgresTx } from "../../src/stores/postgres/postgres-outbox-store.js";
import pg from "pg";
import { freshSchema, postgresAvailable, TEST_DATABASE_URL } from "../support/postgres.js";
import { MariaDbOutboxStore, type MariaDbTx } from "../../src/stores/mariadb/mariadb-outbox-store.js";
import type mysql from "mysql2/promise";
import { freshDatabase, mariadbAvailable, mariadbConnection } from "../support/mariadb.js";
import { selectOne, selectRunnable } from "../support/selection.js";

/** One database under test, with helpers for what only the store's own SQL can do. */
export interface StoreHarness<Tx = unknown> {
  /** The store under test; after `reopen()` it names the reopened store. */
  readonly store: OutboxStore<Tx>;
  /** Closes the store and opens a new one on the same database (a restart of the process). */
  reopen(): Promise<OutboxStore<Tx>>;
  /** Opens another store on the same database (another application instance); `close()` closes it. */
  connect(): Promise<OutboxStore<Tx>>;
  /** A connection handle that is not inside a transaction: `enqueue` must refuse it. */
  outsideTransaction(): Promise<Tx>;
  /**
   * `tx` seen as another library would show it to enqueueIn: raw SQL with the driver's own
   * placeholders, and no state check of its own (the store must find an ended transaction itself
   * where it can: on PostgreSQL; SQLite's check is the library's, here `inTransaction`).
   */
  foreign(tx: Tx): ForeignTransaction;
  /** A business write (one row in the store's business_effects table) inside the caller's transaction. */
  businessWrite(tx: Tx, key: string): Promise<void>;
  /** How many committed business rows have this key, read on a separate connection. */
  countBusinessRows(key: string): Promise<number>;
  /** A connection of its own that reads the committed business rows per key (what another process would see). */
  openBusinessRowsReader(): Promise<BusinessRowsReader>;
  /** Closes every connection and removes the database. Safe to call twice. */
  close(): Promise<void>;
}

export interface BusinessRowsReader {
  /** Committed business rows per key. */
  counts(): Promise<Record<string, number>>;
  close(): Promise<void>;
}

export interface StoreFactory {
  readonly name: string;
  /**
   * Whether this store can run here (e.g. a database server answers). A store that returns false
   * is left out of the run; it should say so loudly itself, or throw when it must run (CI).
   * Absent means always available.
   */
  available?(): Promise<boolean>;
  /** What its stores' completions do with a message's row (see describeEachStoreDeleting). */
  readonly onComplete: OnComplete;
  /** A fresh, migrated, empty database whose store takes every time from `clock`. */
  create(clock: ManualClock): Promise<StoreHarness>;
}

/** The store options every factory's stores take: the factory's onComplete. */
type HarnessOptions = { readonly onComplete: OnComplete };

const sqliteFactory = (options: HarnessOptions): StoreFactory => ({
  name: "sqlite",
  onComplete: options.onComplete,
  async create(clock: ManualClock): Promise<StoreHarness<SqliteTx>> {
    const dir = mkdtempSync(join(tmpdir(), "wassal-conformance-"));
    const path = join(dir, "outbox.db");
    const open = async (): Promise<SqliteOutboxStore> => {
      const store = new SqliteOutboxStore({ path, clock, audit: true, ...options });
      await store.migrate();
      return store;
    };
    let current = await open();
    await current.transaction((tx) => {
      tx.exec("CREATE TABLE business_effects (key TEXT NOT NULL) STRICT");
    });
    const others: SqliteOutboxStore[] = [];
    let closed = false;
    return {
      get store() {
        return current;
      },
      async reopen() {
        await current.close();
        current = await open();
        return current;
      },
      async connect() {
        const other = await open();
        others.push(other);
        return other;
      },
      async outsideTransaction() {
        return current.db;
      },
      foreign: (tx) => ({
        placeholders: "question",
        problem: () => (tx.inTransaction ? null : "no transaction is open on this connection"),
        query: async (sql, params) => tx.prepare(sql).all(...params) as Record<string, unknown>[],
      }),
      async businessWrite(tx, key) {
        tx.prepare("INSERT INTO business_effects (key) VALUES (?)").run(key);
      },
      async countBusinessRows(key) {
        // A separate connection sees only what was committed.
        const reader = new Database(path, { fileMustExist: true });
        try {
          return reader.prepare("SELECT count(*) FROM business_effects WHERE key = ?").pluck().get(key) as number;
        } finally {
          reader.close();
        }
      },
      async openBusinessRowsReader() {
        const db = new Database(path, { readonly: true, fileMustExist: true });
        const query = db.prepare("SELECT key, count(*) AS n FROM business_effects GROUP BY key");
        return {
          counts: async () => Object.fromEntries((query.all() as { key: string; n: number }[]).map((r) => [r.key, r.n])),
          close: async () => void db.close(),
        };
      },
      async close() {
        if (closed) return;
        closed = true;
        for (const other of others) await other.close();
        await current.close();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  },
});

const postgresFactory = (options: HarnessOptions): StoreFactory => ({
  name: "postgres",
  onComplete: options.onComplete,
  available: postgresAvailable,
  async create(clock: ManualClock): Promise<StoreHarness<PostgresTx>> {
    // Each test gets a schema of its own, dropped when the test file ends.
    const schema = freshSchema("wassal_conformance");
    const open = async (): Promise<PostgresOutboxStore> => {
      const store = await PostgresOutboxStore.connect({ url: TEST_DATABASE_URL, schema, clock, maxConnections: 4, audit: true, ...options });
      await store.migrate();
      return store;
    };
    let current = await open();
    await current.transaction(async (tx) => {
      await tx.query(`CREATE TABLE ${schema}.business_effects (key text NOT NULL)`);
    });
    const others: PostgresOutboxStore[] = [];
    const loose: pg.PoolClient[] = [];
    let closed = false;
    return {
      get store() {
        return current;
      },
      async reopen() {
        await current.close();
        current = await open();
        return current;
      },
      async connect() {
        const other = await open();
        others.push(other);
        return other;
      },
      async outsideTransaction() {
        const client = await current.pool.connect();
        loose.push(client);
        return client;
      },
      foreign: (tx) => ({
        placeholders: "numbered",
        problem: () => null,
        query: async (sql, params) => (await tx.query(sql, params as unknown[])).rows as Record<string, unknown>[],
      }),
      async businessWrite(tx, key) {
        await tx.query(`INSERT INTO ${schema}.business_effects (key) VALUES ($1)`, [key]);
      },
      async countBusinessRows(key) {
        // A separate connection sees only what was committed.
        const reader = new pg.Client({ connectionString: TEST_DATABASE_URL });
        await reader.connect();
        try {
          return (await reader.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${schema}.business_effects WHERE key = $1`, [key])).rows[0]?.n ?? 0;
        } finally {
          await reader.end();
        }
      },
      async openBusinessRowsReader() {
        const client = new pg.Client({ connectionString: TEST_DATABASE_URL });
        await client.connect();
        const sql = `SELECT key, count(*)::int AS n FROM ${schema}.business_effects GROUP BY key`;
        return {
          counts: async () => Object.fromEntries((await client.query<{ key: string; n: number }>(sql)).rows.map((r) => [r.key, r.n])),
          close: () => client.end(),
        };
      },
      async close() {
        if (closed) return;
        closed = true;
        for (const client of loose) client.release();
        for (const other of others) await other.close();
        await current.close();
      },
    };
  },
});

const mariadbFactory = (options: HarnessOptions): StoreFactory => ({
  name: "mariadb",
  onComplete: options.onComplete,
  available: mariadbAvailable,
  async create(clock: ManualClock): Promise<StoreHarness<MariaDbTx>> {
    // Each test gets a database of its own, dropped when the harness closes.
    const database = await freshDatabase();
    const open = async (): Promise<MariaDbOutboxStore> => {
      const store = await MariaDbOutboxStore.connect({ url: database.url, clock, maxConnections: 4, audit: true, ...options });
      await store.migrate();
      return store;
    };
    let current = await open();
    await current.pool.query("CREATE TABLE business_effects (`key` VARCHAR(255) NOT NULL) ENGINE=InnoDB");
    const others: MariaDbOutboxStore[] = [];
    const loose: mysql.PoolConnection[] = [];
    const count = async (connection: mysql.Connection): Promise<Record<string, number>> => {
      const [rows] = await connection.query<mysql.RowDataPacket[]>("SELECT `key`, COUNT(*) AS n FROM business_effects GROUP BY `key`");
      return Object.fromEntries(rows.map((r) => [String(r.key), Number(r.n)]));
    };
    let closed = false;
    return {
      get store() {
        return current;
      },
      async reopen() {
        await current.close();
        current = await open();
        return current;
      },
      async connect() {
        const other = await open();
        others.push(other);
        return other;
      },
      async outsideTransaction() {
        const connection = await current.pool.getConnection();
        loose.push(connection);
        return connection;
      },
      foreign: (tx) => ({
        placeholders: "question",
        problem: () => null,
        query: async (sql, params) => {
          const [result] = await tx.query(sql, params as unknown[]);
          return Array.isArray(result) ? (result as Record<string, unknown>[]) : [];
        },
      }),
      async businessWrite(tx, key) {
        await tx.query("INSERT INTO business_effects (`key`) VALUES (?)", [key]);
      },
      async countBusinessRows(key) {
        // A separate connection sees only what was committed.
        const reader = await mariadbConnection(database.name);
        try {
          return (await count(reader))[key] ?? 0;
        } finally {
          await reader.end();
        }
      },
      async openBusinessRowsReader() {
        const reader = await mariadbConnection(database.name);
        return { counts: () => count(reader), close: () => reader.end() };
      },
      async close() {
        if (closed) return;
        closed = true;
        for (const connection of loose) connection.release();
        for (const other of others) await other.close();
        await current.close();
        await database.drop();
      },
    };
  },
});

/** Every store the suite knows. */
export const ALL_STORES: readonly StoreFactory[] = [sqliteFactory, postgresFactory, mariadbFactory].map((factory) =>
  factory({ onComplete: selectOne("WASSAL_TEST_ON_COMPLETE", process.env.WASSAL_TEST_ON_COMPLETE, ON_COMPLETE_MODES, "keep") }),
);

/** How a describe names a factory's stores: the kind, and the completion mode when it deletes. */
function storeTitle(factory: StoreFactory): string {
  return factory.onComplete === "keep" ? `${factory.name} store` : `${factory.name} store, onComplete ${factory.onComplete}`;
}

const DELETING: Readonly<Record<string, StoreFactory>> = Object.fromEntries(
  [sqliteFactory, postgresFactory, mariadbFactory].map((factory) => {
    const deleting = factory({ onComplete: "delete" });
    return [deleting.name, deleting];
  }),
);

/**
 * The stores WASSAL_TEST_STORES selects that can run here. A selection that names an unknown store
 * or leaves none that can run fails every file of the suite loudly (see test/support/selection.ts).
 */
export const storeFactories: StoreFactory[] = await selectRunnable("WASSAL_TEST_STORES", process.env.WASSAL_TEST_STORES, ALL_STORES);

/** Declares the same describe block once per selected store, titled "<store> store: <title>". */
export function describeEachStore(title: string, body: (factory: StoreFactory) => void): void {
  for (const factory of storeFactories) {
    describe(`${storeTitle(factory)}: ${title}`, () => body(factory));
  }
}

/** As describeEachStore, on each selected store opened with onComplete "delete". */
export function describeEachStoreDeleting(title: string, body: (factory: StoreFactory) => void): void {
  for (const keeping of storeFactories) {
    const factory = DELETING[keeping.name] as StoreFactory;
    describe(`${storeTitle(factory)}: ${title}`, () => body(factory));
  }
}

/** What each test gets: its own clock and its own fresh database. */
export interface StoreContext {
  readonly clock: ManualClock;
  readonly harness: StoreHarness;
  /** The harness's current store (follows `reopen`). */
  readonly store: OutboxStore<unknown>;
}

/** The time every test starts at. */
export const START = new Date("2026-01-01T09:00:00.000Z");

/**
 * Registers hooks that give every test in the enclosing describe a fresh ManualClock and a fresh
 * database, closed (and deleted) after the test. Call it inside describe; call the returned
 * function inside a test.
 */
export function useStoreHarness(factory: StoreFactory): () => StoreContext {
  let context: StoreContext | undefined;
  beforeEach(async () => {
    const clock = new ManualClock(START);
    const harness = await factory.create(clock);
    context = {
      clock,
      harness,
      get store() {
        return harness.store;
      },
    };
  });
  afterEach(async () => {
    const done = context;
    context = undefined;
    await done?.harness.close();
  });
  return () => {
    if (context === undefined) throw new Error("useStoreHarness: the store context exists only inside a test");
    return context;
  };
}

/** Enqueues one message in its own committed transaction. */
export async function enqueueMessage<P extends JsonValue = JsonValue>(
  store: OutboxStore<unknown>,
  message?: Partial<NewMessage<P>>,
): Promise<OutboxMessage<P>> {
  const full = { type: "test.message", payload: { n: 1 } as JsonValue, ...message } as NewMessage<P>;
  return store.transaction((tx) => store.enqueue(tx, full));
}

/** Enqueues `count` messages, one transaction each, advancing the clock `stepMs` between them. */
export async function enqueueMessages(store: OutboxStore<unknown>, clock: ManualClock, count: number, stepMs = 1): Promise<OutboxMessage[]> {
  const messages: OutboxMessage[] = [];
  for (let n = 0; n < count; n += 1) {
    if (n > 0) clock.advance(stepMs);
    messages.push(await enqueueMessage(store, { payload: { n } }));
  }
  return messages;
}

/** Claims with limit 1 and expects exactly one lease. */
export async function claimNext(store: OutboxStore<unknown>, owner: string, leaseMs: number): Promise<Lease> {
  const leases = await store.claim(owner, { limit: 1, leaseMs });
  expect(leases, `${owner} expected to claim exactly one message`).toHaveLength(1);
  return leases[0]!;
}

/** Reads a message that must exist. */
export async function mustGet(store: OutboxStore<unknown>, messageId: string): Promise<OutboxMessage> {
  const message = await store.getMessage(messageId);
  expect(message, `message ${messageId} expected to exist`).toBeDefined();
  return message!;
}

/** A time `ms` after the start of every test. */
export function at(ms: number): Date {
  return new Date(START.getTime() + ms);
}

/** Enqueues a message whose payload is `{ label }`, with the ordering key `key` if given. */
export async function enqueueKeyed(store: OutboxStore<unknown>, label: string, key?: string) {
  return enqueueMessage(store, { payload: { label }, ...(key === undefined ? {} : { key }) });
}

/** The label of a message enqueued by enqueueKeyed. */
export const label = (lease: Lease) => (lease.message.payload as { label: string }).label;

/** Claims and completes until nothing is claimable: each claimed message as "label#keySeq", in claim order. */
export async function drain(store: OutboxStore<unknown>, leaseMs = 1_000): Promise<string[]> {
  const seen: string[] = [];
  for (let leases = await store.claim("w", { limit: 10, leaseMs }); leases.length > 0; leases = await store.claim("w", { limit: 10, leaseMs })) {
    seen.push(...leases.map((lease) => `${label(lease)}#${lease.message.keySeq}`));
    await store.completeMany(leases.map((lease) => ({ lease })));
  }
  return seen;
}

// A completed message in either completion mode. With onComplete "keep" its row stays, status
// "processed"; with "delete" the row is gone, and everything that would have shown the processed
// row shows nothing instead. These helpers let one test check either mode: in keep mode exactly
// what it checked before, in delete mode the row's absence.

/** `kept` when the factory's stores keep completed messages as processed rows, `deleted` when they delete them. */
export function whenKept<T>(factory: StoreFactory, kept: T, deleted: T): T {
  return factory.onComplete === "keep" ? kept : deleted;
}

/**
 * Expects a completed message to be finished for good: in keep mode its row is there, processed,
 * and matches `kept` (more fields of the processed row); in delete mode its row is gone.
 */
export async function expectFinished(store: OutboxStore<unknown>, factory: StoreFactory, messageId: string, kept: Partial<OutboxMessage> = {}): Promise<void> {
  const message = await store.getMessage(messageId);
  if (factory.onComplete === "keep") expect(message, `message ${messageId} expected to be kept as processed`).toMatchObject({ status: "processed", ...kept });
  else expect(message, `message ${messageId} expected to be deleted by its completion`).toBeUndefined();
}

/** A cancelled message: kept as cancelled (finished, no lease, lockedBy naming the cancel), or deleted in delete mode. */
export async function expectCancelled(store: OutboxStore<unknown>, factory: StoreFactory, messageId: string, kept: Partial<OutboxMessage> = {}): Promise<void> {
  const message = await store.getMessage(messageId);
  if (factory.onComplete === "keep")
    expect(message, `message ${messageId} expected to be kept as cancelled`).toMatchObject({
      status: "cancelled",
      lockedUntil: null,
      processedAt: expect.any(Date),
      ...kept,
    });
  else expect(message, `message ${messageId} expected to be deleted by its cancel`).toBeUndefined();
}

/**
 * What a refused (lease-lost) operation names as the current holder of a completed message: the
 * processed row matching `holder` in keep mode, null in delete mode (no row holds it any more).
 */
export function finishedHolder(factory: StoreFactory, holder: Partial<MessageHolder> = {}): Partial<MessageHolder> | null {
  return whenKept(factory, { status: "processed", ...holder }, null);
}

/** The status claimMessage and redrive report for a completed message: "processed", or "missing" once its row is deleted. */
export function finishedStatus(factory: StoreFactory): "processed" | "missing" {
  return whenKept(factory, "processed", "missing");
}
