// The figures a lab run reports, all computed from the ledger (the event stream), the final
// rows and the provider's own counters: never from what the scenario believes it did.

import type { OutboxMessage } from "../outbox/types.js";
import type { ProviderSimulator } from "../payments/provider-simulator.js";
import type { Payment } from "../payments/types.js";
import type { Ledger } from "./ledger.js";

export interface LabMetrics {
  paymentsSeeded: number;
  pendingMessagesSeeded: number;
  /** Rows each worker loaded in bulk (BEFORE); null when workers claim one at a time. */
  rowsLoadedByWorker: Record<string, number> | null;
  processingAttempts: number;
  uniqueMessagesProcessed: number;
  messagesProcessedMoreThanOnce: number;
  providerStatusChecks: number;
  /** Results written without the current lease, plus claims that overlapped a live lease; null without ownership. */
  ownershipViolations: number | null;
  paid: number;
  failed: number;
  stillPending: number;
  outboxProcessed: number;
  outboxPending: number;
  outboxProcessing: number;
  duplicatePaymentRows: number;
  duplicateOutboxRows: number;
  paymentCreationsInWorkers: number;
  fakeSuccesses: number;
  claimsWon: number;
  claimsEmpty: number;
  claimsBlocked: number;
  /** Messages each worker carried through to a written result. */
  processedByWorker: Record<string, number>;
}

/** What the ordering scenarios report, computed from the ledger, the final rows and the statement. */
export interface OrderingMetrics {
  eventsEnqueued: number;
  keyed: boolean;
  processingAttempts: number;
  retriesScheduled: number;
  statementLines: number;
  eventsAppliedMoreThanOnce: number;
  /** Claims of an event while an earlier event of its payment was unfinished. */
  claimsAheadOfTurn: number;
  /** Claims of an event while another event of its payment was under a live lease. */
  concurrentLeasesPerPayment: number;
  /** Payments whose statement lines are not in the order their events were enqueued. */
  paymentsOutOfOrder: number;
  /** Payments whose statement ends at a state that is not their last event's. */
  wrongFinalStates: number;
  ownershipViolations: number;
  claimsWon: number;
  claimsEmpty: number;
  outboxProcessed: number;
  outboxUnfinished: number;
  outboxDead: number;
  appliedByWorker: Record<string, number>;
}

/**
 * What the Session 13 scenarios report: an instance killed with reconciliation work left, and a
 * fresh one started on the same database. Read from the rows after the crash and at the end, the
 * killed process's exit, and the provider's call log.
 */
export interface DurabilityMetrics {
  /** Payment rows in the database after the crash. */
  paymentsCreated: number;
  /** Of those, how many the killed instance had reconciled (no longer Pending). */
  reconciledBeforeCrash: number;
  /** The work the killed instance still had to do, as it knew it at its crash point. */
  workPendingAtCrash: number;
  /** The signal that ended the killed instance's process. */
  killedBy: string | null;
  /** Pending reconciliation messages in the database after the crash: the work that survived. */
  durableWorkAtCrash: number;
  /** Work the fresh instance found when it started. */
  workFoundOnRestart: number;
  /** Payments the fresh instance moved out of Pending. */
  reconciledAfterRestart: number;
  providerStatusChecks: number;
  paymentsCheckedMoreThanOnce: number;
  paid: number;
  failed: number;
  stillPending: number;
  /** Pending payments that no pending or processing message will ever reconcile. */
  lostPayments: number;
  /** Lost payments that the provider has as Paid: money taken that the system does not know of. */
  paidAtProviderButPendingHere: number;
  outboxMessages: number;
  outboxProcessed: number;
  duplicatePaymentRows: number;
  duplicateOutboxRows: number;
  fakeSuccesses: number;
}

/**
 * What the Session 14 scenarios report: an instance killed between a payment's write and its
 * message's, the request retried, the rest created, and a worker draining the outbox.
 */
export interface AtomicityMetrics {
  /** Payment requests the killed instance had begun (the last one is where it died). */
  requestsBeforeCrash: number;
  killedBy: string | null;
  paymentRowsAfterCrash: number;
  outboxMessagesAfterCrash: number;
  /** Payment rows no message points at, right after the crash. */
  paymentsWithoutMessageAfterCrash: number;
  /** Messages that point at no payment row, right after the crash. */
  messagesWithoutPaymentAfterCrash: number;
  /** Outbox messages written while retrying the request that the crash cut short. */
  messagesWrittenByRetry: number;
  paymentsAtEnd: number;
  outboxMessagesAtEnd: number;
  paymentsWithoutMessageAtEnd: number;
  messagesWithoutPaymentAtEnd: number;
  processingAttempts: number;
  providerStatusChecks: number;
  paid: number;
  failed: number;
  stillPending: number;
  /** Payments left Pending that the provider has as Paid. */
  paidAtProviderButPendingHere: number;
  duplicatePaymentRows: number;
  duplicateOutboxRows: number;
  fakeSuccesses: number;
}

