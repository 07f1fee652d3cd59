// The Session 13 and 14 scenarios through real processes (node dist/cli/main.js), on SQLite and on
// PostgreSQL. Each kills a real child process with SIGKILL at a point it names; its figures, checks,
// saved reports (.txt and .html) and JSON must come out the same on both stores, and a kept
// database must hold what the report says (read here with SQL of the test's own).
//
// Needs `npm run build` first (`npm test` does it); the PostgreSQL tests need the test server
// (TEST_DATABASE_URL) and are skipped loudly without it.

import { existsSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import Database from "better-sqlite3";
import { beforeAll, describe, expect, it } from "vitest";
import { requireBuiltCli, runCli, startCli } from "../support/cli.js";
import { postgresAvailable, TEST_DATABASE_URL, withClient } from "../support/postgres.js";
import { tempDir } from "../support/temp.js";
import {
  CRASH_SCENARIOS,
  DAY13_AFTER,
  DAY13_BEFORE,
  DAY14_AFTER,
  DAY14_BEFORE,
  expectCrashFigures,
  REPORT_NAME,
  sandbox as sandboxIn,
  SERIES,
  type ScenarioJson,
} from "./cli-support.js";

const PG = await postgresAvailable();
const FILE_TMP = tempDir("wassal-cli-crash-");
const sandbox = () => sandboxIn(FILE_TMP);

beforeAll(requireBuiltCli);

/** Payment keys without a reconciliation message, asked of the database directly. */
const ORPHANS_SQL = (schema: string) =>
  `SELECT p.idempotency_key AS key FROM ${schema}payments p LEFT JOIN ${schema}outbox_messages m ON m.dedupe_key = 'payment.reconcile:' || p.idempotency_key WHERE m.id IS NULL ORDER BY 1`;

function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The killed instance's pid, as the report prints it. */
function killedPid(text: string): number {
  const match = /^process +Instance-1, pid (\d+) \(a child process of the lab\)$/m.exec(text);
  expect(match, "the report names the killed process").not.toBeNull();
  return Number(match![1]);
}

/** Every check passed; the report and its HTML twin are saved where they belong and show the kill. */
function expectCrashReport(result: ScenarioJson, reportsRoot: string): string {
  expect(result.checks.length).toBeGreaterThan(5);
  for (const c of result.checks) expect(c, c.name).toMatchObject({ passed: true });
  expect(result.reportError).toBeNull();
  const path = result.reportPath!;
  expect(dirname(path)).toBe(join(reportsRoot, "Reports", SERIES[result.scenario]!));
  expect(basename(path)).toMatch(REPORT_NAME[result.scenario as keyof typeof REPORT_NAME]);
  const text = readFileSync(path, "utf8");
  expect(text).toContain(`Wassal payments lab: ${result.scenario}`);
  expect(text).toMatch(/CREATE TABLE (\w+\.)?payments/);
  for (const section of ["== The killed instance", "== Timeline", "== Provider calls", "== Final payments", "== Metrics", "== Checks", "== Verdict"]) {
    expect(text).toContain(section);
  }
  expect(text).toMatch(/^ended by +SIGKILL$/m);
  expect(text).toMatch(/^ +\d+ +\d\d:\d\d:\d\d\.\d{3} +lab +SIGKILL sent to Instance-1 \(pid \d+\)$/m);
  // The killed process is gone.
  expect(isRunning(killedPid(text))).toBe(false);
  for (const c of result.checks) expect(text).toContain(c.name);
  expect(text).not.toMatch(/^FAIL\b/m);
  expect(text).toContain(`result        PASSED: ${result.checks.length} of ${result.checks.length} checks passed`);
  const html = readFileSync(path.replace(/\.txt$/, ".html"), "utf8");
  expect(html).toContain("<h2>The killed instance</h2>");
  expect(html).toContain("<h2>Verdict</h2>");
  expect(html).toContain('<span class="verdict-passed">PASSED</span>');
  return text;
}

/** The JSON shape every lab scenario prints. */
function expectJsonShape(result: ScenarioJson): void {
  expect(Object.keys(result).sort()).toEqual(["checks", "databasePath", "metrics", "passed", "reportError", "reportPath", "scenario"]);
  for (const c of result.checks) expect(Object.keys(c).sort()).toEqual(["name", "observed", "passed"]);
}

function parse(run: { code: number | null; stdout: string; stderr: string }): ScenarioJson {
  expect(run.stderr).toBe("");
  expect(run.code).toBe(0);
  return JSON.parse(run.stdout) as ScenarioJson;
}

// ---------------------------------------------------------------------------------------------

describe("Sessions 13 and 14 on SQLite", () => {
  it.each(CRASH_SCENARIOS)("%s --json: the figures, every check, the report and its HTML twin, the temporary database deleted", async (name) => {
    const box = sandbox();
    const result = parse(await runCli(["lab", name, "--json"], box));
    expectJsonShape(result);
    expect(result.scenario).toBe(name);
    expectCrashFigures(result);
    const text = expectCrashReport(result, box.cwd);
    expect(text).toMatch(/^store {9}SQLite /m);
    expect(text).toContain(`temporary database ${result.databasePath} deleted`);
    expect(existsSync(dirname(result.databasePath))).toBe(false);
    expect(readdirSync(box.tmp)).toEqual([]);
    expect(readdirSync(join(box.cwd, "Reports", SERIES[name]!)).sort()).toEqual(
      [basename(result.reportPath!), basename(result.reportPath!).replace(/\.txt$/, ".html")].sort(),
    );
  });

  it(`${DAY14_BEFORE} (text): the orphan found right after the crash, printed as saved, the child killed not the lab`, async () => {
    const box = sandbox();
    const lab = startCli(["lab", DAY14_BEFORE], box);
    const exit = await lab.waitForExit(45_000);
    expect(lab.stderr()).toBe("");
    expect(exit.code).toBe(0);
    const out = lab.stdout();
    expect(killedPid(out)).not.toBe(lab.pid);
    expect(out).toMatch(/^crash point +PAY-004: after its payment row committed, before its message was written$/m);
    const atCrash = out.slice(out.indexOf("== Orphan check right after the crash"), out.indexOf("== Payments after the crash"));
    expect(atCrash).toMatch(/^PAY-004 +4 \(Pending\) +NONE +ORPHAN: payment without its message$/m);
    expect(atCrash.match(/ORPHAN/g)).toHaveLength(1);
    expect(out).toContain("create PAY-004: the key exists, so the request is a replay: nothing written");
    expect(out).toContain("VERDICT: A PAYMENT WITHOUT ITS MESSAGE");
    const saved = /^report {8}saved to (.+)$/m.exec(out);
    expect(out.startsWith(readFileSync(saved![1]!, "utf8"))).toBe(true);
  });

  it(`${DAY13_BEFORE} (text): the fresh instance starts with an empty list and the payments stay Pending`, async () => {
    const box = sandbox();
    const run = await runCli(["lab", DAY13_BEFORE], box);
    expect(run.code).toBe(0);
    expect(run.stdout).toContain("(no outbox messages: the work was kept only in memory)");
    expect(run.stdout).toMatch(/^work it still had +PAY-003, PAY-004, PAY-005, PAY-006$/m);
    expect(run.stdout).toContain("Instance-2  start: the work list in memory holds 0 item(s); nothing to reconcile");
    expect(run.stdout).toContain("VERDICT: THE WORK DIED WITH THE PROCESS");
  });

  it("--keep-db: the kept files hold what the reports say (read with SQL of the test's own)", async () => {
    const box = sandbox();
    const rows = {} as Record<string, { orphans: unknown[]; statuses: unknown[]; messages: number }>;
    for (const name of [DAY13_BEFORE, DAY13_AFTER, DAY14_BEFORE, DAY14_AFTER]) {
      const result = parse(await runCli(["lab", name, "--json", "--keep-db"], box));
      expect(existsSync(result.databasePath)).toBe(true);
      const db = new Database(result.databasePath, { readonly: true });
      try {
        rows[name] = {
          orphans: db.prepare(ORPHANS_SQL("")).pluck().all(),
          statuses: db.prepare("SELECT idempotency_key AS key, payment_status AS status FROM payments ORDER BY idempotency_key").all(),
          messages: db.prepare("SELECT count(*) FROM outbox_messages").pluck().get() as number,
        };
      } finally {
        db.close();
      }
      rmSync(dirname(result.databasePath), { recursive: true, force: true });
    }
    const statuses = (...s: string[]) => s.map((status, i) => ({ key: `PAY-00${i + 1}`, status }));
    // No outbox at all in BEFORE: every payment lacks a message, and four were never reconciled.
    expect(rows[DAY13_BEFORE]).toEqual({
      orphans: ["PAY-001", "PAY-002", "PAY-003", "PAY-004", "PAY-005", "PAY-006"],
      statuses: statuses("Paid", "Paid", "Pending", "Pending", "Pending", "Pending"),
      messages: 0,
    });
    expect(rows[DAY13_AFTER]).toEqual({ orphans: [], statuses: statuses("Paid", "Paid", "Failed", "Paid", "Paid", "Failed"), messages: 6 });
    expect(rows[DAY14_BEFORE]).toEqual({ orphans: ["PAY-004"], statuses: statuses("Paid", "Paid", "Failed", "Pending", "Paid", "Failed"), messages: 5 });
    expect(rows[DAY14_AFTER]).toEqual({ orphans: [], statuses: statuses("Paid", "Paid", "Failed", "Paid", "Paid", "Failed"), messages: 6 });
  });
});

// ---------------------------------------------------------------------------------------------

describe.skipIf(!PG)("Sessions 13 and 14 on PostgreSQL", () => {
  it.each(CRASH_SCENARIOS)("%s --db postgres://… --json: the same figures as on SQLite, the temporary schema dropped", async (name) => {
    const box = sandbox();
    const result = parse(await runCli(["lab", name, "--db", TEST_DATABASE_URL, "--json"], box));
    expectJsonShape(result);
    expectCrashFigures(result);
    const text = expectCrashReport(result, box.cwd);
    expect(text).toMatch(/^store {9}PostgreSQL /m);
    const schema = /\(schema (wassal_lab_[0-9a-f]{10})\)$/.exec(result.databasePath)?.[1];
    expect(schema).toBeDefined();
    expect(text).toContain(`CREATE TABLE ${schema}.payments`);
    expect(text).toContain(`database      temporary schema ${schema} dropped`);
    await withClient(async (client) => {
      expect((await client.query("SELECT 1 FROM pg_namespace WHERE nspname = $1", [schema])).rowCount).toBe(0);
    });
    expect(readdirSync(box.tmp)).toEqual([]);
  });

  it(`${DAY14_BEFORE} and ${DAY14_AFTER} --keep-db: the kept schemas hold one orphan and none`, async () => {
    for (const [name, orphans] of [
      [DAY14_BEFORE, ["PAY-004"]],
      [DAY14_AFTER, []],
    ] as const) {
      const box = sandbox();
      const run = await runCli(["lab", name, "--db", TEST_DATABASE_URL, "--json", "--keep-db"], box);
      const schema = /\(schema (wassal_lab_[0-9a-f]+)\)/.exec(run.stdout)?.[1];
      try {
        expectCrashFigures(parse(run));
        await withClient(async (client) => {
          expect((await client.query<{ key: string }>(ORPHANS_SQL(`${schema}.`))).rows.map((r) => r.key)).toEqual(orphans);
        });
      } finally {
        if (schema !== undefined) await withClient((client) => client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`));
      }
    }
  });
});
