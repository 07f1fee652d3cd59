// Group commit for the worker: completions that become ready at about the same time share one
// transaction (store.completeMany), each in its own savepoint. A durable commit costs a disk
// flush, so sharing it is what lets a worker be fast and durable at once.
//
// Completions wait for the current flush (if any) plus one turn of the event loop, never for a
// timer: under light load a completion commits at once; under heavy load batches grow by themselves.
//
// Which completions are grouped depends on the store. `npm run bench -- --sections throughput`
// measures the gain (rows "wassal" against "wassal (no group commit)", no-op handlers):
// - SQLite has one writer and every commit flushes: grouping wins; savepoints isolate the
//   completions that carry business writes.
// - PostgreSQL commits in parallel over the pool. Completions without business writes are grouped
//   into one statement. Completions with business writes would need a savepoint each, three round
//   trips apiece on one connection; a one-off measurement found that slower than parallel single
//   commits, so those commit one by one (the benchmark does not measure handlers with business
//   writes yet).

import type { OutboxStore } from "./store.js";
import type { Completed, CompletionRequest, Finalize, Lease, LeaseLost } from "./types.js";

interface Waiting<Tx> {
  readonly request: CompletionRequest<Tx>;
  readonly resolve: (result: Completed | LeaseLost) => void;
  readonly reject: (error: unknown) => void;
}

export class CompletionBatcher<Tx> {
  readonly #store: OutboxStore<Tx>;
  readonly #maxBatch: number;
  #waiting: Waiting<Tx>[] = [];
  #flushing = false;
  #scheduled = false;
  /** Completions per commit, for metrics and benchmarks. */
  readonly batchSizes: number[] = [];

  readonly #groupBusinessWrites: boolean;

  constructor(store: OutboxStore<Tx>, maxBatch = 100, groupBusinessWrites = store.kind === "sqlite") {
    this.#store = store;
    this.#maxBatch = maxBatch;
    this.#groupBusinessWrites = groupBusinessWrites;
  }

  /** Like store.complete, but shares its commit with the completions around it. */
  complete(lease: Lease, finalize?: Finalize<Tx>): Promise<Completed | LeaseLost> {
    if (finalize && !this.#groupBusinessWrites) return this.#store.complete(lease, finalize);
    return new Promise((resolve, reject) => {
      this.#waiting.push({ request: finalize ? { lease, finalize } : { lease }, resolve, reject });
      this.#schedule();
    });
  }

  #schedule(): void {
    if (this.#flushing || this.#scheduled) return;
    this.#scheduled = true;
    setImmediate(() => {
      this.#scheduled = false;
      void this.#flush();
    });
  }

  async #flush(): Promise<void> {
    if (this.#flushing || this.#waiting.length === 0) return;
    this.#flushing = true;
    const batch = this.#waiting.splice(0, this.#maxBatch);
    this.batchSizes.push(batch.length);
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
      this.#flushing = false;
      if (this.#waiting.length > 0) this.#schedule();
    }
  }
}
