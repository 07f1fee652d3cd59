// What one application instance does in the Session 13 and Session 14 scenarios, written once and
// run two ways: in a child process that the lab kills with SIGKILL at a named point
// (instance-process.ts, killed-instance.ts), and in the lab's own process for the instance that
// starts after the crash. Both talk to the database only through the store and the payments
// repository, like the application would.

import type { Clock } from "../outbox/clock.js";
import { processLease } from "../outbox/process-lease.js";
import type { OutboxStore } from "../outbox/store.js";
import type { OutboxMessage } from "../outbox/types.js";
import { type PaymentProvider, PaymentsService } from "../payments/payments-service.js";
import {
  type CreatePaymentRequest,
  type OutcomeRecord,
  type Payment,
  type PaymentOutcome,
  type PaymentsRepository,
  RECONCILE_MESSAGE_TYPE,
  type StatementLine,
} from "../payments/types.js";

/** Leases taken by these instances; nothing here waits long enough for one to expire. */
const LEASE_MS = 30_000;

/** What an instance is given: its name, its connection, the provider and the clock. */
export interface InstanceContext<Tx> {
  readonly name: string;
  readonly store: OutboxStore<Tx>;
  readonly repository: PaymentsRepository<Tx>;
  readonly provider: PaymentProvider;
  readonly clock: Clock;
  /** Tells the lab what the instance did (the timeline). */
  readonly note: (text: string) => void;
}

/**
 * The point where the lab kills the instance. In a child process it tells the lab where it is and
 * never returns: the lab's SIGKILL ends it there. `pending` lists what the instance still held.
 */
export type CrashPoint = (where: string, pending: readonly string[]) => Promise<void>;

/** Day 13 BEFORE and AFTER, Day 14 BEFORE and AFTER: what the killed instance runs, up to its crash point. */
export type InstancePlan =
  | { readonly kind: "in-memory-reconciliation"; readonly payments: readonly CreatePaymentRequest[]; readonly reconcileBeforeCrash: number }
  | { readonly kind: "durable-reconciliation"; readonly payments: readonly CreatePaymentRequest[]; readonly reconcileBeforeCrash: number }
  | { readonly kind: "dual-write"; readonly payments: readonly CreatePaymentRequest[]; readonly crashAfterPaymentOf: string }
  | { readonly kind: "transactional-outbox"; readonly payments: readonly CreatePaymentRequest[]; readonly crashAfterPaymentOf: string };

const outcomeText = (outcome: PaymentOutcome) => (outcome.status === "Paid" ? `Paid ${outcome.transactionId}` : "Failed");

/** The reconciliation message a payment needs, as PaymentsService writes it. */
function reconcileMessage(payment: Payment) {
  return {
    type: RECONCILE_MESSAGE_TYPE,
    dedupeKey: `${RECONCILE_MESSAGE_TYPE}:${payment.idempotencyKey}`,
    payload: { paymentId: payment.id, idempotencyKey: payment.idempotencyKey },
  };
}

// ---------------------------------------------------------------------------------------------
// Day 13 BEFORE: the payment rows are durable, the work to reconcile them is not.

/**
 * Creates payments (the row only) and keeps the work of reconciling each in an array in this
 * process's memory. A new instance starts with an empty array, whatever the database holds.
 */
export class InMemoryReconciler<Tx> {
  readonly #context: InstanceContext<Tx>;
  readonly #work: { readonly paymentId: string; readonly idempotencyKey: string }[] = [];

  constructor(context: InstanceContext<Tx>) {
    this.#context = context;
  }

  /** The keys whose reconciliation this instance holds in memory. */
  pending(): string[] {
    return this.#work.map((w) => w.idempotencyKey);
  }

