// `wassal lab` through real processes (node dist/cli/main.js): the Session 15 figures in JSON,
// `lab all` (Sessions 13, 14 and 15, then ordering, in that order; lab-crash.test.ts has the
// Session 13 and 14 scenarios one by one),
// the saved reports, the text report, and what happens to the temporary database.
//
// Needs `npm run build` first (`npm test` does it). Every run gets its own working directory and
// TMPDIR, so no Reports/ folder or temporary database lands in the repository or /tmp.

import { existsSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import Database from "better-sqlite3";
import { beforeAll, describe, expect, it } from "vitest";
import { requireBuiltCli, runCli } from "../support/cli.js";
import { tempDir } from "../support/temp.js";
import {
  AFTER,
  ALL,
  BEFORE,
  DAY13_AFTER,
  DAY13_BEFORE,
  DAY14_AFTER,
  DAY14_BEFORE,
  expectAfterFigures,
  expectBeforeFigures,
  expectFigures,
  expectOrderingFigures,
  ORDER_AFTER,
  ORDER_BEFORE,
  REPORT_NAME,
  sandbox as sandboxIn,
  SERIES,
  type ScenarioJson,
} from "./cli-support.js";

// One folder for the whole file, removed when it finishes (tempDir must be called while the file
// is collected, not inside a test: a hook registered by a running test never runs).
const FILE_TMP = tempDir("wassal-cli-");

/** A fresh working directory and TMPDIR for one CLI run. */
const sandbox = () => sandboxIn(FILE_TMP);

/** Every check passed, the report was saved where it belongs, and it holds the run's text report. */
function expectSavedReport(result: ScenarioJson, reportsRoot: string): string {
  expect(result.checks.length).toBeGreaterThan(5);
  for (const c of result.checks) expect(c, c.name).toMatchObject({ passed: true });
  expect(result.reportError).toBeNull();
  expect(result.reportPath).not.toBeNull();
  const path = result.reportPath!;
  expect(dirname(path)).toBe(join(reportsRoot, "Reports", SERIES[result.scenario]!));
  expect(basename(path)).toMatch(REPORT_NAME[result.scenario as keyof typeof REPORT_NAME]);
  expect(existsSync(path)).toBe(true);
  const text = readFileSync(path, "utf8");
  expect(text).toContain(`Wassal payments lab: ${result.scenario}`);
  expect(text).toContain("CREATE TABLE outbox_messages");
  expect(text).toContain("== Checks");
  expect(text).toContain("== Verdict");
  for (const c of result.checks) expect(text).toContain(c.name);
  expect(text).not.toMatch(/^FAIL\b/m);
  expect(text).toContain(`result        PASSED: ${result.checks.length} of ${result.checks.length} checks passed`);
  expect(text).toContain(`temporary database ${result.databasePath} deleted`);
  return text;
}

/** The temporary database (and its folder) is gone, and nothing else was left in TMPDIR. */
function expectTempDbDeleted(result: ScenarioJson, tmp: string): void {
  expect(result.databasePath.startsWith(`${tmp}/`)).toBe(true);
  expect(existsSync(result.databasePath)).toBe(false);
  expect(existsSync(dirname(result.databasePath))).toBe(false);
  expect(readdirSync(tmp).filter((name) => name.startsWith("wassal-"))).toEqual([]);
}

beforeAll(requireBuiltCli);

// ---------------------------------------------------------------------------------------------

describe("wassal lab --json", () => {
  it(`${BEFORE}: every message processed twice, yet the rows look perfect`, async () => {
    const box = sandbox();
    const run = await runCli(["lab", BEFORE, "--json"], box);
    expect(run.stderr).toBe("");
    expect(run.code).toBe(0);
    const result = JSON.parse(run.stdout) as ScenarioJson;
    expectBeforeFigures(result);
    // Reports go under the working directory by default.
    expectSavedReport(result, box.cwd);
    // The report and its HTML twin.
    expect(readdirSync(join(box.cwd, "Reports", "Session-15")).map((f) => f.replace(/\.(txt|html)$/, ".*"))).toEqual([
      expect.stringMatching(/\.\*$/),
      expect.stringMatching(/\.\*$/),
    ]);
    expect(new Set(readdirSync(join(box.cwd, "Reports", "Session-15")).map((f) => f.replace(/\.(txt|html)$/, ""))).size).toBe(1);
    expectTempDbDeleted(result, box.tmp);
  });

  it(`${AFTER}: each message processed once, the crashed owner's message reclaimed`, async () => {
    const box = sandbox();
    const reports = join(dirname(box.cwd), "elsewhere");
    const run = await runCli(["lab", AFTER, "--json", "--reports", reports], box);
    expect(run.stderr).toBe("");
    expect(run.code).toBe(0);
    const result = JSON.parse(run.stdout) as ScenarioJson;
    expectAfterFigures(result);
    const text = expectSavedReport(result, reports);
    expect(text).toContain("Lease-expiry demonstration");
    // --reports moves the reports: nothing under the working directory.
    expect(existsSync(join(box.cwd, "Reports"))).toBe(false);
    expectTempDbDeleted(result, box.tmp);
  });

  it("all: every scenario in order, every report saved in its lesson's folder, every temporary database deleted", async () => {
    const box = sandbox();
    const run = await runCli(["lab", "all", "--json", "--reports", box.cwd], box);
    expect(run.stderr).toBe("");
    expect(run.code).toBe(0);
    const payload = JSON.parse(run.stdout) as { passed: boolean; scenarios: ScenarioJson[] };
    expect(payload.passed).toBe(true);
    expect(payload.scenarios.map((s) => s.scenario)).toEqual(ALL);
    for (const scenario of payload.scenarios) {
      expectFigures(scenario);
      expectSavedReport(scenario, box.cwd);
      expectTempDbDeleted(scenario, box.tmp);
    }
    for (const [folder, names] of [
      ["Session-13", [DAY13_BEFORE, DAY13_AFTER]],
      ["Session-14", [DAY14_BEFORE, DAY14_AFTER]],
      ["Session-15", [BEFORE, AFTER]],
      ["Ordering", [ORDER_BEFORE, ORDER_AFTER]],
    ] as const) {
      const files = readdirSync(join(box.cwd, "Reports", folder))
        .filter((f) => f.endsWith(".txt"))
        .sort();
      // Each with its HTML twin.
      for (const file of files) expect(readdirSync(join(box.cwd, "Reports", folder))).toContain(file.replace(/\.txt$/, ".html"));
      expect(files).toHaveLength(2);
      for (const name of names) expect(files.some((f) => REPORT_NAME[name].test(f))).toBe(true);
    }
  });

  it(`${ORDER_BEFORE} and ${ORDER_AFTER}: the same workload, out of order without keys and in order with them`, async () => {
    for (const name of [ORDER_BEFORE, ORDER_AFTER]) {
      const box = sandbox();
      const run = await runCli(["lab", name, "--json"], box);
      expect(run.stderr).toBe("");
      expect(run.code).toBe(0);
      const result = JSON.parse(run.stdout) as ScenarioJson;
      expectOrderingFigures(result);
      const text = expectSavedReport(result, box.cwd);
      expect(text).toContain("CREATE TABLE payment_statement");
      if (name === ORDER_BEFORE) {
        expect(text).toMatch(/^PAY-001 +created, paid, refunded +refunded, created, paid +NO +paid +refunded$/m);
        expect(text).toContain("claim PAY-001 refunded by id -> NOT CLAIMABLE: processed");
      } else {
        expect(text).toMatch(/^PAY-001 +created, paid, refunded +created, paid, refunded +yes +refunded +refunded$/m);
        expect(text).toContain("claim PAY-001 refunded by id -> NOT CLAIMABLE: waiting behind an earlier event of its key");
      }
      expectTempDbDeleted(result, box.tmp);
    }
  });

  it("--keep-db keeps the temporary database, holding the run's final rows", async () => {
    const box = sandbox();
    const run = await runCli(["lab", AFTER, "--json", "--keep-db"], box);
    expect(run.code).toBe(0);
    const result = JSON.parse(run.stdout) as ScenarioJson;
    expect(result.passed).toBe(true);
    expect(result.databasePath.startsWith(`${box.tmp}/`)).toBe(true);
    expect(existsSync(result.databasePath)).toBe(true);
    const report = readFileSync(result.reportPath!, "utf8");
    expect(report).toContain(`database kept at ${result.databasePath} (--keep-db)`);
    const db = new Database(result.databasePath, { readonly: true });
    try {
      expect(db.prepare("SELECT status, count(*) AS n FROM outbox_messages GROUP BY status").all()).toEqual([{ status: "processed", n: 6 }]);
      expect(db.prepare("SELECT payment_status AS status, count(*) AS n FROM payments GROUP BY payment_status ORDER BY payment_status").all()).toEqual([
        { status: "Failed", n: 2 },
        { status: "Paid", n: 4 },
      ]);
    } finally {
      db.close();
    }
    rmSync(dirname(result.databasePath), { recursive: true, force: true });
    expect(existsSync(result.databasePath)).toBe(false);
  });

  it("--db runs on the named file and keeps it", async () => {
    const box = sandbox();
    const path = join(box.cwd, "named.db");
    const run = await runCli(["lab", BEFORE, "--json", "--db", path], box);
    expect(run.code).toBe(0);
    const result = JSON.parse(run.stdout) as ScenarioJson;
    expectBeforeFigures(result);
    expect(result.databasePath).toBe(path);
    expect(existsSync(path)).toBe(true);
    expect(readFileSync(result.reportPath!, "utf8")).toContain(`database kept at ${path} (you named it with --db)`);
    expect(readdirSync(box.tmp)).toEqual([]);
  });
});

describe("wassal lab (text)", () => {
  const SECTIONS_AFTER = [
    "== Schema, as the database reports it",
    "CREATE TABLE outbox_messages",
    "== Seeded payments",
    "== Seeded outbox messages",
    "== Lease-expiry demonstration",
    "== Timeline",
    "== Per-message ownership",
    "== Claim ledger",
    "== Processing ledger",
    "== Final payments",
    "== Metrics",
    "== Checks",
    "== Verdict",
    "VERDICT: ",
  ];

  function expectInOrder(text: string, parts: readonly string[]): void {
    let at = -1;
    for (const part of parts) {
      const next = text.indexOf(part, at + 1);
      expect(next, `"${part}" after position ${at}`).toBeGreaterThan(at);
      at = next;
    }
  }

  it(`${AFTER}: prints every section, in order, and exactly the saved report`, async () => {
    const box = sandbox();
    const run = await runCli(["lab", AFTER], box);
    expect(run.stderr).toBe("");
    expect(run.code).toBe(0);
    expectInOrder(run.stdout, SECTIONS_AFTER);
    expect(run.stdout).toMatch(/RECLAIMED from Worker-A/);
    expect(run.stdout).toMatch(/REFUSED: lease lost/);
    expect(run.stdout).not.toMatch(/^FAIL\b/m);
    const saved = /^report {8}saved to (.+)$/m.exec(run.stdout);
    expect(saved).not.toBeNull();
    const path = saved![1]!;
    expect(dirname(path)).toBe(join(box.cwd, "Reports", "Session-15"));
    expect(basename(path)).toMatch(REPORT_NAME[AFTER]);
    // What was printed is what was saved.
    expect(run.stdout.startsWith(readFileSync(path, "utf8"))).toBe(true);
    expect(readdirSync(box.tmp).filter((name) => name.startsWith("wassal-"))).toEqual([]);
  });

  it(`${BEFORE}: prints its sections and the verdict that shows the duplication`, async () => {
    const box = sandbox();
    const run = await runCli(["lab", BEFORE], box);
    expect(run.code).toBe(0);
    expectInOrder(run.stdout, [
      "CREATE TABLE outbox_messages",
      "== Timeline",
      "== Per-message ownership",
      "== Claim ledger",
      "== Processing ledger",
      "== Checks",
      "== Verdict",
      "VERDICT: DURABLE, BUT NOT OWNED",
    ]);
    expect(run.stdout).toContain("WITHOUT any ownership check");
    expect(run.stdout).not.toMatch(/^FAIL\b/m);
  });

  it("all: every report, then one PASSED line per scenario", async () => {
    const box = sandbox();
    const run = await runCli(["lab", "all"], box);
    expect(run.code).toBe(0);
    expect(run.stdout.trimEnd().split("\n").slice(-ALL.length)).toEqual(ALL.map((name) => `PASSED  ${name}`));
    // Two reports per lesson, each .txt and .html.
    for (const folder of ["Session-13", "Session-14", "Session-15", "Ordering"]) expect(readdirSync(join(box.cwd, "Reports", folder))).toHaveLength(4);
  });
});
