// Shared by the lab's CLI tests: a sandbox (working directory and TMPDIR) for one run, and the
// Session 15 figures every lab run must reproduce, whatever the store. Running the CLI itself is
// test/support/cli.ts's.

import { mkdirSync, mkdtempSync } from "node:fs";
import { join } from "node:path";
import { expect } from "vitest";

export const BEFORE = "session-15-competing-workers-no-claim";
export const AFTER = "session-15-outbox-leasing";

/** A working directory and a TMPDIR for one CLI run (pass it as runCli's options). */
export interface Sandbox {
  readonly cwd: string;
  readonly tmp: string;
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
