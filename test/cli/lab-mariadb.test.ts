// `wassal lab` on MariaDB, through real processes: the same figures as on SQLite and PostgreSQL,
// a temporary database per run that is dropped afterwards (or kept with --keep-db).
//
// Needs `npm run build` first (`npm test` does it) and the test server (TEST_MARIADB_URL); the
// tests are skipped loudly without it (fatal under CI).

import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import mysql from "mysql2/promise";
import { beforeAll, describe, expect, it } from "vitest";
import { requireBuiltCli, runCli, type CliResult } from "../support/cli.js";
import { mariadbAvailable, TEST_MARIADB_URL } from "../support/mariadb.js";
import { tempDir } from "../support/temp.js";
import { AFTER, ALL, expectAfterFigures, expectFigures, sandbox as sandboxIn, type ScenarioJson } from "./cli-support.js";

const MARIADB = await mariadbAvailable();
const FILE_TMP = tempDir("wassal-cli-mariadb-");
const sandbox = () => sandboxIn(FILE_TMP);

beforeAll(requireBuiltCli);

async function withServer<T>(work: (connection: mysql.Connection) => Promise<T>): Promise<T> {
  const connection = await mysql.createConnection(TEST_MARIADB_URL);
  try {
    return await work(connection);
  } finally {
    await connection.end();
  }
}

/** Every database named like the lab's temporary ones. */
function labDatabases(): Promise<string[]> {
  return withServer(async (c) => {
    const [rows] = await c.query<mysql.RowDataPacket[]>(String.raw`SHOW DATABASES LIKE 'wassal\_lab\_%'`);
    return rows.map((row) => String(Object.values(row)[0]));
  });
}

/** The run's database, read from its databasePath (the URL naming it). */
function databaseOf(result: ScenarioJson): string {
  const match = /^mysql:\/\/[^/]+\/(wassal_lab_[0-9a-f]{10})$/.exec(result.databasePath);
  expect(match, result.databasePath).not.toBeNull();
  return match![1]!;
}

function parse<T>(run: CliResult): T {
  expect(run.stderr).toBe("");
  expect(run.code).toBe(0);
  return JSON.parse(run.stdout) as T;
}

describe.skipIf(!MARIADB)("wassal lab on MariaDB", () => {
  it("all --db <url> --json: the same figures as on the other stores, every report saved, every temporary database dropped", async () => {
    const box = sandbox();
    const reports = join(box.cwd, "reports");
    const payload = parse<{ passed: boolean; scenarios: ScenarioJson[] }>(
      await runCli(["lab", "all", "--db", TEST_MARIADB_URL, "--json", "--reports", reports], box),
    );

    expect(payload.passed).toBe(true);
    expect(payload.scenarios.map((s) => s.scenario)).toEqual(ALL);
    const databases = payload.scenarios.map(databaseOf);
    expect(new Set(databases).size).toBe(ALL.length);
    for (const scenario of payload.scenarios) {
      expectFigures(scenario);
      for (const c of scenario.checks) expect(c, c.name).toMatchObject({ passed: true });
      const text = readFileSync(scenario.reportPath!, "utf8");
      expect(text).toMatch(/^store {9}MariaDB 10\./m);
      expect(text).toContain(`database      temporary database ${databaseOf(scenario)} dropped`);
      expect(text).toMatch(/CREATE TABLE `outbox_messages`/);
    }
    for (const folder of ["Session-13", "Session-14", "Session-15", "Ordering"]) {
      expect(readdirSync(join(reports, "Reports", folder)).filter((f) => f.endsWith(".txt"))).toHaveLength(2);
    }
    const after = await labDatabases();
    for (const database of databases) expect(after).not.toContain(database);
  });

  it("--keep-db keeps the database, holding the run's final rows", async () => {
    const box = sandbox();
    const run = await runCli(["lab", AFTER, "--db", TEST_MARIADB_URL, "--json", "--keep-db"], box);
    const database = /(wassal_lab_[0-9a-f]{10})/.exec(run.stdout)?.[1];
    try {
      const result = parse<ScenarioJson>(run);
      expectAfterFigures(result);
      expect(databaseOf(result)).toBe(database);
      expect(await labDatabases()).toContain(database);
      await withServer(async (c) => {
        const [messages] = await c.query(`SELECT status, COUNT(*) AS n FROM \`${database}\`.outbox_messages GROUP BY status`);
        expect(messages).toEqual([{ status: "processed", n: 6 }]);
        const [payments] = await c.query(
          `SELECT payment_status AS status, COUNT(*) AS n FROM \`${database}\`.payments GROUP BY payment_status ORDER BY payment_status`,
        );
        expect(payments).toEqual([
          { status: "Failed", n: 2 },
          { status: "Paid", n: 4 },
        ]);
      });
    } finally {
      if (database !== undefined) await withServer((c) => c.query(`DROP DATABASE IF EXISTS \`${database}\``));
    }
    expect(await labDatabases()).not.toContain(database);
  });
});
