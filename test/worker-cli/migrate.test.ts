// Wassal creates Wassal's tables and nothing else: `wassal migrate` (with --check and --print-sql)
// is the documented way, the worker creates only the outbox's tables (the payments demo's are the
// lab's and the payments commands'), and an enqueue or claim on a database never migrated is
// NotMigratedError, which says to run `wassal migrate`. A --db with a mistyped scheme names the
// valid shapes instead of falling through to SQLite.

import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { NotMigratedError } from "../../src/outbox/errors.js";
import { PostgresOutboxStore } from "../../src/stores/postgres/postgres-outbox-store.js";
import { SqliteOutboxStore } from "../../src/stores/sqlite/sqlite-outbox-store.js";
import { killAll, requireBuiltCli, runCli, startCli } from "../support/cli.js";
import { freshSchema, postgresAvailable, TEST_DATABASE_URL, withClient } from "../support/postgres.js";
import { tempDir } from "../support/temp.js";

const PG = await postgresAvailable();
const OUTBOX_TABLES = [
  "outbox_audit",
  "outbox_keys",
  "outbox_limit_starts",
  "outbox_limits",
  "outbox_messages",
  "outbox_owners",
  "outbox_schedules",
  "wassal_inbox",
  "wassal_inbox_keys",
  "wassal_migrations",
];

async function tablesIn(schema: string): Promise<string[]> {
  return withClient(async (client) =>
    (await client.query<{ t: string }>("SELECT table_name AS t FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1", [schema])).rows.map(
      (r) => r.t,
    ),
  );
}

beforeAll(() => requireBuiltCli());
afterEach(killAll);

describe("wassal migrate", () => {
  it("on SQLite: --check lists every migration pending and exits 1 without creating the file; migrate applies them; --check then exits 0", async () => {
    const cwd = tempDir();
    const db = join(cwd, "app.db");
    const check = await runCli(["migrate", "--db", db, "--check", "--json"], { cwd });
    expect(check.code).toBe(1);
    const pending = (JSON.parse(check.stdout) as { pending: string[] }).pending;
    expect(pending[0]).toBe("outbox-001-create");
    expect(existsSync(db), "--check creates nothing").toBe(false);

    const sql = await runCli(["migrate", "--db", db, "--print-sql"], { cwd });
    expect(sql.code).toBe(0);
    expect(sql.stdout).toContain("-- outbox-001-create");
    expect(sql.stdout).toMatch(/CREATE TABLE outbox_messages/);
    expect(existsSync(db), "--print-sql creates nothing").toBe(false);

    const applied = await runCli(["migrate", "--db", db, "--json"], { cwd });
    expect(applied.code).toBe(0);
    expect((JSON.parse(applied.stdout) as { applied: string[] }).applied).toEqual(pending);
    expect((await runCli(["migrate", "--db", db, "--check"], { cwd })).code).toBe(0);
    const again = await runCli(["migrate", "--db", db], { cwd });
    expect(again.stdout).toContain("up to date, nothing applied");
  });

  it.skipIf(!PG)("on PostgreSQL: --check creates no schema; migrate creates only the outbox's tables", async () => {
    const cwd = tempDir();
    const schema = freshSchema("wassal_migrate");
    const db = ["--db", TEST_DATABASE_URL, "--schema", schema];
    expect((await runCli(["migrate", ...db, "--check"], { cwd })).code).toBe(1);
    expect((await runCli(["migrate", ...db, "--print-sql"], { cwd })).stdout).toContain(`CREATE TABLE "${schema}".outbox_messages`);
    expect(await tablesIn(schema)).toEqual([]);
    expect((await runCli(["migrate", ...db], { cwd })).code).toBe(0);
    expect(await tablesIn(schema)).toEqual(OUTBOX_TABLES);
    expect((await runCli(["migrate", ...db, "--check"], { cwd })).code).toBe(0);
  });

  it("a mistyped scheme is refused naming the valid shapes, with the password hidden", async () => {
    const cwd = tempDir();
    const result = await runCli(["migrate", "--db", "postgress://app:hunter2@db/app"], { cwd });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('scheme "postgress:"');
    expect(result.stderr).toContain("postgres://");
    expect(result.stderr).toContain("mariadb://");
    expect(result.stderr).not.toContain("hunter2");
    expect(result.stderr).not.toMatch(/better-sqlite3/);
  });
});

describe("the library's tables only", () => {
  it.skipIf(!PG)("wassal worker on a fresh PostgreSQL schema leaves only Wassal's outbox tables there (no payments demo tables)", async () => {
    const cwd = tempDir();
    const schema = freshSchema("wassal_worker_tables");
    const worker = startCli(["worker", "--db", TEST_DATABASE_URL, "--schema", schema, "--log-level", "info"], { cwd });
    await worker.waitForStderr("worker started", 30_000);
    worker.signal("SIGTERM");
    expect((await worker.waitForExit(30_000)).code).toBe(0);
    expect(await tablesIn(schema)).toEqual(OUTBOX_TABLES);
  });

  it("an enqueue or a claim on a SQLite database never migrated is NotMigratedError naming `wassal migrate`", async () => {
    const store = new SqliteOutboxStore({ path: join(tempDir(), "never.db") });
    try {
      const enqueued = store.transaction((tx) => store.enqueue(tx, { type: "t", payload: 1 }));
      await expect(enqueued).rejects.toThrow(NotMigratedError);
      await expect(enqueued).rejects.toThrow(/wassal migrate/);
      await expect(store.claim("me", { limit: 1, leaseMs: 1000 })).rejects.toThrow(NotMigratedError);
      expect((await store.pendingMigrations()).length).toBeGreaterThan(0);
      await store.migrate();
      expect(await store.pendingMigrations()).toEqual([]);
    } finally {
      await store.close();
    }
  });

  it.skipIf(!PG)("an enqueue or a claim on a PostgreSQL schema never migrated is NotMigratedError naming `wassal migrate`", async () => {
    const store = await PostgresOutboxStore.connect({ url: TEST_DATABASE_URL, schema: freshSchema("wassal_never"), maxConnections: 1 });
    try {
      await expect(store.transaction((tx) => store.enqueue(tx, { type: "t", payload: 1 }))).rejects.toThrow(/wassal migrate/);
      await expect(store.claim("me", { limit: 1, leaseMs: 1000 })).rejects.toThrow(NotMigratedError);
      await expect(store.transaction((tx) => store.enqueueMany(tx, [{ type: "t", payload: 1 }]))).rejects.toThrow(NotMigratedError);
    } finally {
      await store.close();
    }
  });
});
