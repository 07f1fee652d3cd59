// The Wassal payments domain: what a payment is, and what the domain needs from a database.

export type PaymentStatus = "Pending" | "Paid" | "Failed";

export interface Payment {
  readonly id: string;
  readonly idempotencyKey: string;
  /** In minor units (cents): 12500 is 125.00. */
  readonly amount: number;
  /** ISO 4217 code, e.g. "EUR". */
  readonly currency: string;
  readonly status: PaymentStatus;
  /** Set only from the provider, and only when Paid. */
  readonly transactionId: string | null;
  /** The provider's reference for the created payment. */
  readonly providerReference: string;
  readonly createdAt: Date;
  readonly updatedAt: Date;
}

export interface CreatePaymentRequest {
  readonly idempotencyKey: string;
  readonly amount: number;
  readonly currency: string;
}

/** The final word from the provider: Paid with its transaction id, or Failed with none. */
export type PaymentOutcome = { readonly status: "Paid"; readonly transactionId: string } | { readonly status: "Failed" };

/** The reconciliation message's payload, frozen at enqueue time. */
export interface ReconcilePayload {
  readonly paymentId: string;
  readonly idempotencyKey: string;
  [key: string]: string;
}

/** The message type that asks a worker to reconcile one payment with the provider. */
export const RECONCILE_MESSAGE_TYPE = "payment.reconcile";

/** The lifecycle events a payment publishes for downstream consumers, in the order they happen. */
export const PAYMENT_EVENTS = ["payment.created", "payment.paid", "payment.refunded"] as const;
export type PaymentEvent = (typeof PAYMENT_EVENTS)[number];

/** A payment event's payload: which payment, and which step of its life. */
export interface PaymentEventPayload {
  readonly idempotencyKey: string;
  readonly event: PaymentEvent;
  [key: string]: string;
}

/**
 * One line of the customer's statement: a payment event as a consumer applied it. `seq` is the
 * order in which the lines were committed; the statement shows a payment at its latest line.
 */
export interface StatementLine {
  readonly seq: number;
  readonly idempotencyKey: string;
  readonly event: PaymentEvent;
  /** The outbox message the line was applied from (at most one line per message). */
  readonly messageId: string;
  readonly appliedBy: string;
  readonly appliedAt: Date;
}

/** One payment's outcome to record (PaymentsRepository.recordOutcomes). */
export interface OutcomeRecord {
  readonly idempotencyKey: string;
  readonly outcome: PaymentOutcome;
  readonly now: Date;
}

/** Payment rows, per store. Writes take the caller's transaction. */
export interface PaymentsRepository<Tx> {
  migrate(): Promise<void>;
  findByKey(idempotencyKey: string): Promise<Payment | undefined>;
  /** Inserts a Pending payment; returns undefined (and writes nothing) when the key already exists. */
  insert(tx: Tx, request: CreatePaymentRequest & { readonly providerReference: string; readonly now: Date }): Promise<Payment | undefined>;
  /** Moves a Pending payment to its outcome; returns false when it was not Pending. */
  recordOutcome(tx: Tx, idempotencyKey: string, outcome: PaymentOutcome, now: Date): Promise<boolean>;
  /** recordOutcome for several payments in one statement; returns how many were Pending and moved. */
  recordOutcomes(tx: Tx, records: readonly OutcomeRecord[]): Promise<number>;
  list(): Promise<Payment[]>;
  /**
   * Appends a statement line; returns false (and writes nothing) when the message already has
   * one, so a message is applied at most once.
   */
  appendStatement(tx: Tx, line: Omit<StatementLine, "seq">): Promise<boolean>;
  /** Every statement line, in commit order. */
  statement(): Promise<StatementLine[]>;
}