  async create(request: CreatePaymentRequest): Promise<Payment> {
    const { store, repository, provider, clock, note } = this.#context;
    const { providerReference } = await provider.createPayment(request);
    const payment = await store.transaction((tx) => repository.insert(tx, { ...request, providerReference, now: clock.now() }));
    if (payment === undefined) throw new Error(`payment ${request.idempotencyKey} already exists`);
    this.#work.push({ paymentId: payment.id, idempotencyKey: payment.idempotencyKey });
    note(`create ${payment.idempotencyKey}: payment row committed; its reconciliation queued in memory (${this.#work.length} queued)`);
    return payment;
  }

  /** Reconciles the oldest queued payment; false when the queue is empty. */
  async reconcileNext(): Promise<boolean> {
    const { store, repository, provider, clock, note } = this.#context;
    const next = this.#work[0];
    if (next === undefined) return false;
    const outcome = await provider.checkStatus(next.idempotencyKey);
    await store.transaction((tx) => repository.recordOutcome(tx, next.idempotencyKey, outcome, clock.now()));
    this.#work.shift();
    note(`reconcile ${next.idempotencyKey} from memory: provider says ${outcomeText(outcome)}; payment row updated (${this.#work.length} left in memory)`);
    return true;
  }
}

// ---------------------------------------------------------------------------------------------
// Day 13 AFTER and Day 14: the work is an outbox message, committed with the payment.

/** Claims one reconciliation message at a time and processes it under its lease, until none is left; returns how many. */
export async function drainOutbox<Tx>(context: InstanceContext<Tx>, payments: PaymentsService<Tx>, limit = Number.POSITIVE_INFINITY): Promise<number> {
  const handler = payments.handler();
  let done = 0;
  while (done < limit) {
    const [lease] = await context.store.claim(context.name, { limit: 1, leaseMs: LEASE_MS, types: [RECONCILE_MESSAGE_TYPE] });
    if (lease === undefined) break;
    await processLease(context.store, lease, handler, context.clock);
    done += 1;
  }
  return done;
}

export function paymentsService<Tx>(context: InstanceContext<Tx>, repository: PaymentsRepository<Tx> = context.repository): PaymentsService<Tx> {
  return new PaymentsService({ store: context.store, repository, provider: context.provider, clock: context.clock });
}

/**
 * Day 14 BEFORE: the payment commits in one transaction, then its message is written in another.
 * A known key returns the existing payment and writes nothing, as an idempotent create must.
 */
export async function dualWriteCreate<Tx>(
  context: InstanceContext<Tx>,
  request: CreatePaymentRequest,
  betweenWrites: (payment: Payment) => Promise<void> = async () => undefined,
): Promise<{ readonly payment: Payment; readonly created: boolean; readonly message: OutboxMessage | null }> {
  const { store, repository, provider, clock, note } = context;
  const existing = await repository.findByKey(request.idempotencyKey);
  if (existing !== undefined) {
    note(`create ${request.idempotencyKey}: the key exists, so the request is a replay: nothing written`);
    return { payment: existing, created: false, message: null };
  }
  const { providerReference } = await provider.createPayment(request);
  const payment = await store.transaction((tx) => repository.insert(tx, { ...request, providerReference, now: clock.now() }));
  if (payment === undefined) throw new Error(`payment ${request.idempotencyKey} was created concurrently`);
  note(`create ${payment.idempotencyKey}: write 1 of 2, the payment row, committed`);
  await betweenWrites(payment);
  const message = await store.transaction((tx) => store.enqueue(tx, reconcileMessage(payment)));
  note(`create ${payment.idempotencyKey}: write 2 of 2, the reconciliation message, committed on its own`);
  return { payment, created: true, message };
}

/**
 * The payments repository with a hook after one key's insert, inside the caller's transaction:
 * the place to crash "after the business write, before the commit". Everything else is the
 * repository's own.
 */
export class RepositoryWithHook<Tx> implements PaymentsRepository<Tx> {
  readonly #inner: PaymentsRepository<Tx>;
  readonly #key: string;
  readonly #afterInsert: (payment: Payment) => Promise<void>;

