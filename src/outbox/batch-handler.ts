// Batch handlers: one call for up to maxBatch messages of a type claimed together, with one lease
// each. The worker keeps every message its own job (its lease renewed, its time limit, its
// completion or failure), and gives each job a handler that waits for its own result of the one
// call. So a failure of one message retries that one alone, and the completions, ready at the same
// moment, share the worker's group commit (with finalizeTogether, their business writes one call).

import { InvalidArgumentError } from "./errors.js";
import type { Handler, HandlerResult } from "./process-lease.js";
import type { Lease, OutboxMessage } from "./types.js";

/** The longest batch a batch handler may ask for (a claim's limit). */
export const MAX_BATCH = 1000;

/** The claimed leases of batch types cut into batch runs: each lease's run and place in it. */
export function batchRuns<Tx>(
  leases: readonly Lease[],
  batchHandlers: Readonly<Record<string, BatchHandler<Tx>>>,
  takes: (lease: Lease) => boolean,
): Map<Lease, { readonly run: BatchRun<Tx>; readonly index: number }> {
  const byType = new Map<string, Lease[]>();
  for (const lease of leases) {
    const { type } = lease.message;
    if (!Object.hasOwn(batchHandlers, type) || !takes(lease)) continue;
    const list = byType.get(type);
    if (list === undefined) byType.set(type, [lease]);
    else list.push(lease);
  }
  const places = new Map<Lease, { readonly run: BatchRun<Tx>; readonly index: number }>();
  for (const [type, list] of byType) {
    const batch = batchHandlers[type] as BatchHandler<Tx>;
    for (let from = 0; from < list.length; from += batch.maxBatch) {
      const members = list.slice(from, from + batch.maxBatch);
      const run = new BatchRun(batch, members);
      for (const [index, lease] of members.entries()) places.set(lease, { run, index });
    }
  }
  return places;
}

/**
 * A handler of many messages of one type at once (WorkerOptions.batchHandlers). The worker claims
 * as it always does and calls `handle` once per claim with that claim's messages of the type, up to
 * `maxBatch` at a time, each under its own lease.
 */
export interface BatchHandler<Tx> {
  /** At most this many messages per call, 1 to 1000 (a call may have fewer: those one claim found). */
  readonly maxBatch: number;
  /**
   * One result per message, in the order given: a HandlerResult (or undefined) completes it,
   * with its business write if it has one; an Error fails it alone (retried, or dead when its
   * attempts are spent or it is an UnrecoverableError). Throwing fails them all. The signal aborts
   * when the worker stops, or when every message's lease is lost.
   */
  readonly handle: (
    messages: readonly OutboxMessage[],
    context: { readonly leases: readonly Lease[]; readonly signal: AbortSignal },
  ) => Promise<readonly (HandlerResult<Tx> | undefined | Error)[]>;
}

/** Checks a worker's batchHandlers option: an object of type → { maxBatch, handle }. */
export function checkBatchHandlers<Tx>(given: unknown, handlers: Readonly<Record<string, unknown>>): Readonly<Record<string, BatchHandler<Tx>>> {
  if (given === undefined) return {};
  if (typeof given !== "object" || given === null || Array.isArray(given)) {
    throw new InvalidArgumentError("batchHandlers must be an object of message type → { maxBatch, handle }");
  }
  for (const [type, batch] of Object.entries(given)) {
    const name = `batchHandlers[${JSON.stringify(type)}]`;
    if (Object.hasOwn(handlers, type))
      throw new InvalidArgumentError(`${name}: ${JSON.stringify(type)} has a handler too; give a type one handler or one batch handler`);
    if (typeof batch !== "object" || batch === null) throw new InvalidArgumentError(`${name} must be an object { maxBatch, handle }`);
    const { maxBatch, handle } = batch as { maxBatch?: unknown; handle?: unknown };
    if (typeof maxBatch !== "number" || !Number.isSafeInteger(maxBatch) || maxBatch < 1 || maxBatch > MAX_BATCH) {
      throw new InvalidArgumentError(`${name}.maxBatch must be a whole number from 1 to ${MAX_BATCH} (got ${JSON.stringify(maxBatch) ?? String(maxBatch)})`);
    }
    if (typeof handle !== "function") throw new InvalidArgumentError(`${name}.handle must be a function (messages, { leases, signal }) => results`);
  }
  return given as Readonly<Record<string, BatchHandler<Tx>>>;
}

/**
 * One call of a batch handler for its members' messages, made just after the first member asks
 * for its result (in a microtask, so that every member of the claim has joined with its signal:
 * the call's signal aborts when all of theirs have).
 */
export class BatchRun<Tx> {
  readonly #batch: BatchHandler<Tx>;
  readonly #leases: readonly Lease[];
  readonly #signals: AbortSignal[] = [];
  #results: Promise<readonly (HandlerResult<Tx> | undefined | Error)[]> | undefined;

  constructor(batch: BatchHandler<Tx>, leases: readonly Lease[]) {
    this.#batch = batch;
    this.#leases = leases;
  }

  /** A member's abort signal (its lease lost, or the worker stopping). */
  join(signal: AbortSignal): void {
    this.#signals.push(signal);
  }

  /** The handler the member at `index` runs: its own result of the one call (an Error result thrown). */
  handlerFor(index: number): Handler<Tx> {
    return async () => {
      const results = await this.#call();
      const result = results[index];
      if (result instanceof Error) throw result;
      return result;
    };
  }

  #call(): Promise<readonly (HandlerResult<Tx> | undefined | Error)[]> {
    if (this.#results !== undefined) return this.#results;
    const messages = this.#leases.map((lease) => lease.message);
    const type = messages[0]?.type ?? "";
    this.#results = Promise.resolve()
      .then(() => this.#batch.handle(messages, { leases: this.#leases, signal: allAborted(this.#signals) }))
      .then((results) => {
        if (!Array.isArray(results) || results.length !== messages.length) {
          throw new TypeError(
            `the batch handler of ${type} returned ${Array.isArray(results) ? `${results.length} results` : typeof results} for ${messages.length} messages; return one result per message, in their order`,
          );
        }
        return results as readonly (HandlerResult<Tx> | undefined | Error)[];
      });
    return this.#results;
  }
}

/** A signal that aborts once every one of `signals` has (with the last one's reason). */
function allAborted(signals: readonly AbortSignal[]): AbortSignal {
  const controller = new AbortController();
  if (signals.length === 0) return controller.signal; // no member joined (not expected: each joins before the call): nothing to lose
  let left = signals.filter((signal) => !signal.aborted).length;
  if (left === 0) {
    controller.abort(signals.at(-1)?.reason);
    return controller.signal;
  }
  for (const signal of signals) {
    if (signal.aborted) continue;
    signal.addEventListener(
      "abort",
      () => {
        left -= 1;
        if (left === 0) controller.abort(signal.reason);
      },
      { once: true },
    );
  }
  return controller.signal;
}
