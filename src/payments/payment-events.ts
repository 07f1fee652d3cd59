// A payment's lifecycle events (created, paid, refunded), published through the outbox for
// downstream consumers, and one such consumer: the customer's statement, which shows each payment
// at the last event it applied. Applied out of order, the statement shows the wrong state; the
// events of one payment therefore carry the payment as their ordering key when order matters.

import { systemClock, type Clock } from "../outbox/clock.js";
import type { Handler } from "../outbox/process-lease.js";
import type { OutboxStore } from "../outbox/store.js";
import type { OutboxMessage } from "../outbox/types.js";
import { InvalidPayloadError } from "./payments-service.js";
import { PAYMENT_EVENTS, type PaymentEvent, type PaymentEventPayload, type PaymentsRepository } from "./types.js";

export interface PaymentEventsOptions<Tx> {
  readonly store: OutboxStore<Tx>;
  readonly repository: PaymentsRepository<Tx>;
  readonly clock?: Clock;
  /** Give each event its payment as the ordering key, so one payment's events are applied in order. Default: false. */
  readonly orderByPayment?: boolean;
}

const isPaymentEvent = (value: unknown): value is PaymentEvent => PAYMENT_EVENTS.includes(value as PaymentEvent);

/** Reads a payment event's payload, refusing anything malformed or of another type. */
export function parsePaymentEvent(message: OutboxMessage): PaymentEventPayload {
  const payload = message.payload as Record<string, unknown> | null;
  if (!isPaymentEvent(message.type)) {
    throw new InvalidPayloadError(message.id, `the type is not one of ${PAYMENT_EVENTS.join(", ")}`, message.type);
  }
  if (typeof payload !== "object" || payload === null || Array.isArray(payload)) {
    throw new InvalidPayloadError(message.id, "expected an object", message.type);
  }
  const { idempotencyKey, event } = payload;
  if (typeof idempotencyKey !== "string" || idempotencyKey === "" || event !== message.type) {
    throw new InvalidPayloadError(message.id, `expected a string idempotencyKey and event "${message.type}"`, message.type);
  }
  return { idempotencyKey, event: message.type };
}

export class PaymentEvents<Tx> {
  readonly #store: OutboxStore<Tx>;
  readonly #repository: PaymentsRepository<Tx>;
  readonly #clock: Clock;
  readonly #orderByPayment: boolean;

  constructor(options: PaymentEventsOptions<Tx>) {
    this.#store = options.store;
    this.#repository = options.repository;
    this.#clock = options.clock ?? systemClock;
    this.#orderByPayment = options.orderByPayment ?? false;
  }

  /** Enqueues one event of a payment in the caller's transaction (once per payment and event). */
  publish(tx: Tx, idempotencyKey: string, event: PaymentEvent): Promise<OutboxMessage> {
    return this.#store.enqueue(tx, {
      type: event,
      dedupeKey: `${event}:${idempotencyKey}`,
      payload: { idempotencyKey, event },
      ...(this.#orderByPayment ? { key: idempotencyKey } : {}),
    });
  }

  /**
   * The statement consumer: applies an event as one statement line, committed with the message's
   * guarded completion (a message applies at most one line).
   */
  statementHandler(): Handler<Tx> {
    return async (message, { lease }) => {
      const { idempotencyKey, event } = parsePaymentEvent(message);
      return {
        finalize: async (tx) => {
          await this.#repository.appendStatement(tx, { idempotencyKey, event, messageId: message.id, appliedBy: lease.owner, appliedAt: this.#clock.now() });
        },
        summary: `statement line "${event}"`,
      };
    };
  }
}
