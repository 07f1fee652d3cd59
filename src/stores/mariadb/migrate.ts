// Applies named migrations to a MariaDB database, once each, under a named lock (GET_LOCK) so
// several processes can start at once. Several components (the outbox, the payments lab) keep
// their own lists in the same wassal_migrations table; a database holding a name none of them
// ships was migrated by a newer Wassal and is refused (migration-guard.ts), inside the lock and
// before anything is written. Each migration's statements run one by one (the store never enables
// multipleStatements). MariaDB's DDL commits as it goes: a migration is recorded after its last
// statement, so one that failed part way runs again from its start, and its statements are written
// to allow that (CREATE … IF NOT EXISTS).

import type * as mysql from "mysql2/promise";
import { refuseNewer, refuseUnshipped, shipMigrations } from "../migration-guard.js";
import { MIGRATION_SQL, OUTBOX_MIGRATIONS, type MariaDbMigration } from "./outbox-sql.js";

shipMigrations(OUTBOX_MIGRATIONS);

/** How long a migration waits for another process's to finish before giving up (seconds). */
const LOCK_WAIT_S = 120;

type Queryable = Pick<mysql.Pool, "query"> | Pick<mysql.PoolConnection, "query">;

/** The names recorded in the database's wassal_migrations (none when it is not there), read without writing. */
export async function recordedMigrations(db: Queryable): Promise<string[]> {
  const [present] = await db.query<mysql.RowDataPacket[]>(MIGRATION_SQL.recordedTable);
  if (Number(present[0]?.n ?? 0) === 0) return [];
  const [rows] = await db.query<mysql.RowDataPacket[]>(MIGRATION_SQL.recorded);
  return rows.map((row) => String(row.name));
}

/** Throws DatabaseTooNewError when the database records a migration this version does not ship. */
export async function refuseNewerMariaDb(db: Queryable, database: string): Promise<void> {
  refuseNewer(await recordedMigrations(db), `MariaDB database ${database}`);
}

/** Runs the migrations not yet recorded, in order, under the database's migration lock: the names it ran. */
export async function applyMariaDbMigrations(pool: mysql.Pool, database: string, migrations: readonly MariaDbMigration[]): Promise<string[]> {
  refuseUnshipped(migrations);
  const lock = `wassal-migrate:${database}`.slice(0, 64); // GET_LOCK names are at most 64 characters
  const conn = await pool.getConnection();
  let locked = false;
  try {
    const [got] = await conn.query<mysql.RowDataPacket[]>(MIGRATION_SQL.lock, [lock, LOCK_WAIT_S]);
    if (Number(got[0]?.locked) !== 1) throw new Error(`another process held the migration lock of MariaDB database ${database} for more than ${LOCK_WAIT_S} s`);
    locked = true;
    await refuseNewerMariaDb(conn, database);
    await conn.query(MIGRATION_SQL.createTable);
    const applied = new Set(await recordedMigrations(conn));
    const ran: string[] = [];
    for (const migration of migrations) {
      if (applied.has(migration.name)) continue;
      for (const statement of migration.statements) await conn.query(statement);
      await conn.query(MIGRATION_SQL.record, [migration.name]);
      ran.push(migration.name);
    }
    return ran;
  } finally {
    if (locked) await conn.query(MIGRATION_SQL.unlock, [lock]).catch(() => undefined);
    conn.release();
  }
}
