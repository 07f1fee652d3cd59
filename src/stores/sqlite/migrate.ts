// Applies named migrations once each, recording them in wassal_migrations. Several components
// (the outbox, the payments domain) keep their own lists in the same database.

import type { WriteLock } from "./write-lock.js";
import type Database from "better-sqlite3";

export interface Migration {
  /** Unique and stable forever, e.g. "outbox-001-create". */
  readonly name: string;
  readonly sql: string;
}

export async function applyMigrations(db: Database.Database, lock: WriteLock, migrations: readonly Migration[], now: () => number): Promise<string[]> {
  return lock.runSync(() => {
    db.exec("CREATE TABLE IF NOT EXISTS wassal_migrations (name TEXT PRIMARY KEY, applied_at INTEGER NOT NULL) STRICT");
    const applied = new Set(db.prepare("SELECT name FROM wassal_migrations").pluck().all() as string[]);
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
