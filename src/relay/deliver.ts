// What every consumer does with one delivered message, whatever the broker: apply it through the
// inbox in the consumer's transaction, then acknowledge it; if the handler throws, try it again in
// place (so nothing behind it overtakes it), and after maxAttempts give it up (the broker's
// "terminate" or "reject") and report it. An acknowledgement that fails (the connection went away)
// is left to the broker's redelivery, which the inbox absorbs.
//
// Each key's order holds across crashes and redeliveries: a relay sends each keyed message's number
// in its key's order, and the inbox applies number n only after n − 1. A message that arrives early
// (its predecessor is still out: held by a consumer that died, coming again after the broker's ack
// wait, or in another consumer's hands) is held back: parked in the consumer's hands where it can
// go on with the messages behind it (NATS, Redis Streams: parking.ts), else held in place for a
// while and then handed back to the broker (RabbitMQ, whose consumer takes one message at a time).
//
// Stopping: once a consumer stops, no try of the handler starts (not a new message, not another
// try of a failing one); a wait between tries ends at once, and the message goes back to the broker
// unapplied (`giveBack`), or stays unacknowledged. Its tries start again from one wherever it comes.

import { InvalidArgumentError } from "../outbox/errors.js";
import type { Inbox } from "./inbox.js";

/** A message as the consumer's handler gets it. */
export interface DeliveredMessage {
  /** The id the inbox records: the publisher's message id. */
  readonly id: string;
  readonly type: string | null;
  readonly key: string | null;
  /** The message's number in its key's order (the relay's Wassal-Key-Seq), or null: then it is applied by its id alone. */
  readonly keySeq: number | null;
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
  /** Deliveries held back because an earlier message of their key had not been applied yet (each handed back to come again). */
  early: number;
  /** Of the messages applied, those whose number their key had passed (a number given twice): applied out of their place rather than lost. */
  late: number;
}

/** A fresh set of consumer counters. */
export function newConsumerStats(): ConsumerStats {
  return { applied: 0, duplicates: 0, failed: 0, terminated: 0, early: 0, late: 0 };
}

export interface ConsumerRetry {
  /** Tries of a message whose handler throws, before it is given up (default 5). */
  readonly maxAttempts?: number;
  /** The wait before the second try, doubling each time up to 30 s (default 1 000 ms). */
  readonly retryDelayMs?: number;
  /** Told of each handler failure; `final` when the message is given up. */
  readonly onError?: (error: unknown, message: DeliveredMessage, final: boolean) => void;
  /**
   * Told of each delivery held back because its key waits for an earlier number (`waitingFor`). A
   * key that keeps waiting has a gap: see `inbox.blockedKeys()` and `inbox.unblockKey(key, "skip")`.
   */
  readonly onEarly?: (message: DeliveredMessage, waitingFor: number) => void;
  /**
   * Told of each message applied out of its key's order: not seen before, with a number its key had
   * passed (a number the producer gave twice: a message skipped in its outbox after the broker had
   * it, or a producer's database restored from a backup). Applied rather than lost.
   */
  readonly onLate?: (message: DeliveredMessage) => void;
}

/** How a consumer stops (every broker's). */
export interface ConsumerShutdown {
  /**
   * How long `stop()` waits at most for a handler already running to finish (default 10 000 ms).
   * Past it, `stop()` returns anyway: the run goes on in the background, its message is left
   * unacknowledged, and the broker delivers it again (the inbox absorbs it if that run committed).
   */
  readonly shutdownGraceMs?: number;
}

/** The grace a consumer's `stop()` waits for the handler in hand, checked. */
export function checkGrace(graceMs: number | undefined, name = "shutdownGraceMs"): number {
  const grace = graceMs ?? 10_000;
  if (!Number.isFinite(grace) || grace < 0) throw new InvalidArgumentError(`${name} must be a number of milliseconds >= 0 (got ${String(grace)})`);
  return grace;
}

