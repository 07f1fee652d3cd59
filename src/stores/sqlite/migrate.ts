// Applies named migrations once each, recording them in wassal_migrations. Several components
// (the outbox, the payments domain) keep their own lists in the same database; a database holding
// a name none of them ships was migrated by a newer Wassal and is refused (migration-guard.ts).

import type { WriteLock } from "./write-lock.js";
import type Database from "better-sqlite3";
import { refuseNewer, refuseUnshipped, shipMigrations } from "../migration-guard.js";
import { OUTBOX_MIGRATIONS } from "./outbox-sql.js";

/** One named migration (the core's Migration). */
export interface Migration {
  /** Unique and stable forever, e.g. "outbox-001-create". */
  readonly name: string;
  readonly sql: string;
}

shipMigrations(OUTBOX_MIGRATIONS);

/** The names recorded in wassal_migrations (none when the table is not there), read without writing. */
export function recordedMigrations(db: Database.Database): string[] {
  const present = db.prepare("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'wassal_migrations'").get() !== undefined;
  return present ? (db.prepare("SELECT name FROM wassal_migrations").pluck().all() as string[]) : [];
}

/** Throws DatabaseTooNewError when the database records a migration this version does not ship. */
export function refuseNewerSqlite(db: Database.Database, path: string): void {
  refuseNewer(recordedMigrations(db), `SQLite database ${path}`);
}

export async function applyMigrations(db: Database.Database, lock: WriteLock, migrations: readonly Migration[], now: () => number): Promise<string[]> {
  refuseUnshipped(migrations);
  return lock.runSync(() => {
    // Under the write lock, before the first write: a newer Wassal may have migrated since the open.
    refuseNewerSqlite(db, db.name);
    db.exec("CREATE TABLE IF NOT EXISTS wassal_migrations (name TEXT PRIMARY KEY, applied_at INTEGER NOT NULL) STRICT");
    const applied = new Set(recordedMigrations(db));
    const record = db.prepare("INSERT INTO wassal_migrations (name, applied_at) VALUES (?, ?)");
    const ran: string[] = [];
    for (const migration of migrations) {
      if (applied.has(migration.name)) continue;
      db.exec(migration.sql);
      record.run(migration.name, now());
      ran.push(migration.name);
    }
    return ran;
  });
}
