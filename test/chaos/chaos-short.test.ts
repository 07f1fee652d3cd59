// The short chaos run inside `npm test`: real `wassal worker` processes under faults on each
// store, judged by the invariant checker. (`npm run chaos` runs the long version.)

import { spawn } from "node:child_process";
import { describe, expect, it } from "vitest";
import { postgresAvailable, TEST_DATABASE_URL } from "../support/postgres.js";
import { CLI } from "../cli/cli-support.js";

const PG = await postgresAvailable();

interface ChaosJson {
  passed: boolean;
  figures: Record<string, number>;
  report: { rows: { name: string; observed: number; ok: boolean }[]; examples: string[] };
}

function runChaos(args: readonly string[]): Promise<{ code: number | null; result: ChaosJson; stderr: string }> {
  return new Promise((resolve, reject) => {
    const env = { ...process.env };
    delete env.WASSAL_DATABASE_URL;
    const child = spawn(process.execPath, [CLI, "chaos", "run", "--json", ...args], { env, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
    child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
    const timer = setTimeout(() => child.kill("SIGKILL"), 120_000);
    child.on("error", reject);
    child.on("exit", (code) => {
      clearTimeout(timer);
      try {
        resolve({ code, result: JSON.parse(stdout) as ChaosJson, stderr });
      } catch {
        reject(new Error(`chaos run printed no JSON (exit ${code}): ${stderr.slice(-2000)}`));
      }
    });
  });
}

function row(result: ChaosJson, name: string): number {
  const found = result.report.rows.find((r) => r.name.trim().startsWith(name));
  if (!found) throw new Error(`no invariant row named ${name}`);
  return found.observed;
}

const COMMON = ["--workers", "3", "--payments", "400", "--rate", "400", "--lease-ms", "600", "--kill-every", "250", "--pause-every", "700", "--seed", "7", "--timeout", "60000"];

describe("short chaos runs", () => {
  it("sqlite: workers killed, paused past their lease and failing, a competing writer: nothing lost, no ownership violation", { timeout: 150_000 }, async () => {
    const { code, result } = await runChaos([...COMMON, "--store", "sqlite", "--sqlite-lock-every", "500", "--sqlite-lock-ms", "150"]);
    expect(result.report.examples).toEqual([]);
    expect(result.passed).toBe(true);
    expect(code).toBe(0);
    expect(result.figures.processed).toBe(400);
    expect(result.figures.kills).toBeGreaterThan(0);
    expect(result.figures.pauses).toBeGreaterThan(0);
    expect(result.figures.lockHolds).toBeGreaterThan(0);
    expect(row(result, "messages not finished")).toBe(0);
    expect(row(result, "ownership violations")).toBe(0);
    // The faults really caused repeated work, and every repeat was explained.
    expect(row(result, "explained by an expired lease") + row(result, "explained by a retry")).toBeGreaterThan(0);
  });

  it.skipIf(!PG)("postgres: workers killed, paused, their connections terminated: nothing lost, no ownership violation", { timeout: 150_000 }, async () => {
    const { code, result } = await runChaos([...COMMON, "--store", TEST_DATABASE_URL, "--pg-terminate-every", "600"]);
    expect(result.report.examples).toEqual([]);
    expect(result.passed).toBe(true);
    expect(code).toBe(0);
    expect(result.figures.processed).toBe(400);
    expect(result.figures.kills).toBeGreaterThan(0);
    expect(result.figures.connectionKills).toBeGreaterThan(0);
    expect(row(result, "ownership violations")).toBe(0);
  });
});
