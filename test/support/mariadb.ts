// Finding the test MariaDB server. Tests use WASSAL_TEST_MARIADB_URL (default
// mysql://root@127.0.0.1:3306/test), each store in a database of its own (freshDatabase). With CI
// set, an unreachable server fails the run; without it, MariaDB tests are skipped, loudly.

import { randomBytes } from "node:crypto";
import mysql from "mysql2/promise";

export const TEST_MARIADB_URL = process.env.WASSAL_TEST_MARIADB_URL ?? "mysql://root@127.0.0.1:3306/test";

/** The server's URL with another database in its path. */
export function mariadbUrlFor(database: string): string {
  const url = new URL(TEST_MARIADB_URL);
  url.pathname = `/${database}`;
  return url.toString();
}

/** A connection of its own to the test server (no database selected unless `database` is given), for the test's own SQL. */
export async function mariadbConnection(database?: string): Promise<mysql.Connection> {
  const url = new URL(TEST_MARIADB_URL);
  const user = decodeURIComponent(url.username);
  const password = decodeURIComponent(url.password);
  return mysql.createConnection({
    host: url.hostname,
    port: url.port === "" ? 3306 : Number(url.port),
    ...(user === "" ? {} : { user }),
    ...(password === "" ? {} : { password }),
    ...(database === undefined ? {} : { database }),
    supportBigNumbers: true,
    connectTimeout: 5000,
  });
}

let probe: Promise<string | null> | undefined;

/** null when the server answers, else why not. */
function reachable(): Promise<string | null> {
  probe ??= (async () => {
    try {
      const connection = await mariadbConnection();
      try {
        await connection.query("SELECT 1");
        return null;
      } finally {
        await connection.end().catch(() => undefined);
      }
    } catch (error) {
      return (error as Error).message || String(error);
    }
  })();
  return probe;
}

/**
 * True when MariaDB tests can run. Throws under CI when the server is unreachable; prints one
 * loud line and returns false otherwise.
 */
export async function mariadbAvailable(): Promise<boolean> {
  const why = await reachable();
  if (why === null) return true;
  const message = `MariaDB at ${TEST_MARIADB_URL} is unreachable (${why}). Start it with: start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd, or point WASSAL_TEST_MARIADB_URL at a server.`;
  if (process.env.CI) throw new Error(`CI is set, so MariaDB tests must run: ${message}`);
  console.warn(`\n!!! SKIPPING MARIADB TESTS: ${message}\n`);
  return false;
}

export interface FreshDatabase {
  readonly name: string;
  /** The test server's URL naming this database. */
  readonly url: string;
  /** Drops the database and everything in it. Safe to call twice. */
  drop(): Promise<void>;
}

/** A new, empty database (wassal_t_<hex>) on the test server. */
export async function freshDatabase(): Promise<FreshDatabase> {
  const name = `wassal_t_${randomBytes(6).toString("hex")}`;
  const connection = await mariadbConnection();
  try {
    await connection.query(`CREATE DATABASE ${name}`);
  } finally {
    await connection.end();
  }
  let dropped = false;
  return {
    name,
    url: mariadbUrlFor(name),
    async drop() {
      if (dropped) return;
      dropped = true;
      const admin = await mariadbConnection();
      try {
        await admin.query(`DROP DATABASE IF EXISTS ${name}`);
      } finally {
        await admin.end();
      }
    },
  };
}
