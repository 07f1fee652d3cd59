// Bad input and a failing machine, as an outsider tries them:
// - a refused command changes nothing on disk: every argument is checked before the database is
//   opened (a SQLite file, its -wal and -shm stay byte for byte as they were, and nothing is added);
// - `lab --reports /proc` is refused at once instead of hanging;
// - a full disk is the environment's failure: its own exit code (74) and one line, not "internal
//   error … report it";
// - a SIGTERM'd `chaos run` removes its temporary folder.
//
// Needs `npm run build` first (`npm test` does it).

import { createHash } from "node:crypto";
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { killAll, requireBuiltCli, runCli, startCli } from "../support/cli.js";
import { tempDir } from "../support/temp.js";

const dir = tempDir("wassal-hostile-refusals-");

/** Each file of a folder with a hash of its bytes. */
function snapshot(folder: string): Record<string, string> {
  const files: Record<string, string> = {};
  for (const name of readdirSync(folder).sort()) {
    const path = join(folder, name);
    files[name] = statSync(path).isFile() ? createHash("sha256").update(readFileSync(path)).digest("hex") : "(folder)";
  }
  return files;
}

beforeAll(requireBuiltCli);
afterEach(killAll);

describe("a refused command leaves every file as it was", () => {
  it("on a SQLite file holding a Wassal outbox: every refusal exits 2 and the folder is byte for byte the same", async () => {
    const folder = mkdtempSync(join(dir, "db-"));
    const db = join(folder, "app.db");
    const cwd = mkdtempSync(join(dir, "cwd-"));
    expect((await runCli(["payments", "seed", "--db", db, "--count", "3"], { cwd })).code).toBe(0);
    const before = snapshot(folder);
    expect(Object.keys(before)).toContain("app.db");

    const refused: string[][] = [
      ["outbox", "purge", "--db", db, "--processed-before", "99999999999999d"],
      ["outbox", "purge", "--db", db, "--dead-before", "1e9d"],
      ["outbox", "purge", "--db", db],
      ["outbox", "purge", "--db", db, "--processed-before", "1d", "--batch-size", "0"],
      ["outbox", "redrive", "--db", db],
      ["outbox", "redrive", "--db", db, "not-an-id"],
      ["outbox", "show", "--db", db, "-1"],
      ["outbox", "dead", "--db", db, "--limit", "0"],
      ["outbox", "unblock", "--db", db, "some-key"],
      ["inbox", "unblock", "--db", db, "some-key"],
      ["inbox", "unblock", "--db", db, "--all", "--skip", "--older-than", "99999999999999d"],
      ["inbox", "blocked-keys", "--db", db, "--older-than", "soon"],
      ["payments", "create", "--db", db, "--key", "PAY-9", "--amount", "1", "--currency", "eur"],
      ["payments", "seed", "--db", db, "--count", "0"],
      ["worker", "--db", db, "--lease-ms", "5"],
      ["worker", "--db", db, "--handlers", join(cwd, "missing.mjs")],
      ["relay", "--db", db, "--to", "ftp://example.com/x"],
      ["relay", "--db", db, "--to", "https://example.com/hooks"],
      ["dashboard", "--db", db, "--host", "203.0.113.7"],
      ["lab", "session-15-outbox-leasing", "--db", db],
      ["lab", "session-15-outbox-leasing", "--db", db, "--reports", "/proc"],
      ["dashboard", "--db", db, "--port", "0", "--token", " ".repeat(16)],
    ];
    for (const args of refused) {
      const run = await runCli(args, { cwd, timeoutMs: 30_000 });
      expect(run.code, `${args.join(" ")} exited ${run.code}: ${run.stderr}`).toBe(2);
      expect(run.stderr.trim().split("\n")[0], args.join(" ")).toMatch(/^(wassal: |error: )/);
      expect(snapshot(folder), `${args.join(" ")} changed ${folder}`).toEqual(before);
    }
  });

  it("lab --reports on a folder it cannot create in (/proc) is refused at once, with nothing run", async () => {
    const cwd = mkdtempSync(join(dir, "cwd-"));
    for (const reports of ["/proc", "/proc/self", "/sys/kernel"]) {
      const run = await runCli(["lab", "session-15-outbox-leasing", "--reports", reports], { cwd, timeoutMs: 30_000 });
      expect(run.code, `--reports ${reports}: ${run.stderr}`).toBe(2);
      expect(run.stderr).toMatch(new RegExp(`^wassal: cannot save reports in ${reports}/Reports/Session-15: .*\\(nothing was run\\)`));
    }
  });

  it("chaos run's old --pg-terminate-every is refused at once, naming its new name, with nothing run", async () => {
    const cwd = mkdtempSync(join(dir, "cwd-"));
    const run = await runCli(["chaos", "run", "--pg-terminate-every", "600"], { cwd, timeoutMs: 30_000 });
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/--pg-terminate-every .*renamed: use --kill-connections-every <ms>/);
    expect(readdirSync(cwd)).toEqual([]);
  });

  it("chaos run --stall-first with one worker is refused at once (no worker could take the stalled message), with nothing run", async () => {
    const cwd = mkdtempSync(join(dir, "cwd-"));
    const run = await runCli(["chaos", "run", "--stall-first", "--workers", "1"], { cwd, timeoutMs: 30_000 });
    expect(run.code, run.stderr).toBe(2);
    expect(run.stderr).toContain("stallFirst needs 2 workers or more: another worker must take the stalled message (got workers 1)");
    expect(readdirSync(cwd)).toEqual([]);
  });
});

