// Shared by the lab's CLI tests: a sandbox (working directory and TMPDIR) for one run, and the
// Session 15 figures every lab run must reproduce, whatever the store. Running the CLI itself is
// test/support/cli.ts's.

import { mkdirSync, mkdtempSync } from "node:fs";
import { join } from "node:path";
import { expect } from "vitest";

export const BEFORE = "session-15-competing-workers-no-claim";
export const AFTER = "session-15-outbox-leasing";
export const ORDER_BEFORE = "ordering-payment-events-unordered";
export const ORDER_AFTER = "ordering-payment-events-by-key";
/** Every scenario, in the order `lab all` runs them. */
export const ALL = [BEFORE, AFTER, ORDER_BEFORE, ORDER_AFTER] as const;
/** The folder under Reports/ each scenario saves to. */
export const SERIES: Readonly<Record<string, string>> = {
  [BEFORE]: "Session-15",
  [AFTER]: "Session-15",
  [ORDER_BEFORE]: "Ordering",
  [ORDER_AFTER]: "Ordering",
};

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
  metrics: Record<string, unknown> & { processedByWorker: Record<string, number>; claimsBlocked: number; appliedByWorker: Record<string, number> };
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
  [ORDER_BEFORE]: /^Ordering-Payment-Events-Unordered-RunReport-.*\.txt$/,
  [ORDER_AFTER]: /^Ordering-Payment-Events-By-Key-RunReport-.*\.txt$/,
} as const;

/**
 * The ordering pair runs the same workload (5 events of 2 payments, Worker-A's first call slow,
 * PAY-001 paid failing once): every event is applied once in both, and only the keys decide the order.
 */
const ORDERING_COMMON = {
  eventsEnqueued: 5,
  processingAttempts: 6,
  retriesScheduled: 1,
  statementLines: 5,
  eventsAppliedMoreThanOnce: 0,
  ownershipViolations: 0,
  claimsWon: 6,
  outboxProcessed: 5,
  outboxUnfinished: 0,
  outboxDead: 0,
};

export const ORDER_BEFORE_FIGURES = {
  ...ORDERING_COMMON,
  keyed: false,
  claimsAheadOfTurn: 2,
  concurrentLeasesPerPayment: 2,
  paymentsOutOfOrder: 1,
  wrongFinalStates: 1,
};

export const ORDER_AFTER_FIGURES = {
  ...ORDERING_COMMON,
  keyed: true,
  claimsAheadOfTurn: 0,
  concurrentLeasesPerPayment: 0,
  paymentsOutOfOrder: 0,
  wrongFinalStates: 0,
};

export function expectOrderingFigures(result: ScenarioJson): void {
  expect(result.passed).toBe(true);
  if (result.scenario === ORDER_BEFORE) {
    expect(result.metrics).toMatchObject(ORDER_BEFORE_FIGURES);
    // Worker-B ran ahead with PAY-001's refund and PAY-002's two events while Worker-A was held.
    expect(result.metrics.appliedByWorker).toEqual({ "Worker-A": 2, "Worker-B": 3 });
  } else {
    expect(result.scenario).toBe(ORDER_AFTER);
    expect(result.metrics).toMatchObject(ORDER_AFTER_FIGURES);
    // Worker-B could only take PAY-002's events; PAY-001's waited for Worker-A, in order.
    expect(result.metrics.appliedByWorker).toEqual({ "Worker-A": 3, "Worker-B": 2 });
  }
}

/** The figures of whichever scenario this is. */
export function expectFigures(result: ScenarioJson): void {
  if (result.scenario === BEFORE) expectBeforeFigures(result);
  else if (result.scenario === AFTER) expectAfterFigures(result);
  else expectOrderingFigures(result);
}

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
