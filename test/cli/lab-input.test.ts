// `wassal lab` given bad input, through real processes: unknown names and options, unusable
// database paths, and a reports folder that cannot be written. Each must end with a clear message
// (one line where the input is a path), the documented exit code, no stack trace, and no damage.
//
// Needs `npm run build` first (`npm test` does it).

import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import Database from "better-sqlite3";
import { beforeAll, describe, expect, it } from "vitest";
import { expectNoStack, oneLine } from "../support/assertions.js";
import { requireBuiltCli, runCli } from "../support/cli.js";
import { tempDir } from "../support/temp.js";
import { AFTER, ALL, BEFORE, CRASH_SCENARIOS, DAY14_AFTER, sandbox as sandboxIn } from "./cli-support.js";

// One folder for the whole file, removed when it finishes (tempDir must be called while the file
// is collected, not inside a test: a hook registered by a running test never runs).
const FILE_TMP = tempDir("wassal-cli-input-");

const sandbox = () => sandboxIn(FILE_TMP);

/** Nothing was run: no report saved, no temporary database left. */
function expectNothingRan(box: { cwd: string; tmp: string }): void {
  expect(existsSync(join(box.cwd, "Reports"))).toBe(false);
  expect(readdirSync(box.tmp)).toEqual([]);
}

beforeAll(requireBuiltCli);

// ---------------------------------------------------------------------------------------------

describe("names, options and help", () => {
  it("an unknown scenario exits 2 and lists the valid names, without a stack trace", async () => {
    const box = sandbox();
    const run = await runCli(["lab", "session-15-no-such-thing"], box);
    expect(run.code).toBe(2);
    expect(run.stdout).toBe("");
    expect(run.stderr).toContain(`unknown scenario "session-15-no-such-thing"`);
    // Every name, in the order `lab all` runs them.
    const listed = ALL.map((name) => run.stderr.indexOf(`  ${name} `));
    expect(listed.every((at) => at > 0)).toBe(true);
    expect([...listed].sort((a, b) => a - b)).toEqual(listed);
    expectNoStack(run.stderr);
    expectNothingRan(box);
  });

  it("an unknown scenario exits 2 in --json mode too, with the error as JSON on stdout", async () => {
    const box = sandbox();
    const run = await runCli(["lab", "nope", "--json"], box);
    expect(run.code).toBe(2);
    const { error } = JSON.parse(run.stdout) as { error: { name: string; code: string; message: string } };
    expect(error).toMatchObject({ name: "InvalidArgumentError", code: "INVALID_ARGUMENT" });
    expect(error.message).toContain('unknown scenario "nope"');
    expect(error.message).toContain(AFTER);
    expect(run.stderr).toContain(AFTER);
    expectNoStack(run.stderr);
    expectNothingRan(box);
  });

  it("a bad option under --json: exit 2, commander's message on stderr and as a JSON error", async () => {
    const box = sandbox();
    const run = await runCli(["lab", AFTER, "--json", "--no-such-option"], box);
    expect(run.code).toBe(2);
    expect(JSON.parse(run.stdout)).toEqual({ error: { name: "UsageError", code: "commander.unknownOption", message: "unknown option '--no-such-option'" } });
    expect(run.stderr).toContain("unknown option '--no-such-option'");
    expectNothingRan(box);
  });

  it("`lab` without a scenario exits 2 and lists the valid names", async () => {
    const box = sandbox();
    const run = await runCli(["lab"], box);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain(BEFORE);
    expect(run.stderr).toContain(AFTER);
    expectNoStack(run.stderr);
    expectNothingRan(box);
  });

  it("`lab --list` exits 0 and lists every scenario (and all), running nothing", async () => {
    const box = sandbox();
    const run = await runCli(["lab", "--list"], box);
    expect(run.code).toBe(0);
    expect(run.stderr).toBe("");
    const names = run.stdout
      .split("\n")
      .filter((l) => l.trim() !== "")
      .map((l) => l.trim().split(/\s+/)[0]);
    expect(names).toEqual([...ALL, "all"]);
    // The lessons in order: durability (13), atomicity (14), leasing (15), each BEFORE then AFTER.
    expect(names.flatMap((n) => /^session-(\d+)-/.exec(n ?? "")?.[1] ?? [])).toEqual(["13", "13", "14", "14", "15", "15"]);
    expect(run.stdout).toMatch(/^ {2}session-13-in-memory-reconciliation +BEFORE: /m);
    expect(run.stdout).toMatch(/^ {2}session-14-transactional-outbox +AFTER: /m);
    expectNothingRan(box);
  });

  it("--help and lab --help exit 0 and describe the usage", async () => {
    const box = sandbox();
    const top = await runCli(["--help"], box);
    expect(top.code).toBe(0);
    expect(top.stdout).toMatch(/^Usage: wassal /m);
    expect(top.stdout).toContain("lab");
    const lab = await runCli(["lab", "--help"], box);
    expect(lab.code).toBe(0);
    expect(lab.stdout).toMatch(/^Usage: wassal lab /m);
    for (const option of ["--json", "--reports", "--db", "--keep-db", "--list"]) expect(lab.stdout).toContain(option);
    for (const name of ALL) expect(lab.stdout).toContain(name);
    expect(lab.stdout).toMatch(/Session-13,\s+Session-14,\s+Session-15\s+or\s+Ordering/);
    expectNothingRan(box);
  });

  it("an unknown option exits 2 and names the option", async () => {
    const box = sandbox();
    for (const args of [["lab", AFTER, "--no-such-option"], ["--no-such-option"]]) {
      const run = await runCli(args, box);
      expect(run.code, args.join(" ")).toBe(2);
      expect(run.stderr).toContain("--no-such-option");
      expectNoStack(run.stderr);
    }
    expectNothingRan(box);
  });
});

