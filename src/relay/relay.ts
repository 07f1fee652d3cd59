// The relay: a Worker whose one handler publishes each message to a broker and returns once the
// broker has acknowledged it; the worker then completes it under its lease token, with the other
// acknowledged messages in one commit (group commit). Publishes are pipelined: up to
// `maxInFlight` messages are published at once, each holding its lease, so acknowledgements
// overlap instead of following one another. The store's ordering keys keep at most one message
// per key in flight, so a key's messages reach the broker in the order they were enqueued.
//
// A broker that cannot be reached costs no attempt: the handler keeps its message (the worker
// renews the lease meanwhile) and publishes again with backoff, until it gets through, the lease
// is lost, or the relay stops. A broker that refuses a message for good sends it dead.

import { type Clock, systemClock } from "../outbox/clock.js";
import { InvalidArgumentError, UnroutedTypesError } from "../outbox/errors.js";
import type { Handler } from "../outbox/process-lease.js";
import type { RetryPolicy } from "../outbox/retry.js";
import type { OutboxStore } from "../outbox/store.js";
import type { Tracing } from "../outbox/tracing.js";
import type { OutboxMessage } from "../outbox/types.js";
import { checkTypes } from "../outbox/validate.js";
import { Worker } from "../outbox/worker.js";
import { BrokerUnavailableError, type OutgoingMessage, type Publisher, type Routes, router } from "./publisher.js";

export interface RelayOptions<Tx> {
  readonly store: OutboxStore<Tx>;
  readonly publisher: Publisher;
  /** Where each message goes (its own destination first; see Routes). */
  readonly routes?: Routes;
  /**
   * The message types this relay takes (default: every type). Each needs a route (a `byType`
   * entry or the default), or the relay is refused: a message with nowhere to go would be dead.
   */
  readonly types?: readonly string[];
  /**
   * Put in front of every message id the broker deduplicates on (default ""). Give each outbox
   * that publishes to the same broker its own prefix, or their ids collide.
   */
  readonly idPrefix?: string;
  /** The owner name on the relay's leases (default: host-pid-random). */
  readonly name?: string;
  /** Messages published and awaiting their acknowledgement at once (default 256). */
  readonly maxInFlight?: number;
  /** Lease length in milliseconds (default 30 000). */
  readonly leaseMs?: number;
  /** The longest wait between claims when nothing wakes the relay (default 1 000 ms). */
  readonly pollIntervalMs?: number;
  /** Listen for new messages instead of waiting for the next poll (default true). */
  readonly wakeOnNewMessages?: boolean;
  /** Retries of messages the broker failed (not refused, not unreachable): the worker's policy. */
  readonly retry?: Partial<RetryPolicy>;
  /** How long `stop` lets outstanding publishes finish (default 10 000 ms). */
  readonly shutdownGraceMs?: number;
  /** The first wait before publishing again to an unreachable broker, doubling to 30 s (default 250 ms). */
  readonly unavailableBackoffMs?: number;
  /** Told of each message acknowledged, refused, or held while the broker is unreachable (for logs and metrics). */
  readonly onEvent?: (event: RelayEvent) => void;
  /** Traces each claim, publish (the processing span) and completion, as the Worker's option does. */
  readonly tracing?: Tracing;
  /** The heartbeat that lets peers take a killed relay's messages early: the Worker's option (default 2 000 ms; false: none). */
  readonly heartbeatMs?: number | false;
  /** How long after its last heartbeat the relay counts as dead to its peers: the Worker's option (default 10 000 ms). */
  readonly ownerDeadAfterMs?: number;
  /** How often the relay fires the schedules' due ticks: the Worker's option (default 1 000 ms; false: none). */
  readonly schedulePollMs?: number | false;
  readonly clock?: Clock;
}

export type RelayEvent =
  | { readonly type: "published"; readonly messageId: string; readonly destination: string; readonly duplicate: boolean }
  | { readonly type: "broker-unavailable"; readonly messageId: string; readonly error: string; readonly retryInMs: number };

/** What a relay has done since it started. */
export interface RelayStats {
  /** Messages the broker acknowledged. */
  published: number;
  /** Of those, acknowledged as duplicates (the broker already had the id, e.g. after a crash before completion). */
  duplicates: number;
  /** Publishes that found the broker unreachable and were tried again. */
  unavailableRetries: number;
}

const MAX_UNAVAILABLE_BACKOFF_MS = 30_000;

function positiveInteger(name: string, value: number): number {
  if (!Number.isSafeInteger(value) || value < 1) throw new InvalidArgumentError(`${name} must be a whole number >= 1 (got ${String(value)})`);
  return value;
}

/** The message as the broker gets it. */
export function outgoing(message: OutboxMessage, destination: string, idPrefix: string): OutgoingMessage {
  return {
    id: `${idPrefix}${message.id}`,
    messageId: message.id,
    type: message.type,
    key: message.key,
    keySeq: message.keySeq,
    destination,
    headers: message.headers,
    body: JSON.stringify(message.payload),
    createdAt: message.createdAt,
  };
}

/**
 * The types a relay takes, checked against its routes: `types` when given, each with a route (or
 * a default route, or the routes' ownDestinations), else UnroutedTypesError; undefined (every
 * type) when not given.
 */
