// Shared by the lab's CLI tests: a sandbox (working directory and TMPDIR) for one run, and the
// figures every lab run must reproduce, whatever the store. Running the CLI itself is
// test/support/cli.ts's.

import { mkdirSync, mkdtempSync } from "node:fs";
import { join } from "node:path";
import { expect } from "vitest";

export const DAY13_BEFORE = "session-13-in-memory-reconciliation";
export const DAY13_AFTER = "session-13-durable-reconciliation";
export const DAY14_BEFORE = "session-14-dual-write";
export const DAY14_AFTER = "session-14-transactional-outbox";
/** The scenarios that kill a real child process (Sessions 13 and 14). */
export const CRASH_SCENARIOS = [DAY13_BEFORE, DAY13_AFTER, DAY14_BEFORE, DAY14_AFTER] as const;
export const BEFORE = "session-15-competing-workers-no-claim";
export const AFTER = "session-15-outbox-leasing";
export const ORDER_BEFORE = "ordering-payment-events-unordered";
export const ORDER_AFTER = "ordering-payment-events-by-key";
/** Every scenario, in the order `lab all` runs them. */
export const ALL = [...CRASH_SCENARIOS, BEFORE, AFTER, ORDER_BEFORE, ORDER_AFTER] as const;
/** The folder under Reports/ each scenario saves to. */
export const SERIES: Readonly<Record<string, string>> = {
  [DAY13_BEFORE]: "Session-13",
  [DAY13_AFTER]: "Session-13",
  [DAY14_BEFORE]: "Session-14",
  [DAY14_AFTER]: "Session-14",
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
  [DAY13_BEFORE]: /^Session-13-In-Memory-Reconciliation-RunReport-.*\.txt$/,
  [DAY13_AFTER]: /^Session-13-Durable-Reconciliation-RunReport-.*\.txt$/,
  [DAY14_BEFORE]: /^Session-14-Dual-Write-RunReport-.*\.txt$/,
  [DAY14_AFTER]: /^Session-14-Transactional-Outbox-RunReport-.*\.txt$/,
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

/**
 * Session 13: Instance-1 creates the 6 payments, reconciles PAY-001 and PAY-002, and is killed;
 * a fresh instance finds nothing to do (BEFORE) or the 4 pending messages (AFTER).
 */
const DAY13_COMMON = {
  paymentsCreated: 6,
  reconciledBeforeCrash: 2,
  workPendingAtCrash: 4,
  killedBy: "SIGKILL",
  paymentsCheckedMoreThanOnce: 0,
  duplicatePaymentRows: 0,
  duplicateOutboxRows: 0,
  fakeSuccesses: 0,
};

export const DAY13_BEFORE_FIGURES = {
  ...DAY13_COMMON,
  durableWorkAtCrash: 0,
  workFoundOnRestart: 0,
  reconciledAfterRestart: 0,
  providerStatusChecks: 2,
  paid: 2,
  failed: 0,
  stillPending: 4,
  lostPayments: 4,
  paidAtProviderButPendingHere: 2,
  outboxMessages: 0,
  outboxProcessed: 0,
};

export const DAY13_AFTER_FIGURES = {
  ...DAY13_COMMON,
  durableWorkAtCrash: 4,
  workFoundOnRestart: 4,
  reconciledAfterRestart: 4,
  providerStatusChecks: 6,
  paid: 4,
  failed: 2,
  stillPending: 0,
  lostPayments: 0,
  paidAtProviderButPendingHere: 0,
  outboxMessages: 6,
  outboxProcessed: 6,
};

/** Session 14: Instance-1 begins PAY-001 to PAY-004 and is killed inside PAY-004's creation. */
const DAY14_COMMON = {
  requestsBeforeCrash: 4,
  killedBy: "SIGKILL",
  outboxMessagesAfterCrash: 3,
  messagesWithoutPaymentAfterCrash: 0,
  paymentsAtEnd: 6,
  messagesWithoutPaymentAtEnd: 0,
  failed: 2,
  duplicatePaymentRows: 0,
  duplicateOutboxRows: 0,
  fakeSuccesses: 0,
};

export const DAY14_BEFORE_FIGURES = {
  ...DAY14_COMMON,
  paymentRowsAfterCrash: 4,
  paymentsWithoutMessageAfterCrash: 1,
  messagesWrittenByRetry: 0,
  outboxMessagesAtEnd: 5,
  paymentsWithoutMessageAtEnd: 1,
  processingAttempts: 5,
  providerStatusChecks: 5,
  paid: 3,
  stillPending: 1,
  paidAtProviderButPendingHere: 1,
};

export const DAY14_AFTER_FIGURES = {
  ...DAY14_COMMON,
  paymentRowsAfterCrash: 3,
  paymentsWithoutMessageAfterCrash: 0,
  messagesWrittenByRetry: 1,
  outboxMessagesAtEnd: 6,
  paymentsWithoutMessageAtEnd: 0,
  processingAttempts: 6,
  providerStatusChecks: 6,
  paid: 4,
  stillPending: 0,
  paidAtProviderButPendingHere: 0,
};

const CRASH_FIGURES: Readonly<Record<string, object>> = {
  [DAY13_BEFORE]: DAY13_BEFORE_FIGURES,
  [DAY13_AFTER]: DAY13_AFTER_FIGURES,
  [DAY14_BEFORE]: DAY14_BEFORE_FIGURES,
  [DAY14_AFTER]: DAY14_AFTER_FIGURES,
};

/** The figures of a Session 13 or 14 scenario: exactly these metrics, nothing more or less. */
export function expectCrashFigures(result: ScenarioJson): void {
  const figures = CRASH_FIGURES[result.scenario];
  expect(figures, `${result.scenario} is a Session 13 or 14 scenario`).toBeDefined();
  expect(result.passed).toBe(true);
  expect(result.metrics).toEqual(figures);
}

/** The figures of whichever scenario this is. */
export function expectFigures(result: ScenarioJson): void {
  if (result.scenario === BEFORE) expectBeforeFigures(result);
  else if (result.scenario === AFTER) expectAfterFigures(result);
  else if (result.scenario in CRASH_FIGURES) expectCrashFigures(result);
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