/** Waits `ms`, or less: until `signal` is aborted. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise<void>((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}

/** True when `work` settles within `ms`; false when the time ran out first (`work` goes on). */
export async function settlesWithin(work: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const over = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), ms)));
  try {
    return await Promise.race([
      work.then(
        () => true as const,
        () => true as const,
      ),
      over,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** What the broker lets a consumer do with the message in hand. */
export interface Acknowledger {
  ack(): Promise<void> | void;
  /** Give the message up for good (no redelivery), saying why. */
  giveUp(reason: string): Promise<void> | void;
  /** Tell the broker the message is still being worked on (optional). */
  working?(): void;
  /**
   * True once the consumer is stopping: no try of the handler starts after that; the message is
   * handed back with `giveBack` (or, without it, left unacknowledged for redelivery).
   */
  stopping?(): boolean;
  /** Aborted when the consumer stops: a wait between tries (or for the database) ends at once. */
  readonly signal?: AbortSignal;
  /**
   * Puts an early message aside to be tried again later, without holding up the messages behind it
   * (NATS and Redis Streams park it in the consumer's hands). Without it, an early message is held
   * in place, its key checked again and again, and after a while handed back with `giveBack`.
   */
  defer?(): Promise<void> | void;
  /**
   * Hands a message back to the broker now, unapplied, to be delivered again at once (NATS: nak;
   * RabbitMQ: reject with requeue): an early one held in place too long, or one the consumer stops
   * before it could apply it. Without it, the message is left unacknowledged (redelivered after
   * the broker's ack wait, or resumed by the same consumer name).
   */
  giveBack?(): Promise<void> | void;
  /** True for a message this consumer held back before (parked, now tried again): not counted or reported as early again. */
  readonly heldBefore?: boolean;
}

/** How long an early message is held in place (re-checked with growing waits) before it is handed back. */
const HOLD_IN_PLACE_MS = 5_000;

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

/** A message's number in its key's order from its header or field: a whole number from 1, else null (applied by its id alone). */
export function keySeqOf(text: string | null | undefined): number | null {
  if (typeof text !== "string" || !/^[1-9][0-9]{0,15}$/.test(text)) return null;
  const seq = Number(text);
  return Number.isSafeInteger(seq) ? seq : null;
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
  reports: Pick<ConsumerRetry, "onError" | "onEarly" | "onLate"> = {},
): Promise<void> {
  const report = (error: unknown, final: boolean) => {
    try {
      reports.onError?.(error, message, final);
    } catch {
      // a report that throws must not stop the consumer
    }
  };
  let heldSince: number | undefined;
  const signal = broker.signal;
  const pause = (ms: number) => sleep(ms, signal);
  // Stopping: no try starts any more; the message goes back unapplied (or is left unacknowledged).
  const handBack = async () => {
    try {
      await broker.giveBack?.();
    } catch {
      // the connection went away: the broker delivers it again after its ack wait
    }
  };
  for (let attempt = 1, delay = retry.delayMs, holdDelay = 50; ; ) {
    if (broker.stopping?.()) return handBack();
    try {
      const received = await inbox.handle(message, async (tx) => {
        try {
          return await handle(message, tx);
        } catch (error) {
          throw new HandlerFailure(error);
        }
      });
      if (received.early) {
        if (heldSince === undefined) {
          heldSince = performance.now();
          if (broker.heldBefore !== true) {
            stats.early += 1;
            try {
              reports.onEarly?.(message, received.waitingFor);
            } catch {
              // as report
            }
          }
        }
        if (broker.defer !== undefined) return void (await broker.defer());
        if (broker.stopping?.() || performance.now() - heldSince >= HOLD_IN_PLACE_MS) return handBack();
        // Held in place: its predecessor may be in another consumer's hands right now.
        broker.working?.();
        await pause(holdDelay);
        holdDelay = Math.min(holdDelay * 2, 1_000);
        continue;
      }
      if (received.duplicate) stats.duplicates += 1;
      else {
        stats.applied += 1;
        if ("late" in received && received.late) {
          stats.late += 1;
          try {
            reports.onLate?.(message);
          } catch {
            // as report
          }
        }
      }
    } catch (caught) {
      if (!(caught instanceof HandlerFailure)) {
        // The consumer's own database failed (down, busy): nothing was applied and the handler is
        // not to blame. Try again without spending an attempt, until it works or the consumer stops.
        report(caught, false);
        if (broker.stopping?.()) return handBack();
        broker.working?.();
        await pause(delay);
        delay = Math.min(delay * 2, 30_000);
        continue;
      }
      const error = caught.error;
      stats.failed += 1;
      const final = attempt >= retry.maxAttempts;
      report(error, final);
      if (final) {
        stats.terminated += 1;
        // Given up: its key moves on past it (as a skip would), or every later message of the key
        // would wait for it for ever. Its id and number are recorded, nothing else is written; tried
        // until it commits (the consumer's database failing spends nothing), and given up only then.
        if (message.key !== null && message.keySeq !== null) {
          for (let wait = retry.delayMs; ; wait = Math.min(Math.max(wait, 50) * 2, 30_000)) {
            try {
              await inbox.handle(message, () => undefined);
              break;
            } catch (recordError) {
              report(recordError, false);
              if (broker.stopping?.()) return handBack(); // delivered again, and tried again then
              broker.working?.();
              await pause(wait);
            }
          }
        }
        try {
          await broker.giveUp(`the handler failed ${attempt} times: ${error instanceof Error ? error.message : String(error)}`);
        } catch {
          // The connection went away: the broker delivers it again, and it is tried again then.
        }
        return;
      }
      attempt += 1;
      if (broker.stopping?.()) return handBack(); // tried again by whoever takes it next
      broker.working?.();
      await pause(delay);
      delay = Math.min(delay * 2, 30_000);
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