export function routedTypes(types: readonly string[] | undefined, routes: Routes | undefined): readonly string[] | undefined {
  if (types === undefined) return undefined;
  const checked = checkTypes(types);
  if (routes?.default !== undefined || routes?.ownDestinations === true) return checked;
  const unrouted = checked.filter((type) => !Object.hasOwn(routes?.byType ?? {}, type));
  if (unrouted.length > 0) throw new UnroutedTypesError(unrouted);
  return checked;
}

export class Relay<Tx> {
  readonly worker: Worker<Tx>;
  readonly publisher: Publisher;
  readonly stats: RelayStats = { published: 0, duplicates: 0, unavailableRetries: 0 };
  /** Publishes now waiting out an unreachable broker. */
  #waitingOnBroker = 0;

  constructor(options: RelayOptions<Tx>) {
    if (typeof options !== "object" || options === null) throw new InvalidArgumentError("Relay needs options: { store, publisher, routes?, … }");
    const { publisher } = options;
    if (typeof publisher?.publish !== "function") throw new InvalidArgumentError("Relay needs a publisher (see openPublisher, or implement Publisher)");
    this.publisher = publisher;
    const idPrefix = options.idPrefix ?? "";
    if (typeof idPrefix !== "string" || idPrefix.length > 100)
      throw new InvalidArgumentError(`idPrefix must be a string of at most 100 characters (got ${JSON.stringify(idPrefix)})`);
    const route = router(options.routes);
    const types = routedTypes(options.types, options.routes);
    const clock = options.clock ?? systemClock;
    const firstBackoff = positiveInteger("unavailableBackoffMs", options.unavailableBackoffMs ?? 250);
    const onEvent = options.onEvent ?? (() => undefined);

    const publish: Handler<Tx> = async (message, { signal }) => {
      const out = outgoing(message, route(message), idPrefix);
      for (let backoff = firstBackoff; ; backoff = Math.min(backoff * 2, MAX_UNAVAILABLE_BACKOFF_MS)) {
        try {
          const receipt = await publisher.publish(out, signal);
          this.stats.published += 1;
          if (receipt.duplicate) this.stats.duplicates += 1;
          onEvent({ type: "published", messageId: message.id, destination: out.destination, duplicate: receipt.duplicate });
          return { summary: `${receipt.duplicate ? "acknowledged as a duplicate by" : "published to"} ${out.destination}` };
        } catch (error) {
          // Unreachable: keep the message (its lease is renewed meanwhile) and try again, unless
          // the lease is lost or the relay stops, which the signal says.
          if (!(error instanceof BrokerUnavailableError) || signal.aborted) throw error;
          this.stats.unavailableRetries += 1;
          onEvent({ type: "broker-unavailable", messageId: message.id, error: error.message, retryInMs: backoff });
          this.#waitingOnBroker += 1;
          try {
            await clock.sleep(backoff, signal);
          } finally {
            this.#waitingOnBroker -= 1;
          }
          if (signal.aborted) throw error;
        }
      }
    };

    this.worker = new Worker<Tx>({
      store: options.store,
      handlers: {},
      defaultHandler: publish,
      ...(types === undefined ? {} : { types }),
      concurrency: positiveInteger("maxInFlight", options.maxInFlight ?? 256),
      ...(options.name === undefined ? {} : { name: options.name }),
      ...(options.leaseMs === undefined ? {} : { leaseMs: options.leaseMs }),
      ...(options.pollIntervalMs === undefined ? {} : { pollIntervalMs: options.pollIntervalMs }),
      ...(options.wakeOnNewMessages === undefined ? {} : { wakeOnNewMessages: options.wakeOnNewMessages }),
      ...(options.retry === undefined ? {} : { retry: options.retry }),
      ...(options.shutdownGraceMs === undefined ? {} : { shutdownGraceMs: options.shutdownGraceMs }),
      ...(options.tracing === undefined ? {} : { tracing: options.tracing }),
      ...(options.heartbeatMs === undefined ? {} : { heartbeatMs: options.heartbeatMs }),
      ...(options.ownerDeadAfterMs === undefined ? {} : { ownerDeadAfterMs: options.ownerDeadAfterMs }),
      ...(options.schedulePollMs === undefined ? {} : { schedulePollMs: options.schedulePollMs }),
      ownerKind: "relay",
      clock,
    });
  }

  get name(): string {
    return this.worker.name;
  }

  /** The types this relay takes, or null for every type. */
  get types(): readonly string[] | null {
    return this.worker.types;
  }

  /** Starts claiming and publishing. */
  start(): Promise<void> {
    return this.worker.start();
  }

  /**
   * Stops claiming, lets outstanding publishes finish (up to the grace), releases the rest. When
   * every outstanding publish is waiting out an unreachable broker, none can finish: they are
   * released at once instead. Does not close the publisher.
   */
  stop(options: { readonly graceMs?: number } = {}): Promise<void> {
    const stuck = this.#waitingOnBroker > 0 && this.#waitingOnBroker >= this.worker.inFlight;
    return this.worker.stop(stuck ? { graceMs: 0 } : options);
  }
}
