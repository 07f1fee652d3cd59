// `wassal worker`, `payments` and `outbox` given bad input, through real processes: each exits 2
// with one clear line (commander's "(run with --help for usage)" hint aside), no stack trace, and
// no damage. And --help on every command and sub-command.
//
// Needs `npm run build` first (`npm test` does it).

import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { errorLine } from "../support/assertions.js";
import { killAll, requireBuiltCli, runCli, type CliResult } from "../support/cli.js";
import { freshSchema, postgresAvailable, TEST_DATABASE_URL, withClient } from "../support/postgres.js";
import { tempDir } from "../support/temp.js";
import { closeTargets, newTarget } from "./harness.js";

const PG = await postgresAvailable();
const FILE_TMP = tempDir("wassal-wcli-input-");
const cwd = () => mkdtempSync(join(FILE_TMP, "cwd-"));

beforeAll(requireBuiltCli);
afterEach(killAll);
afterAll(closeTargets);

/** Exit 2, nothing on stdout, one line on stderr (returned). */
function usageError(run: CliResult): string {
  expect({ code: run.code, signal: run.signal, stdout: run.stdout }).toEqual({ code: 2, signal: null, stdout: "" });
  return errorLine(run.stderr);
}

describe("bad input: exit 2, one clear line, no stack trace, no damage", () => {
  it("worker without --db names the missing option", async () => {
    const dir = cwd();
    const line = usageError(await runCli(["worker"], { cwd: dir }));
    expect(line).toBe("wassal: give the outbox's database: --db <url-or-path> (or WASSAL_DATABASE_URL), or --shard once per shard");
    expect(readdirSync(dir)).toEqual([]);
  });

  it("worker --concurrency 0, --lease-ms abc, --log-level loud: each names the option and the valid range", async () => {
    const dir = cwd();
    const db = join(dir, "never.db");
    const [concurrency, lease, level, grace] = await Promise.all([
      runCli(["worker", "--db", db, "--concurrency", "0"], { cwd: dir }),
      runCli(["worker", "--db", db, "--lease-ms", "abc"], { cwd: dir }),
      runCli(["worker", "--db", db, "--log-level", "loud"], { cwd: dir }),
      runCli(["worker", "--db", db, "--grace-ms", "-5"], { cwd: dir }),
    ]);
    expect(usageError(concurrency)).toBe("error: option '--concurrency <n>' argument '0' is invalid. expected a whole number from 1 to 1000");
    expect(usageError(lease)).toBe("error: option '--lease-ms <ms>' argument 'abc' is invalid. expected a whole number from 100 to 86400000");
    expect(usageError(level)).toMatch(/^error: option '--log-level <level>' argument 'loud' is invalid\. expected one of .*\bwarn\b/);
    expect(usageError(grace)).toBe("error: option '--grace-ms <ms>' argument '-5' is invalid. expected a whole number from 0 to 3600000");
    expect(existsSync(db)).toBe(false);
  });

  it("worker and relay: an owner timing too short for the heartbeat names the flags, before anything opens", async () => {
    const dir = cwd();
    const db = join(dir, "never.db");
    const relay = ["relay", "--db", db, "--to", "nats://127.0.0.1:1", "--destination", "orders.{type}"];
    const runs = await Promise.all([
      runCli(["worker", "--db", db, "--owner-dead-after-ms", "100"], { cwd: dir }),
      runCli([...relay, "--owner-dead-after-ms", "3000", "--poll-ms", "2000"], { cwd: dir }),
      runCli(["worker", "--db", db, "--heartbeat-ms", "5000", "--owner-dead-after-ms", "9999"], { cwd: dir }),
    ]);
    expect(runs.map(usageError)).toEqual([
      "wassal: --owner-dead-after-ms (100) must be at least twice the heartbeat (the longer of --heartbeat-ms 2000 and --poll-ms 1000), or a live worker's leases could be reaped: give it 4000 or more",
      "wassal: --owner-dead-after-ms (3000) must be at least twice the heartbeat (the longer of --heartbeat-ms 2000 and --poll-ms 2000), or a live worker's leases could be reaped: give it 4000 or more",
      "wassal: --owner-dead-after-ms (9999) must be at least twice the heartbeat (the longer of --heartbeat-ms 5000 and --poll-ms 1000), or a live worker's leases could be reaped: give it 10000 or more",
    ]);
    expect(existsSync(db)).toBe(false);
  });

  it("outbox purge --processed-before 7x explains the duration format, and deletes nothing", async () => {
    const target = newTarget("sqlite", FILE_TMP);
    const dir = cwd();
    expect((await runCli(["payments", "seed", ...target.args, "--count", "1"], { cwd: dir })).code).toBe(0);
    const line = usageError(await runCli(["outbox", "purge", ...target.args, "--processed-before", "7x"], { cwd: dir }));
    expect(line).toBe("error: option '--processed-before <duration>' argument '7x' is invalid. expected a duration such as 500ms, 30s, 15m, 12h, 7d or 2w");
    expect(await target.messages()).toHaveLength(1);
    // Something to purge must be named.
    expect(usageError(await runCli(["outbox", "purge", ...target.args], { cwd: dir }))).toBe(
      "wassal: name what to purge: --processed-before, --dead-before, --audit-before or --inbox-before (a duration such as 7d)",
    );
  });

  it("outbox stats (and dead, redrive, cancel, purge, payments list) on a file that does not exist: exit 2, and the file is not created", async () => {
    const dir = cwd();
    const missing = join(dir, "missing.db");
    const runs = await Promise.all(
      [
        ["outbox", "stats"],
        ["outbox", "dead"],
        ["outbox", "redrive", "--all"],
        ["outbox", "cancel", "1"],
        ["outbox", "purge", "--processed-before", "1d"],
        ["payments", "list"],
      ].map((command) => runCli([...command, "--db", missing], { cwd: dir })),
    );
    for (const run of runs) {
      expect(usageError(run)).toBe(`wassal: no database at ${missing}; give the path of an existing Wassal SQLite file or a server's URL`);
    }
    expect(readdirSync(dir)).toEqual([]);
  });

  it("outbox stats (and the other read or repair commands) on a SQLite file that is not Wassal's: exit 2, and no table is added to it", async () => {
    const dir = cwd();
    const other = join(dir, "other.db");
    const db = new Database(other);
    db.exec("CREATE TABLE notes (text TEXT)");
    db.close();
    const before = readFileSync(other);
    const runs = await Promise.all(
      [
        ["outbox", "stats"],
        ["outbox", "redrive", "--all"],
        ["outbox", "cancel", "1"],
        ["payments", "list"],
      ].map((command) => runCli([...command, "--db", other], { cwd: dir })),
    );
    for (const run of runs) {
      expect(usageError(run)).toBe(
        `wassal: ${other} is a SQLite database but holds no Wassal outbox; give the path of a Wassal database (run 'wassal migrate --db ${other}' to create one)`,
      );
    }
    const after = new Database(other, { readonly: true });
    expect(after.prepare("SELECT name FROM sqlite_schema WHERE type = 'table'").pluck().all()).toEqual(["notes"]);
    after.close();
    expect(readFileSync(other).equals(before)).toBe(true);
  });

  it("worker --db <a text file>: says it is not a SQLite database, leaves the file alone, and claims nothing", async () => {
    const dir = cwd();
    const text = join(dir, "notes.txt");
    writeFileSync(text, "these are my notes, not a database\n".repeat(20));
    const [worker, stats] = await Promise.all([
      runCli(["worker", "--db", text, "--log-level", "warn"], { cwd: dir, timeoutMs: 15_000 }),
      runCli(["outbox", "stats", "--db", text], { cwd: dir, timeoutMs: 15_000 }),
    ]);
    expect(usageError(worker)).toBe(`wassal: ${text} is not a SQLite database (its header is wrong); give a new path or an existing SQLite file`);
    expect(usageError(stats)).toContain("is not a SQLite database");
    expect(readFileSync(text, "utf8")).toBe("these are my notes, not a database\n".repeat(20));
    expect(readdirSync(dir)).toEqual(["notes.txt"]);
  });

  it("payments create --currency eur: exit 2 with a line saying what a currency must look like; nothing created", async () => {
    const target = newTarget("sqlite", FILE_TMP);
    const dir = cwd();
    expect((await runCli(["payments", "seed", ...target.args, "--count", "1"], { cwd: dir })).code).toBe(0);
    const line = usageError(await runCli(["payments", "create", ...target.args, "--key", "PAY-LOWER", "--amount", "12500", "--currency", "eur"], { cwd: dir }));
    expect(line).toBe(`wassal: currency must be a three-letter ISO 4217 code in capitals, e.g. EUR (got "eur")`);
    expect((await target.payments()).map((p) => p.key)).toEqual(["PAY-000001"]);
    expect(await target.messages()).toHaveLength(1);
    // The other fields, likewise.
    const [amount, key] = await Promise.all([
      runCli(["payments", "create", ...target.args, "--key", "PAY-X", "--amount", "12.50", "--currency", "EUR"], { cwd: dir }),
      runCli(["payments", "create", ...target.args, "--key", "bad key!", "--amount", "1250", "--currency", "EUR"], { cwd: dir }),
    ]);
    expect(usageError(amount)).toMatch(/^error: option '--amount <minor-units>' argument '12\.50' is invalid\. expected a whole number/);
    expect(usageError(key)).toMatch(/^wassal: idempotency key must be 1 to 100 characters/);
    expect(await target.payments()).toHaveLength(1);
  });

  it("payments create with a bad currency on a new path creates no database file", async () => {
    const dir = cwd();
    const db = join(dir, "fresh.db");
    const run = await runCli(["payments", "create", "--db", db, "--key", "PAY-1", "--amount", "100", "--currency", "eur"], { cwd: dir });
    expect(run.code).toBe(2);
    expect(readdirSync(dir)).toEqual([]);
  });

  it("outbox redrive with ids and --all together exits 2", async () => {
    const target = newTarget("sqlite", FILE_TMP);
    const dir = cwd();
    expect((await runCli(["payments", "seed", ...target.args, "--count", "1"], { cwd: dir })).code).toBe(0);
    const line = usageError(await runCli(["outbox", "redrive", ...target.args, "1", "--all"], { cwd: dir }));
    expect(line).toBe("wassal: name the dead message ids to redrive, or pass --all (not both)");
  });

  it("outbox redrive with neither ids nor --all exits 2", async () => {
    const target = newTarget("sqlite", FILE_TMP);
    const dir = cwd();
    expect((await runCli(["payments", "seed", ...target.args, "--count", "1"], { cwd: dir })).code).toBe(0);
    const line = usageError(await runCli(["outbox", "redrive", ...target.args], { cwd: dir }));
    expect(line).toBe("wassal: name the dead message ids to redrive, or pass --all (not both)");
  });

  describe.runIf(PG)("postgresql", () => {
    it("an unreachable server or a bad schema name: exit 2, one line", async () => {
      const dir = cwd();
      const refused = new URL(TEST_DATABASE_URL);
      refused.port = "1";
      const [worker, stats] = await Promise.all([
        runCli(["worker", "--db", refused.toString(), "--log-level", "warn"], { cwd: dir, timeoutMs: 20_000 }),
        runCli(["outbox", "stats", "--db", TEST_DATABASE_URL, "--schema", "Bad-Name"], { cwd: dir }),
      ]);
      expect(usageError(worker)).toMatch(/^wassal: cannot connect to PostgreSQL at .*:1\/.*connection refused/);
      expect(usageError(stats)).toMatch(/^wassal: schema name must be .*\(got "Bad-Name"\)$/);
    });

    it("outbox stats on a schema that does not exist refuses (exit 2) and creates nothing", async () => {
      const dir = cwd();
      const schema = freshSchema("wassal_wcli_missing");
      const run = await runCli(["outbox", "stats", "--db", TEST_DATABASE_URL, "--schema", schema], { cwd: dir });
      const created = (await withClient((client) => client.query("SELECT 1 FROM pg_namespace WHERE nspname = $1", [schema]))).rowCount;
      expect(created).toBe(0);
      expect(run.code).toBe(2);
    });
  });
});