  constructor(inner: PaymentsRepository<Tx>, key: string, afterInsert: (payment: Payment) => Promise<void>) {
    this.#inner = inner;
    this.#key = key;
    this.#afterInsert = afterInsert;
  }

  migrate(): Promise<void> {
    return this.#inner.migrate();
  }
  findByKey(idempotencyKey: string): Promise<Payment | undefined> {
    return this.#inner.findByKey(idempotencyKey);
  }
  async insert(tx: Tx, request: CreatePaymentRequest & { readonly providerReference: string; readonly now: Date }): Promise<Payment | undefined> {
    const payment = await this.#inner.insert(tx, request);
    if (payment !== undefined && payment.idempotencyKey === this.#key) await this.#afterInsert(payment);
    return payment;
  }
  recordOutcome(tx: Tx, idempotencyKey: string, outcome: PaymentOutcome, now: Date): Promise<boolean> {
    return this.#inner.recordOutcome(tx, idempotencyKey, outcome, now);
  }
  recordOutcomes(tx: Tx, records: readonly OutcomeRecord[]): Promise<number> {
    return this.#inner.recordOutcomes(tx, records);
  }
  list(): Promise<Payment[]> {
    return this.#inner.list();
  }
  appendStatement(tx: Tx, line: Omit<StatementLine, "seq">): Promise<boolean> {
    return this.#inner.appendStatement(tx, line);
  }
  statement(): Promise<StatementLine[]> {
    return this.#inner.statement();
  }
}

// ---------------------------------------------------------------------------------------------

/** Runs `plan` up to its crash point (in a child process, the lab kills it there). */
export async function runPlan<Tx>(context: InstanceContext<Tx>, plan: InstancePlan, crashPoint: CrashPoint): Promise<void> {
  const { note } = context;
  switch (plan.kind) {
    case "in-memory-reconciliation": {
      const instance = new InMemoryReconciler(context);
      for (const request of plan.payments) await instance.create(request);
      for (let i = 0; i < plan.reconcileBeforeCrash; i += 1) await instance.reconcileNext();
      return crashPoint(
        `after reconciling ${plan.reconcileBeforeCrash}, with ${instance.pending().length} reconciliations queued in memory`,
        instance.pending(),
      );
    }
    case "durable-reconciliation": {
      const payments = paymentsService(context);
      for (const request of plan.payments) {
        const { payment } = await payments.create(request);
        note(`create ${payment.idempotencyKey}: payment row + reconciliation message committed together`);
      }
      await drainOutbox(context, payments, plan.reconcileBeforeCrash);
      const pending = (await context.store.listMessages({ status: ["pending"] })).map((m) =>
        String((m.payload as { idempotencyKey?: unknown }).idempotencyKey),
      );
      return crashPoint(`after reconciling ${plan.reconcileBeforeCrash}, between two claims (no lease held)`, pending);
    }
    case "dual-write": {
      for (const request of plan.payments) {
        await dualWriteCreate(context, request, async (payment) => {
          if (payment.idempotencyKey === plan.crashAfterPaymentOf) {
            await crashPoint(`${payment.idempotencyKey}: after its payment row committed, before its message was written`, [payment.idempotencyKey]);
          }
        });
      }
      return;
    }
    case "transactional-outbox": {
      const repository = new RepositoryWithHook(context.repository, plan.crashAfterPaymentOf, async (payment) => {
        note(`create ${payment.idempotencyKey}: payment row inserted inside the transaction (not committed yet)`);
        await crashPoint(`${payment.idempotencyKey}: inside its transaction, after the payment insert, before the message and the commit`, [
          payment.idempotencyKey,
        ]);
      });
      const payments = paymentsService(context, repository);
      for (const request of plan.payments) {
        const { payment } = await payments.create(request);
        note(`create ${payment.idempotencyKey}: payment row + reconciliation message committed together`);
      }
      return;
    }
  }
}
