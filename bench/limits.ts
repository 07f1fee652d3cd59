// Rate-limited throughput against its limit (store.limit). A fresh store holds `messages` due
// messages of one type limited to `rate` claims in any second; `workers` Workers in this process,
// each with its own store on the database (as separate processes would have), 100 slots and a
// 50 ms poll, work them with a no-op handler. Each claim's time comes from the stores' claim-won
// events: the busiest second (which must not pass the limit), and the paced rate, the claims after
// the first second's burst over the time they took, against the limit. With CPU per message, this
// process's and, on a PostgreSQL server on this machine, the server's.

import { type NewMessage, type OutboxStore, Worker } from "wassal";
import { openOutbox } from "wassal/lab";
import { cpuUsPer, locatePostmaster, serverCpu } from "./server-cpu.js";

export interface LimitFigures {
  readonly rate: number;
  readonly messages: number;
  readonly workers: number;
  readonly seconds: number;
  /** Claims after the first interval's burst, per second of the time they took. */
  readonly pacedPerSecond: number;
  /** pacedPerSecond ÷ the limit. */
  readonly ofLimit: number;
  /** The most claims in any one-second window (≤ rate). */
  readonly busiestSecond: number;
  readonly cpuUsPerMessage: number;
  readonly serverUsPerMessage: number | null;
}

const TYPE = "bench.limited";
const INTERVAL_MS = 1_000;

export async function limitBench(
  db: string,
  options: { schema?: string; synchronous: "FULL" | "NORMAL"; rate: number; messages: number; workers: number },
): Promise<LimitFigures> {
  const opened: Awaited<ReturnType<typeof openOutbox>>[] = [];
  const workers: Worker<unknown>[] = [];
  try {
    for (let n = 0; n < options.workers; n += 1) {
      opened.push(await openOutbox(db, { ...(options.schema ? { schema: options.schema } : {}), synchronous: options.synchronous, maxConnections: 4 }));
    }
    const stores = opened.map((o) => o.store as OutboxStore<unknown>);
    const first = stores[0] as OutboxStore<unknown>;
    await first.migrate();
    await first.limit(TYPE, { rate: { count: options.rate, intervalMs: INTERVAL_MS } });
    for (let from = 0; from < options.messages; from += 1_000) {
      const part: NewMessage[] = [];
      for (let n = from; n < Math.min(options.messages, from + 1_000); n += 1) part.push({ type: TYPE, payload: { n } });
      await first.transaction((tx) => first.enqueueMany(tx, part));
    }
    const claims: number[] = [];
    for (const store of stores) {
      store.events.subscribe((event) => {
        if (event.type === "claim-won") claims.push(event.at.getTime());
      });
    }
    let done = 0;
    const finished = new Promise<void>((resolve) => {
      for (const store of stores) {
        workers.push(
          new Worker({
            store,
            concurrency: 100,
            pollIntervalMs: 50,
            schedulePollMs: false,
            handlers: {
              [TYPE]: async () => {
                done += 1;
                if (done === options.messages) resolve();
                return {};
              },
            },
          }),
        );
      }
    });
    const postmaster = /^postgres(ql)?:\/\//.test(db) ? await locatePostmaster(db) : null;
    const serverBefore = postmaster === null ? null : serverCpu(postmaster);
    const cpu = process.cpuUsage();
    const started = performance.now();
    for (const worker of workers) await worker.start();
    await finished;
    const seconds = (performance.now() - started) / 1000;
    const used = process.cpuUsage(cpu);
    const serverAfter = postmaster === null ? null : serverCpu(postmaster);
    for (const worker of workers) await worker.stop({ graceMs: 1_000 });

    if (claims.length !== options.messages) throw new Error(`limits: ${claims.length} claims of ${options.messages} messages`);
    claims.sort((a, b) => a - b);
    let busiestSecond = 0;
    let from = 0;
    claims.forEach((at, n) => {
      while ((claims[from] as number) <= at - INTERVAL_MS) from += 1;
      busiestSecond = Math.max(busiestSecond, n - from + 1);
    });
    if (busiestSecond > options.rate) throw new Error(`limits: ${busiestSecond} claims in one second, over the limit of ${options.rate}`);
    const firstAt = claims[0] as number;
    const paced = claims.filter((at) => at >= firstAt + INTERVAL_MS);
    const pacedSeconds = ((claims.at(-1) as number) - firstAt - INTERVAL_MS) / 1000 + INTERVAL_MS / 1000;
    const pacedPerSecond = paced.length / pacedSeconds;
    return {
      rate: options.rate,
      messages: options.messages,
      workers: options.workers,
      seconds,
      pacedPerSecond,
      ofLimit: pacedPerSecond / options.rate,
      busiestSecond,
      cpuUsPerMessage: (used.user + used.system) / options.messages,
      serverUsPerMessage: cpuUsPer(serverBefore, serverAfter, options.messages),
    };
  } finally {
    for (const worker of workers) await worker.stop({ graceMs: 0 }).catch(() => undefined);
    for (const o of opened) await o.close();
  }
}
