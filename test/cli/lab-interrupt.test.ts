// An interrupted `wassal lab` (Ctrl-C, or SIGTERM) removes its temporary database before it
// exits: no file left in TMPDIR, no schema left in PostgreSQL.

import { spawn } from "node:child_process";
import { readdirSync } from "node:fs";
import pg from "pg";
import { beforeAll, describe, expect, it } from "vitest";
import { postgresAvailable, TEST_DATABASE_URL } from "../support/postgres.js";
import { tempDir } from "../support/temp.js";
import { AFTER, CLI, requireBuiltCli, sandbox } from "./cli-support.js";

const PG = await postgresAvailable();
const root = tempDir();

beforeAll(() => requireBuiltCli());

/** Starts the lab paused after seeding, waits for `ready`, interrupts it, and returns how it ended. */
async function interrupt(extra: readonly string[], signal: NodeJS.Signals, ready: (tmp: string) => Promise<boolean>) {
  const where = sandbox(root);
  const env: NodeJS.ProcessEnv = { ...process.env, TMPDIR: where.tmp, WASSAL_LAB_TEST_PAUSE_MS: "20000" };
  delete env.WASSAL_DATABASE_URL;
  const child = spawn(process.execPath, [CLI, "lab", AFTER, ...extra], { cwd: where.cwd, env, stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  const deadline = Date.now() + 15_000;
  while (!(await ready(where.tmp))) {
    if (Date.now() > deadline) throw new Error(`the lab never got ready; stderr: ${stderr}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  child.kill(signal);
  const code = await exited;
  return { code, stderr, tmp: where.tmp };
}

async function labSchemas(): Promise<string[]> {
  const client = new pg.Client({ connectionString: TEST_DATABASE_URL });
  await client.connect();
  try {
    return (await client.query<{ nspname: string }>("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'wassal_lab_%'")).rows.map((r) => r.nspname);
  } finally {
    await client.end();
  }
}

describe("interrupting the lab", () => {
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    it(`${signal} on SQLite deletes the temporary database and exits 130`, async () => {
      const { code, stderr, tmp } = await interrupt([], signal, async (dir) => readdirSync(dir).some((name) => name.startsWith("wassal-")));
      expect(code).toBe(130);
      expect(stderr).toMatch(new RegExp(`interrupted by ${signal}; temporary database .* deleted`));
      expect(readdirSync(tmp)).toEqual([]);
    });
  }

  it.skipIf(!PG)("SIGINT on PostgreSQL drops the temporary schema and exits 130", async () => {
    const before = await labSchemas();
    const { code, stderr } = await interrupt(["--db", TEST_DATABASE_URL], "SIGINT", async () => (await labSchemas()).some((s) => !before.includes(s)));
    expect(code).toBe(130);
    expect(stderr).toMatch(/interrupted by SIGINT; temporary schema wassal_lab_\w+ dropped/);
    expect((await labSchemas()).filter((s) => !before.includes(s))).toEqual([]);
  });
});
