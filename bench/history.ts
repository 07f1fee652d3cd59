// Processed history for the relay section's history rows: `count` messages enqueued and processed
// before the timed part, through the store's public API only (SQL lives in src/stores): the
// messages go in with enqueueMany, 10,000 per transaction, then are claimed and completed in
// groups (completeMany) until all are processed. Untimed for the figures, but timed itself, so
// the run says what the preload costs.
//
// With ordering keys the messages spread round-robin over `keys` keys named k0, k1, … (the names
// the relay section's timed messages use, so its keys have processed rows of their own). A key has
// one message in flight at a time: each claim returns at most one message per key, so a preload
// over few keys takes many rounds (count ÷ keys at least). The relay section spreads its history
// over 10,000 keys (about 15 s for 100,000 on the shared PostgreSQL here, 8 s on SQLite): over its
// 30 keys, PostgreSQL had processed 28,860 of 100,000 after 300 s (about 75 a second, with 71,000
// waiting behind their keys), far too long to repeat for every run.

import { MAX_CLAIM_LIMIT, MAX_ENQUEUE_MANY, type OutboxStore } from "wassal";

export interface HistoryOptions {
  readonly count: number;
  /** Spread over this many ordering keys, round-robin (k0, k1, …); absent: no keys. */
  readonly keys?: number;
}

/** Enqueues and processes `count` messages; returns the seconds it took. Throws when any is left unprocessed. */
export async function preloadHistory(store: OutboxStore<unknown>, options: HistoryOptions): Promise<number> {
  const started = performance.now();
  for (let done = 0; done < options.count; done += MAX_ENQUEUE_MANY) {
    const batch = Array.from({ length: Math.min(MAX_ENQUEUE_MANY, options.count - done) }, (_, i) => {
      const n = done + i;
      return { type: "bench.history", payload: { n }, ...(options.keys === undefined ? {} : { key: `k${n % options.keys}` }) };
    });
    await store.transaction((tx) => store.enqueueMany(tx, batch));
  }
  // One claimer: a few at once were no faster with keys (each claim takes the heads of the keys).
  for (let processed = 0; processed < options.count; ) {
    const leases = await store.claim("bench-history", { limit: MAX_CLAIM_LIMIT, leaseMs: 600_000 });
    if (leases.length === 0) break;
    const results = await store.completeMany(leases.map((lease) => ({ lease })));
    const lost = results.filter((r) => r.outcome !== "completed");
    if (lost.length > 0) throw new Error(`history: ${lost.length} of ${results.length} completions were not completed (${lost[0]?.outcome})`);
    processed += results.length;
  }
  const counts = await store.countByStatus();
  if (counts.processed !== options.count || counts.pending !== 0 || counts.processing !== 0) {
    throw new Error(`history: expected ${options.count} processed and nothing else, found ${JSON.stringify(counts)}`);
  }
  return (performance.now() - started) / 1000;
}
