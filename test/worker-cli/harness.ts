// Shared by the `wassal worker` / `wassal outbox` end-to-end tests: reading a database (a SQLite
// file, a PostgreSQL schema or a MariaDB database) directly to check what the CLI processes did, polling it with a
// deadline, and reading what they printed. Starting and stopping the processes is
// test/support/cli.ts's.
//
// Needs `npm run build` first (`npm test` does it).

import { existsSync, mkdtempSync } from "node:fs";
import { join } from "node:path";
import Database from "better-sqlite3";
import type mysql from "mysql2/promise";
import pg from "pg";
import { expect } from "vitest";
import { openOutbox, type OpenedOutbox } from "../../src/stores/open-outbox.js";
import type { StatusCounts } from "../../src/outbox/types.js";
import type { CliProcess } from "../support/cli.js";
import { freshDatabase, mariadbConnection, type FreshDatabase } from "../support/mariadb.js";
import { freshSchema, TEST_DATABASE_URL } from "../support/postgres.js";
import { until } from "../support/wait.js";

// ---------------------------------------------------------------------------------------------
// Output.

/** The JSON log lines (pino) a worker wrote on stderr. */
export function logLines(stderr: string): { level: number; msg: string; event?: string; error?: string; messageId?: string; [key: string]: unknown }[] {
  return stderr
    .split("\n")
    .filter((line) => line.trim() !== "")
    .map((line) => {
      try {
        return JSON.parse(line) as { level: number; msg: string };
      } catch {
        throw new Error(`a worker's stderr line is not a JSON log line: ${JSON.stringify(line)}`);
      }
    });
}

// ---------------------------------------------------------------------------------------------
// Databases: a SQLite file, a PostgreSQL schema or a MariaDB database, read directly.

export type StoreKind = "sqlite" | "postgres" | "mariadb";

export interface MessageRow {
  readonly id: string;
  readonly type: string;
  readonly status: string;
  readonly lockedBy: string | null;
  readonly leaseToken: number;
  readonly attempts: number;
  readonly lastError: string | null;
  /** Epoch milliseconds (the store's clock), or null. */
  readonly lockedUntil: number | null;
}

export interface PaymentRow {
  readonly key: string;
  readonly status: string;
  readonly transactionId: string | null;
}

export interface Target {
  readonly kind: StoreKind;
  /** The --db value. */
  readonly db: string;
  /** --db (and --schema on PostgreSQL), for every command. */
  readonly args: readonly string[];
  messages(): Promise<MessageRow[]>;
  counts(): Promise<StatusCounts>;
  payments(): Promise<PaymentRow[]>;
  /** The library's view of the same database (for enqueueing what the CLI cannot). Close it. */
  open(): Promise<OpenedOutbox>;
  close(): Promise<void>;
}

const MESSAGE_COLUMNS = "id, type, status, locked_by, locked_until, lease_token, attempts, last_error";

interface RawMessage {
  id: number | string;
  type: string;
  status: string;
  locked_by: string | null;
  lease_token: number;
  attempts: number;
  last_error: string | null;
  locked_until: number | Date | null;
}

function toMessage(row: RawMessage): MessageRow {
  return {
    id: String(row.id),
    type: row.type,
    status: row.status,
    lockedBy: row.locked_by,
    leaseToken: Number(row.lease_token),
    attempts: Number(row.attempts),
    lastError: row.last_error,
    lockedUntil: row.locked_until === null ? null : row.locked_until instanceof Date ? row.locked_until.getTime() : Number(row.locked_until),
  };
}

function toCounts(rows: readonly { status: string; n: number | string }[]): StatusCounts {
  const counts: StatusCounts = { pending: 0, processing: 0, processed: 0, dead: 0, cancelled: 0 };
  for (const row of rows) counts[row.status as keyof StatusCounts] = Number(row.n);
  return counts;
}

const targets: Target[] = [];

