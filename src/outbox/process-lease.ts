// Runs one claimed message through a handler and completes it under its lease. The handler does
// its slow work (e.g. a provider call) outside any transaction and returns the business write;
// that write commits with the token-guarded completion or not at all. Both the lab and the
// worker use this, so processing is reported the same way everywhere.

import { publish } from "./events.js";
import type { Clock } from "./clock.js";
import type { OutboxStore } from "./store.js";
import type { Completed, Finalize, Lease, LeaseLost, OutboxMessage } from "./types.js";

/** What a handler returns: the business write to commit with the completion, and a summary for reports. */
export interface HandlerResult<Tx> {
  readonly finalize?: Finalize<Tx>;
  readonly summary?: string;
}

export type Handler<Tx> = (message: OutboxMessage, context: { readonly lease: Lease; readonly signal: AbortSignal }) => Promise<HandlerResult<Tx>>;

export interface ProcessOptions<Tx = unknown> {
  /** Fires when the lease is lost (or the worker shuts down); handed to the handler. */
  readonly signal?: AbortSignal;
  /** Like `signal`, but read only when the handler reads its signal (the worker builds it on demand). */
  readonly abort?: { readonly signal: AbortSignal };
  /** Runs after the handler returned, before the completion (e.g. to stop lease renewals). */
  readonly beforeComplete?: () => Promise<void>;
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
  let signal = options.signal;
  const source = options.abort;
  const context = {
    lease,
    get signal(): AbortSignal {
      signal ??= source ? source.signal : new AbortController().signal;
      return signal;
    },
  };
  const { owner, messageId, token } = lease; // spelled out in each event: spreading showed in the worker's profile
  publish(store.events, { type: "processing-started", at: clock.now(), owner, messageId, token, attempt: lease.message.attempts });
  const finished = (result: "completed" | "lease-lost" | "failed", detail: string) =>
    publish(store.events, { type: "processing-finished", at: clock.now(), owner, messageId, token, result, detail });
  let handled: HandlerResult<Tx>;
  try {
    handled = await handler(lease.message, context);
  } catch (error) {
    finished("failed", errorText(error));
    throw error;
  }
  const summary = handled.summary ?? "";
  await options.beforeComplete?.();
  let result: Completed | LeaseLost;
  try {
    result = options.complete ? await options.complete(lease, handled.finalize) : await store.complete(lease, handled.finalize);
  } catch (error) {
    // The business write failed: nothing was committed, the message is still ours to fail or retry.
    finished("failed", `business write failed: ${errorText(error)}`);
    throw error;
  }
  if (result.outcome === "completed") finished("completed", summary);
  else finished("lease-lost", `result discarded: lease lost (${summary})`);
  return { result, summary };
}

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
