// The bench's chores on the MariaDB server of the mariadb runs: its settings that shape the
// figures, a database of each run's own (created before the run, dropped after it; on MariaDB a
// schema is a database, so this is what a fresh PostgreSQL schema is to the postgres runs), the
// tables' statistics refreshed after seeding, and the server's process, when it runs on this
// machine, for its CPU time (server-cpu.ts).

import { randomBytes } from "node:crypto";
import mysql from "mysql2/promise";
import { listeningOn, processesNamed } from "./server-cpu.js";

/** A connection to the server `url` names, to the database it names unless `database` says otherwise (null: none). */
export async function mariadbConnection(url: string, database?: string | null): Promise<mysql.Connection> {
  const parsed = new URL(url);
  const user = decodeURIComponent(parsed.username);
  const password = decodeURIComponent(parsed.password);
  const named = decodeURIComponent(parsed.pathname.replace(/^\//, ""));
  const db = database === undefined ? named : database;
  return mysql.createConnection({
    host: parsed.hostname.replace(/^\[(.*)\]$/, "$1"),
    port: parsed.port === "" ? 3306 : Number(parsed.port),
    ...(user === "" ? {} : { user }),
    ...(password === "" ? {} : { password }),
    ...(db === null || db === "" ? {} : { database: db }),
    supportBigNumbers: true,
    bigNumberStrings: false,
    connectTimeout: 3_000,
  });
}

/** The MariaDB server's settings the benchmark records: version, durability, memory, statistics. */
const SERVER_SETTINGS = [
  "version",
  "innodb_flush_log_at_trx_commit",
  "sync_binlog",
  "log_bin",
  "innodb_doublewrite",
  "innodb_flush_method",
  "innodb_buffer_pool_size",
  "innodb_log_file_size",
  "innodb_stats_auto_recalc",
  "max_connections",
] as const;

/** The server's settings that shape the figures, as it reports them; null when it cannot be reached. */
export async function mariadbServer(url: string): Promise<Record<string, string | null> | null> {
  let connection: mysql.Connection;
  try {
    connection = await mariadbConnection(url, null);
  } catch {
    return null;
  }
  try {
    const [rows] = await connection.query<mysql.RowDataPacket[]>(`SELECT ${SERVER_SETTINGS.map((name) => `@@GLOBAL.${name} AS ${name}`).join(", ")}`);
    const row: Record<string, unknown> = rows[0] ?? {};
    return Object.fromEntries(SERVER_SETTINGS.map((name) => [name, row[name] === undefined || row[name] === null ? null : String(row[name])]));
  } catch (error) {
    return { error: error instanceof Error ? error.message : String(error) };
  } finally {
    await connection.end().catch(() => undefined);
  }
}

/** A fresh, empty database for one run: its URL (`url` with the new database in its path) and its removal. */
export async function mariadbScratch(url: string): Promise<{ db: string; drop: () => Promise<void> }> {
  const database = `wassal_bench_${randomBytes(5).toString("hex")}`;
  const connection = await mariadbConnection(url, null);
  try {
    await connection.query(`CREATE DATABASE \`${database}\` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin`);
  } finally {
    await connection.end();
  }
  const named = new URL(url);
  named.pathname = `/${database}`;
  return {
    db: named.toString(),
    drop: async () => {
      const admin = await mariadbConnection(url, null);
      try {
        await admin.query(`DROP DATABASE IF EXISTS \`${database}\``);
      } finally {
        await admin.end();
      }
    },
  };
}

/**
 * Refreshes InnoDB's statistics of every table of the run's database after seeding, as the
 * postgres runs ANALYZE theirs (InnoDB recalculates them itself after 10 % of a table changed, in
 * the background, so a table seeded a moment ago may have none yet).
 */
export async function analyzeMariaDb(db: string): Promise<void> {
  const connection = await mariadbConnection(db);
  try {
    const [tables] = await connection.query<mysql.RowDataPacket[]>("SHOW TABLES");
    const names = tables.map((row) => String(Object.values(row)[0]));
    if (names.length > 0) await connection.query(`ANALYZE TABLE ${names.map((name) => `\`${name}\``).join(", ")}`);
  } finally {
    await connection.end();
  }
}

/**
 * The MariaDB server's process, when it runs on this machine: the one mariadbd (or mysqld) process
 * listening on the URL's port; null when the URL names another host, or none (or more than one
 * that cannot be told apart) is visible in this PID namespace. One process: its threads' CPU time
 * is all in its /proc/<pid>/stat (server-cpu.ts processCpu).
 */
export function locateMariadbd(url: string): number | null {
  const parsed = new URL(url);
  if (!["127.0.0.1", "localhost", "[::1]", "::1"].includes(parsed.hostname)) return null;
  const port = parsed.port === "" ? 3306 : Number(parsed.port);
  const pids = [...processesNamed("mariadbd"), ...processesNamed("mysqld")];
  if (pids.length === 0) return null;
  const holders = listeningOn(pids, port);
  return holders.length === 1 ? (holders[0] ?? null) : null;
}
