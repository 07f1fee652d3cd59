// A database a newer Wassal migrated (issue 37, item 4): a row such as outbox-999-from-the-future
// in wassal_migrations, as a rolled-back deployment finds it. Every writing command and every
// store that would write refuses it (DatabaseTooNewError, exit 2, one line naming the newer
// migration and saying to upgrade) before anything is written: a SQLite directory stays byte for
// byte as it was, a PostgreSQL schema keeps its rows and migrations. It stays readable through the
// read-only paths (the CLI's outbox stats, dead and show; readOnly in the library). A database
// that another component of this same version migrated (the payments tables) is not refused.
//
// Needs `npm run build` first (`npm test` does it).

import { createHash } from "node:crypto";
import { mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { DatabaseOpenError, DatabaseTooNewError, InvalidArgumentError, StoreReadOnlyError } from "../../src/outbox/errors.js";
import { openOutbox } from "../../src/stores/open-outbox.js";
import { PostgresPaymentsRepository } from "../../src/lab/stores/postgres-payments.js";
import { PostgresOutboxStore } from "../../src/stores/postgres/postgres-outbox-store.js";
import { SqlitePaymentsRepository } from "../../src/lab/stores/sqlite-payments.js";
import { SqliteOutboxStore } from "../../src/stores/sqlite/sqlite-outbox-store.js";
import { killAll, requireBuiltCli, runCli } from "../support/cli.js";
import { freshSchema, postgresAvailable, TEST_DATABASE_URL, withClient } from "../support/postgres.js";
import { tempDir } from "../support/temp.js";

const PG = await postgresAvailable();
const FUTURE = "outbox-999-from-the-future";
const REFUSAL = /was migrated by a newer Wassal \(outbox-999-from-the-future\); upgrade wassal to use it, or open it read-only to inspect it/;
const tmp = tempDir("wassal-migration-guard-");
const cwd = () => mkdtempSync(join(tmp, "cwd-"));

beforeAll(requireBuiltCli);
afterEach(killAll);

/** The commands that write: each must be refused. */
const WRITING_COMMANDS: readonly (readonly string[])[] = [
  ["payments", "create", "--key", "PAY-NEW", "--amount", "100", "--currency", "EUR"],
  ["payments", "seed", "--count", "3"],
  ["outbox", "redrive", "--all"],
  ["outbox", "unblock", "k", "--skip"],
  ["outbox", "purge", "--processed-before", "0s"],
  ["worker", "--poll-ms", "50"],
];

/** Leaves one processed message and one dead message of key "k" behind, through the library. */
async function seedOutbox(db: string, schema?: string): Promise<void> {
  const opened = await openOutbox(db, schema === undefined ? {} : { schema });
  const { store } = opened;
  try {
    await store.transaction((tx) =>
      store.enqueueMany(tx, [
        { type: "t", payload: { n: 1 } },
        { type: "t", payload: { n: 2 }, key: "k" },
      ]),
    );
    const [done, dead] = await store.claim("setup", { limit: 2, leaseMs: 60_000 });
    await store.complete(done!);
    await store.fail(dead!, new Error("no"), "dead");
  } finally {
    await opened.close();
  }
}

/** Every refused command: exit 2, one line on stderr naming the migration; under --json, DatabaseTooNewError. */
async function expectRefused(args: readonly string[], at: { cwd: string }): Promise<void> {
  const result = await runCli(args, at);
  expect(result.code, `wassal ${args.join(" ")}: ${result.stderr}`).toBe(2);
  expect(result.stderr).toMatch(REFUSAL);
  expect(result.stderr.trim().split("\n"), result.stderr).toHaveLength(1);
  if (args[0] === "worker") return;
  const json = await runCli([...args, "--json"], at);
  expect(json.code).toBe(2);
  expect(JSON.parse(json.stdout)).toMatchObject({ error: { name: "DatabaseTooNewError", code: "DATABASE_OPEN" } });
}

// ---------------------------------------------------------------------------------------------
// SQLite.

/** Every file in the directory, by name, with its bytes' hash. */
function filesIn(dir: string): Record<string, string> {
  return Object.fromEntries(
    readdirSync(dir).map((name) => [
      name,
      createHash("sha256")
        .update(readFileSync(join(dir, name)))
        .digest("hex"),
    ]),
  );
}

function addFutureRow(path: string): void {
  const db = new Database(path);
  try {
    db.prepare("INSERT INTO wassal_migrations (name, applied_at) VALUES (?, ?)").run(FUTURE, Date.now());
  } finally {
    db.close();
  }
}

function migrationsIn(path: string): string[] {
  const db = new Database(path, { readonly: true });
  try {
    return db.prepare("SELECT name FROM wassal_migrations ORDER BY name").pluck().all() as string[];
  } finally {
    db.close();
  }
}

describe("SQLite: a database a newer Wassal migrated", () => {
  async function futureDatabase(): Promise<{ dir: string; path: string }> {
    const dir = mkdtempSync(join(tmp, "db-"));
    const path = join(dir, "app.db");
    await seedOutbox(path);
    addFutureRow(path);
    return { dir, path };
  }

  it("is refused by every writing command of the CLI (exit 2, one line: the newer migration, upgrade), and every file stays byte for byte", async () => {
    const { dir, path } = await futureDatabase();
    const before = filesIn(dir);
    const at = { cwd: cwd() };
    for (const command of WRITING_COMMANDS) {
      await expectRefused([...command, "--db", path], at);
      expect(filesIn(dir), `after wassal ${command.join(" ")}`).toEqual(before);
    }
  });

  it("stays readable: the CLI's outbox stats, dead and show, and a readOnly store, leaving the file as it was", async () => {
    const { path } = await futureDatabase();
    const bytes = readFileSync(path);
    expect(() => new SqliteOutboxStore({ path }), "refused for writing").toThrow(DatabaseTooNewError);
    const at = { cwd: cwd() };
    const stats = await runCli(["outbox", "stats", "--db", path, "--json"], at);
    expect(stats.code, stats.stderr).toBe(0);
    expect(JSON.parse(stats.stdout)).toMatchObject({ counts: { processed: 1, dead: 1 } });
    const dead = await runCli(["outbox", "dead", "--db", path, "--json"], at);
    expect(dead.code, dead.stderr).toBe(0);
    const [{ id }] = JSON.parse(dead.stdout) as [{ id: string }];
    expect((await runCli(["outbox", "show", id, "--db", path], at)).code).toBe(0);

    const reader = new SqliteOutboxStore({ path, readOnly: true });
    try {
      expect((await reader.stats()).counts).toMatchObject({ processed: 1, dead: 1 });
    } finally {
      await reader.close();
    }
    expect(readFileSync(path).equals(bytes)).toBe(true);
  });

  it("is refused by the library before anything is written: a store, openOutbox, and a migration after a newer Wassal's", async () => {
    const { dir, path } = await futureDatabase();
    const before = filesIn(dir);
    expect(() => new SqliteOutboxStore({ path })).toThrow(DatabaseTooNewError);
    expect(() => new SqliteOutboxStore({ path })).toThrow(REFUSAL);
    try {
      new SqliteOutboxStore({ path });
    } catch (error) {
      expect(error).toBeInstanceOf(DatabaseOpenError);
      expect((error as DatabaseTooNewError).newer).toEqual([FUTURE]);
    }
    await expect(openOutbox(path)).rejects.toThrow(REFUSAL);
    await expect(openOutbox(path, { mustExist: true })).rejects.toThrow(REFUSAL);
    expect(filesIn(dir)).toEqual(before);

    // A store opened before the newer Wassal migrated: its next migration is refused, under the write lock.
    const racePath = join(mkdtempSync(join(tmp, "race-")), "app.db");
    const store = new SqliteOutboxStore({ path: racePath });
    try {
      await store.migrate();
      // Another component of this version (the payments tables) is not a newer Wassal.
      await new SqlitePaymentsRepository(store).migrate();
      await store.migrate();
      const reopened = new SqliteOutboxStore({ path: racePath });
      await reopened.migrate();
      await reopened.close();

      addFutureRow(racePath);
      const migrations = migrationsIn(racePath);
      await expect(store.migrate()).rejects.toThrow(DatabaseTooNewError);
      await expect(new SqlitePaymentsRepository(store).migrate()).rejects.toThrow(REFUSAL);
      expect(migrationsIn(racePath)).toEqual(migrations);
      // wassal_migrations is Wassal's own: a name this version does not ship is not recorded there.
      await expect(store.applyMigrations([{ name: "app-001-orders", sql: "CREATE TABLE orders (id INTEGER)" }])).rejects.toThrow(InvalidArgumentError);
    } finally {
      await store.close();
    }
  });
});

// ---------------------------------------------------------------------------------------------
// PostgreSQL.

interface SchemaState {
  readonly migrations: string[];
  readonly rows: Record<string, string>;
}

/** What a refused command must leave as it was: the migrations, and every table's rows. */
async function schemaState(schema: string): Promise<SchemaState> {
  return withClient(async (client) => {
    const migrations = (await client.query<{ name: string }>(`SELECT name FROM "${schema}".wassal_migrations ORDER BY name`)).rows.map((r) => r.name);
    const tables = (await client.query<{ t: string }>("SELECT table_name AS t FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1", [schema]))
      .rows;
    const rows: Record<string, string> = {};
    for (const { t } of tables) {
      rows[t] = (await client.query<{ s: string }>(`SELECT coalesce(string_agg(x::text, '|' ORDER BY x::text), '') AS s FROM "${schema}"."${t}" x`)).rows[0]!.s;
    }
    return { migrations, rows };
  });
}

const addFutureRowPg = (schema: string) => withClient((client) => client.query(`INSERT INTO "${schema}".wassal_migrations (name) VALUES ($1)`, [FUTURE]));

describe.runIf(PG)("PostgreSQL: a schema a newer Wassal migrated", () => {
  async function futureSchema(): Promise<string> {
    const schema = freshSchema("wassal_guard");
    await seedOutbox(TEST_DATABASE_URL, schema);
    await addFutureRowPg(schema);
    return schema;
  }

  it("is refused by every writing command of the CLI (exit 2, one line: the newer migration, upgrade), and nothing changes", async () => {
    const schema = await futureSchema();
    const before = await schemaState(schema);
    expect(before.migrations).toContain(FUTURE);
    const at = { cwd: cwd() };
    for (const command of WRITING_COMMANDS) {
      await expectRefused([...command, "--db", TEST_DATABASE_URL, "--schema", schema], at);
      expect(await schemaState(schema), `after wassal ${command.join(" ")}`).toEqual(before);
    }
  });

  it("stays readable: the CLI's outbox stats and dead, and a readOnly store (whose writes fail)", async () => {
    const schema = await futureSchema();
    const before = await schemaState(schema);
    const at = { cwd: cwd() };
    const stats = await runCli(["outbox", "stats", "--db", TEST_DATABASE_URL, "--schema", schema, "--json"], at);
    expect(stats.code, stats.stderr).toBe(0);
    expect(JSON.parse(stats.stdout)).toMatchObject({ counts: { processed: 1, dead: 1 } });
    expect((await runCli(["outbox", "dead", "--db", TEST_DATABASE_URL, "--schema", schema], at)).code).toBe(0);

    const reader = await PostgresOutboxStore.connect({ url: TEST_DATABASE_URL, schema, readOnly: true });
    try {
      expect((await reader.stats()).counts).toMatchObject({ processed: 1, dead: 1 });
      await expect(reader.migrate()).rejects.toThrow(StoreReadOnlyError);
      await expect(reader.transaction((tx) => reader.enqueue(tx, { type: "t", payload: {} }))).rejects.toThrow(/read-only transaction/);
    } finally {
      await reader.close();
    }
    expect(await schemaState(schema)).toEqual(before);
  });

  it("is refused by the library before anything is written: a store that does not migrate, openOutbox, and a migration after a newer Wassal's", async () => {
    const schema = await futureSchema();
    const before = await schemaState(schema);
    await expect(PostgresOutboxStore.connect({ url: TEST_DATABASE_URL, schema })).rejects.toThrow(DatabaseTooNewError);
    await expect(PostgresOutboxStore.connect({ url: TEST_DATABASE_URL, schema })).rejects.toThrow(
      `PostgreSQL schema ${schema} was migrated by a newer Wassal (${FUTURE})`,
    );
    await expect(openOutbox(TEST_DATABASE_URL, { schema })).rejects.toThrow(REFUSAL);
    expect(await schemaState(schema)).toEqual(before);

    // A store connected before the newer Wassal migrated: its migration is refused inside the locked transaction.
    const raceSchema = freshSchema("wassal_guard_race");
    const store = await PostgresOutboxStore.connect({ url: TEST_DATABASE_URL, schema: raceSchema });
    try {
      await store.migrate();
      await new PostgresPaymentsRepository(store).migrate();
      // Another component of this version (the payments tables) is not a newer Wassal.
      const again = await PostgresOutboxStore.connect({ url: TEST_DATABASE_URL, schema: raceSchema });
      await again.migrate();
      await again.close();

      await addFutureRowPg(raceSchema);
      const state = await schemaState(raceSchema);
      await expect(store.migrate()).rejects.toThrow(DatabaseTooNewError);
      await expect(new PostgresPaymentsRepository(store).migrate()).rejects.toThrow(REFUSAL);
      expect(await schemaState(raceSchema)).toEqual(state);
      await expect(store.applyMigrations([{ name: "app-001-orders", sql: `CREATE TABLE "${raceSchema}".orders (id int)` }])).rejects.toThrow(
        InvalidArgumentError,
      );
    } finally {
      await store.close();
    }
  });
});
