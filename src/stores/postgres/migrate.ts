// Applies named migrations into a schema of their own, once each, under an advisory lock so
// several processes can start at once. Several components (the outbox, the payments domain) keep
// their own lists in the same wassal_migrations table; a schema holding a name none of them ships
// was migrated by a newer Wassal and is refused (migration-guard.ts), inside the locked
// transaction and before anything is written.

import type pg from "pg";
import { refuseNewer, refuseUnshipped, shipMigrations } from "../migration-guard.js";
import { outboxMigrations, quoteIdent, type PgMigration } from "./outbox-sql.js";

shipMigrations(outboxMigrations("wassal"));

/** The names recorded in the schema's wassal_migrations (none when it is not there), read without writing. */
export async function recordedMigrations(client: pg.Pool | pg.ClientBase, schema: string): Promise<string[]> {
  const table = `${quoteIdent(schema)}.wassal_migrations`;
  const present = (await client.query<{ present: boolean }>("SELECT to_regclass($1) IS NOT NULL AS present", [table])).rows[0]?.present ?? false;
  return present ? (await client.query<{ name: string }>(`SELECT name FROM ${table}`)).rows.map((r) => r.name) : [];
}

/** Throws DatabaseTooNewError when the schema records a migration this version does not ship. */
export async function refuseNewerPostgres(client: pg.Pool | pg.ClientBase, schema: string): Promise<void> {
  refuseNewer(await recordedMigrations(client, schema), `PostgreSQL schema ${schema}`);
}

export async function applyPgMigrations(pool: pg.Pool, schema: string, migrations: readonly PgMigration[]): Promise<string[]> {
  refuseUnshipped(migrations);
  const s = quoteIdent(schema);
  const client = await pool.connect();
  let broken = false;
  const onError = () => {
    broken = true; // the connection died; the caller sees the failed query
  };
  client.on("error", onError);
  try {
    await client.query("BEGIN");
    await client.query("SELECT pg_advisory_xact_lock(hashtext($1))", [`wassal-migrate:${schema}`]);
    await refuseNewerPostgres(client, schema);
    await client.query(`CREATE SCHEMA IF NOT EXISTS ${s}`);
    await client.query(`CREATE TABLE IF NOT EXISTS ${s}.wassal_migrations (name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT clock_timestamp())`);
    const applied = new Set(await recordedMigrations(client, schema));
    const ran: string[] = [];
    for (const migration of migrations) {
      if (applied.has(migration.name)) continue;
      await client.query(migration.sql);
      await client.query(`INSERT INTO ${s}.wassal_migrations (name) VALUES ($1)`, [migration.name]);
      ran.push(migration.name);
    }
    await client.query("COMMIT");
    return ran;
  } catch (error) {
    await client.query("ROLLBACK").catch(() => undefined);
    throw error;
  } finally {
    client.removeListener("error", onError);
    client.release(broken);
  }
}
