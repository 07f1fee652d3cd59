// Opens a mysql2 pool for a MariaDB URL and proves it works, turning every way it can fail
// (malformed URL, no database named, refused connection, wrong password, missing database, a
// server that is MySQL or too old, a session that will not read committed data) into one clear
// line. Every connection of the pool is set up before its first use: READ COMMITTED, UTC, and
// read-only transactions for a store opened readOnly.

import type * as mysql from "mysql2/promise";
import { DatabaseOpenError, InvalidArgumentError } from "../../outbox/errors.js";
import { redactUrl, rememberSecret, rememberUrlSecrets } from "../../outbox/redact.js";
import { mysqlDriver } from "./driver.js";
import { SESSION_SQL } from "./outbox-sql.js";

export { redactUrl } from "../../outbox/redact.js";

export interface MariaDbConnectOptions {
  /** Most connections the pool opens (default 10). */
  readonly maxConnections?: number;
  /** Give up connecting after this long (default 10 000 ms). */
  readonly connectTimeoutMs?: number;
  /** The program name the server shows for the store's connections (performance_schema's connect attributes; default "wassal"). */
  readonly applicationName?: string;
}

/** True for strings that look like a MariaDB URL (mariadb:// or mysql://) rather than a file path. */
export function isMariaDbUrl(value: string): boolean {
  return /^(mariadb|mysql):\/\//i.test(value);
}

/** Where a MariaDB URL points: what mysql2 needs, and the database (always named). */
export interface MariaDbTarget {
  readonly host: string;
  readonly port: number;
  readonly user: string | undefined;
  readonly password: string | undefined;
  readonly database: string;
  /** The URL without its password, for messages. */
  readonly where: string;
}

