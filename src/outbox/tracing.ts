// Tracing hooks. The store calls them around an enqueue, the worker around a claim, each message's
// processing and the store call that settles it (complete, fail, release), so that an
// implementation can record spans and carry trace context from enqueue to handler in the
// message's headers. The core imports no tracing library: "wassal/observability" implements these
// hooks with OpenTelemetry (otelTracing). Without hooks (the default) a store or worker pays one
// branch per operation and allocates nothing for tracing.

import type { Completed, JsonValue, Lease, LeaseLost, MarkedDead, NewMessage, OutboxMessage, Released, RetryScheduled } from "./types.js";

/**
 * What a store and a worker tell a tracer. Give the same object to the store (it traces
 * enqueues) and to the Worker (it traces claims, processing and settling). Build one with
 * `otelTracing()` from "wassal/observability", or implement it for another tracer: its methods
 * must not throw (they run inside the caller's transaction and the worker's bookkeeping).
 */
export interface Tracing {
  /**
   * An enqueue of `message` begins. Put the trace context to carry into `carrier` (an empty
   * object): the store adds each header there that the caller did not set (names compared
   * without regard to case), that is a valid header, and that fits within the 64 allowed.
   */
  enqueue(message: NewMessage<JsonValue>, carrier: Record<string, string>): EnqueueTrace;
  /** A worker named `owner` starts a claim, of these message types (null: every type). */
  claim(owner: string, types: readonly string[] | null): ClaimTrace;
}

/** One enqueue, from its checks to the inserted row. */
export interface EnqueueTrace {
  /** Runs the insert inside the enqueue's trace context (a database instrumentation's spans nest under it). */
  run<T>(work: () => T): T;
  /** The enqueue ended: with the stored message, or refused with `error` (nothing was written). */
  end(message: OutboxMessage | undefined, error?: unknown): void;
}

/** One claim of a worker. */
export interface ClaimTrace {
  /** The claim returned these leases (possibly none), or failed with `error`. */
  end(leases: readonly Lease[], error?: unknown): void;
  /** The processing of one lease this claim won begins (called after `end`). */
  process(lease: Lease): ProcessTrace;
}

/** The store calls that settle a claimed message. */
export type SettleOperation = "complete" | "fail" | "release";

/** What a settling store call returned. */
export type SettleResult = Completed | LeaseLost | RetryScheduled | MarkedDead | Released;

/** One message's processing by a worker: its handler, then the store call that settles it. */
export interface ProcessTrace {
  /** Runs `work` (the handler and what follows it) inside the processing's trace context, so the handler's own spans nest under it. */
  run<T>(work: () => T): T;
  /**
   * A settling store call begins; call what it returns with the call's result, or with the error
   * it threw. For "fail", `error` is the attempt's failure (the handler's error, a timeout, …).
   */
  settle(operation: SettleOperation, error?: unknown): (result: SettleResult | undefined, thrown?: unknown) => void;
  /**
   * The processing ended: its handler returned or threw, and every settling call made for it
   * (a release at shutdown included) has returned. `abortedBy` is why it was cut short when it
   * was (LeaseLostError, ShutdownError, ProcessingTimeoutError), else undefined.
   */
  end(abortedBy?: unknown): void;
}
