// The lab's and the chaos harness's chores on a MariaDB server: its version, a database of a run's
// own created and dropped, and the run's connections killed on purpose. (On MariaDB a schema is a
// database, so a run's place is a database; the URL given names the one to connect to first.)

import type { RowDataPacket } from "mysql2/promise";
import { InvalidArgumentError } from "../../outbox/errors.js";
import { openMariaDbPool, parseMariaDbUrl } from "../../stores/mariadb/connect.js";
import { quoteIdent } from "../../stores/mariadb/outbox-sql.js";
import type { ConnectionKiller } from "./admin.js";

type Pool = Awaited<ReturnType<typeof openMariaDbPool>>;

/** Runs `work` on a one-connection pool to the database `url` names; one clear DatabaseOpenError when it cannot be reached. */
async function withServer<T>(url: string, work: (pool: Pool) => Promise<T>): Promise<T> {
  const pool = await openMariaDbPool(parseMariaDbUrl(url), { maxConnections: 1, readOnly: false, applicationName: "wassal-lab-admin" });
  try {
    return await work(pool);
  } finally {
    await pool.end().catch(() => undefined);
  }
}

/** A run's database name: the lab makes them, but a name is checked before it reaches SQL. */
function checkName(database: string): string {
  if (!/^[a-z0-9_]{1,64}$/.test(database)) throw new InvalidArgumentError(`a lab database name is 1 to 64 of a-z, 0-9 and _ (got ${JSON.stringify(database)})`);
  return database;
}

/** The MariaDB server's version ("10.11.19-MariaDB-…"). */
export function mariadbServerVersion(url: string): Promise<string> {
  return withServer(url, async (pool) => {
    const [rows] = await pool.query<RowDataPacket[]>("SELECT VERSION() AS v");
    return String(rows[0]?.v ?? "?");
  });
}

/** Creates the database `database` on the server `url` names, and returns `url` naming it instead. */
export async function createMariaDbDatabase(url: string, database: string): Promise<string> {
  await withServer(url, (pool) => pool.query(`CREATE DATABASE ${quoteIdent(checkName(database))} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin`));
  const named = new URL(url);
  named.pathname = `/${database}`;
  return named.toString();
}

/** Drops a run's database and everything in it. */
export async function dropMariaDbDatabase(url: string, database: string): Promise<void> {
  await withServer(url, (pool) => pool.query(`DROP DATABASE IF EXISTS ${quoteIdent(checkName(database))}`));
}

/**
 * A connection that kills the run's connections: every connection to the run's database but its
 * own (MariaDB shows no application name unless performance_schema is on, which it is not by
 * default; the pattern the PostgreSQL killer takes is not needed here).
 */
export async function openMariaDbConnectionKiller(url: string, database: string): Promise<ConnectionKiller> {
  const pool = await openMariaDbPool(parseMariaDbUrl(url), { maxConnections: 1, readOnly: false, applicationName: "wassal-chaos-killer" });
  const name = checkName(database);
  return {
    async terminate() {
      const [rows] = await pool.query<RowDataPacket[]>("SELECT ID AS id FROM information_schema.PROCESSLIST WHERE DB = ? AND ID <> CONNECTION_ID()", [name]);
      let killed = 0;
      for (const row of rows) {
        // A connection that ended meanwhile is no error (ER_NO_SUCH_THREAD).
        try {
          await pool.query(`KILL CONNECTION ${Number(row.id)}`);
          killed += 1;
        } catch (error) {
          if ((error as { errno?: unknown }).errno !== 1094) throw error;
        }
      }
      return killed;
    },
    close: () => pool.end().catch(() => undefined),
  };
}