/** A URL component decoded, or as written when its escapes are broken. */
function safeDecode(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

/** Checks a MariaDB URL and reads where it points; InvalidArgumentError says what is wrong with one that will not do. */
export function parseMariaDbUrl(url: string): MariaDbTarget {
  if (typeof url !== "string") throw new InvalidArgumentError(`url must be a string, mariadb://user@host:3306/database (got ${typeof url})`);
  rememberUrlSecrets(url);
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new InvalidArgumentError(
      `malformed MariaDB URL ${redactUrl(url)}: it does not parse as a URL (a special character in the password must be percent-encoded, e.g. @ as %40); expected mariadb://USER@HOST:PORT/DATABASE`,
    );
  }
  if (parsed.protocol !== "mariadb:" && parsed.protocol !== "mysql:") {
    throw new InvalidArgumentError(`MariaDB URL must start with mariadb:// or mysql:// (got ${parsed.protocol}//)`);
  }
  if (parsed.hostname === "") throw new InvalidArgumentError(`MariaDB URL ${redactUrl(url)} names no host; expected mariadb://user@host:3306/database`);
  const port = parsed.port === "" ? 3306 : Number(parsed.port);
  if (!(Number.isInteger(port) && port > 0 && port < 65536)) throw new InvalidArgumentError(`MariaDB URL ${redactUrl(url)} has an invalid port`);
  const database = safeDecode(parsed.pathname.replace(/^\//, ""));
  if (database === "" || database.includes("/")) {
    throw new InvalidArgumentError(
      `MariaDB URL ${redactUrl(url)} names no database: Wassal keeps its tables in the database the URL names, so give one, e.g. mariadb://user@host:3306/app (create it first: CREATE DATABASE app)`,
    );
  }
  if (database.length > 64) throw new InvalidArgumentError(`MariaDB database names are at most 64 characters (got ${database.length})`);
  if ([...parsed.searchParams.keys()].length > 0) {
    throw new InvalidArgumentError(
      `MariaDB URL ${redactUrl(url)} has query parameters (${[...parsed.searchParams.keys()].join(", ")}), which the MariaDB store does not take; give the user, password, host, port and database alone`,
    );
  }
  const password = parsed.password === "" ? undefined : safeDecode(parsed.password);
  rememberSecret(password);
  return {
    host: parsed.hostname.replace(/^\[(.*)\]$/, "$1"),
    port,
    user: parsed.username === "" ? undefined : safeDecode(parsed.username),
    password,
    database,
    where: redactUrl(url),
  };
}

/** Explains a connection failure in one line. */
export function describeConnectError(to: MariaDbTarget, error: unknown): string {
  const { where, host, user, database } = to;
  const err = error as { code?: string; message?: string };
  switch (err.code) {
    case "ECONNREFUSED":
      return `cannot connect to MariaDB at ${where}: connection refused; is the server running and listening there?`;
    case "ENOTFOUND":
    case "EAI_AGAIN":
      return `cannot connect to MariaDB at ${where}: host ${host} not found`;
    case "ETIMEDOUT":
      return `cannot connect to MariaDB at ${where}: timed out`;
    case "ER_ACCESS_DENIED_ERROR":
      return `MariaDB at ${where} refused user ${user ?? "(default)"} (${err.message ?? "access denied"}); check the user and password in the URL`;
    case "ER_DBACCESS_DENIED_ERROR":
      return `MariaDB at ${where} does not allow user ${user ?? "(default)"} to use database ${database}`;
    case "ER_BAD_DB_ERROR":
      return `MariaDB database ${database} does not exist at ${where}; create it (CREATE DATABASE ${database}) or name another in the URL`;
    default:
      return `cannot connect to MariaDB at ${where}: ${err.message ?? String(error)}`;
  }
}

/** The oldest MariaDB the store's SQL runs on: FOR UPDATE SKIP LOCKED and JSON_TABLE came in 10.6. */
const OLDEST = [10, 6] as const;

/**
 * Throws DatabaseOpenError unless the session reads committed data (READ COMMITTED), in UTC, and
 * (with `readOnly`) in read-only transactions, on MariaDB 10.6 or later. Exported for the tests.
 */
export async function checkSession(db: Pick<mysql.Pool, "query"> | Pick<mysql.Connection, "query">, readOnly: boolean): Promise<void> {
  const [rows] = await db.query<mysql.RowDataPacket[]>(SESSION_SQL.check);
  const session: Record<string, unknown> = rows[0] ?? {};
  const version = String(session.version ?? "");
  const [major, minor] = (/^(\d+)\.(\d+)/.exec(version)?.slice(1) ?? []).map(Number);
  if (!/mariadb/i.test(version)) {
    throw new DatabaseOpenError(
      `the server is not MariaDB (version ${version}): the MariaDB store needs MariaDB ${OLDEST.join(".")} or later (MySQL has no INSERT … RETURNING)`,
    );
  }
  if (major === undefined || minor === undefined || major < OLDEST[0] || (major === OLDEST[0] && minor < OLDEST[1])) {
    throw new DatabaseOpenError(`MariaDB ${version} is too old: the MariaDB store needs ${OLDEST.join(".")} or later (FOR UPDATE SKIP LOCKED, JSON_TABLE)`);
  }
  if (session.isolation !== "READ-COMMITTED") {
    throw new DatabaseOpenError(
      `the session's transactions are ${String(session.isolation)}, and Wassal's statements need READ-COMMITTED (the per-key order relies on each statement reading what committed before it): the store sets it on each of its connections, so something reset it`,
    );
  }
  if (readOnly && Number(session.read_only) !== 1) throw new DatabaseOpenError("readOnly: the store's sessions are not read-only");
}

/** Opens the store's pool and checks one of its sessions; the pool is ended again if the check fails. */
export async function openMariaDbPool(to: MariaDbTarget, options: MariaDbConnectOptions & { readonly readOnly: boolean }): Promise<mysql.Pool> {
  const max = options.maxConnections ?? 10;
  if (!Number.isInteger(max) || max < 1) throw new InvalidArgumentError(`maxConnections must be a whole number >= 1 (got ${String(max)})`);
  const connectTimeout = options.connectTimeoutMs ?? 10_000;
  const driver = mysqlDriver();
  const pool = driver.createPool({
    host: to.host,
    port: to.port,
    ...(to.user === undefined ? {} : { user: to.user }),
    ...(to.password === undefined ? {} : { password: to.password }),
    database: to.database,
    connectionLimit: max,
    connectTimeout,
    // BIGINT as a number where it is exact (times, counts, ids below 2^53), else as decimal text.
    supportBigNumbers: true,
    bigNumberStrings: false,
    charset: "UTF8MB4_GENERAL_CI",
    multipleStatements: false,
    enableKeepAlive: true,
    connectAttributes: { program_name: options.applicationName ?? "wassal" },
  });
  // Each new connection is set up before the pool hands it out (its first command, queued ahead of
  // the caller's). A connection that dies reports the error to the query that was waiting on it;
  // the listener keeps an idle one's error from crashing the process.
  const setup = SESSION_SQL.setup(options.readOnly);
  pool.pool.on("connection", (connection) => {
    connection.on("error", () => undefined);
    // A connection whose setup failed is closed, so none is used at another isolation level.
    connection.query(setup, (error) => {
      if (error) connection.destroy();
    });
  });
  try {
    try {
      await pool.query("SELECT 1");
    } catch (error) {
      throw new DatabaseOpenError(describeConnectError(to, error), { cause: error });
    }
    await checkSession(pool, options.readOnly);
  } catch (error) {
    await pool.end().catch(() => undefined);
    throw error;
  }
  return pool;
}