describe("--db that cannot be used", () => {
  it("a file that is not SQLite: exit 2, one line saying so, the file untouched", async () => {
    const box = sandbox();
    const path = join(box.cwd, "notes.txt");
    const content = "these are my notes, not a database\n".repeat(20);
    writeFileSync(path, content);
    const before = statSync(path);
    const run = await runCli(["lab", AFTER, "--db", path], box);
    expect(run.code).toBe(2);
    expect(run.stdout).toBe("");
    const line = oneLine(run.stderr);
    expect(line).toContain("not a SQLite database");
    expect(line).toContain(path);
    expect(readFileSync(path, "utf8")).toBe(content);
    expect(statSync(path).mtimeMs).toBe(before.mtimeMs);
    expect(existsSync(`${path}-wal`)).toBe(false);
    expect(existsSync(`${path}-shm`)).toBe(false);
    expectNothingRan(box);
  });

  // The Session 13 and 14 scenarios open the database before they start their child process.
  it.each(CRASH_SCENARIOS)("%s with a file that is not SQLite: exit 2, one line, nothing run", async (name) => {
    const box = sandbox();
    const path = join(box.cwd, "notes.txt");
    writeFileSync(path, "not a database\n".repeat(40));
    const run = await runCli(["lab", name, "--db", path], box);
    expect(run.code).toBe(2);
    expect(run.stdout).toBe("");
    const line = oneLine(run.stderr);
    expect(line).toContain("not a SQLite database");
    expect(line).toContain(path);
    expect(readFileSync(path, "utf8")).toBe("not a database\n".repeat(40));
    expectNothingRan(box);
  });

  it("a file with a SQLite header but a corrupt body: exit 2, one line, the file untouched", async () => {
    const box = sandbox();
    const path = join(box.cwd, "corrupt.db");
    const content = Buffer.concat([Buffer.from("SQLite format 3\0", "latin1"), Buffer.from("garbage, not pages ".repeat(10))]);
    writeFileSync(path, content);
    const run = await runCli(["lab", AFTER, "--db", path, "--json"], box);
    expect(run.code).toBe(2);
    expect(JSON.parse(run.stdout)).toMatchObject({ error: { name: "DatabaseOpenError", message: expect.stringContaining("not a SQLite database") } });
    expect(oneLine(run.stderr)).toContain("not a SQLite database");
    expect(readFileSync(path).equals(content)).toBe(true);
    expectNothingRan(box);
  });

  it("a path in a directory that does not exist: exit 2, one clear line, nothing created", async () => {
    const box = sandbox();
    const missingDir = join(box.cwd, "no", "such", "dir");
    const path = join(missingDir, "lab.db");
    const run = await runCli(["lab", AFTER, "--db", path], box);
    expect(run.code).toBe(2);
    expect(run.stdout).toBe("");
    const line = oneLine(run.stderr);
    expect(line).toContain(path);
    expect(line).toMatch(/director/);
    expect(existsSync(join(box.cwd, "no"))).toBe(false);
    expectNoStack(run.stderr);
    expectNothingRan(box);
  });

  it("a path whose parent is a regular file: exit 2, one clear line, the file untouched", async () => {
    const box = sandbox();
    const parent = join(box.cwd, "plain-file");
    writeFileSync(parent, "just a file\n");
    const path = join(parent, "lab.db");
    const run = await runCli(["lab", AFTER, "--db", path], box);
    expect(run.code).toBe(2);
    const line = oneLine(run.stderr);
    expect(line).toContain(path);
    expect(line).toMatch(/cannot|unable/i);
    expect(readFileSync(parent, "utf8")).toBe("just a file\n");
    expectNoStack(run.stderr);
    expectNothingRan(box);
  });

  it("a directory: exit 2, one line", async () => {
    const box = sandbox();
    const dir = join(box.cwd, "a-directory");
    mkdirSync(dir);
    const run = await runCli(["lab", AFTER, "--db", dir], box);
    expect(run.code).toBe(2);
    expect(oneLine(run.stderr)).toContain("is a directory");
    expect(readdirSync(dir)).toEqual([]);
    expectNothingRan(box);
  });

  it("a file that already holds Wassal tables: exit 2, one line, its data untouched", async () => {
    const box = sandbox();
    const path = join(box.cwd, "used.db");
    // A first run on a new path works and keeps the file...
    const first = await runCli(["lab", AFTER, "--db", path, "--json"], box);
    expect(first.code).toBe(0);
    expect((JSON.parse(first.stdout) as { passed: boolean }).passed).toBe(true);
    const counts = () => {
      const db = new Database(path, { readonly: true });
      try {
        return {
          outbox: db.prepare("SELECT id, status, locked_by, lease_token, attempts FROM outbox_messages ORDER BY id").all(),
          payments: db.prepare("SELECT idempotency_key, payment_status, transaction_id FROM payments ORDER BY id").all(),
        };
      } finally {
        db.close();
      }
    };
    const before = counts();
    expect(before.outbox).toHaveLength(6);
    const reportsBefore = readdirSync(join(box.cwd, "Reports", "Session-15"));

    // ...a second run on it is refused before doing anything.
    for (const scenario of [AFTER, BEFORE]) {
      const second = await runCli(["lab", scenario, "--db", path], box);
      expect(second.code, scenario).toBe(2);
      expect(second.stdout).toBe("");
      const line = oneLine(second.stderr);
      expect(line).toContain("already holds Wassal tables");
      expect(line).toContain(path);
    }
    expect(counts()).toEqual(before);
    expect(readdirSync(join(box.cwd, "Reports", "Session-15"))).toEqual(reportsBefore);
  });

  it("`lab all --db` is refused before anything runs (each scenario needs an empty database)", async () => {
    const box = sandbox();
    const path = join(box.cwd, "all.db");
    const run = await runCli(["lab", "all", "--db", path, "--json"], box);
    expect(run.code).toBe(2);
    expect(JSON.parse(run.stdout)).toMatchObject({ error: { name: "InvalidArgumentError", message: expect.stringContaining("--db") } });
    expect(run.stderr).toContain("--db");
    expectNoStack(run.stderr);
    expect(existsSync(path)).toBe(false);
    expectNothingRan(box);
  });
});

