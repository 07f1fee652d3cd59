// Runs one claimed message through a handler and completes it under its lease. The handler does
// its slow work (e.g. a provider call) outside any transaction and returns the business write;
// that write commits with the token-guarded completion or not at all. Both the lab and the
// worker use this, so processing is reported the same way everywhere.

import { type EventHub, listened, publish } from "./events.js";
import type { Clock } from "./clock.js";
import type { OutboxStore } from "./store.js";
import type { Completed, Finalize, Lease, LeaseLost, OutboxMessage } from "./types.js";

/** What a handler returns: the business write to commit with the completion, and a summary for reports. */
export interface HandlerResult<Tx> {
  readonly finalize?: Finalize<Tx>;
  readonly summary?: string;
}

/**
 * A message type's handler. It may return nothing (`async (message) => { … }`): the message is
 * then completed with no business write, as with `{}`.
 */
export type Handler<Tx> = (
  message: OutboxMessage,
  context: { readonly lease: Lease; readonly signal: AbortSignal },
  // biome-ignore lint/suspicious/noConfusingVoidType: an async handler without a return statement returns Promise<void>
) => Promise<HandlerResult<Tx> | undefined | void>;

const NOTHING_RETURNED: HandlerResult<unknown> = Object.freeze({});

/** A handler's return value as a result: nothing returned (undefined or null) is `{}`. */
export function handlerResult<Tx>(returned: Awaited<ReturnType<Handler<Tx>>> | null): HandlerResult<Tx> {
  return returned === undefined || returned === null ? NOTHING_RETURNED : returned;
}

export interface ProcessOptions<Tx = unknown> {
  /** Fires when the lease is lost (or the worker shuts down); handed to the handler. */
  readonly signal?: AbortSignal;
  /** Like `signal`, but read only when the handler reads its signal (the worker builds it on demand). */
  readonly abort?: { readonly signal: AbortSignal };
  /** Runs after the handler returned, before the completion (e.g. to stop lease renewals); a promise it returns is awaited. */
  readonly beforeComplete?: () => Promise<void> | undefined;
  /** How to complete (default: store.complete); the worker passes its group-commit batcher. */
  readonly complete?: (lease: Lease, finalize?: Finalize<Tx>) => Promise<Completed | LeaseLost>;
}

export async function processLease<Tx>(
  store: OutboxStore<Tx>,
  lease: Lease,
  handler: Handler<Tx>,
  clock: Clock,
  options: ProcessOptions<Tx> = {},
): Promise<{ readonly result: Completed | LeaseLost; readonly summary: string }> {
  // The worker runs these same steps in its own async function (Worker #process), with these
  // same reports: a change here is a change there.
  const context = handlerContext(lease, options.signal, options.abort);
  const { events } = store;
  reportStarted(events, clock, lease);
  let handled: HandlerResult<Tx>;
  try {
    handled = handlerResult(await handler(lease.message, context));
  } catch (error) {
    reportFinished(events, clock, lease, "failed", errorText(error));
    throw error;
  }
  const summary = handled.summary ?? "";
  // Awaited only when there is something to wait for: an await costs a few hundred bytes and a
  // turn of the microtask queue per message, and the worker's heartbeat rarely has a renewal in flight.
  const before = options.beforeComplete?.();
  if (before !== undefined) await before;
  let result: Completed | LeaseLost;
  try {
    result = options.complete ? await options.complete(lease, handled.finalize) : await store.complete(lease, handled.finalize);
  } catch (error) {
    // The business write failed: nothing was committed, the message is still ours to fail or retry.
    reportFinished(events, clock, lease, "failed", `business write failed: ${errorText(error)}`);
    throw error;
  }
  reportOutcome(events, clock, lease, result, summary);
  return { result, summary };
}

/** Reports that an attempt starts (before its handler runs). */
export function reportStarted(events: EventHub, clock: Clock, lease: Lease): void {
  if (listened(events)) {
    const { owner, messageId, token } = lease; // spelled out: spreading showed in the worker's profile
    publish(events, { type: "processing-started", at: clock.now(), owner, messageId, token, attempt: lease.message.attempts });
  }
}

/** Reports how a completion that returned ended: completed, or the result discarded with a lost lease. */
export function reportOutcome(events: EventHub, clock: Clock, lease: Lease, result: Completed | LeaseLost, summary: string): void {
  if (result.outcome === "completed") reportFinished(events, clock, lease, "completed", summary);
  else reportFinished(events, clock, lease, "lease-lost", `result discarded: lease lost (${summary})`);
}

/**
 * Reports the end of an attempt. A function of its own, not a closure made per message, and the
 * event (with its Date) built only when someone listens (here, in claims and in completions):
 * 7.06 → 5.69 and 6.44 → 5.79 µs per message in two series (medians of 7, the worker over an
 * in-memory driver, no listener); with two listeners the events are built as before (7.88 and 7.64).
 */
export function reportFinished(events: EventHub, clock: Clock, lease: Lease, result: "completed" | "lease-lost" | "failed", detail: string): void {
  if (listened(events))
    publish(events, { type: "processing-finished", at: clock.now(), owner: lease.owner, messageId: lease.messageId, token: lease.token, result, detail });
}

/** Hands back the object it is given (a base class whose constructor returns it), so HandlerSignal can add its private fields to a plain object. */
class Stamped {
  constructor(target: object) {
    // biome-ignore lint/correctness/noConstructorReturn: returning the target is what lets a subclass put private fields on it
    return target;
  }
}

let signalProperty: PropertyDescriptor;

/**
 * The lazy signal of a handler's context, kept in private fields of the context object itself.
 *
 * The context was an object literal with a getter closing over the message's signal. V8 makes a
 * new getter function, and so a new hidden class, for every such literal: about 1.1 µs per message
 * in a micro-benchmark (3 M contexts), and the largest single item of processLease's allocations.
 * A shared getter defined on the literal (one descriptor for every context, the state in private
 * fields stamped on by this class) costs about 0.13 µs and keeps what a handler can see the same:
 * a plain object (Object.prototype) with an own enumerable `lease` and an own enumerable accessor
 * `signal`, so spreading the context or listing its keys gives what it gave.
 * Rejected: a class with `signal` as a prototype getter (0.02 µs), because `{ ...context }` and
 * Object.keys(context) would no longer include `signal`.
 */
class HandlerSignal extends Stamped {
  #given: AbortSignal | undefined;
  #source: { readonly signal: AbortSignal } | undefined;

  constructor(target: object, given: AbortSignal | undefined, source: { readonly signal: AbortSignal } | undefined) {
    super(target);
    this.#given = given;
    this.#source = source;
  }

  static {
    signalProperty = {
      get(this: HandlerSignal): AbortSignal {
        this.#given ??= this.#source ? this.#source.signal : new AbortController().signal;
        return this.#given;
      },
      enumerable: true,
      configurable: true,
    };
  }
}

/** A handler's context: the lease, and a signal built when first read (from `source` when given, else a fresh one that never fires). */
export function handlerContext(
  lease: Lease,
  given: AbortSignal | undefined,
  source: { readonly signal: AbortSignal } | undefined,
): { readonly lease: Lease; readonly signal: AbortSignal } {
  const context = { lease };
  new HandlerSignal(context, given, source);
  Object.defineProperty(context, "signal", signalProperty);
  return context as { readonly lease: Lease; readonly signal: AbortSignal };
}

export function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
