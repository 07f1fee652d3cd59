// Opens an outbox from one string: a server's URL or a SQLite file path (see backends.ts for
// which backend takes which). The CLI and anything else that takes a "--db" use this, so every
// store opens the same way. It creates and upgrades Wassal's own tables only: a demo's or an
// app's tables are theirs to create.

import { DatabaseOpenError, InvalidArgumentError, NotMigratedError } from "../outbox/errors.js";
import type { InsertFeedLag } from "../outbox/insert-feed.js";
import { redactUrl } from "../outbox/redact.js";
import { openWalFeed } from "./postgres/wal-feed.js";

export { dropWalFeed } from "./postgres/wal-feed.js";
import type { Migration } from "../outbox/driver.js";
import type { OutboxStore } from "../outbox/store.js";
import type { OpenOutboxOptions } from "./backend.js";
import { backendFor } from "./backends.js";

export type { OpenOutboxOptions, StoreBackend } from "./backend.js";
export { BACKENDS, backendFor } from "./backends.js";

export interface OpenedOutbox {
  /** The backend's name: "sqlite", "postgres" or "mariadb". */
  readonly kind: string;
  /** The path, or the URL without its password. */
  readonly location: string;
  readonly store: OutboxStore<unknown>;
  close(): Promise<void>;
}

export interface OpenOutboxMigration {
  /**
   * "migrate" (the default): create or upgrade the outbox's tables. "require": refuse, with
   * NotMigratedError, a database whose outbox is missing or has migrations pending, changing
   * nothing (what an app does when migrations are a deploy step: `wassal migrate`).
   */
  readonly migrate?: "migrate" | "require";
}

/** Opens the outbox and creates or upgrades its tables (or, with readOnly, only opens it). */
export async function openOutbox(db: string, options: OpenOutboxOptions & OpenOutboxMigration = {}): Promise<OpenedOutbox> {
  const backend = backendFor(db);
  const opened = await backend.open(db, options);
  const { store } = opened;
  try {
    // Commands that only read or repair must not create (or migrate) a database that is not Wassal's.
    if ((options.mustExist || options.readOnly) && !(await store.isInstalled())) throw new DatabaseOpenError(opened.missing);
    if (!options.readOnly) {
      if (options.migrate === "require") {
        const pending = await store.pendingMigrations();
        if (pending.length > 0)
          throw new NotMigratedError(
            opened.location,
            pending.map((m) => m.name),
          );
      } else {
        await store.migrate();
      }
    }
    return { kind: backend.name, location: opened.location, store, close: () => store.close() };
  } catch (error) {
    await store.close();
    throw error;
  }
}

export interface MigrationStatus {
  /** The path, or the URL without its password (and the schema). */
  readonly location: string;
  /** The outbox's migrations not yet applied, in order, with their SQL. */
  readonly pending: readonly Migration[];
}

/** The outbox's migrations pending at `db`, read without writing anything (a database that does not exist yet has all of them pending). */
export async function migrationStatus(db: string, options: OpenOutboxOptions = {}): Promise<MigrationStatus> {
  const opened = await backendFor(db).open(db, { ...options, readOnly: true }, true);
  try {
    return { location: opened.location, pending: await opened.store.pendingMigrations() };
  } finally {
    await opened.store.close();
  }
}

/** Creates or upgrades the outbox's tables at `db`: the migrations it applied, in order (none when it was up to date). */
export async function migrateOutbox(db: string, options: OpenOutboxOptions = {}): Promise<MigrationStatus & { readonly applied: readonly string[] }> {
  const opened = await backendFor(db).open(db, { ...options, readOnly: false, mustExist: false });
  try {
    const before = await opened.store.pendingMigrations();
    await opened.store.migrate();
    const after = new Set((await opened.store.pendingMigrations()).map((m) => m.name));
    return { location: opened.location, pending: [], applied: before.map((m) => m.name).filter((name) => !after.has(name)) };
  } finally {
    await opened.store.close();
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

/** A replication slot to watch (the dashboard's --slot): its lag, read on demand, and how to let it go. */
export interface SlotWatch {
  readonly name: string;
  lag(): Promise<InsertFeedLag | null>;
  close(): Promise<void>;
}

/**
 * Watches the WAL relay's slot on the PostgreSQL server of `db` (its lag and whether a relay
 * streams from it), without taking it. InvalidArgumentError for a database that is not PostgreSQL.
 */
export function watchSlot(db: string, options: { readonly schema?: string; readonly slot: string }): SlotWatch {
  if (backendFor(db).name !== "postgres") {
    throw new InvalidArgumentError(`--slot watches a PostgreSQL replication slot, and ${redactUrl(db)} is a ${backendFor(db).name} database: leave --slot out`);
  }
  const feed = openWalFeed({ url: db, slot: options.slot, ...(options.schema === undefined ? {} : { schema: options.schema }) });
  return { name: feed.slot, lag: () => feed.lag(), close: () => feed.stop() };
}
