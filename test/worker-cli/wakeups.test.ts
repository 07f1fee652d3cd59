// A message committed by another process wakes an idle worker at once, on both stores: through
// LISTEN/NOTIFY on PostgreSQL, through the wake file on SQLite (the -wal watch, for commits made
// through other libraries, is test/stores/sqlite-commit-watch.test.ts). Not on MariaDB: its store
// has no cross-process wake-ups (crossProcessWakeups: false), so another process's commit waits for the poll. The worker polls only
// once a minute here, so only a wake-up can get the message handled within the test's time.
//
// Needs `npm run build` first (`npm test` does it).

import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { CLI, killAll, requireBuiltCli, runCli } from "../support/cli.js";
import { childEnv } from "../support/env.js";
import { postgresAvailable } from "../support/postgres.js";
import { tempDir } from "../support/temp.js";
import { closeTargets, newTarget, waitForRows, type StoreKind } from "./harness.js";

const PG = await postgresAvailable();
const FILE_TMP = tempDir("wassal-wakeups-");
const children: ChildProcess[] = [];

beforeAll(requireBuiltCli);
afterEach(async () => {
  for (const child of children.splice(0)) child.kill("SIGKILL");
  await killAll();
});
afterAll(closeTargets);

/** A worker that polls once a minute, resolved once it reports ready (claiming). */
async function idleWorker(args: readonly string[], cwd: string): Promise<ChildProcess> {
  const child = spawn(process.execPath, [CLI, "worker", ...args, "--poll-ms", "60000", "--log-level", "warn"], {
    cwd,
    env: childEnv(),
    stdio: ["ignore", "ignore", "pipe", "ipc"],
  });
  children.push(child);
  await new Promise<void>((resolve, reject) => {
    child.once("message", () => resolve());
    child.once("exit", (code) => reject(new Error(`worker exited ${code} before it was ready`)));
  });
  return child;
}

for (const kind of ["sqlite", "postgres"] as const satisfies readonly StoreKind[]) {
  describe.runIf(kind === "sqlite" || PG)(`${kind}: wake-ups across processes`, () => {
    it("an idle worker handles each payment another process creates at once, long before its next poll", { timeout: 120_000 }, async () => {
      const target = newTarget(kind, FILE_TMP);
      const cwd = mkdtempSync(join(FILE_TMP, "cwd-"));
      expect((await runCli(["payments", "seed", ...target.args, "--count", "1"], { cwd })).code).toBe(0);
      const worker = await idleWorker(target.args, cwd);
      await waitForRows(target, "the seeded payment handled", (rows) => rows.every((r) => r.status === "processed"), [], 20_000);
      // Now idle until a minute from now, unless woken. Another process creates payments, one at a
      // time, each only after the previous one was handled: every one must wake the worker itself
      // (a wake-up missed would leave its message waiting for the poll, a minute away).
      for (let n = 1; n <= 5; n += 1) {
        const created = await runCli(["payments", "create", ...target.args, "--key", `PAY-WAKE-${n}`, "--amount", "100", "--currency", "EUR"], { cwd });
        expect(created.code, created.stderr).toBe(0);
        await waitForRows(target, `payment ${n} handled by the idle worker`, (r) => r.length === n + 1 && r.every((m) => m.status === "processed"), [], 15_000);
      }
      expect(worker.exitCode).toBeNull();
    });
  });
}
