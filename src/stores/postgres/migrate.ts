// Applies named migrations into a schema of their own, once each, under an advisory lock so
// several processes can start at once.

import type pg from "pg";
import { quoteIdent, type PgMigration } from "./outbox-sql.js";

export async function applyPgMigrations(pool: pg.Pool, schema: string, migrations: readonly PgMigration[]): Promise<string[]> {
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
    await client.query(`CREATE SCHEMA IF NOT EXISTS ${s}`);
    await client.query(`CREATE TABLE IF NOT EXISTS ${s}.wassal_migrations (name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT clock_timestamp())`);
    const applied = new Set((await client.query<{ name: string }>(`SELECT name FROM ${s}.wassal_migrations`)).rows.map((r) => r.name));
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