/** Closes the connections every target of this file opened (afterAll). */
export async function closeTargets(): Promise<void> {
  await Promise.all(targets.splice(0).map((t) => t.close()));
}

/** A new, empty database: a SQLite file under `dir`, or a fresh schema (dropped when the file ends). */
export function newTarget(kind: Exclude<StoreKind, "mariadb">, dir: string): Target {
  const target = kind === "sqlite" ? sqliteTarget(join(mkdtempSync(join(dir, "db-")), "outbox.db")) : postgresTarget(freshSchema("wassal_wcli"));
  targets.push(target);
  return target;
}

/**
 * newTarget for any store, MariaDB too: a fresh MariaDB database (created here, since the
 * commands need it to exist, and dropped by closeTargets).
 */
export async function createTarget(kind: StoreKind, dir: string): Promise<Target> {
  if (kind !== "mariadb") return newTarget(kind, dir);
  const database = await freshDatabase();
  let target: Target;
  try {
    target = mariadbTarget(database, await mariadbConnection(database.name));
  } catch (error) {
    await database.drop();
    throw error;
  }
  targets.push(target);
  return target;
}

function sqliteTarget(path: string): Target {
  const read = <T>(work: (db: Database.Database) => T): T | undefined => {
    if (!existsSync(path)) return undefined;
    const db = new Database(path, { readonly: true, fileMustExist: true, timeout: 5000 });
    try {
      return work(db);
    } finally {
      db.close();
    }
  };
  const hasTable = (db: Database.Database, name: string) => db.prepare("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?").get(name) !== undefined;
  return {
    kind: "sqlite",
    db: path,
    args: ["--db", path],
    async messages() {
      return (
        read((db) =>
          hasTable(db, "outbox_messages")
            ? (db.prepare(`SELECT ${MESSAGE_COLUMNS} FROM outbox_messages ORDER BY id`).all() as RawMessage[]).map(toMessage)
            : [],
        ) ?? []
      );
    },
    async counts() {
      return toCounts(
        read((db) =>
          hasTable(db, "outbox_messages")
            ? (db.prepare("SELECT status, count(*) AS n FROM outbox_messages GROUP BY status").all() as { status: string; n: number }[])
            : [],
        ) ?? [],
      );
    },
    async payments() {
      return (
        read((db) =>
          hasTable(db, "payments")
            ? (db
                .prepare("SELECT idempotency_key AS key, payment_status AS status, transaction_id AS transactionId FROM payments ORDER BY id")
                .all() as PaymentRow[])
            : [],
        ) ?? []
      );
    },
    open: () => openOutbox(path),
    async close() {},
  };
}

function postgresTarget(schema: string): Target {
  const pool = new pg.Pool({ connectionString: TEST_DATABASE_URL, max: 2 });
  pool.on("error", () => undefined);
  const exists = async (table: string) => (await pool.query("SELECT to_regclass($1) AS t", [`${schema}.${table}`])).rows[0]?.t !== null;
  return {
    kind: "postgres",
    db: TEST_DATABASE_URL,
    args: ["--db", TEST_DATABASE_URL, "--schema", schema],
    async messages() {
      if (!(await exists("outbox_messages"))) return [];
      return (await pool.query<RawMessage>(`SELECT ${MESSAGE_COLUMNS} FROM ${schema}.outbox_messages ORDER BY id`)).rows.map(toMessage);
    },
    async counts() {
      if (!(await exists("outbox_messages"))) return toCounts([]);
      return toCounts((await pool.query<{ status: string; n: string }>(`SELECT status, count(*) AS n FROM ${schema}.outbox_messages GROUP BY status`)).rows);
    },
    async payments() {
      if (!(await exists("payments"))) return [];
      return (
        await pool.query<PaymentRow>(
          `SELECT idempotency_key AS key, payment_status AS status, transaction_id AS "transactionId" FROM ${schema}.payments ORDER BY id`,
        )
      ).rows;
    },
    open: () => openOutbox(TEST_DATABASE_URL, { schema, maxConnections: 2 }),
    close: () => pool.end(),
  };
}

