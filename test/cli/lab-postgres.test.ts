// `wassal lab` on PostgreSQL, through real processes: the same Session 15 figures as on SQLite,
// a temporary schema per run that is dropped afterwards (or kept with --keep-db), the database
// URL from WASSAL_DATABASE_URL, and one clear line (exit 2) for every URL or server that cannot
// be used.
//
// Needs `npm run build` first (`npm test` does it) and the test server (TEST_DATABASE_URL); the
// tests that need the server are skipped loudly without it (fatal under CI).

import { existsSync, readdirSync, readFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { expectNoStack, oneLine } from "../support/assertions.js";
import { requireBuiltCli, runCli, type CliResult } from "../support/cli.js";
import { postgresAvailable, TEST_DATABASE_URL, withClient } from "../support/postgres.js";
import { tempDir } from "../support/temp.js";
import {
  AFTER,
  ALL,
  BEFORE,
  CRASH_SCENARIOS,
  expectAfterFigures,
  expectBeforeFigures,
  expectFigures,
  REPORT_NAME,
  sandbox as sandboxIn,
  SERIES,
  type Sandbox,
  type ScenarioJson,
} from "./cli-support.js";

const PG = await postgresAvailable();

// One folder for the whole file, removed when it finishes.
const FILE_TMP = tempDir("wassal-cli-pg-");
const sandbox = () => sandboxIn(FILE_TMP);

beforeAll(requireBuiltCli);

/** TEST_DATABASE_URL with one part changed. */
function testUrlWith(change: (url: URL) => void): string {
  const url = new URL(TEST_DATABASE_URL);
  change(url);
  return url.toString();
}

/** The URL as the CLI prints it: without its password. */
const SHOWN_URL = testUrlWith((url) => {
  if (url.password) url.password = "***";
});

/** Every schema named like the lab's temporary ones. */
function labSchemas(): Promise<string[]> {
  return withClient(async (client) =>
    (await client.query<{ name: string }>(String.raw`SELECT nspname AS name FROM pg_namespace WHERE nspname LIKE 'wassal\_lab\_%' ORDER BY 1`)).rows.map(
      (r) => r.name,
    ),
  );
}

/** The run's schema, read from its databasePath ("postgres://… (schema wassal_lab_…)"). */
function schemaOf(result: ScenarioJson): string {
  expect(result.databasePath.startsWith("postgres://")).toBe(true);
  expect(result.databasePath.startsWith(`${SHOWN_URL} (schema `)).toBe(true);
  const match = /\(schema (wassal_lab_[0-9a-f]{10})\)$/.exec(result.databasePath);
  expect(match, result.databasePath).not.toBeNull();
  return match![1]!;
}

/** Every check passed and the saved report is the PostgreSQL run's, with the schema's fate. */
function expectSavedPostgresReport(result: ScenarioJson, reportsRoot: string, fate: "dropped" | "kept"): string {
  const schema = schemaOf(result);
  expect(result.checks.length).toBeGreaterThan(5);
  for (const c of result.checks) expect(c, c.name).toMatchObject({ passed: true });
  expect(result.reportError).toBeNull();
  const path = result.reportPath!;
  expect(dirname(path)).toBe(join(reportsRoot, "Reports", SERIES[result.scenario]!));
  expect(basename(path)).toMatch(REPORT_NAME[result.scenario as keyof typeof REPORT_NAME]);
  const text = readFileSync(path, "utf8");
  expect(text).toContain(`Wassal payments lab: ${result.scenario}`);
  expect(text).toMatch(/^store {9}PostgreSQL /m);
  expect(text).toContain(`database      ${result.databasePath}`);
  expect(text).toContain(`CREATE TABLE ${schema}.outbox_messages`);
  expect(text).toContain(`CREATE TABLE ${schema}.payments`);
  expect(text).toContain("== Verdict");
  for (const c of result.checks) expect(text).toContain(c.name);
  expect(text).not.toMatch(/^FAIL\b/m);
  expect(text).toContain(`result        PASSED: ${result.checks.length} of ${result.checks.length} checks passed`);
  expect(text).toContain(fate === "dropped" ? `database      temporary schema ${schema} dropped` : `database      schema ${schema} kept (--keep-db)`);
  return text;
}

/** A PostgreSQL run creates no temporary SQLite file. */
function expectTmpUntouched(box: Sandbox): void {
  expect(readdirSync(box.tmp)).toEqual([]);
}

function parse<T>(run: CliResult): T {
  expect(run.stderr).toBe("");
  expect(run.code).toBe(0);
  return JSON.parse(run.stdout) as T;
}

// ---------------------------------------------------------------------------------------------

describe.skipIf(!PG)("wassal lab on PostgreSQL", () => {
  it("all --db <url> --json: the same figures as on SQLite, every report saved, every temporary schema dropped", async () => {
    const box = sandbox();
    const reports = join(box.cwd, "reports");

    const run = await runCli(["lab", "all", "--db", TEST_DATABASE_URL, "--json", "--reports", reports], box);
    const payload = parse<{ passed: boolean; scenarios: ScenarioJson[] }>(run);

    expect(payload.passed).toBe(true);
    expect(payload.scenarios.map((s) => s.scenario)).toEqual(ALL);
    for (const scenario of payload.scenarios) {
      expectFigures(scenario);
      expectSavedPostgresReport(scenario, reports, "dropped");
    }
    const schemas = payload.scenarios.map(schemaOf);
    // Each scenario ran in a schema of its own.
    expect(new Set(schemas).size).toBe(ALL.length);
    for (const folder of ["Session-13", "Session-14", "Session-15", "Ordering"]) {
      expect(readdirSync(join(reports, "Reports", folder)).filter((f) => f.endsWith(".txt"))).toHaveLength(2);
    }

    // None of this run's schemas is left behind. (Not "no new lab schema at all": other test files
    // run labs on the same database at the same time.)
    const after = await labSchemas();
    for (const schema of schemas) expect(after).not.toContain(schema);
    expect(existsSync(join(box.cwd, "Reports"))).toBe(false);
    expectTmpUntouched(box);
  });

  it("--keep-db keeps the schema, holding the run's final rows", async () => {
    const box = sandbox();
    const run = await runCli(["lab", AFTER, "--db", TEST_DATABASE_URL, "--json", "--keep-db"], box);
    // Whatever fails below, the kept schema is dropped at the end.
    const schema = /\(schema (wassal_lab_[0-9a-f]+)\)/.exec(run.stdout)?.[1];
    try {
      const result = parse<ScenarioJson>(run);
      expectAfterFigures(result);
      expect(schemaOf(result)).toBe(schema);
      expectSavedPostgresReport(result, box.cwd, "kept");
      expect(await labSchemas()).toContain(schema);
      await withClient(async (client) => {
        expect((await client.query(`SELECT status, count(*)::int AS n FROM ${schema}.outbox_messages GROUP BY status`)).rows).toEqual([
          { status: "processed", n: 6 },
        ]);
        expect(
          (await client.query(`SELECT payment_status AS status, count(*)::int AS n FROM ${schema}.payments GROUP BY payment_status ORDER BY payment_status`))
            .rows,
        ).toEqual([
          { status: "Failed", n: 2 },
          { status: "Paid", n: 4 },
        ]);
      });
    } finally {
      if (schema !== undefined) await withClient((client) => client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`));
    }
    expect(await labSchemas()).not.toContain(schema);
    expectTmpUntouched(box);
  });

  it("WASSAL_DATABASE_URL=postgres://… runs on PostgreSQL without --db", async () => {
    const box = sandbox();
    const run = await runCli(["lab", AFTER, "--json"], { ...box, env: { WASSAL_DATABASE_URL: TEST_DATABASE_URL } });
    const result = parse<ScenarioJson>(run);
    expect(result.databasePath.startsWith("postgres://")).toBe(true);
    expectAfterFigures(result);
    expectSavedPostgresReport(result, box.cwd, "dropped");
    expect(await labSchemas()).not.toContain(schemaOf(result));
    expectTmpUntouched(box);
  });

  it("--db on the command line wins over WASSAL_DATABASE_URL", async () => {
    const box = sandbox();
    const unusable = testUrlWith((url) => {
      url.hostname = "127.0.0.1";
      url.port = "1";
    });
    const run = await runCli(["lab", BEFORE, "--json", "--db", TEST_DATABASE_URL], { ...box, env: { WASSAL_DATABASE_URL: unusable } });
    const result = parse<ScenarioJson>(run);
    expectBeforeFigures(result);
    expect(await labSchemas()).not.toContain(schemaOf(result));
  });

  it("text: prints the PostgreSQL report and the dropped schema", async () => {
    const box = sandbox();
    const run = await runCli(["lab", AFTER, "--db", TEST_DATABASE_URL], box);
    expect(run.stderr).toBe("");
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/^store {9}PostgreSQL /m);
    expect(run.stdout).toMatch(/^database {6}temporary schema wassal_lab_[0-9a-f]{10} dropped$/m);
    expect(run.stdout).toMatch(/RECLAIMED from Worker-A/);
    expect(run.stdout).toMatch(/REFUSED: lease lost/);
    expect(run.stdout).not.toMatch(/^FAIL\b/m);
    expect(run.stdout).toMatch(/^result {8}PASSED: /m);
  });
});

// ---------------------------------------------------------------------------------------------

/**
 * Exit 2, one line on stderr, no stack, and nothing ran; nothing on stdout, or under --json the
 * same error as a JSON object there.
 */
async function expectRefused(args: readonly string[], env: Record<string, string> = {}): Promise<string> {
  const box = sandbox();
  const run = await runCli(args, { ...box, env });
  expect(run.code, run.stderr).toBe(2);
  expect(run.signal).toBeNull();
  const line = oneLine(run.stderr);
  if (args.includes("--json")) {
    const { error } = JSON.parse(run.stdout) as { error: { name: string; message: string } };
    expect(error.name).toBe("DatabaseOpenError");
    expect(`wassal: ${error.message}`).toBe(line);
  } else {
    expect(run.stdout).toBe("");
  }
  expect(line.startsWith("wassal: ")).toBe(true);
  expect(line).not.toContain("unexpected error");
  expectNoStack(run.stderr);
  expect(existsSync(join(box.cwd, "Reports"))).toBe(false);
  expectTmpUntouched(box);
  return line;
}

describe("--db postgres://… that cannot be used (no server needed)", () => {
  it.each<[string, string, RegExp]>([
    [
      "a malformed URL: no host, a port beyond 65535",
      "postgres://user@:99999/x",
      /^wassal: malformed PostgreSQL URL postgres:\/\/user@:99999\/x: port 99999 is out of range \(1 to 65535\); expected postgres:\/\/USER@HOST:PORT\/DATABASE, with USER:PASSWORD@ for a password \(its special characters percent-encoded\)$/,
    ],
    ["a port beyond 65535", "postgres://postgres@127.0.0.1:99999/test", /^wassal: malformed PostgreSQL URL .*127\.0\.0\.1:99999/],
    ["a URL naming no host", "postgresql://", /^wassal: PostgreSQL URL postgresql:\/\/ names no host/],
    ["a host that is a broken percent-escape", "postgres://%zz/test", /^wassal: cannot connect to PostgreSQL at postgres:\/\/%zz\/test: host %zz not found$/],
    [
      "a URL naming no database (pg would pick the one named like the user)",
      "postgres://postgres@127.0.0.1:5432",
      /^wassal: PostgreSQL URL postgres:\/\/postgres@127\.0\.0\.1:5432 names no database; name it after the host: postgres:\/\/user@host:5432\/DATABASE/,
    ],
    [
      "a refused connection (port 1)",
      "postgres://postgres@127.0.0.1:1/test",
      /^wassal: cannot connect to PostgreSQL at postgres:\/\/postgres@127\.0\.0\.1:1\/test: connection refused; is the server running and listening there\?$/,
    ],
  ])("%s: exit 2 with one line naming the problem", async (_label, url, naming) => {
    expect(await expectRefused(["lab", AFTER, "--db", url])).toMatch(naming);
  });

  it("all --json with a refused connection: exit 2 before any scenario runs", async () => {
    expect(await expectRefused(["lab", "all", "--json", "--db", "postgres://postgres@127.0.0.1:1/test"])).toContain("connection refused");
  });

  it.each(CRASH_SCENARIOS)("%s with a refused connection: exit 2, one line, nothing run", async (name) => {
    expect(await expectRefused(["lab", name, "--db", "postgres://postgres@127.0.0.1:1/test"])).toContain("connection refused");
  });

  it("a refused connection given in WASSAL_DATABASE_URL: exit 2, one line", async () => {
    expect(await expectRefused(["lab", AFTER, "--json"], { WASSAL_DATABASE_URL: "postgres://postgres@127.0.0.1:1/test" })).toContain("connection refused");
  });

  it("a password in a URL that cannot be used is never printed", async () => {
    const line = await expectRefused(["lab", AFTER, "--db", "postgres://postgres:s3cret-pw@127.0.0.1:1/test"]);
    expect(line).not.toContain("s3cret-pw");
    expect(line).toContain("postgres://postgres:***@127.0.0.1:1/test");
  });

  // A broken percent-escape in the database or user name must still be explained in one line
  // (explaining it once threw a URIError and exited 1).
  it.each<[string, string, string]>([
    ["a database name that is a broken percent-escape", "postgres://postgres@127.0.0.1:5432/te%zzst", "te%zzst"],
    ["a user name that is a broken percent-escape", "postgres://us%zzer@127.0.0.1:5432/test", "us%zzer"],
  ])("%s: exit 2 with one line naming the problem", async (_label, url, part) => {
    expect(await expectRefused(["lab", AFTER, "--db", url])).toContain(part);
  });
});

describe.skipIf(!PG)("--db postgres://… that the server refuses", () => {
  it("a database that does not exist: exit 2, one line naming it, nothing created", async () => {
    const url = testUrlWith((u) => {
      u.pathname = "/no_such_db_wassal";
    });
    const line = await expectRefused(["lab", "all", "--json", "--db", url]);
    expect(line).toMatch(
      /^wassal: PostgreSQL database no_such_db_wassal does not exist at postgres:\/\/.*\/no_such_db_wassal; create it \(createdb no_such_db_wassal\) or name another in the URL$/,
    );
    // Nothing created: not the database it named.
    const named = await withClient((client) => client.query("SELECT 1 FROM pg_database WHERE datname = 'no_such_db_wassal'"));
    expect(named.rowCount).toBe(0);
  });

  it("a role that does not exist: exit 2, one line naming it", async () => {
    const url = testUrlWith((u) => {
      u.username = "no_such_role_wassal";
      u.password = "";
    });
    const line = await expectRefused(["lab", AFTER, "--db", url]);
    expect(line).toMatch(
      /^wassal: PostgreSQL at postgres:\/\/no_such_role_wassal@.* does not allow user no_such_role_wassal to connect \(.*role "no_such_role_wassal" does not exist.*\)$/,
    );
  });

  // A wrong password (28P01) cannot be provoked here: the test server trusts every local role.
});
