// An interrupted `wassal lab` (Ctrl-C, or SIGTERM) removes its temporary database before it
// exits: no file left in TMPDIR, no schema left in PostgreSQL.
//
// The signal must land while the run is under way, and a run takes a fraction of a second. So
// the test watches for the run's temporary database (which the lab creates anyway), freezes the
// process (SIGSTOP) and reads that database: while one of the seeded messages is not processed
// yet, the run has work left, and that work returns to the event loop (between database round
// trips, and after each message a worker processes) before the run can end, so a signal sent now
// is handled mid-run. The test sends it and lets the process go on (SIGCONT). A run that got
// further before it was frozen (a starved test process) is let finish, and a new one is tried.

import { randomBytes } from "node:crypto";
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { killAll, requireBuiltCli, startCli } from "../support/cli.js";
import { postgresAvailable, TEST_DATABASE_URL, withClient } from "../support/postgres.js";
import { tempDir } from "../support/temp.js";
import { until } from "../support/wait.js";
import { AFTER, AFTER_FIGURES, sandbox } from "./cli-support.js";

const PG = await postgresAvailable();
const root = tempDir();

beforeAll(requireBuiltCli);
afterEach(killAll);

/**
 * How far a run is, read from its temporary database: how many messages are processed, or
 * undefined while there is no definite answer (no database yet, or not readable right now).
 */
type Progress = (tmp: string) => Promise<number | undefined>;

interface Interrupted {
  readonly code: number | null;
  readonly stderr: string;
  readonly tmp: string;
}

const ATTEMPTS = 3;

/** One run to try: the lab's arguments (after the scenario), and how to read its progress. */
interface Run {
  readonly args: readonly string[];
  readonly progress: Progress;
}

/** Starts runs of `wassal lab AFTER …` until one is caught mid-run, sends it `signal` (see the top of the file), and returns how it ended. */
async function interruptMidRun(signal: NodeJS.Signals, newRun: () => Run): Promise<Interrupted> {
  for (let attempt = 1; attempt <= ATTEMPTS; attempt += 1) {
    const where = sandbox(root);
    const run = newRun();
    const lab = startCli(["lab", AFTER, ...run.args], where);
    const caught = await until(
      "the lab's temporary database",
      async () => {
        if (lab.exit() !== undefined) return "finished";
        if ((await run.progress(where.tmp)) === undefined) return false;
        lab.signal("SIGSTOP");
        const processed = await run.progress(where.tmp);
        if (processed !== undefined) return processed < AFTER_FIGURES.pendingMessagesSeeded ? "mid-run" : "too far";
        lab.signal("SIGCONT");
        return false;
      },
      { timeoutMs: 15_000, intervalMs: 5, last: () => lab.stderr() },
    );
    if (caught === "mid-run") {
      lab.signal(signal);
      lab.signal("SIGCONT");
      const exit = await lab.waitForExit(15_000);
      return { code: exit.code, stderr: lab.stderr(), tmp: where.tmp };
    }
    lab.signal("SIGCONT");
    await lab.waitForExit(15_000);
  }
  throw new Error(`${ATTEMPTS} lab runs all got past their last message before the test could freeze them`);
}

/** The processed messages in the one lab database under `tmp` (the lab's file, read-only, while the lab is frozen). */
const sqliteProgress: Progress = async (tmp) => {
  const dir = readdirSync(tmp).find((name) => name.startsWith("wassal-"));
  if (dir === undefined) return undefined;
  const path = join(tmp, dir, "wassal-outbox.db");
  if (!existsSync(path)) return 0;
  try {
    const db = new Database(path, { readonly: true, fileMustExist: true, timeout: 100 });
    try {
      const table = db.prepare("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'outbox_messages'").get();
      return table === undefined ? 0 : (db.prepare("SELECT count(*) FROM outbox_messages WHERE status = 'processed'").pluck().get() as number);
    } finally {
      db.close();
    }
  } catch {
    return undefined; // being created or switched to WAL right now: look again
  }
};

/** The lab schemas whose name appears in the last statement of a connection named `application`. */
async function schemasUsedBy(application: string): Promise<string[]> {
  return withClient(async (client) => {
    const { rows } = await client.query<{ query: string }>("SELECT query FROM pg_stat_activity WHERE application_name = $1", [application]);
    return [...new Set(rows.flatMap((r) => r.query.match(/wassal_lab_[0-9a-f]+/g) ?? []))];
  });
}

/** The processed messages in `schema` (0 before its table exists), or undefined when it cannot be read right now. */
async function postgresProgress(schema: string): Promise<number | undefined> {
  try {
    return await withClient(async (client) => {
      // The lab is frozen: never wait on a lock it holds (a migration in progress).
      await client.query("SET lock_timeout = '500ms'");
      const { rows } = await client.query<{ t: string | null }>("SELECT to_regclass($1)::text AS t", [`${schema}.outbox_messages`]);
      if ((rows[0]?.t ?? null) === null) return 0;
      return (await client.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${schema}.outbox_messages WHERE status = 'processed'`)).rows[0]!.n;
    });
  } catch {
    return undefined;
  }
}

async function schemaExists(schema: string): Promise<boolean> {
  return withClient(async (client) => (await client.query("SELECT 1 FROM pg_namespace WHERE nspname = $1", [schema])).rowCount === 1);
}

describe("interrupting the lab", () => {
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    it(`${signal} on SQLite deletes the temporary database and exits 130`, async () => {
      const { code, stderr, tmp } = await interruptMidRun(signal, () => ({ args: [], progress: sqliteProgress }));
      expect(code).toBe(130);
      expect(stderr).toMatch(new RegExp(`interrupted by ${signal}; temporary database .* deleted`));
      expect(readdirSync(tmp)).toEqual([]);
    });
  }

  it.skipIf(!PG)("SIGINT on PostgreSQL drops the temporary schema and exits 130", async () => {
    let schema: string | undefined;
    const { code, stderr } = await interruptMidRun("SIGINT", () => {
      // The run's connections carry this name (libpq's application_name, in the URL), so the test
      // finds the run's schema among any other runs' on the same server.
      const application = `wassal-lab-interrupt-${randomBytes(4).toString("hex")}`;
      const url = new URL(TEST_DATABASE_URL);
      url.searchParams.set("application_name", application);
      schema = undefined;
      return {
        args: ["--db", url.toString()],
        progress: async () => {
          schema ??= (await schemasUsedBy(application))[0];
          return schema === undefined ? undefined : postgresProgress(schema);
        },
      };
    });
    expect(code).toBe(130);
    expect(schema).toBeDefined();
    expect(stderr).toMatch(new RegExp(`interrupted by SIGINT; temporary schema ${schema} dropped`));
    expect(await schemaExists(schema!)).toBe(false);
  });
});
