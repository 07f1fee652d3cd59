// Database chores of the lab and the chaos harness, kept here so that SQL and database drivers
// stay under stores/: the server's version, a schema dropped after a run, connections terminated
// on purpose, a SQLite file checked for someone else's tables.

import { pgDriver } from "../../stores/postgres/driver.js";
import { openPostgresPool } from "../../stores/postgres/connect.js";
import { quoteIdent } from "../../stores/postgres/outbox-sql.js";
import { checkSchema } from "../../stores/postgres/postgres-outbox-store.js";
import { existsSync } from "node:fs";
import { fileHasAnyTable } from "../../stores/sqlite/open-database.js";

export { sqliteVersion } from "../../stores/sqlite/open-database.js";
export { isPostgresUrl, redactUrl } from "../../stores/postgres/connect.js";

/** The PostgreSQL server's version; one clear DatabaseOpenError when it cannot be reached. */
export async function postgresServerVersion(url: string): Promise<string> {
  const { pool } = await openPostgresPool({ url }, { maxConnections: 1 });
  try {
    return (await pool.query<{ v: string }>("SELECT current_setting('server_version') AS v")).rows[0]?.v ?? "?";
  } finally {
    await pool.end();
  }
}

/** Drops a schema and everything in it (a lab or chaos run's own schema, at its end). */
export async function dropSchema(url: string, schema: string): Promise<void> {
  const { pool } = await openPostgresPool({ url }, { maxConnections: 1 });
  try {
    await pool.query(`DROP SCHEMA IF EXISTS ${quoteIdent(checkSchema(schema))} CASCADE`);
  } finally {
    await pool.end();
  }
}

/** A connection that terminates a run's worker connections, for fault injection. */
export interface ConnectionKiller {
  /**
   * Terminates the run's worker connections and returns how many: on PostgreSQL every backend
   * whose application_name matches the LIKE pattern; MariaDB shows no application name, so there
   * every connection to the run's own database but the killer's (the run's own reads retry).
   */
  terminate(applicationNameLike: string): Promise<number>;
  close(): Promise<void>;
}

export async function openConnectionKiller(url: string): Promise<ConnectionKiller> {
  const admin = new (pgDriver().Client)({ connectionString: url });
  admin.on("error", () => undefined);
  await admin.connect();
  return {
    async terminate(applicationNameLike) {
      const { rowCount } = await admin.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE $1", [applicationNameLike]);
      return rowCount ?? 0;
    },
    close: () => admin.end().catch(() => undefined),
  };
}

/** True when a SQLite file exists at `path` and already has one of these tables (looked at read-only: the file is left as it was). */
export function sqliteHoldsTables(path: string, names: readonly string[]): boolean {
  return existsSync(path) && fileHasAnyTable(path, names);
}
