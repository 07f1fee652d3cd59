// Creating payments (payment row + its reconciliation message in one transaction, once per
// idempotency key) and reconciling them with the provider under a lease.

import { systemClock, type Clock } from "../outbox/clock.js";
import { InvalidArgumentError, UnrecoverableError, WassalError } from "../outbox/errors.js";
import type { Handler } from "../outbox/process-lease.js";
import type { OutboxStore } from "../outbox/store.js";
import type { Finalize, OutboxMessage } from "../outbox/types.js";
import { finalizeTogether, type TogetherWriter } from "../outbox/write-together.js";
import type { ProviderSimulator } from "./provider-simulator.js";
import {
  RECONCILE_MESSAGE_TYPE,
  type CreatePaymentRequest,
  type OutcomeRecord,
  type Payment,
  type PaymentOutcome,
  type PaymentsRepository,
  type ReconcilePayload,
} from "./types.js";

/** A payments message whose payload is not what this version of Wassal wrote. */
export class InvalidPayloadError extends UnrecoverableError {
  override name = "InvalidPayloadError";
  constructor(messageId: string, detail: string, type: string = RECONCILE_MESSAGE_TYPE) {
    super("INVALID_PAYLOAD", `message ${messageId} has an invalid ${type} payload: ${detail}; it cannot be processed and should be marked dead`);
  }
}

/** An idempotency key was replayed with a different amount or currency: the request is not a replay. */
export class IdempotencyConflictError extends WassalError {
  override name = "IdempotencyConflictError";
  readonly idempotencyKey: string;
  constructor(key: string, existing: Payment, request: CreatePaymentRequest) {
    super(
      "IDEMPOTENCY_CONFLICT",
      `idempotency key ${key} already belongs to a payment of ${existing.amount} ${existing.currency}; this request asks for ${request.amount} ${request.currency}. Use a new key for a new payment`,
    );
    this.idempotencyKey = key;
  }
}

/** The same key, for a different payment? Then it is not a replay. */
function sameRequest(payment: Payment, request: CreatePaymentRequest): Payment {
  if (payment.amount !== request.amount || payment.currency !== request.currency) {
    throw new IdempotencyConflictError(request.idempotencyKey, payment, request);
  }
  return payment;
}

/** The provider calls the domain makes. The simulator provides them; so would a real client. */
export type PaymentProvider = Pick<ProviderSimulator, "createPayment" | "checkStatus">;

export interface PaymentsServiceOptions<Tx> {
  readonly store: OutboxStore<Tx>;
  readonly repository: PaymentsRepository<Tx>;
  readonly provider: PaymentProvider;
  readonly clock?: Clock;
  /**
   * The ordering key of a payment's reconciliation message (say, its merchant's account), so that
   * the reconciliations of one key run one at a time, in creation order. Default: none.
   */
  readonly orderingKeyOf?: (request: CreatePaymentRequest) => string | undefined;
}

export interface CreatePaymentResult {
  readonly payment: Payment;
  /** False when the idempotency key already existed and nothing was written. */
  readonly created: boolean;
  readonly message: OutboxMessage | null;
}

const KEY_PATTERN = /^[A-Za-z0-9._:-]{1,100}$/;

export function checkCreateRequest(request: CreatePaymentRequest): CreatePaymentRequest {
  const { idempotencyKey, amount, currency } = request;
  if (typeof idempotencyKey !== "string" || !KEY_PATTERN.test(idempotencyKey)) {
    throw new InvalidArgumentError(
      `idempotency key must be 1 to 100 characters of letters, digits, '.', '_', ':' or '-' (got ${JSON.stringify(idempotencyKey)})`,
    );
  }
  if (typeof amount !== "number" || !Number.isSafeInteger(amount) || amount <= 0) {
    throw new InvalidArgumentError(`amount must be a positive whole number of minor units, e.g. 12500 for 125.00 (got ${String(amount)})`);
  }
  if (typeof currency !== "string" || !/^[A-Z]{3}$/.test(currency)) {
    throw new InvalidArgumentError(`currency must be a three-letter ISO 4217 code in capitals, e.g. EUR (got ${JSON.stringify(currency)})`);
  }
  return { idempotencyKey, amount, currency };
}