describe("errors under --json, and internal errors", () => {
  it("a database that cannot be used, under --json: exit 2, the error as JSON on stdout, the line on stderr", async () => {
    const dir = cwd();
    const missing = join(dir, "missing.db");
    const run = await runCli(["outbox", "stats", "--db", missing, "--json"], { cwd: dir });
    expect(run.code).toBe(2);
    const { error } = JSON.parse(run.stdout) as { error: { name: string; code: string; message: string } };
    expect(error).toMatchObject({ name: "DatabaseOpenError", code: "DATABASE_OPEN" });
    expect(error.message).toContain(missing);
    expect(errorLine(run.stderr)).toBe(`wassal: ${error.message}`);
    expect(existsSync(missing)).toBe(false);
  });

  it("an error Wassal did not expect exits 70 (not 1, which means the work did not succeed), as text and as JSON", async () => {
    const target = newTarget("sqlite", FILE_TMP);
    const dir = cwd();
    expect((await runCli(["payments", "seed", ...target.args, "--count", "1"], { cwd: dir })).code).toBe(0);
    const env = { NODE_OPTIONS: `--import=${join(import.meta.dirname, "..", "fixtures", "simulated-bug.mjs")}` };
    const text = await runCli(["outbox", "stats", ...target.args], { cwd: dir, env });
    expect([text.code, text.stdout]).toEqual([70, ""]);
    expect(text.stderr).toContain("wassal: unexpected error: simulated bug: toISOString is broken\n");
    expect(text.stderr).toContain("set WASSAL_DEBUG=1 to see the stack");
    const json = await runCli(["outbox", "stats", ...target.args, "--json"], { cwd: dir, env });
    expect(json.code).toBe(70);
    expect(JSON.parse(json.stdout)).toEqual({ error: { name: "TypeError", code: "INTERNAL", message: "simulated bug: toISOString is broken" } });
  });
});

