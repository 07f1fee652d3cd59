// What every consumer does with one delivered message, whatever the broker: apply it through the
// inbox in the consumer's transaction, then acknowledge it; if the handler throws, try it again in
// place (so nothing behind it overtakes it, and each key's order holds), and after maxAttempts give
// it up (the broker's "terminate" or "reject") and report it. An acknowledgement that fails (the
// connection went away) is left to the broker's redelivery, which the inbox absorbs.

import { InvalidArgumentError } from "../outbox/errors.js";
import type { Inbox } from "./inbox.js";

/** A message as the consumer's handler gets it. */
export interface DeliveredMessage {
  /** The id the inbox records: the publisher's message id. */
  readonly id: string;
  readonly type: string | null;
  readonly key: string | null;
  /** The broker headers other than the id and Wassal's own. */
  readonly headers: Readonly<Record<string, string>>;
  /** The payload, parsed from JSON (the raw text when it is not JSON). */
  readonly body: unknown;
  /** Where it was delivered from: a subject, a queue, a stream. */
  readonly source: string;
  readonly redelivered: boolean;
}

export type DeliveryHandler<Tx> = (message: DeliveredMessage, tx: Tx) => void | Promise<void>;

export interface ConsumerStats {
  /** Messages whose handler ran and committed. */
  applied: number;
  /** Messages the inbox had seen: acknowledged without running the handler. */
  duplicates: number;
  /** Handler runs that threw (rolled back; the message is tried again). */
  failed: number;
  /** Messages given up after maxAttempts failures: never applied. */
  terminated: number;
}

export interface ConsumerRetry {
  /** Tries of a message whose handler throws, before it is given up (default 5). */
  readonly maxAttempts?: number;
  /** The wait before the second try, doubling each time up to 30 s (default 1 000 ms). */
  readonly retryDelayMs?: number;
  /** Told of each handler failure; `final` when the message is given up. */
  readonly onError?: (error: unknown, message: DeliveredMessage, final: boolean) => void;
}

/** What the broker lets a consumer do with the message in hand. */
export interface Acknowledger {
  ack(): Promise<void> | void;
  /** Give the message up for good (no redelivery), saying why. */
  giveUp(reason: string): Promise<void> | void;
  /** Tell the broker the message is still being worked on (optional). */
  working?(): void;
  /** True once the consumer is stopping: a message waiting on its database is left to redelivery. */
  stopping?(): boolean;
}

/** An error the app's handler threw (as opposed to the consumer's database failing). */
class HandlerFailure extends Error {
  constructor(readonly error: unknown) {
    super("the handler failed");
  }
}

export function checkRetry(retry: ConsumerRetry): { maxAttempts: number; delayMs: number } {
  const maxAttempts = retry.maxAttempts ?? 5;
  if (!Number.isSafeInteger(maxAttempts) || maxAttempts < 1)
    throw new InvalidArgumentError(`maxAttempts must be a whole number >= 1 (got ${String(maxAttempts)})`);
  const delayMs = retry.retryDelayMs ?? 1_000;
  if (!Number.isSafeInteger(delayMs) || delayMs < 0)
    throw new InvalidArgumentError(`retryDelayMs must be a whole number of milliseconds >= 0 (got ${String(delayMs)})`);
  return { maxAttempts, delayMs };
}

/** Parses a payload as JSON, or hands the text over as it is. */
export function parseBody(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** Applies one message once (see the top of this file) and updates `stats`. */
export async function deliver<Tx>(
  message: DeliveredMessage,
  broker: Acknowledger,
  inbox: Inbox<Tx>,
  handle: DeliveryHandler<Tx>,
  retry: { maxAttempts: number; delayMs: number },
  stats: ConsumerStats,
  onError?: ConsumerRetry["onError"],
): Promise<void> {
  const report = (error: unknown, final: boolean) => {
    try {
      onError?.(error, message, final);
    } catch {
      // a report that throws must not stop the consumer
    }
  };
  for (let attempt = 1, delay = retry.delayMs; ; delay = Math.min(delay * 2, 30_000)) {
    try {
      const received = await inbox.handle(message.id, async (tx) => {
        try {
          return await handle(message, tx);
        } catch (error) {
          throw new HandlerFailure(error);
        }
      });
      if (received.duplicate) stats.duplicates += 1;
      else stats.applied += 1;
    } catch (caught) {
      if (!(caught instanceof HandlerFailure)) {
        // The consumer's own database failed (down, busy): nothing was applied and the handler is
        // not to blame. Try again without spending an attempt, until it works or the consumer stops.
        report(caught, false);
        if (broker.stopping?.()) return; // left unacknowledged: the broker delivers it again
        broker.working?.();
        await new Promise((resolve) => setTimeout(resolve, delay));
        continue;
      }
      const error = caught.error;
      stats.failed += 1;
      const final = attempt >= retry.maxAttempts;
      report(error, final);
      if (final) {
        stats.terminated += 1;
        try {
          await broker.giveUp(`the handler failed ${attempt} times: ${error instanceof Error ? error.message : String(error)}`);
        } catch {
          // The connection went away: the broker delivers it again, and it is tried again then.
        }
        return;
      }
      attempt += 1;
      broker.working?.();
      await new Promise((resolve) => setTimeout(resolve, delay));
      continue;
    }
    try {
      await broker.ack();
    } catch {
      // The connection went away after the commit: the broker delivers the message again, and the
      // inbox, which has its id, absorbs it.
    }
    return;
  }
}
