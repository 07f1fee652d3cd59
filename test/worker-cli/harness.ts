// Shared by the `wassal worker` / `wassal outbox` end-to-end tests: running the built CLI as real
// processes (short commands and long-running workers), killing whatever is left after each test,
// polling with deadlines instead of sleeping, and reading a database (a SQLite file or a
// PostgreSQL schema) directly to check what the processes did.
//
// Needs `npm run build` first (`npm test` does it).

import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import Database from "better-sqlite3";
import pg from "pg";
import { expect } from "vitest";
import { openOutbox, type OpenedOutbox } from "../../src/stores/open-outbox.js";
import type { StatusCounts } from "../../src/outbox/types.js";
import { freshSchema, TEST_DATABASE_URL } from "../support/postgres.js";

export const ROOT = fileURLToPath(new URL("../../", import.meta.url));
export const CLI = join(ROOT, "dist", "cli", "main.js");

/** Throws (once, in beforeAll) when dist/ was not built. */
export function requireBuiltCli(): void {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` before these tests (npm test does)`);
}

// ---------------------------------------------------------------------------------------------
// Polling with a deadline.

/**
 * Calls `probe` every `intervalMs` until it returns something other than undefined (or false),
 * and returns that. Throws, naming `what` and the last value seen, when `timeoutMs` passes.
 */
export async function until<T>(what: string, probe: () => T | undefined | false | Promise<T | undefined | false>, options: { timeoutMs?: number; intervalMs?: number; last?: () => unknown } = {}): Promise<T> {
  const timeoutMs = options.timeoutMs ?? 20_000;
  const intervalMs = options.intervalMs ?? 50;
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined && value !== false) return value;
    if (performance.now() > deadline) {
      const last = options.last ? ` (last seen: ${JSON.stringify(options.last())})` : "";
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last}`);
    }
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

// ---------------------------------------------------------------------------------------------
// Processes.

export interface Exit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  /** performance.now() when the process ended. */
  readonly at: number;
}

export interface CliProcess {
  readonly args: readonly string[];
  readonly child: ChildProcess;
  readonly pid: number;
  stdout(): string;
  stderr(): string;
  /** Resolves when the process has ended and its output is closed. */
  readonly exited: Promise<Exit>;
  /** The exit, once it happened. */
  exit(): Exit | undefined;
  /** Sends a signal; returns performance.now() at the moment it was sent. */
  signal(signal: NodeJS.Signals): number;
  /** Waits for the exit, failing after `timeoutMs` (the process is left for afterEach to kill). */
  waitForExit(timeoutMs: number): Promise<Exit>;
  /** Waits until stderr contains `text`. */
  waitForStderr(text: string | RegExp, timeoutMs?: number): Promise<void>;
}

const live = new Set<CliProcess>();

/** The environment a CLI process gets: no inherited WASSAL_DEBUG or WASSAL_DATABASE_URL (which would redirect --db). */
function cliEnv(extra: Readonly<Record<string, string>> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
  delete env.WASSAL_DEBUG;
  delete env.WASSAL_DATABASE_URL;
  return { ...env, ...extra };
}

/** Starts `node dist/cli/main.js …args` in `cwd`. Killed by `killAll` if still running. */
export function startCli(args: readonly string[], options: { cwd: string; env?: Readonly<Record<string, string>> }): CliProcess {
  return track(args, spawn(process.execPath, [CLI, ...args], { cwd: options.cwd, env: cliEnv(options.env), stdio: ["ignore", "pipe", "pipe"] }));
}

/**
 * Runs the CLI under `script`, so that its stdin, stdout and stderr are a terminal (as for a
 * person at a shell): what it prints only for terminals becomes visible. Output is merged.
 */
export function startCliOnTerminal(args: readonly string[], options: { cwd: string }): CliProcess {
  const command = [process.execPath, CLI, ...args].map(shellQuote).join(" ");
  return track(args, spawn("script", ["-qec", command, "/dev/null"], { cwd: options.cwd, env: cliEnv(), stdio: ["ignore", "pipe", "pipe"] }));
}

export const SCRIPT_AVAILABLE = existsSync("/usr/bin/script") || existsSync("/bin/script");

function shellQuote(word: string): string {
  return `'${word.replaceAll("'", `'\\''`)}'`;
}

