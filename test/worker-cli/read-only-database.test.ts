// A SQLite database this process may read but not write, in each form it takes: the file's mode,
// the directory's mode, and a file its owner holds open with -wal and -shm present. Opening for
// writing must refuse at once (exit 2, one line naming the file and what to check), the worker must
// refuse instead of retrying forever, nothing may change, and the commands that only read must
// still work wherever SQLite can read at all.
//
// The CLI runs without the power to ignore permissions (see `unprivileged` in support/cli.ts), so
// the file modes apply even where the tests run as root.
//
// Needs `npm run build` first (`npm test` does it).

import { chmodSync, existsSync, mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { SqliteOutboxStore } from "../../src/stores/sqlite/sqlite-outbox-store.js";
import { errorLine } from "../support/assertions.js";
import { killAll, requireBuiltCli, runCli, UNPRIVILEGED_AVAILABLE, type CliResult } from "../support/cli.js";
import { tempDir } from "../support/temp.js";

const FILE_TMP = tempDir("wassal-read-only-");
let serial = 0;

beforeAll(() => {
  requireBuiltCli();
  if (!UNPRIVILEGED_AVAILABLE) throw new Error("these tests need setpriv (util-linux) when run as root");
});

const restore: (() => void)[] = [];
afterEach(async () => {
  await killAll();
  for (const undo of restore.splice(0).reverse()) undo();
});

/** Sets a mode now and puts the old one back after the test (so the temporary folder can be removed). */
function chmodForTest(path: string, mode: number): void {
  chmodSync(path, mode);
  restore.push(() => chmodSync(path, 0o755));
}

/** A folder holding a Wassal database with 3 payments (and their messages), written by the CLI. */
async function seeded(): Promise<{ dir: string; db: string }> {
  const dir = join(FILE_TMP, `case-${++serial}`);
  mkdirSync(dir);
  const db = join(dir, "app.db");
  const seed = await runCli(["payments", "seed", "--db", db, "--count", "3"], { cwd: dir });
  expect(seed.code, seed.stderr).toBe(0);
  return { dir, db };
}

/** Reads the counts as the owner would (a read-only connection would leave a -wal file behind). */
function counts(db: string): { payments: number; messages: number } {
  const reader = new Database(db, { fileMustExist: true });
  try {
    return {
      payments: reader.prepare("SELECT count(*) FROM payments").pluck().get() as number,
      messages: reader.prepare("SELECT count(*) FROM outbox_messages").pluck().get() as number,
    };
  } finally {
    reader.close();
  }
}

/** Exit 2, nothing on stdout, one line naming the file and what to check. */
function refusedToWrite(run: CliResult, db: string): void {
  expect({ code: run.code, stdout: run.stdout }).toEqual({ code: 2, stdout: "" });
  const line = errorLine(run.stderr);
  expect(line).toMatch(
    new RegExp(
      `^wassal: cannot write SQLite database ${db.replaceAll(/[.*+?^${}()|[\]\\]/g, "\\$&")} \\(SQLITE_[A-Z_]+\\): check that this process's user may write the file, its -wal and -shm files`,
    ),
  );
  expect(line).toContain("open it read-only");
}

async function expectWritesRefusedAndNothingChanged(dir: string, db: string, before: { payments: number; messages: number }): Promise<void> {
  const options = { cwd: dir, unprivileged: true } as const;
  refusedToWrite(await runCli(["payments", "seed", "--db", db, "--count", "2"], options), db);
  refusedToWrite(await runCli(["payments", "create", "--db", db, "--key", "PAY-NEW", "--amount", "100", "--currency", "EUR"], options), db);
  // A repair first looks whether the file is Wassal's (reading), then opens it for writing.
  const redrive = await runCli(["outbox", "redrive", "--db", db, "--all"], options);
  expect({ code: redrive.code, stdout: redrive.stdout }).toEqual({ code: 2, stdout: "" });
  expect(errorLine(redrive.stderr)).toMatch(/^wassal: cannot (write|read) SQLite database .* \(SQLITE_(READONLY|CANTOPEN)\w*\): /);
  // The worker refuses at start instead of retrying its first write forever.
  refusedToWrite(await runCli(["worker", "--db", db, "--poll-ms", "50"], { ...options, timeoutMs: 20_000 }), db);
  expect(counts(db)).toEqual(before);
}

async function expectStatsReadable(dir: string, db: string): Promise<void> {
  const stats = await runCli(["outbox", "stats", "--db", db, "--json"], { cwd: dir, unprivileged: true });
  expect(stats.code, stats.stderr).toBe(0);
  expect((JSON.parse(stats.stdout) as { counts: Record<string, number> }).counts).toEqual({ pending: 3, processing: 0, processed: 0, dead: 0, cancelled: 0 });
  const dead = await runCli(["outbox", "dead", "--db", db], { cwd: dir, unprivileged: true });
  expect([dead.code, dead.stdout]).toEqual([0, "no dead messages\n"]);
}

describe("a SQLite database this process can read but not write", () => {
  it("by the file's mode: writes are refused at open (exit 2, nothing changed); stats and dead still work", async () => {
    const { dir, db } = await seeded();
    const before = counts(db);
    chmodForTest(db, 0o444);
    await expectWritesRefusedAndNothingChanged(dir, db, before);
    await expectStatsReadable(dir, db);
  });

  it("by the directory's mode: writes are refused at open; reading needs a -shm file that cannot be created, and says so", async () => {
    const { dir, db } = await seeded();
    const before = counts(db);
    expect(existsSync(`${db}-wal`)).toBe(false); // closed cleanly: nothing but the file itself
    chmodForTest(dir, 0o555);
    await expectWritesRefusedAndNothingChanged(dir, db, before);
    const stats = await runCli(["outbox", "stats", "--db", db], { cwd: dir, unprivileged: true });
    expect({ code: stats.code, stdout: stats.stdout }).toEqual({ code: 2, stdout: "" });
    expect(errorLine(stats.stderr)).toMatch(/^wassal: cannot read SQLite database .* \(SQLITE_READONLY\w*\): a database in WAL mode can be read only while/);
  });

  it("held open by its owner, with -wal and -shm present and none of it writable: writes refused at open; stats and dead still work", async () => {
    const { dir, db } = await seeded();
    const before = counts(db);
    // The owner: a process with write access that keeps the database open (its -wal and -shm stay).
    const owner = new SqliteOutboxStore({ path: db });
    restore.push(() => void owner.close());
    await owner.isInstalled();
    expect(existsSync(`${db}-wal`) && existsSync(`${db}-shm`)).toBe(true);
    for (const path of [db, `${db}-wal`, `${db}-shm`]) chmodForTest(path, 0o444);
    chmodForTest(dir, 0o555);
    await expectWritesRefusedAndNothingChanged(dir, db, before);
    await expectStatsReadable(dir, db);
    expect(readFileSync(db).subarray(0, 16).toString("latin1")).toBe("SQLite format 3\u0000");
  });
});
