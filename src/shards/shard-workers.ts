// One worker per shard, in one process: each shard is claimed on its own schedule, with its own
// concurrency and lease, so a busy or stopped shard never holds back the others.

import { defaultWorkerName, Worker, type WorkerOptions } from "../outbox/worker.js";
import type { ShardedOutbox } from "./sharded-outbox.js";

/** Worker options for every shard: each worker gets the same, with its shard's store. */
export type ShardWorkerOptions<Tx> = Omit<WorkerOptions<Tx>, "store">;

/** The workers of a sharded outbox, one per shard. */
export class ShardWorkers<Tx> {
  /** One worker per shard, in shard order; each is named `<name>-shard<n>`. */
  readonly workers: readonly Worker<Tx>[];

  constructor(outbox: ShardedOutbox<Tx>, options: ShardWorkerOptions<Tx>) {
    const name = options.name ?? defaultWorkerName();
    this.workers = outbox.shards.map((store, shard) => new Worker({ ...options, store, name: `${name}-shard${shard}` }));
  }

  /** Starts every shard's worker; if one fails to start, stops the ones started and rethrows. */
  async start(): Promise<void> {
    const started = await Promise.allSettled(this.workers.map((worker) => worker.start()));
    const failed = started.find((result): result is PromiseRejectedResult => result.status === "rejected");
    if (failed !== undefined) {
      await this.stop();
      throw failed.reason;
    }
  }

  /** Stops every shard's worker (see Worker.stop). */
  async stop(options: { readonly graceMs?: number } = {}): Promise<void> {
    await Promise.all(this.workers.map((worker) => worker.stop(options)));
  }

  /** Handlers running now, over all shards. */
  get inFlight(): number {
    return this.workers.reduce((sum, worker) => sum + worker.inFlight, 0);
  }
}