function track(args: readonly string[], child: ChildProcess): CliProcess {
  let out = "";
  let err = "";
  child.stdout!.setEncoding("utf8").on("data", (chunk: string) => (out += chunk));
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (err += chunk));
  let ended: Exit | undefined;
  const exited = new Promise<Exit>((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code, signal) => {
      ended = { code, signal, at: performance.now() };
      live.delete(handle);
      resolve(ended);
    });
  });
  const handle: CliProcess = {
    args,
    child,
    pid: child.pid ?? -1,
    stdout: () => out,
    stderr: () => err,
    exited,
    exit: () => ended,
    signal(signal) {
      const at = performance.now();
      if (ended === undefined) child.kill(signal);
      return at;
    },
    async waitForExit(timeoutMs) {
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`wassal ${args.join(" ")} did not exit within ${timeoutMs} ms; stderr: ${err.slice(-2000)}`)), timeoutMs);
      });
      try {
        return await Promise.race([exited, timeout]);
      } finally {
        clearTimeout(timer);
      }
    },
    async waitForStderr(text, timeoutMs = 15_000) {
      await until(`stderr of wassal ${args.join(" ")} to show ${String(text)}`, () => {
        if (typeof text === "string" ? err.includes(text) : text.test(err)) return true;
        if (ended) throw new Error(`wassal ${args.join(" ")} exited (${JSON.stringify(ended)}) before printing ${String(text)}; stderr: ${err.slice(-2000)}`);
        return false;
      }, { timeoutMs });
    },
  };
  live.add(handle);
  return handle;
}

/** SIGKILLs every process these helpers started that is still running, and waits for them (afterEach). */
export async function killAll(): Promise<void> {
  const left = [...live];
  for (const p of left) p.child.kill("SIGKILL");
  await Promise.all(left.map((p) => p.exited.catch(() => undefined)));
}