/** The figures of any scenario. */
export type ScenarioMetrics = LabMetrics | OrderingMetrics | DurabilityMetrics | AtomicityMetrics;

export interface MetricInputs {
  readonly ledger: Ledger;
  readonly provider: ProviderSimulator;
  readonly seededPayments: readonly Payment[];
  readonly seededMessages: readonly OutboxMessage[];
  readonly finalPayments: readonly Payment[];
  readonly finalMessages: readonly OutboxMessage[];
  readonly rowsLoadedByWorker: Record<string, number> | null;
  readonly paymentCreationsInWorkers: number;
  readonly leased: boolean;
}

function excess<T>(items: readonly T[], key: (item: T) => string | null): number {
  const counts = new Map<string, number>();
  for (const item of items) {
    const k = key(item);
    if (k !== null) counts.set(k, (counts.get(k) ?? 0) + 1);
  }
  let extra = 0;
  for (const n of counts.values()) extra += n - 1;
  return extra;
}

/** Paid without the provider's transaction id, or an id on anything but Paid. */
export function fakeSuccesses(payments: readonly Payment[], provider: ProviderSimulator): Payment[] {
  return payments.filter((p) =>
    p.status === "Paid" ? p.transactionId === null || p.transactionId !== provider.issuedTransactionId(p.idempotencyKey) : p.transactionId !== null,
  );
}

/** Processed rows whose owner and token are not those of the completion the ledger saw. */
function rowsWithoutOwner(messages: readonly OutboxMessage[], ledger: Ledger): number {
  const completions = new Map(ledger.of("completed").map((e) => [e.messageId, e]));
  return messages.filter((m) => {
    if (m.status !== "processed") return false;
    const completion = completions.get(m.id);
    return completion === undefined || completion.owner !== m.lockedBy || completion.token !== m.leaseToken;
  }).length;
}

export function computeMetrics(input: MetricInputs): LabMetrics {
  const { ledger, finalPayments, finalMessages } = input;
  const attempts = ledger.attemptsByMessage();
  const claims = ledger.claimTally().total;
  const processedByWorker: Record<string, number> = {};
  for (const e of ledger.of("processing-finished")) {
    if (e.result === "completed" || e.result === "unguarded-write") processedByWorker[e.owner] = (processedByWorker[e.owner] ?? 0) + 1;
  }
  const status = (s: string) => finalMessages.filter((m) => m.status === s).length;
  const payStatus = (s: string) => finalPayments.filter((p) => p.status === s).length;
  return {
    paymentsSeeded: input.seededPayments.length,
    pendingMessagesSeeded: input.seededMessages.filter((m) => m.status === "pending").length,
    rowsLoadedByWorker: input.rowsLoadedByWorker,
    processingAttempts: [...attempts.values()].reduce((a, b) => a + b, 0),
    uniqueMessagesProcessed: attempts.size,
    messagesProcessedMoreThanOnce: [...attempts.values()].filter((n) => n > 1).length,
    providerStatusChecks: input.provider.statusChecks(),
    ownershipViolations: input.leased ? ledger.unownedCompletions().length + ledger.overlappingClaims().length + rowsWithoutOwner(finalMessages, ledger) : null,
    paid: payStatus("Paid"),
    failed: payStatus("Failed"),
    stillPending: payStatus("Pending"),
    outboxProcessed: status("processed"),
    outboxPending: status("pending"),
    outboxProcessing: status("processing"),
    duplicatePaymentRows: excess(finalPayments, (p) => p.idempotencyKey),
    duplicateOutboxRows:
      excess(finalMessages, (m) => m.dedupeKey) +
      excess(finalMessages, (m) => {
        const payload = m.payload as { paymentId?: unknown } | null;
        return typeof payload?.paymentId === "string" ? payload.paymentId : null;
      }),
    paymentCreationsInWorkers: input.paymentCreationsInWorkers,
    fakeSuccesses: fakeSuccesses(finalPayments, input.provider).length,
    claimsWon: claims.won,
    claimsEmpty: claims.empty,
    claimsBlocked: claims.blocked,
    processedByWorker,
  };
}
