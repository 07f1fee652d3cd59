// Opens an outbox (and the payments tables) from one string: a postgres:// URL or a SQLite file
// path. The CLI and anything else that takes a "--db" use this, so both stores open the same way.

import { existsSync } from "node:fs";
import type { Clock } from "../outbox/clock.js";
import { DatabaseOpenError, InvalidArgumentError } from "../outbox/errors.js";
import type { OutboxStore } from "../outbox/store.js";
import type { Tracing } from "../outbox/tracing.js";
import type { PaymentsRepository } from "../payments/types.js";
import { isPostgresUrl, redactUrl } from "./postgres/connect.js";

export { isPostgresUrl } from "./postgres/connect.js";
import { PostgresPaymentsRepository } from "./postgres/payments-repository.js";
import { PostgresOutboxStore } from "./postgres/postgres-outbox-store.js";
import { fileHasTable, type Synchronous } from "./sqlite/open-database.js";
import { SqlitePaymentsRepository } from "./sqlite/payments-repository.js";
import { SqliteOutboxStore } from "./sqlite/sqlite-outbox-store.js";

export interface OpenOutboxOptions {
  /** PostgreSQL schema (default "wassal"). */
  readonly schema?: string;
  /** SQLite durability (default FULL). */
  readonly synchronous?: Synchronous;
  readonly clock?: Clock;
  /** PostgreSQL pool size. */
  readonly maxConnections?: number;
  /** Shown in pg_stat_activity. */
  readonly applicationName?: string;
  /** Refuse a SQLite path that does not exist yet (for commands that only read or repair). */
  readonly mustExist?: boolean;
  /**
   * Only look (implies mustExist): nothing is migrated, a SQLite file is opened read-only and a
   * PostgreSQL store's sessions are read-only, so a database this process may read but not write,
   * or one a newer Wassal migrated (refused for writing: DatabaseTooNewError), can still be inspected.
   */
  readonly readOnly?: boolean;
  /** Keep the audit trail (outbox_audit). */
  readonly audit?: boolean;
  /** Trace enqueues (see otelTracing in "wassal/observability"). */
  readonly tracing?: Tracing;
}

export interface OpenedOutbox {
  readonly kind: "sqlite" | "postgres";
  /** The path, or the URL without its password. */
  readonly location: string;
  readonly store: OutboxStore<unknown>;
  readonly payments: PaymentsRepository<unknown>;
  close(): Promise<void>;
}

/** Opens and migrates the outbox and the payments tables (or, with readOnly, only opens them). */
export async function openOutbox(db: string, options: OpenOutboxOptions = {}): Promise<OpenedOutbox> {
  const opened = isPostgresUrl(db) ? await openPostgres(db, options) : openSqlite(db, options);
  const { store } = opened;
  try {
    // Commands that only read or repair must not create (or migrate) a database that is not Wassal's.
    if ((options.mustExist || options.readOnly) && !(await store.isInstalled())) throw new DatabaseOpenError(opened.missing);
    if (!options.readOnly) {
      await store.migrate();
      await opened.payments.migrate();
    }
    return { kind: opened.kind, location: opened.location, store, payments: opened.payments, close: () => store.close() };
  } catch (error) {
    await store.close();
    throw error;
  }
}

/** Opens the outbox, runs `work` with it, and closes it whatever happens. */
export async function withOutbox<T>(db: string, options: OpenOutboxOptions, work: (outbox: OpenedOutbox) => Promise<T>): Promise<T> {
  const outbox = await openOutbox(db, options);
  try {
    return await work(outbox);
  } finally {
    await outbox.close();
  }
}

interface Unmigrated {
  readonly kind: "sqlite" | "postgres";
  readonly location: string;
  readonly store: OutboxStore<unknown>;
  readonly payments: PaymentsRepository<unknown>;
  /** What to say when `mustExist` finds no outbox there. */
  readonly missing: string;
}

async function openPostgres(db: string, options: OpenOutboxOptions): Promise<Unmigrated> {
  const store = await PostgresOutboxStore.connect({
    url: db,
    ...(options.schema === undefined ? {} : { schema: options.schema }),
    ...(options.clock === undefined ? {} : { clock: options.clock }),
    ...(options.maxConnections === undefined ? {} : { maxConnections: options.maxConnections }),
    ...(options.applicationName === undefined ? {} : { applicationName: options.applicationName }),
    ...(options.audit === undefined ? {} : { audit: options.audit }),
    ...(options.tracing === undefined ? {} : { tracing: options.tracing }),
    ...(options.readOnly ? { readOnly: true } : {}),
  });
  return {
    kind: "postgres",
    location: `${redactUrl(db)} (schema ${store.schema})`,
    store: store as OutboxStore<unknown>,
    payments: new PostgresPaymentsRepository(store) as PaymentsRepository<unknown>,
    missing: `no Wassal outbox in schema ${store.schema} at ${redactUrl(db)}; check --schema (default wassal), or start a worker or create a payment there first`,
  };
}

function openSqlite(db: string, options: OpenOutboxOptions): Unmigrated {
  const missing = `${db} is a SQLite database but holds no Wassal outbox; give the path of a Wassal database (one a worker, the lab or 'payments create' has used)`;
  if (options.mustExist || options.readOnly) {
    if (!existsSync(db)) throw new DatabaseOpenError(`no database at ${db}; give the path of an existing Wassal SQLite file or a postgres:// URL`);
    // Look before opening: opening for Wassal would already change someone else's file.
    if (!fileHasTable(db, "outbox_messages")) throw new DatabaseOpenError(missing);
  }
  const store = new SqliteOutboxStore({
    path: db,
    ...(options.synchronous === undefined ? {} : { synchronous: options.synchronous }),
    ...(options.clock === undefined ? {} : { clock: options.clock }),
    ...(options.audit === undefined ? {} : { audit: options.audit }),
    ...(options.tracing === undefined ? {} : { tracing: options.tracing }),
    ...(options.readOnly ? { readOnly: true } : {}),
  });
  return {
    kind: "sqlite",
    location: db,
    store: store as OutboxStore<unknown>,
    payments: new SqlitePaymentsRepository(store) as PaymentsRepository<unknown>,
    missing,
  };
}

/** The payments tables' repository on the store's own database (for the payments handlers module). */
export function paymentsRepositoryFor(store: unknown): PaymentsRepository<unknown> {
  if (store instanceof PostgresOutboxStore) return new PostgresPaymentsRepository(store) as PaymentsRepository<unknown>;
  if (store instanceof SqliteOutboxStore) return new SqlitePaymentsRepository(store) as PaymentsRepository<unknown>;
  throw new InvalidArgumentError("the payments handlers need a SQLite or PostgreSQL store opened by Wassal");
}
