// Group commit for the worker: completions that become ready at about the same time share one
// transaction (store.completeMany), each in its own savepoint. A durable commit costs a disk
// flush, so sharing it is what lets a worker be fast and durable at once.
//
// Completions wait for a free commit slot (one on SQLite, a few on PostgreSQL) plus one turn of
// the event loop, never for a timer: under light load a completion commits at once; under heavy
// load groups grow by themselves.
//
// Every completion is grouped, on both stores: those without business writes share one guarded
// statement, each of the others gets its own savepoint (on PostgreSQL opened in the same round
// trip as its guarded update), so a business write that fails undoes only its own completion.
// `npm run bench` measures the gain (rows "wassal" against "wassal (no group commit)", no-op
// handlers) and the payments handler's throughput (business writes) next to the no-op's.

import { LeaseSet } from "./driver.js";
import type { OutboxStore } from "./store.js";
import type { Completed, CompletionRequest, Finalize, Lease, LeaseLost } from "./types.js";
import { InvalidArgumentError } from "./errors.js";
import { checkLease } from "./validate.js";

interface Waiting<Tx> {
  readonly request: CompletionRequest<Tx>;
  readonly resolve: (result: Completed | LeaseLost) => void;
  readonly reject: (error: unknown) => void;
}

/** How many commit sizes `batchSizes` keeps (a worker runs for days: the history must not grow without end). */
const SIZE_HISTORY = 1_000;

export class CompletionBatcher<Tx> {
  readonly #store: OutboxStore<Tx>;
  readonly #maxBatch: number;
  readonly #parallel: number;
  #waiting: Waiting<Tx>[] = [];
  #inFlight = 0;
  #scheduled = false;
  /** Completions per commit, the latest last (up to the last 1,000 commits), for metrics and benchmarks. */
  readonly batchSizes: number[] = [];

  /**
   * `parallel`: how many group commits may be in flight at once. SQLite has one writer, so one;
   * PostgreSQL commits in parallel over its pool, and a second group flushing while the first
   * waits for its disk flush keeps the worker busy (default 4 there).
   *
   * Tried on PostgreSQL with 1, 2 and 4 (issue 17, 3 interleaved rounds of the bench's throughput
   * and payments sections, 10,000 messages, worker processes and server CPU µs per message,
   * medians): no-op with 1 process 124 / 133 / 121, with 4 processes 301 / 266 / 309; payments
   * with 1 process 239 / 217 / 243, with 4 processes 549 / 652 / 528. Single runs spread by up to
   * 3 × on that machine, so none of the three was better beyond noise; 4 stays.
   */
  constructor(store: OutboxStore<Tx>, maxBatch = 100, parallel = store.capabilities.parallelCommits ? 4 : 1) {
    this.#store = store;
    this.#maxBatch = maxBatch;
    this.#parallel = parallel;
  }

  /** Like store.complete, but shares its commit with the completions around it. */
  complete(lease: Lease, finalize?: Finalize<Tx>): Promise<Completed | LeaseLost> {
    return new Promise((resolve, reject) => {
      // A malformed request fails alone, not its whole group.
      checkLease(lease);
      if (finalize !== undefined && typeof finalize !== "function")
        throw new InvalidArgumentError(`finalize must be a function of the transaction (got ${typeof finalize})`);
      this.#waiting.push({ request: finalize ? { lease, finalize } : { lease }, resolve, reject });
      this.#schedule();
    });
  }

  #schedule(): void {
    if (this.#inFlight >= this.#parallel || this.#scheduled) return;
    this.#scheduled = true;
    setImmediate(() => {
      this.#scheduled = false;
      void this.#flush();
    });
  }

  /**
   * How many of the waiting completions the next group takes: up to maxBatch, ending before a
   * lease the group already holds (completed twice by mistake, it goes to the next group, which
   * then reports it lost, as two separate completions would; completeMany refuses duplicates).
   */
  #groupSize(): number {
    const leases = new LeaseSet();
    const end = Math.min(this.#waiting.length, this.#maxBatch);
    for (let i = 0; i < end; i++) {
      const { lease } = (this.#waiting[i] as Waiting<Tx>).request;
      if (!leases.add(lease.messageId, lease.token)) return i;
    }
    return end;
  }

  async #flush(): Promise<void> {
    if (this.#inFlight >= this.#parallel || this.#waiting.length === 0) return;
    this.#inFlight += 1;
    const batch = this.#waiting.splice(0, this.#groupSize());
    this.batchSizes.push(batch.length);
    if (this.batchSizes.length > SIZE_HISTORY) this.batchSizes.shift();
    // More waiting than one group takes: start the next group now, if a commit slot is free.
    if (this.#waiting.length > 0) this.#schedule();
    try {
      const results = await this.#store.completeMany(batch.map((w) => w.request));
      batch.forEach((waiting, index) => {
        const result = results[index];
        if (result === undefined) waiting.reject(new Error("completeMany returned fewer results than requests"));
        else if (result.outcome === "failed") waiting.reject(result.error);
        else waiting.resolve(result);
      });
    } catch (error) {
      // The commit itself failed: nothing of the batch was written; each caller sees the error.
      for (const waiting of batch) waiting.reject(error);
    } finally {
      this.#inFlight -= 1;
      if (this.#waiting.length > 0) this.#schedule();
    }
  }
}
