// What a relay hands a broker, how it finds where each message goes, and how a publisher says that
// a broker refused a message for good (it goes dead) or is unreachable (the relay holds the message
// under its lease and tries again; no attempt is spent).

import { InvalidArgumentError, UnrecoverableError, WassalError } from "../outbox/errors.js";
import type { OutboxMessage } from "../outbox/types.js";

/** One outbox message as a broker receives it. */
export interface OutgoingMessage {
  /**
   * The message's id for the consumer's inbox (NATS `Wassal-Id`, AMQP `message-id`, the stream
   * entry's `id` field, `webhook-id`): the relay's id prefix and the outbox message id. A broker
   * with a duplicate window drops re-publishes by duplicateId.
   */
  readonly id: string;
  /** The outbox message id. */
  readonly messageId: string;
  readonly type: string;
  /** The ordering key, or null. */
  readonly key: string | null;
  /**
   * The message's number in its key's order (1, 2, 3…, no gaps), or null without a key: publishers
   * send it (Wassal-Key-Seq), and the consumer's inbox applies number n of a key only after n − 1.
   */
  readonly keySeq: number | null;
  /** Where it goes: a subject, an exchange and routing key, a stream or a URL (see Routes). */
  readonly destination: string;
  /** The message's own headers; publishers add theirs (id, type, key) as wassal-* headers. */
  readonly headers: Readonly<Record<string, string>>;
  /** The payload as JSON text (UTF-8). */
  readonly body: string;
  readonly createdAt: Date;
}

/**
 * The id a broker's duplicate window drops a re-publish by (NATS `Nats-Msg-Id`, the Redis
 * marker): the message's id and, for a keyed message, its number too. A message redriven after
 * its key skipped it is published again under a new number (its first number went to the next
 * message of the key); dropped as a duplicate of its first publication, that number would never
 * reach the consumer, whose key would wait for it for ever (found by the relay's model,
 * model/relay.pml). The consumer's inbox still knows every copy by `id`.
 */
export function duplicateId(message: OutgoingMessage): string {
  return message.keySeq === null ? message.id : `${message.id}:${message.keySeq}`;
}

/** What a broker said when it accepted a message. */
export interface PublishReceipt {
  /** The broker recognised the id and kept nothing new (a re-publish absorbed by its duplicate window). */
  readonly duplicate: boolean;
}

/** A broker or endpoint. `publish` resolves once the broker has acknowledged the message. */
export interface Publisher {
  /** For logs and reports, e.g. "nats://127.0.0.1:4222 (JetStream)". */
  readonly description: string;
  /**
   * Publishes one message and resolves when the broker has acknowledged it. Many calls may be
   * outstanding at once: the relay pipelines them. Throw PermanentPublishError when the broker
   * refused this message for good, BrokerUnavailableError when the broker cannot be reached; any
   * other error is retried with backoff and counts an attempt.
   */
  publish(message: OutgoingMessage, signal: AbortSignal): Promise<PublishReceipt>;
  close(): Promise<void>;
}

/** The broker refused the message for good (too large, 4xx from a webhook): it goes dead with the broker's reason. */
export class PermanentPublishError extends UnrecoverableError {
  override name = "PermanentPublishError";
  constructor(reason: string, options?: { cause?: unknown }) {
    super("PUBLISH_REFUSED", `the broker refused the message for good: ${reason}`, options);
  }
}

/**
 * The broker could not be reached (connection refused or lost). The relay keeps the message under
 * its lease, renewing it, and publishes again with backoff; no attempt is spent on it.
 */
export class BrokerUnavailableError extends WassalError {
  override name = "BrokerUnavailableError";
  constructor(reason: string, options?: { cause?: unknown }) {
    super("BROKER_UNAVAILABLE", `the broker cannot be reached: ${reason}`, options);
  }
}

/** A message whose destination no route gives: it goes dead, since no retry would find one. */
export class NoRouteError extends UnrecoverableError {
  override name = "NoRouteError";
  constructor(type: string) {
    super(
      "NO_ROUTE",
      `no destination for message type ${JSON.stringify(type)}: give the message a destination at enqueue, a route for its type, or a default destination`,
    );
  }
}

/**
 * Where messages go, in this order: the message's own `destination`; the route for its type; the
 * default, where `{type}` stands for the message type (e.g. "events.{type}").
 */
export interface Routes {
  readonly byType?: Readonly<Record<string, string>>;
  readonly default?: string;
  /**
   * The messages carry their own destinations (set at enqueue): a type the relay takes needs no
   * route, and without `types` the relay takes every type. A message without a destination of its
   * own and without a route is then dead (NoRouteError).
   */
  readonly ownDestinations?: boolean;
}

function checkDestination(value: unknown, what: string): string {
  if (typeof value !== "string" || value.length === 0 || value.length > 1000) {
    throw new InvalidArgumentError(
      `${what} must be a destination of 1 to 1000 characters (a subject, exchange/routing key, stream or URL); got ${JSON.stringify(value)}`,
    );
  }
  return value;
}

/** Checks routes once, up front, and returns the function that resolves a message's destination. */
export function router(routes: Routes = {}): (message: OutboxMessage) => string {
  if (typeof routes !== "object" || routes === null) throw new InvalidArgumentError("routes must be an object ({ byType, default })");
  const byType = new Map(
    Object.entries(routes.byType ?? {}).map(([type, destination]) => [type, checkDestination(destination, `the route for ${JSON.stringify(type)}`)]),
  );
  const fallback = routes.default === undefined ? undefined : checkDestination(routes.default, "the default destination");
  return (message) => {
    if (message.destination !== null) return message.destination;
    const routed = byType.get(message.type);
    if (routed !== undefined) return routed;
    if (fallback !== undefined) return fallback.replaceAll("{type}", message.type);
    throw new NoRouteError(message.type);
  };
}
