// The worker of the cross-process latency run: a Wassal Worker (wake-up on, polling every
// LATENCY_POLL_MS, 1 s) in a process of its own, recording for each message its number and how
// long after its enqueue's stamp (taken in the parent before its transaction) its handler started.
// Prints "ready" once claiming, then, after `count` messages (or 30 s without one), the samples as
// one JSON line.
//   node bench/.build/latency-child.js <db> <schema> <synchronous> <count>

import { openOutbox } from "wassal/lab";
import { type LatencySample, startLatencyWorker } from "./latency.js";

const [db, schema, synchronous, countText] = process.argv.slice(2);
if (!db || !countText) throw new Error("usage: latency-child <db> <schema> <synchronous> <count>");
const count = Number(countText);
const outbox = await openOutbox(db, {
  ...(schema && schema !== "-" ? { schema } : {}),
  synchronous: synchronous === "NORMAL" ? "NORMAL" : "FULL",
  maxConnections: 4,
});
const samples: LatencySample[] = [];
const worker = await startLatencyWorker(outbox.store, samples);
process.stdout.write("ready\n");
// Until every sample is in, or 30 s pass without a new one.
let seen = 0;
let last = performance.now();
while (samples.length < count && performance.now() - last < 30_000) {
  if (samples.length > seen) [seen, last] = [samples.length, performance.now()];
  await new Promise((resolve) => setTimeout(resolve, 10));
}
await worker.stop({ graceMs: 1_000 });
await outbox.close();
process.stdout.write(`${JSON.stringify(samples)}\n`);