describe("--help", () => {
  const COMMANDS = [
    [],
    ["lab"],
    ["worker"],
    ["payments"],
    ["payments", "create"],
    ["payments", "seed"],
    ["payments", "list"],
    ["outbox"],
    ["outbox", "stats"],
    ["outbox", "dead"],
    ["outbox", "redrive"],
    ["outbox", "purge"],
    ["inbox"],
    ["inbox", "blocked-keys"],
    ["inbox", "unblock"],
    ["schedule"],
    ["schedule", "list"],
    ["schedule", "add"],
    ["schedule", "remove"],
  ];

  it("every command and sub-command prints its usage and exits 0", async () => {
    const dir = cwd();
    const runs = await Promise.all(COMMANDS.map((command) => runCli([...command, "--help"], { cwd: dir })));
    runs.forEach((run, i) => {
      const command = ["wassal", ...COMMANDS[i]!].join(" ");
      expect({ command, code: run.code, signal: run.signal, stderr: run.stderr }).toEqual({ command, code: 0, signal: null, stderr: "" });
      expect(run.stdout.startsWith(`Usage: ${command} [options]`), `${command} --help:\n${run.stdout}`).toBe(true);
    });
    expect(readdirSync(dir)).toEqual([]);

    const help = (command: string) => runs[COMMANDS.findIndex((c) => c.join(" ") === command)]!.stdout;
    for (const option of [
      "--db",
      "--schema",
      "--name",
      "--concurrency",
      "--lease-ms",
      "--poll-ms",
      "--max-attempts",
      "--retry-base-ms",
      "--grace-ms",
      "--metrics-port",
      "--log-level",
      "--provider-latency-ms",
    ]) {
      expect(help("worker")).toContain(option);
    }
    for (const sub of ["create", "seed", "list"]) expect(help("payments")).toContain(sub);
    for (const sub of ["stats", "dead", "redrive", "purge"]) expect(help("outbox")).toContain(sub);
    for (const sub of ["lab", "worker", "payments", "outbox", "inbox", "schedule"]) expect(help("")).toContain(sub);
    for (const sub of ["list", "add", "remove"]) expect(help("schedule")).toContain(sub);
    for (const option of ["--type", "--payload", "--timezone", "--backfill", "--header"]) expect(help("schedule add")).toContain(option);
    for (const option of ["--source", "--older-than", "--json"]) expect(help("inbox blocked-keys")).toContain(option);
    expect(help("outbox redrive")).toContain("--all");
    expect(help("outbox purge")).toContain("--processed-before");
    expect(help("outbox purge")).toContain("--batch-size");
  });
});
