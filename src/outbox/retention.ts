// Built-in retention: a loop that, every interval, deletes the rows older than an age of each kind
// (processed messages, dead messages, audit rows, inbox ids) through the store's own purges, in
// short batches, so a long-running process keeps its outbox from growing without anyone
// scheduling `wassal outbox purge`. Its passes are idempotent deletes: several processes may run
// it on one database at once (a row is deleted once; a concurrent batch skips or waits for it).

import { setImmediate } from "node:timers/promises";
import { type Clock, systemClock } from "./clock.js";
import { InvalidArgumentError } from "./errors.js";
import type { OutboxStore } from "./store.js";
import type { PurgeOptions } from "./types.js";
import { checkBatchSize, checkObject } from "./validate.js";

/** What retention deletes: processed messages, dead messages, audit rows, inbox ids. */
export type RetentionKind = "processed" | "dead" | "audit" | "inbox";

/** Every kind, in the order a pass purges them. */
export const RETENTION_KINDS: readonly RetentionKind[] = ["processed", "dead", "audit", "inbox"];

/**
 * The shortest inbox retention taken (1 hour). An inbox id must outlive every way its message can
 * come again (the broker's redelivery, the relay's lease and retries, a webhook's 5-minute replay
 * tolerance): deleted earlier, a redelivered message would be applied twice.
 */
export const MIN_INBOX_RETENTION_MS = 3_600_000;

/** The default time between two passes (10 minutes). */
export const DEFAULT_RETENTION_INTERVAL_MS = 600_000;

/** How long each kind of row is kept, in milliseconds; a kind left out is never purged. */
export interface RetentionAges {
  /** Processed messages, by when they were processed. A purged message's dedupe key is free again. */
  readonly processed?: number;
  /** Dead messages, by when they died (one blocking its ordering key stays until redriven or skipped). */
  readonly dead?: number;
  /** Audit rows, by when they were written. */
  readonly audit?: number;
  /** Inbox ids, by when they were received; at least MIN_INBOX_RETENTION_MS. */
  readonly inbox?: number;
}

export interface RetentionOptions extends RetentionAges {
  /** Time from the end of one pass to the start of the next (default 10 minutes). The first pass starts at once. */
  readonly intervalMs?: number;
  /** Rows deleted per transaction (default 1000, at most 100000). */
  readonly batchSize?: number;
  /** Where "now" and the waits come from (default: the system clock). */
  readonly clock?: Clock;
  /**
   * Called after every pass, one that failed or was cut short by stop() included, with what it
   * deleted. A callback that throws does not stop retention.
   */
  readonly onPass?: (pass: RetentionPass) => void;
}

/** What one pass did. */
export interface RetentionPass {
  /** When it started (by the retention's clock). */
  readonly startedAt: Date;
  /** Rows deleted per kind purged (those whose age was given), failed or cut-short ones included. */
  readonly deleted: Readonly<Partial<Record<RetentionKind, number>>>;
  /** Per kind purged: rows older than this went (startedAt minus the kind's age). */
  readonly cutoffs: Readonly<Partial<Record<RetentionKind, Date>>>;
  /** Whether stop() cut it short (the batch in progress committed, no further one ran). */
  readonly stopped: boolean;
  /** When a purge failed: which kind and why. The pass ends there; the next interval tries again. */
  readonly failure?: { readonly kind: RetentionKind; readonly error: unknown };
}

/** A running retention (see startRetention). */
export interface Retention {
  /** The ages in effect. */
  readonly ages: Readonly<RetentionAges>;
  readonly intervalMs: number;
  /**
   * Stops it: a pass in progress ends after its current batch commits; no further pass starts.
   * Resolves once nothing of it runs. Safe to call twice.
   */
  stop(): Promise<void>;
}

function checkAge(value: unknown, kind: RetentionKind): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== "number" || !Number.isFinite(value) || value <= 0) {
    throw new InvalidArgumentError(`retention ${kind} must be a number of milliseconds > 0, or left out to keep ${kind} rows (got ${String(value)})`);
  }
  if (kind === "inbox" && value < MIN_INBOX_RETENTION_MS) {
    throw new InvalidArgumentError(
      `retention inbox must be at least ${MIN_INBOX_RETENTION_MS} ms (1 hour), got ${value}: an inbox id must outlive every redelivery of its message (the broker's, the relay's retries, a webhook's 5-minute replay window), or that message is applied twice`,
    );
  }
  return value;
}

/**
 * Starts deleting, every `intervalMs` (the first pass at once), the rows older than each given
 * age, through the store's purges in batches of `batchSize`, yielding to the process's other
 * work between batches. One pass at a time; a failed pass is reported (onPass) and the next
 * interval tries again. Throws InvalidArgumentError, starting nothing, on an age that is not > 0,
 * an inbox age under MIN_INBOX_RETENTION_MS, or no age at all.
 */
export function startRetention(store: OutboxStore<unknown>, options: RetentionOptions): Retention {
  const o = checkObject(options, "retention options");
  const ages: RetentionAges = Object.fromEntries(
    RETENTION_KINDS.flatMap((kind) => {
      const age = checkAge(o[kind], kind);
      return age === undefined ? [] : [[kind, age]];
    }),
  );
  const kinds = RETENTION_KINDS.filter((kind) => ages[kind] !== undefined);
  if (kinds.length === 0) throw new InvalidArgumentError("retention needs at least one age: processed, dead, audit or inbox (milliseconds)");
  const intervalMs = o.intervalMs ?? DEFAULT_RETENTION_INTERVAL_MS;
  if (typeof intervalMs !== "number" || !Number.isFinite(intervalMs) || intervalMs < 1) {
    throw new InvalidArgumentError(`retention intervalMs must be a number of milliseconds >= 1 (got ${String(intervalMs)})`);
  }
  const batchSize = checkBatchSize(o.batchSize ?? 1000, "retention batchSize");
  const clock = o.clock ?? systemClock;
  const stopping = new AbortController();
  const { signal } = stopping;

  const report = (pass: RetentionPass): void => {
    try {
      o.onPass?.(pass);
    } catch {
      // A reporting callback that throws must not end retention: the next pass still runs.
    }
  };

  const pass = async (): Promise<void> => {
    const startedAt = clock.now();
    const deleted: Partial<Record<RetentionKind, number>> = {};
    const cutoffs: Partial<Record<RetentionKind, Date>> = {};
    let failure: RetentionPass["failure"];
    for (const kind of kinds) {
      if (signal.aborted) break;
      const cutoff = new Date(startedAt.getTime() - (ages[kind] as number));
      cutoffs[kind] = cutoff;
      deleted[kind] = 0;
      const purge: PurgeOptions = { batchSize, signal, onProgress: (n) => (deleted[kind] = n) };
      try {
        const purged = { processed: store.purgeProcessed, dead: store.purgeDead, audit: store.purgeAudit, inbox: store.purgeInbox }[kind];
        deleted[kind] = await purged.call(store, cutoff, purge);
      } catch (error) {
        failure = { kind, error };
        break;
      }
    }
    report({ startedAt, deleted, cutoffs, stopped: signal.aborted, ...(failure === undefined ? {} : { failure }) });
  };

  const loop = (async () => {
    // Not in the caller's turn: startRetention returns first.
    await setImmediate();
    while (!signal.aborted) {
      await pass();
      if (signal.aborted) break;
      await clock.sleep(intervalMs, signal);
    }
  })();

  return {
    ages,
    intervalMs,
    async stop() {
      stopping.abort();
      await loop;
    },
  };
}