/** Reads the reconciliation payload, refusing anything malformed. */
export function parseReconcilePayload(message: OutboxMessage): ReconcilePayload {
  const payload = message.payload;
  if (typeof payload !== "object" || payload === null || Array.isArray(payload)) {
    throw new InvalidPayloadError(message.id, "expected an object");
  }
  const { paymentId, idempotencyKey } = payload as Record<string, unknown>;
  if (typeof paymentId !== "string" || typeof idempotencyKey !== "string" || idempotencyKey === "") {
    throw new InvalidPayloadError(message.id, "expected string fields paymentId and idempotencyKey");
  }
  return { paymentId, idempotencyKey };
}

export class PaymentsService<Tx> {
  readonly #store: OutboxStore<Tx>;
  readonly #repository: PaymentsRepository<Tx>;
  readonly #provider: PaymentProvider;
  readonly #clock: Clock;
  readonly #orderingKeyOf: ((request: CreatePaymentRequest) => string | undefined) | undefined;
  /** One writer for every reconciliation, so that a group commit's members share its call. */
  readonly #recordOutcomes: TogetherWriter<Tx, OutcomeRecord>;

  constructor(options: PaymentsServiceOptions<Tx>) {
    this.#store = options.store;
    this.#repository = options.repository;
    this.#provider = options.provider;
    this.#clock = options.clock ?? systemClock;
    this.#orderingKeyOf = options.orderingKeyOf;
    this.#recordOutcomes = async (tx, records) => {
      await this.#repository.recordOutcomes(tx, records);
    };
  }

  /**
   * Creates a payment once per idempotency key. A known key returns the existing payment and
   * writes nothing, without calling the provider (a known key with a different amount or
   * currency throws IdempotencyConflictError). A new key is created at the provider (which is
   * idempotent by key), then the payment row and its reconciliation message commit together.
   */
  async create(request: CreatePaymentRequest): Promise<CreatePaymentResult> {
    const checked = checkCreateRequest(request);
    const existing = await this.#repository.findByKey(checked.idempotencyKey);
    if (existing !== undefined) return { payment: sameRequest(existing, checked), created: false, message: null };

    const { providerReference } = await this.#provider.createPayment(checked);
    const outcome = await this.#store.transaction(async (tx) => {
      const payment = await this.#repository.insert(tx, { ...checked, providerReference, now: this.#clock.now() });
      if (payment === undefined) return undefined; // a concurrent create won the key
      const key = this.#orderingKeyOf?.(checked);
      const message = await this.#store.enqueue(tx, {
        type: RECONCILE_MESSAGE_TYPE,
        dedupeKey: `${RECONCILE_MESSAGE_TYPE}:${payment.idempotencyKey}`,
        payload: { paymentId: payment.id, idempotencyKey: payment.idempotencyKey },
        ...(key === undefined ? {} : { key }),
      });
      return { payment, message };
    });
    if (outcome === undefined) {
      const winner = await this.#repository.findByKey(checked.idempotencyKey);
      if (winner === undefined)
        throw new WassalError("PAYMENT_VANISHED", `payment ${checked.idempotencyKey} was created concurrently but cannot be read back; retry the request`);
      return { payment: sameRequest(winner, checked), created: false, message: null };
    }
    return { payment: outcome.payment, created: true, message: outcome.message };
  }

  /**
   * The reconciliation handler: asks the provider for the final status (outside any
   * transaction) and returns the business write to commit with the message's completion.
   */
  async reconcile(message: OutboxMessage, signal?: AbortSignal): Promise<{ readonly outcome: PaymentOutcome; readonly finalize: Finalize<Tx> }> {
    const { idempotencyKey } = parseReconcilePayload(message);
    const outcome = await this.#provider.checkStatus(idempotencyKey, signal === undefined ? {} : { signal });
    // finalizeTogether: in a group commit, the outcomes of all its payments are one statement.
    return { outcome, finalize: finalizeTogether(this.#recordOutcomes, { idempotencyKey, outcome, now: this.#clock.now() }) };
  }

  /** The reconciliation handler, ready to register with a Worker under RECONCILE_MESSAGE_TYPE. */
  handler(): Handler<Tx> {
    return async (message, { signal }) => {
      // The signal fires when the lease is lost or the worker stops: the provider call is cancelled.
      const { outcome, finalize } = await this.reconcile(message, signal);
      return { finalize, summary: outcome.status === "Paid" ? `Paid ${outcome.transactionId}` : "Failed" };
    };
  }

  list(): Promise<Payment[]> {
    return this.#repository.list();
  }
}