export interface CliResult {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs a short CLI command to its end. */
export async function runCli(args: readonly string[], options: { cwd: string; timeoutMs?: number; env?: Readonly<Record<string, string>> }): Promise<CliResult> {
  const p = startCli(args, options);
  const exit = await p.waitForExit(options.timeoutMs ?? 30_000);
  return { code: exit.code, signal: exit.signal, stdout: p.stdout(), stderr: p.stderr() };
}

/** Runs a short CLI command that must succeed; returns its stdout. */
export async function cliOk(args: readonly string[], options: { cwd: string; timeoutMs?: number }): Promise<string> {
  const result = await runCli(args, options);
  expect(result, `wassal ${args.join(" ")}`).toMatchObject({ code: 0, signal: null, stderr: "" });
  return result.stdout;
}

/** Runs a short CLI command with --json that must succeed; returns its parsed output. */
export async function cliJson<T = unknown>(args: readonly string[], options: { cwd: string; timeoutMs?: number }): Promise<T> {
  return JSON.parse(await cliOk([...args, "--json"], options)) as T;
}

// ---------------------------------------------------------------------------------------------
// Output checks.

/** Commander's hint after a usage error: allowed as a second line after the error itself. */
export const HELP_HINT = "(run with --help for usage)";

/** No "    at foo (file:line)" lines: errors are messages, not stack traces. */
export function expectNoStack(text: string): void {
  expect(text).not.toMatch(/^\s+at .+/m);
  expect(text).not.toMatch(/node:internal|file:\/\/|\.js:\d+/);
}

/** The one error line of a failed command (the help hint aside), with no stack trace. */
export function errorLine(stderr: string): string {
  expectNoStack(stderr);
  const lines = stderr.split("\n").filter((line) => line.trim() !== "" && line.trim() !== HELP_HINT);
  expect(lines, `stderr: ${JSON.stringify(stderr)}`).toHaveLength(1);
  return lines[0]!;
}

/** The JSON log lines (pino) a worker wrote on stderr. */
export function logLines(stderr: string): { level: number; msg: string; event?: string; error?: string; messageId?: string; [key: string]: unknown }[] {
  return stderr.split("\n").filter((line) => line.trim() !== "").map((line) => {
    try {
      return JSON.parse(line) as { level: number; msg: string };
    } catch {
      throw new Error(`a worker's stderr line is not a JSON log line: ${JSON.stringify(line)}`);
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Free TCP ports.

/** A port that was free a moment ago (listen on 0, read the port, close). */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (address === null || typeof address === "string") throw new Error("no port");
  return address.port;
}

// ---------------------------------------------------------------------------------------------
// Databases: a SQLite file or a PostgreSQL schema, read directly.

export type StoreKind = "sqlite" | "postgres";

export interface MessageRow {
  readonly id: string;
  readonly type: string;
  readonly status: string;
  readonly lockedBy: string | null;
  readonly leaseToken: number;
  readonly attempts: number;
  readonly lastError: string | null;
  /** Epoch milliseconds (the store's clock), or null. */
  readonly lockedUntil: number | null;
}

export interface PaymentRow {
  readonly key: string;
  readonly status: string;
  readonly transactionId: string | null;
}

export interface Target {
  readonly kind: StoreKind;
  /** The --db value. */
  readonly db: string;
  /** --db (and --schema on PostgreSQL), for every command. */
  readonly args: readonly string[];
  messages(): Promise<MessageRow[]>;
  counts(): Promise<StatusCounts>;
  payments(): Promise<PaymentRow[]>;
  /** The library's view of the same database (for enqueueing what the CLI cannot). Close it. */
  open(): Promise<OpenedOutbox>;
  close(): Promise<void>;
}

const MESSAGE_COLUMNS = "id, type, status, locked_by, locked_until, lease_token, attempts, last_error";

interface RawMessage {
  id: number | string;
  type: string;
  status: string;
  locked_by: string | null;
  lease_token: number;
  attempts: number;
  last_error: string | null;
  locked_until: number | Date | null;
}

function toMessage(row: RawMessage): MessageRow {
  return { id: String(row.id), type: row.type, status: row.status, lockedBy: row.locked_by, leaseToken: Number(row.lease_token), attempts: Number(row.attempts), lastError: row.last_error,
    lockedUntil: row.locked_until === null ? null : row.locked_until instanceof Date ? row.locked_until.getTime() : Number(row.locked_until) };
}

function toCounts(rows: readonly { status: string; n: number | string }[]): StatusCounts {
  const counts: StatusCounts = { pending: 0, processing: 0, processed: 0, dead: 0 };
  for (const row of rows) counts[row.status as keyof StatusCounts] = Number(row.n);
  return counts;
}

const targets: Target[] = [];

/** Closes the connections every target of this file opened (afterAll). */
export async function closeTargets(): Promise<void> {
  await Promise.all(targets.splice(0).map((t) => t.close()));
}

/** A new, empty database: a SQLite file under `dir`, or a fresh schema (dropped when the file ends). */
export function newTarget(kind: StoreKind, dir: string): Target {
  const target = kind === "sqlite" ? sqliteTarget(join(mkdtempSync(join(dir, "db-")), "outbox.db")) : postgresTarget(freshSchema("wassal_wcli"));
  targets.push(target);
  return target;
}

function sqliteTarget(path: string): Target {
  const read = <T>(work: (db: Database.Database) => T): T | undefined => {
    if (!existsSync(path)) return undefined;
    const db = new Database(path, { readonly: true, fileMustExist: true, timeout: 5000 });
    try {
      return work(db);
    } finally {
      db.close();
    }
  };
  const hasTable = (db: Database.Database, name: string) => db.prepare("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?").get(name) !== undefined;
  return {
    kind: "sqlite",
    db: path,
    args: ["--db", path],
    async messages() {
      return read((db) => (hasTable(db, "outbox_messages") ? (db.prepare(`SELECT ${MESSAGE_COLUMNS} FROM outbox_messages ORDER BY id`).all() as RawMessage[]).map(toMessage) : [])) ?? [];
    },
    async counts() {
      return toCounts(read((db) => (hasTable(db, "outbox_messages") ? (db.prepare("SELECT status, count(*) AS n FROM outbox_messages GROUP BY status").all() as { status: string; n: number }[]) : [])) ?? []);
    },
    async payments() {
      return read((db) => (hasTable(db, "payments")
        ? (db.prepare("SELECT idempotency_key AS key, payment_status AS status, transaction_id AS transactionId FROM payments ORDER BY id").all() as PaymentRow[])
        : [])) ?? [];
    },
    open: () => openOutbox(path),
    async close() {},
  };
}

function postgresTarget(schema: string): Target {
  const pool = new pg.Pool({ connectionString: TEST_DATABASE_URL, max: 2 });
  pool.on("error", () => undefined);
  const exists = async (table: string) => (await pool.query("SELECT to_regclass($1) AS t", [`${schema}.${table}`])).rows[0]?.t !== null;
  return {
    kind: "postgres",
    db: TEST_DATABASE_URL,
    args: ["--db", TEST_DATABASE_URL, "--schema", schema],
    async messages() {
      if (!(await exists("outbox_messages"))) return [];
      return (await pool.query<RawMessage>(`SELECT ${MESSAGE_COLUMNS} FROM ${schema}.outbox_messages ORDER BY id`)).rows.map(toMessage);
    },
    async counts() {
      if (!(await exists("outbox_messages"))) return toCounts([]);
      return toCounts((await pool.query<{ status: string; n: string }>(`SELECT status, count(*) AS n FROM ${schema}.outbox_messages GROUP BY status`)).rows);
    },
    async payments() {
      if (!(await exists("payments"))) return [];
      return (await pool.query<PaymentRow>(`SELECT idempotency_key AS key, payment_status AS status, transaction_id AS "transactionId" FROM ${schema}.payments ORDER BY id`)).rows;
    },
    open: () => openOutbox(TEST_DATABASE_URL, { schema, maxConnections: 2 }),
    close: () => pool.end(),
  };
}

/** Every payment settled the way the (deterministic) provider answers, with a transaction id exactly when Paid. */
export function expectSettled(payments: readonly PaymentRow[], outcomeFor: (key: string) => "Paid" | "Failed"): void {
  const wrong = payments.filter((p) => p.status !== outcomeFor(p.key) || (p.status === "Paid") !== (p.transactionId !== null));
  expect(wrong, "payments not settled as the provider says, or with a transaction id when not Paid (or none when Paid)").toEqual([]);
  const ids = payments.flatMap((p) => (p.transactionId === null ? [] : [p.transactionId]));
  expect(ids.every((id) => /^TXN-[0-9A-F]{16}$/.test(id))).toBe(true);
  expect(new Set(ids).size, "transaction ids are unique").toBe(ids.length);
}
