// The payments domain on every store. A factory opens a fresh, empty database with the outbox and
// payments tables (SQLite: a file of its own; PostgreSQL: a schema of its own, dropped when the
// test file ends; MariaDB: a database of its own, dropped when the test file ends), and hands back what a store-agnostic test needs: the store, the repository,
// more connections to the same database, and a count of committed payment rows.
//
// As in the conformance suite, WASSAL_TEST_STORES=sqlite,postgres,mariadb picks the stores (default:
// all), and a server store is skipped loudly when no server answers (fatal under CI: see
// test/support/postgres.ts and test/support/mariadb.ts).

import { join } from "node:path";
import type { RowDataPacket } from "mysql2/promise";
import { afterAll } from "vitest";
import type { ManualClock } from "../../src/outbox/clock.js";
import type { OutboxStore } from "../../src/outbox/store.js";
import type { PaymentsRepository } from "../../src/payments/types.js";
import { MariaDbPaymentsRepository } from "../../src/lab/stores/mariadb-payments.js";
import { MariaDbOutboxStore } from "../../src/stores/mariadb/mariadb-outbox-store.js";
import { PostgresPaymentsRepository } from "../../src/lab/stores/postgres-payments.js";
import { PostgresOutboxStore } from "../../src/stores/postgres/postgres-outbox-store.js";
import { SqlitePaymentsRepository } from "../../src/lab/stores/sqlite-payments.js";
import { SqliteOutboxStore } from "../../src/stores/sqlite/sqlite-outbox-store.js";
import { type FreshDatabase, freshDatabase, mariadbAvailable } from "../support/mariadb.js";
import { freshSchema, postgresAvailable, TEST_DATABASE_URL } from "../support/postgres.js";
import { selectRunnable } from "../support/selection.js";
import { tempDir } from "../support/temp.js";

/** One application instance: a store connection and the payments repository on it. */
export interface PaymentsConnection<Tx = unknown> {
  readonly store: OutboxStore<Tx>;
  readonly repository: PaymentsRepository<Tx>;
}

/** A fresh database with the outbox and payments tables. */
export interface PaymentsDatabase<Tx = unknown> extends PaymentsConnection<Tx> {
  /** Opens another connection to the same database (another application instance). */
  connect(): Promise<PaymentsConnection<Tx>>;
  /** Committed payment rows, counted with the store's own SQL on the store's connection. */
  countPayments(): Promise<number>;
}

export interface PaymentsStoreFactory {
  readonly name: "sqlite" | "postgres" | "mariadb";
  /** What the error of a violated CHECK constraint carries on this store (mysql2 names MariaDB's 4025 after MySQL's, so MariaDB's is matched by number). */
  readonly checkViolation: Readonly<Record<string, string | number>>;
  available?(): Promise<boolean>;
  create(clock: ManualClock): Promise<PaymentsDatabase>;
}

// Everything opened by any test, closed by closeOpenedStores() (call it in afterEach).
const opened: Array<{ close(): Promise<void> }> = [];

export async function closeOpenedStores(): Promise<void> {
  for (const store of opened.splice(0)) await store.close();
}

// Collected with the test file, removed when it ends.
const sqliteDir = tempDir("wassal-payments-");
let fileNumber = 0;

/** A new SQLite file with both tables; the concrete types, for tests that need raw SQL. */
export async function openSqlitePayments(clock: ManualClock): Promise<PaymentsDatabase & { readonly store: SqliteOutboxStore; readonly path: string }> {
  fileNumber += 1;
  const path = join(sqliteDir, `payments-${fileNumber}.db`);
  const open = async () => {
    const store = new SqliteOutboxStore({ path, clock });
    opened.push(store);
    await store.migrate();
    const repository = new SqlitePaymentsRepository(store);
    await repository.migrate();
    return { store, repository };
  };
  const main = await open();
  return {
    ...main,
    path,
    connect: open,
    countPayments: async () => main.store.db.prepare("SELECT count(*) FROM payments").pluck().get() as number,
  };
}

/** A new PostgreSQL schema with both tables; the concrete types, for tests that need raw SQL. */
export async function openPostgresPayments(clock: ManualClock): Promise<PaymentsDatabase & { readonly store: PostgresOutboxStore; readonly schema: string }> {
  const schema = freshSchema("wassal_payments");
  const open = async () => {
    const store = await PostgresOutboxStore.connect({ url: TEST_DATABASE_URL, schema, clock, maxConnections: 4 });
    opened.push(store);
    await store.migrate();
    const repository = new PostgresPaymentsRepository(store);
    await repository.migrate();
    return { store, repository };
  };
  const main = await open();
  return {
    ...main,
    schema,
    connect: open,
    countPayments: async () => (await main.store.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${schema}.payments`)).rows[0]!.n,
  };
}

// The MariaDB databases made by this test file, dropped when it ends.
const databases: FreshDatabase[] = [];
afterAll(async () => {
  for (const database of databases.splice(0)) await database.drop();
});

/** A new MariaDB database with both tables; the concrete types, for tests that need raw SQL. */
export async function openMariaDbPayments(clock: ManualClock): Promise<PaymentsDatabase & { readonly store: MariaDbOutboxStore }> {
  const database = await freshDatabase();
  databases.push(database);
  const open = async () => {
    const store = await MariaDbOutboxStore.connect({ url: database.url, clock, maxConnections: 4 });
    opened.push(store);
    await store.migrate();
    const repository = new MariaDbPaymentsRepository(store);
    await repository.migrate();
    return { store, repository };
  };
  const main = await open();
  return {
    ...main,
    connect: open,
    countPayments: async () => {
      const [rows] = await main.store.pool.query<RowDataPacket[]>("SELECT COUNT(*) AS n FROM payments");
      return Number(rows[0]?.n);
    },
  };
}

const ALL: readonly PaymentsStoreFactory[] = [
  { name: "sqlite", checkViolation: { code: "SQLITE_CONSTRAINT_CHECK" }, create: openSqlitePayments },
  { name: "postgres", checkViolation: { code: "23514" }, available: postgresAvailable, create: openPostgresPayments },
  { name: "mariadb", checkViolation: { errno: 4025 }, available: mariadbAvailable, create: openMariaDbPayments },
];

/** The selected stores that can run here (a selection that leaves none fails the file: see test/support/selection.ts). */
export const paymentsStores: readonly PaymentsStoreFactory[] = await selectRunnable("WASSAL_TEST_STORES", process.env.WASSAL_TEST_STORES, ALL);

/** True when the PostgreSQL store is selected and its server answers. */
export const postgresSelected = paymentsStores.some((f) => f.name === "postgres");
/** True when the SQLite store is selected. */
export const sqliteSelected = paymentsStores.some((f) => f.name === "sqlite");
