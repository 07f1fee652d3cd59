// Opens a SQLite file for Wassal: checks that it is a SQLite database and that no newer Wassal
// migrated it (both without writing anything), then sets WAL, the durability level and a short
// busy timeout (long waits are retried asynchronously), and proves with a real committed write
// that this process can write it: the file, its -wal and -shm files and their directory must all
// be writable, and only a write shows that (SQLite silently opens a file it cannot write
// read-only). Or opens it read-only, for commands that only look.

import { closeSync, existsSync, openSync, readSync, statSync } from "node:fs";
import type Database from "better-sqlite3";
import { sqliteDriver } from "./driver.js";
import { DatabaseOpenError, InvalidArgumentError } from "../../outbox/errors.js";
import { refuseNewerSqlite } from "./migrate.js";

export type Synchronous = "FULL" | "NORMAL";

export interface SqliteOpenOptions {
  /** `FULL` (default) flushes every commit to disk; `NORMAL` is faster and may lose the last commits on power loss (never corrupts). */
  readonly synchronous?: Synchronous;
  /**
   * How long one attempt may block the event loop waiting for the write lock (default 2 ms); after
   * that the store waits asynchronously (WriteLock). SQLite's busy handler sleeps 1 ms, then 1 ms
   * again, looking after each, and the whole process sleeps with it. With 10 ms (the default
   * before) it sleeps 1, 2, 5 and 2 ms: the bench's workers in 4 processes spent about half their
   * time there (`exec`, mostly BEGIN IMMEDIATE: 57–59 % of each one's samples in CPU profiles,
   * against 11 % for BEGIN and COMMIT with 1 process), and the lock stood free while they slept.
   * With 0 every wait is on Node's timers, which fire no sooner than 1 ms and late under load: a
   * worker woken by another process's message and waiting for that enqueuer's commit started it
   * later (enqueue → start p99, synchronous FULL, from another process: 6.77–10.70 ms with 0,
   * 3.55–5.09 with 2, 4.97–9.65 with 10; 3 alternated rounds of `npm run bench -- --sections
   * latency --stores sqlite-FULL`).
   */
  readonly busyTimeoutMs?: number;
  /**
   * Open for reading only (the file must exist): nothing is written, not even the write check,
   * so a database this process may read but not write can still be inspected. Writes then throw
   * StoreReadOnlyError.
   */
  readonly readOnly?: boolean;
}

const CHECK_WRITE_ACCESS =
  "check that this process's user may write the file, its -wal and -shm files (they belong to whoever created them) and their directory, and that the file system is not mounted read-only";

const SQLITE_HEADER = "SQLite format 3\u0000";

/** How long opening may block waiting for another process's lock. */
const OPEN_WAIT_MS = 10_000;

/**
 * Reads the first bytes of an existing, non-empty file and refuses anything that is not SQLite.
 * True when the file holds a database (exists and is not empty).
 */