function mariadbTarget(database: FreshDatabase, connection: mysql.Connection): Target {
  connection.on("error", () => undefined);
  const query = async <T>(sql: string, values: unknown[] = []): Promise<T[]> => (await connection.query(sql, values))[0] as T[];
  const exists = async (table: string) =>
    (await query("SELECT 1 FROM information_schema.tables WHERE table_schema = ? AND table_name = ?", [database.name, table])).length > 0;
  return {
    kind: "mariadb",
    db: database.url,
    args: ["--db", database.url],
    async messages() {
      if (!(await exists("outbox_messages"))) return [];
      return (await query<RawMessage>(`SELECT ${MESSAGE_COLUMNS} FROM outbox_messages ORDER BY id`)).map(toMessage);
    },
    async counts() {
      if (!(await exists("outbox_messages"))) return toCounts([]);
      return toCounts(await query<{ status: string; n: number | string }>("SELECT status, count(*) AS n FROM outbox_messages GROUP BY status"));
    },
    async payments() {
      if (!(await exists("payments"))) return [];
      return query<PaymentRow>("SELECT idempotency_key AS `key`, payment_status AS status, transaction_id AS transactionId FROM payments ORDER BY id");
    },
    open: () => openOutbox(database.url, { maxConnections: 2 }),
    async close() {
      await connection.end().catch(() => undefined);
      await database.drop();
    },
  };
}

/** Every payment settled the way the (deterministic) provider answers, with a transaction id exactly when Paid. */
export function expectSettled(payments: readonly PaymentRow[], outcomeFor: (key: string) => "Paid" | "Failed"): void {
  const wrong = payments.filter((p) => p.status !== outcomeFor(p.key) || (p.status === "Paid") !== (p.transactionId !== null));
  expect(wrong, "payments not settled as the provider says, or with a transaction id when not Paid (or none when Paid)").toEqual([]);
  const ids = payments.flatMap((p) => (p.transactionId === null ? [] : [p.transactionId]));
  expect(ids.every((id) => /^TXN-[0-9A-F]{16}$/.test(id))).toBe(true);
  expect(new Set(ids).size, "transaction ids are unique").toBe(ids.length);
}

// ---------------------------------------------------------------------------------------------
// Waiting for the database.

/** How many rows have each status (for failure messages). */
export function countsOf(rows: readonly MessageRow[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const row of rows) counts[row.status] = (counts[row.status] ?? 0) + 1;
  return counts;
}

/**
 * Polls the messages until `predicate` holds and returns them; fails early if one of `alive`
 * exits meanwhile, and after `timeoutMs` with the last counts seen.
 */
export async function waitForRows(
  target: Target,
  what: string,
  predicate: (rows: MessageRow[]) => boolean,
  alive: readonly CliProcess[] = [],
  timeoutMs = 20_000,
): Promise<MessageRow[]> {
  let rows: MessageRow[] = [];
  return until(
    what,
    async () => {
      for (const p of alive)
        if (p.exit())
          throw new Error(`wassal ${p.args[0]} exited early (${JSON.stringify(p.exit())}) while waiting for ${what}; stderr: ${p.stderr().slice(-2000)}`);
      rows = await target.messages();
      return predicate(rows) ? rows : false;
    },
    { timeoutMs, intervalMs: 25, last: () => countsOf(rows) },
  );
}

/** What `wassal outbox stats --json` prints. */
export interface StatsJson {
  db: string;
  now: string;
  counts: { pending: number; processing: number; processed: number; dead: number; cancelled: number };
  oldestPendingCreatedAt: string | null;
  oldestPendingAgeMs: number | null;
  leasesByOwner: { owner: string; held: number; expired: number }[];
  expiredLeases: number;
  pendingByType: { type: string; count: number }[];
}
