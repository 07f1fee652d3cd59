// Enqueue → handler start latency at a steady rate, with wake-up on: the enqueuer and one worker
// in this process, each message carrying the time it was enqueued (committed).

import { Worker } from "wassal";
import { openOutbox } from "wassal/lab";
import { percentile } from "./stats.js";

export interface LatencyResult {
  readonly messages: number;
  readonly p50: number;
  readonly p95: number;
  readonly p99: number;
  readonly max: number;
}

const nowMs = () => performance.timeOrigin + performance.now();

export async function measureLatency(
  db: string,
  options: { schema?: string; synchronous: "FULL" | "NORMAL"; rate: number; seconds: number },
): Promise<LatencyResult> {
  const outbox = await openOutbox(db, { ...(options.schema ? { schema: options.schema } : {}), synchronous: options.synchronous, maxConnections: 4 });
  const samples: number[] = [];
  const worker = new Worker({
    store: outbox.store,
    concurrency: 10,
    pollIntervalMs: 1_000,
    handlers: {
      "bench.latency": async (message) => {
        samples.push(nowMs() - (message.payload as { t: number }).t);
        return {};
      },
    },
  });
  await worker.start();
  const total = Math.round(options.rate * options.seconds);
  const started = performance.now();
  for (let n = 0; n < total; n += 1) {
    const wait = started + (n / options.rate) * 1000 - performance.now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    await outbox.store.transaction((tx) => outbox.store.enqueue(tx, { type: "bench.latency", payload: { t: nowMs() } }));
  }
  const deadline = performance.now() + 30_000;
  while (samples.length < total && performance.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
  await worker.stop({ graceMs: 1_000 });
  await outbox.close();
  return { messages: samples.length, p50: percentile(samples, 50), p95: percentile(samples, 95), p99: percentile(samples, 99), max: Math.max(...samples) };
}