function checkHeader(path: string): boolean {
  let size: number;
  try {
    const stat = statSync(path);
    if (stat.isDirectory()) {
      throw new DatabaseOpenError(`database path ${path} is a directory; give the path of a SQLite file (it is created if missing)`);
    }
    size = stat.size;
  } catch (error) {
    if (error instanceof DatabaseOpenError) throw error;
    return false; // missing: SQLite creates it (and reports if it cannot)
  }
  if (size === 0) return false;
  const buffer = Buffer.alloc(16);
  let fd: number | undefined;
  try {
    fd = openSync(path, "r");
    readSync(fd, buffer, 0, 16, 0);
  } catch (error) {
    throw new DatabaseOpenError(`cannot read database file ${path}: ${(error as Error).message}`, { cause: error });
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
  if (buffer.toString("latin1") !== SQLITE_HEADER) {
    throw new DatabaseOpenError(`${path} is not a SQLite database (its header is wrong); give a new path or an existing SQLite file`);
  }
  return true;
}

export function openSqliteDatabase(path: string, options: SqliteOpenOptions = {}): Database.Database {
  if (typeof path !== "string" || path.trim() === "") {
    throw new InvalidArgumentError(`SQLite path must be a non-empty file path (got ${JSON.stringify(path)})`);
  }
  const synchronous = options.synchronous ?? "FULL";
  if (synchronous !== "FULL" && synchronous !== "NORMAL") {
    throw new InvalidArgumentError(`synchronous must be "FULL" or "NORMAL" (got ${JSON.stringify(synchronous)})`);
  }
  const busyTimeoutMs = options.busyTimeoutMs ?? 2;
  if (!Number.isInteger(busyTimeoutMs) || busyTimeoutMs < 0) {
    throw new InvalidArgumentError(`busyTimeoutMs must be a whole number of milliseconds >= 0 (got ${String(busyTimeoutMs)})`);
  }
  // A missing driver is its own error (MissingClientError), not a database that cannot open.
  const Driver = sqliteDriver();
  const existing = path !== ":memory:" && checkHeader(path);
  if (options.readOnly) return openForReading(Driver, path, busyTimeoutMs);
  // Before the first write (WAL, the write check): a database a newer Wassal migrated stays as it is.
  if (existing) {
    try {
      peek(Driver, path, (db) => refuseNewerSqlite(db, path));
    } catch (error) {
      throw error instanceof DatabaseOpenError ? error : openFailure(path, error);
    }
  }

  let db: Database.Database;
  try {
    // Opening may wait for another process's lock (switching to WAL, the write check below):
    // allow that once, at start-up, then keep every later wait short.
    db = new Driver(path, { timeout: OPEN_WAIT_MS });
  } catch (error) {
    throw new DatabaseOpenError(`cannot open SQLite database ${path}: ${(error as Error).message}; check that the directory exists and is writable`, {
      cause: error,
    });
  }
  try {
    db.pragma("journal_mode = WAL");
    db.pragma(`synchronous = ${synchronous}`);
    db.pragma("foreign_keys = ON");
    // Keep the WAL file bounded: truncate it back to 64 MiB after each checkpoint.
    db.pragma("journal_size_limit = 67108864");
    // wal_autocheckpoint stays SQLite's 1,000 pages. Tried: 4,000 and 10,000 (the bench's NORMAL and
    // FULL throughput rows, 100,000 messages, 1 and 4 processes, 3 alternated rounds). With 4
    // processes at batch 100 on NORMAL the time in COMMIT (which runs the checkpoint after the lock
    // is released) fell, 8.9 / 10.4 / 9.9 µs per message -> 4.6 / 3.7 / 2.8 (4,000) and 2.5 / 3.5 /
    // 3.8 (10,000), but the rates did not move beyond the noise (medians 36,893 / 35,275 / 36,520
    // msg/s on NORMAL, 25,822 / 27,954 / 27,391 on FULL), and a WAL file up to ten times the size
    // would stay on disk.
    proveWritable(db);
    db.pragma(`busy_timeout = ${busyTimeoutMs}`);
  } catch (error) {
    db.close();
    throw openFailure(path, error);
  }
  return db;
}

/** What a failure to open or prepare a database for writing means, as one DatabaseOpenError. */
function openFailure(path: string, error: unknown): DatabaseOpenError {
  const code = (error as { code?: string }).code ?? "";
  if (code === "SQLITE_NOTADB") {
    return new DatabaseOpenError(`${path} is not a SQLite database; give a new path or an existing SQLite file`, { cause: error });
  }
  if (code.startsWith("SQLITE_BUSY")) {
    return new DatabaseOpenError(`SQLite database ${path} stayed locked by another process for ${OPEN_WAIT_MS / 1000} s while opening; try again`, {
      cause: error,
    });
  }
  if (code.startsWith("SQLITE_READONLY") || code.startsWith("SQLITE_CANTOPEN") || code.startsWith("SQLITE_IOERR") || code === "SQLITE_PERM") {
    return new DatabaseOpenError(
      `cannot write SQLite database ${path} (${code}): ${CHECK_WRITE_ACCESS}. Commands that only read (outbox stats, outbox dead) open it read-only`,
      { cause: error },
    );
  }
  return new DatabaseOpenError(`cannot prepare SQLite database ${path}: ${(error as Error).message}`, { cause: error });
}

/**
 * Proves, now rather than at the first enqueue, that this connection can write: commits a write
 * that changes nothing (user_version set to its own value, under the write lock). An empty
 * BEGIN IMMEDIATE … COMMIT is not enough: it succeeds on a file SQLite opened read-only.
 */
function proveWritable(db: Database.Database): void {
  db.exec("BEGIN IMMEDIATE");
  try {
    const version = db.pragma("user_version", { simple: true }) as number;
    db.pragma(`user_version = ${version}`);
    db.exec("COMMIT");
  } catch (error) {
    if (db.inTransaction) db.exec("ROLLBACK");
    throw error;
  }
}

/**
 * Runs `read` on an existing database file, leaving the file as it was and nothing new beside it.
 * A -wal file already there may hold commits not yet in the file: a read-only connection reads
 * them and never checkpoints (it never writes the file). Without one, a read-only connection would
 * leave the -wal and -shm files its read creates; a read-write connection reads, and as the last
 * to close removes them again, its empty WAL checkpointing nothing into the file.
 */
function peek<T>(Driver: typeof Database, path: string, read: (db: Database.Database) => T): T {
  const db = new Driver(path, { readonly: existsSync(`${path}-wal`), fileMustExist: true, timeout: OPEN_WAIT_MS });
  try {
    return read(db);
  } finally {
    db.close();
  }
}

function openForReading(Driver: typeof Database, path: string, busyTimeoutMs: number): Database.Database {
  if (path === ":memory:") throw new InvalidArgumentError("readOnly needs a database file, not :memory:");
  let db: Database.Database | undefined;
  try {
    db = new Driver(path, { readonly: true, fileMustExist: true, timeout: OPEN_WAIT_MS });
    db.prepare("SELECT count(*) FROM sqlite_schema").get(); // reading starts here: fail now, not at the first command
    db.pragma(`busy_timeout = ${busyTimeoutMs}`);
    return db;
  } catch (error) {
    db?.close();
    throw readFailure(path, error);
  }
}

/** What a failure to read a database means, as one DatabaseOpenError. */
function readFailure(path: string, error: unknown): DatabaseOpenError {
  const code = (error as { code?: string }).code ?? "";
  if (code === "SQLITE_NOTADB" || code === "SQLITE_CORRUPT")
    return new DatabaseOpenError(`${path} is not a SQLite database (its header is, its body is not: ${code}); give a new path or an intact SQLite file`, {
      cause: error,
    });
  const hint =
    code === "SQLITE_CANTOPEN"
      ? "check that it exists and that this process may read it"
      : code.startsWith("SQLITE_READONLY")
        ? "a database in WAL mode can be read only while its -shm file is writable, or while a process that may write it has it open; check the directory's and the -wal and -shm files' permissions"
        : "check the path";
  return new DatabaseOpenError(`cannot read SQLite database ${path} (${code || (error as Error).message}): ${hint}`, { cause: error });
}

/**
 * Whether an existing SQLite file holds a table, read without changing anything in the file or
 * beside it (opening it for Wassal would switch it to WAL). A file that is not SQLite is refused.
 */
export function fileHasTable(path: string, table: string): boolean {
  return fileHasAnyTable(path, [table]);
}

/** True when an existing SQLite file holds one of these tables, read as fileHasTable reads (nothing on disk changes). */
export function fileHasAnyTable(path: string, tables: readonly string[]): boolean {
  checkHeader(path);
  if (statSync(path).size === 0) return false;
  try {
    return peek(sqliteDriver(), path, (db) => listTables(db).some((name) => tables.includes(name)));
  } catch (error) {
    throw readFailure(path, error);
  }
}

/** Names of the tables in a database. */
export function listTables(db: Database.Database): string[] {
  return db.prepare("SELECT name FROM sqlite_schema WHERE type = 'table'").pluck().all() as string[];
}

/** The SQLite library's version, e.g. "3.51.2". */
export function sqliteVersion(): string {
  const db = new (sqliteDriver())(":memory:");
  try {
    return db.prepare("SELECT sqlite_version()").pluck().get() as string;
  } finally {
    db.close();
  }
}