describe("--reports that cannot be written", () => {
  it("is refused before anything runs: exit 2, one line naming the folder, nothing run, the blocking file untouched", async () => {
    const box = sandbox();
    const blocker = join(box.cwd, "not-a-dir");
    writeFileSync(blocker, "a regular file where the reports folder should be\n");
    const reports = join(blocker, "sub");
    const run = await runCli(["lab", AFTER, "--reports", reports], box);
    expect(run.code).toBe(2);
    expect(run.stdout).toBe("");
    const line = oneLine(run.stderr);
    expect(line).toContain(`cannot save reports in ${join(reports, "Reports", "Session-15")}`);
    expect(line).toContain("nothing was run");
    expectNoStack(run.stderr);
    expect(readFileSync(blocker, "utf8")).toBe("a regular file where the reports folder should be\n");
    expectNothingRan(box);
  });

  it(`${DAY14_AFTER}: refused before anything runs, naming Reports/Session-14`, async () => {
    const box = sandbox();
    const blocker = join(box.cwd, "not-a-dir");
    writeFileSync(blocker, "x");
    const run = await runCli(["lab", DAY14_AFTER, "--reports", blocker], box);
    expect(run.code).toBe(2);
    expect(run.stdout).toBe("");
    const line = oneLine(run.stderr);
    expect(line).toContain(`cannot save reports in ${join(blocker, "Reports", "Session-14")}`);
    expect(line).toContain("nothing was run");
    expectNothingRan(box);
  });

  it("all, under --json: refused before the first scenario, with the error as JSON", async () => {
    const box = sandbox();
    const blocker = join(box.cwd, "not-a-dir");
    writeFileSync(blocker, "x");
    const run = await runCli(["lab", "all", "--json", "--reports", blocker], box);
    expect(run.code).toBe(2);
    const { error } = JSON.parse(run.stdout) as { error: { name: string; message: string } };
    expect(error.name).toBe("InvalidArgumentError");
    // The first scenario of `all` is Session 13's.
    expect(error.message).toContain(`cannot save reports in ${join(blocker, "Reports", "Session-13")}`);
    expectNothingRan(box);
  });
});
