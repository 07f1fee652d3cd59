// Enqueue → handler start latency at a steady rate, with wake-up on, each message carrying the
// time its enqueue began (stamped before its transaction, so a sample includes the enqueue's own
// commit; that commit is also reported apart, as is the rest, commit → handler start): the
// enqueuer and one worker in this process ("in-process"), or the worker in a process of its own
// ("other process", bench/latency-child.ts), which only a wake-up across processes reaches before
// its next poll (LISTEN/NOTIFY on PostgreSQL, the watch on the -wal file on SQLite). MariaDB has no
// such wake-up (its store wakes only the listeners of the enqueuing process): there the other
// process's worker finds each message at its next poll, every LATENCY_POLL_MS, so that row
// measures the polling.

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
  /** The enqueue's own transaction, from the stamp to its commit returning (the database's time, inside each sample). */
  readonly commit: Percentiles;
  /** From the enqueue's commit returning to the handler's start: the wake-up, the claim and the dispatch. */
  readonly afterCommit: Percentiles;
}

export interface Percentiles {
  readonly p50: number;
  readonly p99: number;
}

/** One handler start: the message's number in the run and how long after its stamp (taken before its enqueue's transaction) it started, ms. */
export type LatencySample = readonly [n: number, ms: number];

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

interface Enqueued {
  /** The rate reached, messages per second. */
  readonly rate: number;
  /** Each message's enqueue transaction, stamp to commit, ms, by its number. */
  readonly commitMs: readonly number[];
}

/** Enqueues `total` messages at `rate` per second, each stamped with its time (before its transaction) and its number. */
async function enqueueAtRate(store: Awaited<ReturnType<typeof openOutbox>>["store"], rate: number, total: number): Promise<Enqueued> {
  const started = performance.now();
  const commitMs: number[] = [];
  for (let n = 0; n < total; n += 1) {
    const wait = started + (n / rate) * 1000 - performance.now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    const t = nowMs();
    await store.transaction((tx) => store.enqueue(tx, { type: "bench.latency", payload: { t, n } }));
    commitMs.push(nowMs() - t);
  }
  return { rate: total / ((performance.now() - started) / 1000), commitMs };
}

function summary(samples: readonly LatencySample[], enqueued: Enqueued): LatencyResult {
  const ms = samples.map(([, value]) => value);
  const commits = samples.map(([n]) => enqueued.commitMs[n] ?? 0);
  const after = samples.map(([n, value]) => value - (enqueued.commitMs[n] ?? 0));
  return {
    messages: samples.length,
    enqueued: enqueued.rate,
    p50: percentile(ms, 50),
    p95: percentile(ms, 95),
    p99: percentile(ms, 99),
    max: Math.max(...ms),
    commit: { p50: percentile(commits, 50), p99: percentile(commits, 99) },
    afterCommit: { p50: percentile(after, 50), p99: percentile(after, 99) },
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
  let enqueued: Enqueued;
  try {
    enqueued = await enqueueAtRate(outbox.store, options.rate, total);
  } finally {
    await outbox.close();
  }
  const last = await lines.next();
  if (last.done) throw new Error("latency-child ended without its samples");
  return summary(JSON.parse(last.value) as LatencySample[], enqueued);
}

/** The measured worker (wake-up on, polling every LATENCY_POLL_MS): each handler start records how long after its enqueue it came. */
export async function startLatencyWorker(store: Awaited<ReturnType<typeof openOutbox>>["store"], samples: LatencySample[]): Promise<Worker<unknown>> {
  const worker = new Worker({
    store,
    concurrency: 10,
    pollIntervalMs: LATENCY_POLL_MS,
    handlers: {
      "bench.latency": async (message) => {
        const { t, n } = message.payload as { t: number; n: number };
        samples.push([n, nowMs() - t]);
        return {};
      },
    },
  });
  await worker.start();
  return worker;
}

async function inProcess(db: string, options: LatencyOptions): Promise<LatencyResult> {
  const outbox = await openOutbox(db, { ...(options.schema ? { schema: options.schema } : {}), synchronous: options.synchronous, maxConnections: 4 });
  const samples: LatencySample[] = [];
  const worker = await startLatencyWorker(outbox.store, samples);
  const total = Math.round(options.rate * options.seconds);
  const enqueued = await enqueueAtRate(outbox.store, options.rate, total);
  const deadline = performance.now() + 30_000;
  while (samples.length < total && performance.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
  await worker.stop({ graceMs: 1_000 });
  await outbox.close();
  return summary(samples, enqueued);
}