// A full disk, for real: a small tmpfs, mounted here (root only). Under CI it must run.
const canMount = process.getuid?.() === 0 && spawnSync("mount", ["--version"]).status === 0;
const mounts: string[] = [];
afterAll(() => {
  for (const mount of mounts.splice(0)) spawnSync("umount", ["-l", mount]);
});

describe.runIf(canMount || process.env.CI)("the environment's failures", () => {
  it("a full disk during `payments seed` exits 74 with one line saying what to free", async () => {
    const mount = mkdtempSync(join(dir, "full-"));
    const mounted = spawnSync("mount", ["-t", "tmpfs", "-o", "size=256k", "tmpfs", mount], { encoding: "utf8" });
    expect(mounted.status, `mount a 256 KiB tmpfs: ${mounted.stderr}`).toBe(0);
    mounts.push(mount);
    const run = await runCli(["payments", "seed", "--db", join(mount, "app.db"), "--count", "100000"], { cwd: mount, timeoutMs: 120_000 });
    expect(run.code, run.stderr).toBe(74);
    const lines = run.stderr.trim().split("\n");
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^wassal: the disk is full \((SQLITE_FULL|ENOSPC)\): free space .*, then run the command again/);
    expect(run.stderr).not.toContain("internal error");

    const json = await runCli(["payments", "seed", "--db", join(mount, "app.db"), "--count", "100000", "--json"], { cwd: mount, timeoutMs: 120_000 });
    expect(json.code).toBe(74);
    expect(JSON.parse(json.stdout)).toMatchObject({ error: { name: "EnvironmentError" } });
  });
});

describe("chaos run, stopped by SIGTERM", () => {
  it("stops its workers and removes its temporary folder", async () => {
    const tmp = mkdtempSync(join(dir, "tmp-"));
    mkdirSync(join(tmp, "keep-me"));
    const cwd = mkdtempSync(join(dir, "cwd-"));
    const chaos = startCli(["chaos", "run", "--workers", "1", "--payments", "100000", "--rate", "50", "--kill-every", "0", "--pause-every", "0"], {
      cwd,
      tmp,
    });
    await chaos.waitForStderr("workers ready", 60_000);
    expect(readdirSync(tmp).some((name) => name.startsWith("wassal-chaos-"))).toBe(true);
    chaos.signal("SIGTERM");
    const exit = await chaos.waitForExit(60_000);
    expect(exit.code, chaos.stderr()).toBe(1);
    expect(chaos.stderr()).toContain("interrupted; the run's workers were stopped, its temporary files and schema removed");
    expect(readdirSync(tmp)).toEqual(["keep-me"]);
  });
});
