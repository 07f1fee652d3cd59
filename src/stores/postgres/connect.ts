// Opens a pg Pool for a PostgreSQL URL and proves it works, turning every way it can fail
// (malformed URL, refused connection, wrong password, missing database) into one clear line.

import type pg from "pg";
import { pgDriver } from "./driver.js";
import { DatabaseOpenError, InvalidArgumentError } from "../../outbox/errors.js";
import { redactUrl, rememberSecret, rememberUrlSecrets } from "../../outbox/redact.js";

export { redactUrl } from "../../outbox/redact.js";

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

/** Why a URL that does not parse is malformed, where that can be told. */
function malformation(url: string): string {
  const authority = /^[a-z][a-z0-9+.-]*:\/\/(?:[^/?#]*@)?([^/?#]*)/i.exec(url)?.[1] ?? "";
  const port = /:(\d+)$/.exec(authority)?.[1];
  if (port !== undefined && Number(port) > 65_535) return `port ${port} is out of range (1 to 65535)`;
  if (/\s/.test(authority)) return "the host holds a space";
  if (authority.startsWith("[") && !authority.includes("]")) return "an IPv6 host opened with [ is not closed with ]";
  if ((authority.match(/:/g) ?? []).length > 1 && !authority.startsWith("[")) return "the host and port hold more than one colon";
  if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(url)) return "it does not start with postgres://";
  return "it does not parse as a URL (a special character in the password must be percent-encoded, e.g. @ as %40)";
}

export function checkPostgresUrl(url: string): URL {
  rememberUrlSecrets(url);
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new InvalidArgumentError(
      `malformed PostgreSQL URL ${redactUrl(url)}: ${malformation(url)}; expected postgres://USER@HOST:PORT/DATABASE, with USER:PASSWORD@ for a password (its special characters percent-encoded)`,
    );
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
  // Without a database pg connects to the one named like the user (often "postgres"), and
  // Wassal's tables would land there unnoticed.
  if (parsed.pathname.length <= 1) {
    throw new InvalidArgumentError(
      `PostgreSQL URL ${redactUrl(url)} names no database; name it after the host: postgres://user@host:5432/DATABASE (without one, pg would use the database named like the user)`,
    );
  }
  return parsed;
}

/** Remembers the secrets a pg config holds, so no message shows them. */
function rememberConfigSecrets(config: pg.ClientConfig): void {
  if (typeof config.password === "string") rememberSecret(config.password);
  const ssl = config.ssl;
  if (typeof ssl === "object" && ssl !== null) {
    if (typeof ssl.passphrase === "string") rememberSecret(ssl.passphrase);
    if (typeof ssl.key === "string") rememberSecret(ssl.key);
  }
}

/** A URL component decoded, or as written when its escapes are broken. */
function safeDecode(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

/** Where a connection goes, as error messages name it (never with its password). */
interface Target {
  readonly where: string;
  readonly host: string;
  readonly user: string;
  readonly database: string;
  /** Where the user set them: "the URL" or "the config". */
  readonly setIn: string;
}

function target(config: pg.ClientConfig): Target {
  if (config.connectionString !== undefined) {
    const parsed = new URL(config.connectionString);
    return {
      where: redactUrl(config.connectionString),
      host: parsed.hostname,
      user: safeDecode(parsed.username) || "(default)",
      database: safeDecode(parsed.pathname.slice(1)) || "(default)",
      setIn: "the URL",
    };
  }
  const host = config.host ?? process.env.PGHOST ?? "localhost";
  const user = config.user ?? process.env.PGUSER ?? "(default)";
  const database = config.database ?? process.env.PGDATABASE ?? "(default)";
  return {
    where: `host ${host} port ${config.port ?? process.env.PGPORT ?? 5432} database ${database} (user ${user})`,
    host,
    user,
    database,
    setIn: "the config",
  };
}

/** Explains a connection failure in one line. */
export function describeConnectError(to: Target, error: unknown): string {
  const { where, host, user, database, setIn } = to;
  const err = error as { code?: string; message?: string };
  switch (err.code) {
    case "ECONNREFUSED":
      return `cannot connect to PostgreSQL at ${where}: connection refused; is the server running and listening there?`;
    case "ENOTFOUND":
    case "EAI_AGAIN":
      return `cannot connect to PostgreSQL at ${where}: host ${host} not found`;
    case "ETIMEDOUT":
      return `cannot connect to PostgreSQL at ${where}: timed out`;
    case "28P01":
      return `PostgreSQL at ${where} refused the password for user ${user}; check the user and password in ${setIn}`;
    case "28000":
      return `PostgreSQL at ${where} does not allow user ${user} to connect (${err.message ?? "no pg_hba.conf entry"})`;
    case "3D000":
      return `PostgreSQL database ${database} does not exist at ${where}; create it (createdb ${database}) or name another in ${setIn}`;
    default:
      return `cannot connect to PostgreSQL at ${where}: ${err.message ?? String(error)}`;
  }
}

const READ_COMMITTED = "-c default_transaction_isolation=read\\ committed";

/** Where the store's connections come from: a URL, the app's own pg.Pool, or a pg pool config. */
export type PostgresSource = { readonly url: string } | { readonly pool: pg.Pool } | { readonly config: pg.PoolConfig };

/** A connected pool, and how to open the store's one extra connection (its LISTEN for wake-ups). */
export interface OpenedPool {
  readonly pool: pg.Pool;
  /** False for the app's own pool: closing the store leaves it open. */
  readonly owned: boolean;
  readonly clientConfig: pg.ClientConfig;
  /** The client class the pool makes its connections with (pg's, pg-native's, an instrumented one). */
  readonly Client: new (
    config: pg.ClientConfig,
  ) => pg.Client;
}

function absorbErrors(pool: pg.Pool): void {
  pool.on("error", () => {
    // An idle client lost its connection; the pool drops it and opens a new one when needed.
  });
  pool.on("connect", (client) => {
    // A backend that dies (killed, server restart) can make its client emit "error" more than
    // once, or between the pool's own listeners; the failing query still reports the error to
    // its caller, and the pool discards the client. Without this listener the process would crash.
    client.on("error", () => undefined);
  });
}

/**
 * Opens (or, for the app's own pool, checks) the store's pool. Idle-client errors (a killed
 * backend, a server restart) are absorbed on a pool the store opened; the pool reconnects.
 */
export async function openPostgresPool(source: PostgresSource, options: PostgresConnectOptions = {}): Promise<OpenedPool> {
  if (typeof source !== "object" || source === null || ["url" in source, "pool" in source, "config" in source].filter(Boolean).length !== 1) {
    throw new InvalidArgumentError("give exactly one of url (postgres://…), pool (your pg.Pool) or config (a pg pool config)");
  }
  const max = options.maxConnections ?? 10;
  if (!Number.isInteger(max) || max < 1) {
    throw new InvalidArgumentError(`maxConnections must be a whole number >= 1 (got ${String(max)})`);
  }
  const applicationName = options.applicationName ?? "wassal";
  if ("pool" in source) return adoptPool(source.pool, applicationName);

  let config: pg.PoolConfig;
  if ("url" in source) {
    checkPostgresUrl(source.url);
    config = { connectionString: source.url };
  } else {
    if (typeof source.config !== "object" || source.config === null)
      throw new InvalidArgumentError("config must be a pg pool config object ({ host, user, password, ssl, … })");
    if (source.config.connectionString !== undefined) checkPostgresUrl(source.config.connectionString);
    rememberConfigSecrets(source.config);
    config = source.config;
  }
  // FIFO per ordering key relies on each statement reading what committed before it (READ
  // COMMITTED): the store's own sessions use it whatever the database's default.
  const clientConfig: pg.ClientConfig = {
    application_name: applicationName,
    ...config,
    connectionTimeoutMillis: config.connectionTimeoutMillis ?? options.connectTimeoutMs ?? 10_000,
    options: config.options === undefined ? READ_COMMITTED : `${config.options} ${READ_COMMITTED}`,
  };
  const driver = pgDriver();
  const pool = new driver.Pool({ ...config, ...clientConfig, max: config.max ?? max });
  absorbErrors(pool);
  try {
    // The URL's own ?options=… replaces the options set above: check what the sessions got.
    await checkIsolation(pool, target(config), "the URL's or config's options override it: add -c default_transaction_isolation=read\\ committed to them");
  } catch (error) {
    await pool.end().catch(() => undefined);
    throw error;
  }
  return { pool, owned: true, clientConfig, Client: driver.Client };
}

/** Throws DatabaseOpenError when the pool cannot connect, or its sessions do not default to READ COMMITTED. */
async function checkIsolation(pool: pg.Pool, to: Target, fix: string): Promise<void> {
  let isolation: string | undefined;
  try {
    isolation = (await pool.query<{ isolation: string }>("SELECT current_setting('default_transaction_isolation') AS isolation")).rows[0]?.isolation;
  } catch (error) {
    throw new DatabaseOpenError(describeConnectError(to, error), { cause: error });
  }
  if (isolation !== "read committed") {
    throw new DatabaseOpenError(
      `the pool's sessions default to ${isolation ?? "an unknown"} isolation, and Wassal's statements need read committed (the per-key order relies on it): ${fix}`,
    );
  }
}

/**
 * The app's own pool: used as it is (the store never ends it), after checking that it connects
 * and that its sessions read committed data, which the per-key order relies on.
 */
async function adoptPool(pool: pg.Pool, applicationName: string): Promise<OpenedPool> {
  if (typeof pool !== "object" || pool === null || typeof pool.connect !== "function" || typeof pool.query !== "function") {
    throw new InvalidArgumentError("pool must be a pg.Pool (new pg.Pool({ … }))");
  }
  await checkIsolation(
    pool,
    target(pool.options),
    'create the pool with options: "-c default_transaction_isolation=read\\ committed", or give Wassal a url or config instead',
  );
  // The LISTEN connection is one of its own, made like the pool's (its client class, its settings).
  const Client = (pool as pg.Pool & { Client?: OpenedPool["Client"] }).Client ?? pgDriver().Client;
  return {
    pool,
    owned: false,
    Client,
    clientConfig: { ...pool.options, connectionTimeoutMillis: pool.options.connectionTimeoutMillis || 10_000, application_name: applicationName },
  };
}
