// Enqueue → handler start latency at a steady rate, with wake-up on, each message carrying the
// time it was enqueued (committed): the enqueuer and one worker in this process ("in-process"),
// or the worker in a process of its own ("other process", bench/latency-child.ts), which only a
// wake-up across processes reaches before its next poll (LISTEN/NOTIFY on PostgreSQL, the watch
// on the -wal file on SQLite). MariaDB has no such wake-up (its store wakes only the listeners of
// the enqueuing process): there the other process's worker finds each message at its next poll,
// every LATENCY_POLL_MS, so that row measures the polling.

import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { Worker } from "wassal";
import { openOutbox } from "wassal/lab";
import { percentile } from "./stats.js";

export interface LatencyResult {
  readonly messages: number;
  /** The enqueue rate reached (messages per second): below the rate asked for when each commit takes longer than its share. */
  readonly enqueued: number;
  readonly p50: number;
  readonly p95: number;
  readonly p99: number;
  readonly max: number;
}

const nowMs = () => performance.timeOrigin + performance.now();

export type WorkerPlace = "in-process" | "other process";

/** The measured worker's poll interval: the longest a message waits when no wake-up reaches its worker. */
export const LATENCY_POLL_MS = 1_000;

interface LatencyOptions {
  schema?: string;
  synchronous: "FULL" | "NORMAL";
  rate: number;
  seconds: number;
}

/** Enqueues `total` messages at `rate` per second, each stamped with its time; returns the rate reached. */
async function enqueueAtRate(store: Awaited<ReturnType<typeof openOutbox>>["store"], rate: number, total: number): Promise<number> {
  const started = performance.now();
  for (let n = 0; n < total; n += 1) {
    const wait = started + (n / rate) * 1000 - performance.now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    await store.transaction((tx) => store.enqueue(tx, { type: "bench.latency", payload: { t: nowMs() } }));
  }
  return total / ((performance.now() - started) / 1000);
}

function summary(samples: number[], enqueued: number): LatencyResult {
  return {
    messages: samples.length,
    enqueued,
    p50: percentile(samples, 50),
    p95: percentile(samples, 95),
    p99: percentile(samples, 99),
    max: Math.max(...samples),
  };
}

export function measureLatency(db: string, place: WorkerPlace, options: LatencyOptions): Promise<LatencyResult> {
  return place === "in-process" ? inProcess(db, options) : otherProcess(db, options);
}

async function otherProcess(db: string, options: LatencyOptions): Promise<LatencyResult> {
  const total = Math.round(options.rate * options.seconds);
  const script = fileURLToPath(new URL("./latency-child.js", import.meta.url));
  const child = spawn(process.execPath, [script, db, options.schema ?? "-", options.synchronous, String(total)], { stdio: ["ignore", "pipe", "inherit"] });
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const first = await lines.next();
  if (first.done || first.value !== "ready") throw new Error(`latency-child did not start (said ${JSON.stringify(first.value)})`);
  const outbox = await openOutbox(db, { ...(options.schema ? { schema: options.schema } : {}), synchronous: options.synchronous, maxConnections: 4 });
  let enqueued: number;
  try {
    enqueued = await enqueueAtRate(outbox.store, options.rate, total);
  } finally {
    await outbox.close();
  }
  const last = await lines.next();
  if (last.done) throw new Error("latency-child ended without its samples");
  return summary(JSON.parse(last.value) as number[], enqueued);
}

/** The measured worker (wake-up on, polling every LATENCY_POLL_MS): each handler start records how long after its enqueue it came. */
export async function startLatencyWorker(store: Awaited<ReturnType<typeof openOutbox>>["store"], samples: number[]): Promise<Worker<unknown>> {
  const worker = new Worker({
    store,
    concurrency: 10,
    pollIntervalMs: LATENCY_POLL_MS,
    handlers: {
      "bench.latency": async (message) => {
        samples.push(nowMs() - (message.payload as { t: number }).t);
        return {};
      },
    },
  });
  await worker.start();
  return worker;
}

async function inProcess(db: string, options: LatencyOptions): Promise<LatencyResult> {
  const outbox = await openOutbox(db, { ...(options.schema ? { schema: options.schema } : {}), synchronous: options.synchronous, maxConnections: 4 });
  const samples: number[] = [];
  const worker = await startLatencyWorker(outbox.store, samples);
  const total = Math.round(options.rate * options.seconds);
  const enqueued = await enqueueAtRate(outbox.store, options.rate, total);
  const deadline = performance.now() + 30_000;
  while (samples.length < total && performance.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
  await worker.stop({ graceMs: 1_000 });
  await outbox.close();
  return summary(samples, enqueued);
}
