// Enqueue throughput: `messages` messages enqueued through store.transaction + store.enqueue,
// `perTransaction` to a transaction (1: every message commits on its own, so on SQLite FULL each
// one waits for a flush to disk; 100: a hundred share one commit), or with `many` through one
// store.enqueueMany call per transaction (one multi-row INSERT), timed from the first BEGIN to
// the last COMMIT, in this process, on a fresh empty store, after an untimed warm-up of a few
// transactions of the same shape (a cold first repetition would otherwise be the minimum).

import { openOutbox } from "wassal/lab";

const WARM_UP_TRANSACTIONS = 5;

export async function enqueueRate(
  db: string,
  options: { schema?: string; synchronous: "FULL" | "NORMAL"; messages: number; perTransaction: number; many?: boolean },
): Promise<number> {
  const outbox = await openOutbox(db, { ...(options.schema ? { schema: options.schema } : {}), synchronous: options.synchronous, maxConnections: 2 });
  const enqueue = async (from: number, to: number) => {
    for (let done = from; done < to; done += options.perTransaction) {
      const end = Math.min(to, done + options.perTransaction);
      await outbox.store.transaction(async (tx) => {
        if (options.many) {
          const messages = [];
          for (let n = done; n < end; n += 1) messages.push({ type: "bench.enqueue", payload: { n } });
          await outbox.store.enqueueMany(tx, messages);
        } else {
          for (let n = done; n < end; n += 1) await outbox.store.enqueue(tx, { type: "bench.enqueue", payload: { n } });
        }
      });
    }
  };
  try {
    const warmUp = WARM_UP_TRANSACTIONS * options.perTransaction;
    await enqueue(0, warmUp);
    const started = performance.now();
    await enqueue(warmUp, warmUp + options.messages);
    const seconds = (performance.now() - started) / 1000;
    const counts = await outbox.store.countByStatus();
    if (counts.pending !== warmUp + options.messages) throw new Error(`enqueue: ${counts.pending} pending after enqueuing ${warmUp} + ${options.messages}`);
    return options.messages / seconds;
  } finally {
    await outbox.close();
  }
}
