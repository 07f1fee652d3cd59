// Shared by the CLI tests: running `node dist/cli/main.js` in a sandbox, reading its output, and
// the Session 15 figures every lab run must reproduce, whatever the store.
//
// Needs `npm run build` first (`npm test` does it).

import { spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { expect } from "vitest";

export const ROOT = fileURLToPath(new URL("../../", import.meta.url));
export const CLI = join(ROOT, "dist", "cli", "main.js");

export const BEFORE = "session-15-competing-workers-no-claim";
export const AFTER = "session-15-outbox-leasing";

export interface CliResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** A working directory and a TMPDIR for one CLI run. */
export interface Sandbox {
  readonly cwd: string;
  readonly tmp: string;
}

/** Throws (once, in beforeAll) when dist/ was not built. */
export function requireBuiltCli(): void {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` before these tests (npm test does)`);
}

/** A fresh working directory and TMPDIR under `root` (a folder the test file removes when it ends). */
export function sandbox(root: string): Sandbox {
  const dir = mkdtempSync(join(root, "run-"));
  const cwd = join(dir, "cwd");
  const tmp = join(dir, "tmp");
  mkdirSync(cwd);
  mkdirSync(tmp);
  return { cwd, tmp };
}

export interface RunOptions {
  /** Variables to set for this run (after WASSAL_DEBUG and WASSAL_DATABASE_URL are cleared). */
  readonly env?: Readonly<Record<string, string>>;
  readonly timeoutMs?: number;
}

/**
 * Runs the CLI in `where`. WASSAL_DEBUG and WASSAL_DATABASE_URL are removed from the inherited
 * environment (a database URL there would redirect --db), unless `options.env` sets them.
 */
export function runCli(args: readonly string[], where: Sandbox, options: RunOptions = {}): Promise<CliResult> {
  const timeoutMs = options.timeoutMs ?? 45_000;
  return new Promise((resolve, reject) => {
    const env: NodeJS.ProcessEnv = { ...process.env, TMPDIR: where.tmp };
    delete env.WASSAL_DEBUG;
    delete env.WASSAL_DATABASE_URL;
    Object.assign(env, options.env);
    const child = spawn(process.execPath, [CLI, ...args], { cwd: where.cwd, env, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`wassal ${args.join(" ")} did not finish within ${timeoutMs} ms; stderr: ${stderr}`));
    }, timeoutMs);
    child.on("error", (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

/** No "    at foo (file:line)" lines: errors are messages, not stack traces. */
export function expectNoStack(text: string): void {
  expect(text).not.toMatch(/^\s+at .+/m);
  expect(text).not.toMatch(/node:internal|file:\/\//);
}

/** stderr is exactly one non-empty line. */
export function oneLine(stderr: string): string {
  const lines = stderr.split("\n").filter((line) => line.trim() !== "");
  expect(lines, `stderr: ${JSON.stringify(stderr)}`).toHaveLength(1);
  return lines[0]!;
}

// ---------------------------------------------------------------------------------------------
// The JSON a run prints, and the figures the lesson fixes (the same on every store).

export interface Check {
  name: string;
  passed: boolean;
  observed: string;
}

export interface ScenarioJson {
  scenario: string;
  passed: boolean;
  reportPath: string | null;
  reportError: string | null;
  databasePath: string;
  checks: Check[];
  metrics: Record<string, unknown> & { processedByWorker: Record<string, number>; claimsBlocked: number };
}

export const BEFORE_FIGURES = {
  paymentsSeeded: 6,
  pendingMessagesSeeded: 6,
  rowsLoadedByWorker: { "Worker-A": 6, "Worker-B": 6 },
  processingAttempts: 12,
  uniqueMessagesProcessed: 6,
  messagesProcessedMoreThanOnce: 6,
  providerStatusChecks: 12,
  ownershipViolations: null,
  paid: 4,
  failed: 2,
  stillPending: 0,
  outboxProcessed: 6,
  outboxPending: 0,
  outboxProcessing: 0,
  duplicatePaymentRows: 0,
  duplicateOutboxRows: 0,
  paymentCreationsInWorkers: 0,
  fakeSuccesses: 0,
  processedByWorker: { "Worker-A": 6, "Worker-B": 6 },
  claimsWon: 0,
};

export const AFTER_FIGURES = {
  paymentsSeeded: 6,
  pendingMessagesSeeded: 6,
  rowsLoadedByWorker: null,
  processingAttempts: 6,
  uniqueMessagesProcessed: 6,
  messagesProcessedMoreThanOnce: 0,
  providerStatusChecks: 6,
  ownershipViolations: 0,
  paid: 4,
  failed: 2,
  stillPending: 0,
  outboxProcessed: 6,
  outboxPending: 0,
  outboxProcessing: 0,
  duplicatePaymentRows: 0,
  duplicateOutboxRows: 0,
  paymentCreationsInWorkers: 0,
  fakeSuccesses: 0,
};

export const REPORT_NAME = {
  [BEFORE]: /^Session-15-Competing-Workers-No-Claim-RunReport-.*\.txt$/,
  [AFTER]: /^Session-15-Outbox-Leasing-RunReport-.*\.txt$/,
} as const;

export function expectBeforeFigures(result: ScenarioJson): void {
  expect(result.scenario).toBe(BEFORE);
  expect(result.passed).toBe(true);
  expect(result.metrics).toMatchObject(BEFORE_FIGURES);
  // Exactly these workers, nobody else.
  expect(result.metrics.processedByWorker).toEqual({ "Worker-A": 6, "Worker-B": 6 });
}

export function expectAfterFigures(result: ScenarioJson): void {
  expect(result.scenario).toBe(AFTER);
  expect(result.passed).toBe(true);
  expect(result.metrics).toMatchObject(AFTER_FIGURES);
  expect(result.metrics.claimsBlocked).toBeGreaterThanOrEqual(1);
  // 6 first claims plus the one reclaim of PAY-001 after its owner crashed.
  expect(result.metrics.claimsWon).toBe(7);
  const processed = Object.values(result.metrics.processedByWorker);
  expect(processed.reduce((a, b) => a + b, 0)).toBe(6);
  expect(Object.keys(result.metrics.processedByWorker).every((w) => w === "Worker-A" || w === "Worker-B")).toBe(true);
}
