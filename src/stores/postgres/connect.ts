// Opens a pg Pool for a PostgreSQL URL and proves it works, turning every way it can fail
// (malformed URL, refused connection, wrong password, missing database) into one clear line.

import type pg from "pg";
import { pgDriver } from "./driver.js";
import { DatabaseOpenError, InvalidArgumentError } from "../../outbox/errors.js";

export interface PostgresConnectOptions {
  /** Most connections the pool opens (default 10). */
  readonly maxConnections?: number;
  /** Give up connecting after this long (default 10 000 ms). */
  readonly connectTimeoutMs?: number;
  /** Name shown in pg_stat_activity (default "wassal"). */
  readonly applicationName?: string;
}

/** True for strings that look like a PostgreSQL URL rather than a file path. */
export function isPostgresUrl(value: string): boolean {
  return /^postgres(ql)?:\/\//i.test(value);
}

/** The URL without its password, safe to print. */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = "***";
    return parsed.toString();
  } catch {
    return "(malformed URL)";
  }
}

export function checkPostgresUrl(url: string): URL {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new InvalidArgumentError(`malformed PostgreSQL URL ${JSON.stringify(url)}; expected postgres://user[:password]@host[:port]/database`);
  }
  if (parsed.protocol !== "postgres:" && parsed.protocol !== "postgresql:") {
    throw new InvalidArgumentError(`PostgreSQL URL must start with postgres:// or postgresql:// (got ${parsed.protocol}//)`);
  }
  if (parsed.hostname === "" && !parsed.searchParams.has("host")) {
    throw new InvalidArgumentError(`PostgreSQL URL ${redactUrl(url)} names no host; expected postgres://user@host:port/database`);
  }
  if (parsed.port !== "" && !(Number(parsed.port) > 0 && Number(parsed.port) < 65536)) {
    throw new InvalidArgumentError(`PostgreSQL URL ${redactUrl(url)} has an invalid port`);
  }
  return parsed;
}

/** A URL component decoded, or as written when its escapes are broken. */
function safeDecode(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

/** Explains a connection failure in one line. */
export function describeConnectError(url: string, error: unknown): string {
  const where = redactUrl(url);
  const err = error as { code?: string; message?: string };
  const parsed = new URL(url);
  const database = safeDecode(parsed.pathname.slice(1)) || "(default)";
  const user = safeDecode(parsed.username) || "(default)";
  switch (err.code) {
    case "ECONNREFUSED":
      return `cannot connect to PostgreSQL at ${where}: connection refused; is the server running and listening there?`;
    case "ENOTFOUND":
    case "EAI_AGAIN":
      return `cannot connect to PostgreSQL at ${where}: host ${parsed.hostname} not found`;
    case "ETIMEDOUT":
      return `cannot connect to PostgreSQL at ${where}: timed out`;
    case "28P01":
      return `PostgreSQL at ${where} refused the password for user ${user}; check the URL's user and password`;
    case "28000":
      return `PostgreSQL at ${where} does not allow user ${user} to connect (${err.message ?? "no pg_hba.conf entry"})`;
    case "3D000":
      return `PostgreSQL database ${database} does not exist at ${where}; create it (createdb ${database}) or name another in the URL`;
    default:
      return `cannot connect to PostgreSQL at ${where}: ${err.message ?? String(error)}`;
  }
}

/** A connected pool. Idle-client errors (a killed backend, a server restart) are absorbed; the pool reconnects. */
export async function openPostgresPool(url: string, options: PostgresConnectOptions = {}): Promise<pg.Pool> {
  checkPostgresUrl(url);
  const max = options.maxConnections ?? 10;
  if (!Number.isInteger(max) || max < 1) {
    throw new InvalidArgumentError(`maxConnections must be a whole number >= 1 (got ${String(max)})`);
  }
  const pool = new (pgDriver().Pool)({
    connectionString: url,
    max,
    connectionTimeoutMillis: options.connectTimeoutMs ?? 10_000,
    application_name: options.applicationName ?? "wassal",
    // FIFO per ordering key relies on each statement reading what committed before it (READ
    // COMMITTED): the store's own sessions use it whatever the database's default.
    options: "-c default_transaction_isolation=read\\ committed",
  });
  pool.on("error", () => {
    // An idle client lost its connection; the pool drops it and opens a new one when needed.
  });
  pool.on("connect", (client) => {
    // A backend that dies (killed, server restart) can make its client emit "error" more than
    // once, or between the pool's own listeners; the failing query still reports the error to
    // its caller, and the pool discards the client. Without this listener the process would crash.
    client.on("error", () => undefined);
  });
  try {
    await pool.query("SELECT 1");
  } catch (error) {
    await pool.end().catch(() => undefined);
    throw new DatabaseOpenError(describeConnectError(url, error), { cause: error });
  }
  return pool;
}
