// The dashboard's view of the outbox over time: it reads the store's stats every poll, keeps the
// processed and dead counts of the last minutes (so throughput needs no query over history), and
// tells live pages when anything they show has changed.

import type { OutboxStore } from "../outbox/store.js";
import type { OutboxStats } from "../outbox/types.js";

/** One reading of the counts. */
interface Sample {
  readonly at: number;
  readonly processed: number;
  readonly dead: number;
}

/** Messages that finished in one minute of the window. */
export interface MinuteThroughput {
  /** The minute's start. */
  readonly from: Date;
  readonly processed: number;
  readonly dead: number;
  /**
   * False for a minute whose figures are a lower bound: the dashboard started inside it, a reading
   * failed, or a count fell (a purge or a redrive took rows away while others finished).
   */
  readonly whole: boolean;
}

export const THROUGHPUT_MINUTES = 10;

export class Pulse {
  readonly #store: OutboxStore<unknown>;
  readonly #pollMs: number;
  readonly #samples: Sample[] = [];
  /** When a reading failed or a count fell: the minutes holding these are not whole. */
  readonly #gaps: number[] = [];
  readonly #listeners = new Set<(signature: string) => void>();
  #timer: NodeJS.Timeout | undefined;
  #latest: OutboxStats | undefined;
  #signature = "";
  #error: string | null = null;
  readonly #now: () => number;

  constructor(store: OutboxStore<unknown>, pollMs: number, now: () => number = Date.now) {
    this.#store = store;
    this.#pollMs = pollMs;
    this.#now = now;
  }

  /** Reads once now, then every poll until stop(). */
  async start(): Promise<void> {
    await this.poll();
    const tick = () => {
      this.#timer = setTimeout(() => void this.poll().finally(() => this.#timer !== undefined && tick()), this.#pollMs);
      this.#timer.unref();
    };
    tick();
  }

  stop(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  /** The last stats read (reads them now if none were read yet). */
  async stats(): Promise<OutboxStats> {
    if (this.#latest === undefined) await this.poll();
    if (this.#latest === undefined) throw new Error(this.#error ?? "the outbox's stats could not be read");
    return this.#latest;
  }

  /** Why the last reading failed, or null. */
  get error(): string | null {
    return this.#error;
  }

  /** Changes at each reading whose counts or leases differ from the one before. */
  get signature(): string {
    return this.#signature;
  }

  /** Calls `listener` after every reading that changed the signature; the returned function stops it. */
  onChange(listener: (signature: string) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Processed and dead messages per minute over the last minutes, oldest first, from the readings. */
  throughput(now: number = this.#now()): MinuteThroughput[] {
    const minute = 60_000;
    const end = Math.floor(now / minute) * minute + minute;
    const first = this.#samples[0]?.at ?? now;
    const minutes: MinuteThroughput[] = [];
    for (let start = end - THROUGHPUT_MINUTES * minute; start < end; start += minute) {
      const before = this.#at(start);
      const after = this.#at(Math.min(start + minute, now));
      minutes.push({
        from: new Date(start),
        processed: before && after ? Math.max(after.processed - before.processed, 0) : 0,
        dead: before && after ? Math.max(after.dead - before.dead, 0) : 0,
        whole: first <= start && start + minute <= now && !this.#gaps.some((at) => at >= start && at < start + minute),
      });
    }
    return minutes;
  }

  /** The last reading at or before `at`; the first one when `at` comes before every reading inside the window. */
  #at(at: number): Sample | undefined {
    let found: Sample | undefined;
    for (const sample of this.#samples) {
      if (sample.at > at) break;
      found = sample;
    }
    const first = this.#samples[0];
    return found ?? (first !== undefined && first.at <= at + 60_000 ? first : undefined);
  }

  /** Reads the stats once now (start() does it every poll). */
  async poll(): Promise<void> {
    try {
      const stats = await this.#store.stats();
      this.#error = null;
      this.#latest = stats;
      const now = this.#now();
      const last = this.#samples.at(-1);
      if (last !== undefined && (stats.counts.processed < last.processed || stats.counts.dead < last.dead)) this.#gaps.push(now);
      this.#samples.push({ at: now, processed: stats.counts.processed, dead: stats.counts.dead });
      const horizon = now - (THROUGHPUT_MINUTES + 1) * 60_000;
      while ((this.#samples[0]?.at ?? now) < horizon) this.#samples.shift();
      while ((this.#gaps[0] ?? now) < horizon) this.#gaps.shift();
      const signature = JSON.stringify([stats.counts, stats.leasesByOwner, stats.expiredLeases]);
      if (signature !== this.#signature) {
        this.#signature = signature;
        for (const listener of this.#listeners) listener(signature);
      }
    } catch (error) {
      this.#error = error instanceof Error ? error.message : String(error);
      this.#gaps.push(this.#now());
    }
  }
}
