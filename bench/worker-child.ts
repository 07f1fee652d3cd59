// One benchmark worker process: waits for "go" on stdin, runs a Wassal Worker with a no-op
// handler until the store has no pending or processing message left, then prints what it did.
//   node bench/.build/worker-child.js <db> <schema> <synchronous> <concurrency> <groupCommit> <connections>
// <connections>: the PostgreSQL pool's size (the server allows 100 connections, shared by all children).

import { Worker } from "wassal";
import { openOutbox } from "wassal/lab";
import { readyThenGo, report, writeLockSince } from "./child-report.js";

const [db, schema, synchronous, concurrencyText, group, connectionsText] = process.argv.slice(2);
if (!db) throw new Error("usage: worker-child <db> <schema> <synchronous> <concurrency> <groupCommit> <connections>");
const outbox = await openOutbox(db, {
  ...(schema && schema !== "-" ? { schema } : {}),
  synchronous: synchronous === "NORMAL" ? "NORMAL" : "FULL",
  maxConnections: Math.max(2, Math.min(Number(concurrencyText), Number(connectionsText ?? 10))),
});
let processed = 0;
const worker = new Worker({
  store: outbox.store,
  concurrency: Number(concurrencyText),
  groupCommit: group === "true",
  pollIntervalMs: 20,
  wakeOnNewMessages: false,
  handlers: {
    "bench.noop": async () => {
      processed += 1;
      return {};
    },
  },
});
await readyThenGo();
const lock = writeLockSince(outbox.store);
// Done when a claim finds nothing, nothing is running here, and nothing is left unfinished. With
// ordering keys a claim also finds nothing while another process holds the key it would need, or
// while this process's own completion, which hands the key on, is still committing. Should work
// stay unfinished yet unclaimable for 10 s, give up: the parent then reports what was left.
const idle = new Promise<void>((resolve) => {
  let looking = false;
  let stuckSince: number | undefined;
  outbox.store.events.subscribe((event) => {
    if (event.type !== "claim-empty" || worker.inFlight !== 0 || looking) return;
    looking = true;
    void outbox.store.countByStatus().then((counts) => {
      looking = false;
      if (counts.pending === 0 && counts.processing === 0) return resolve();
      stuckSince ??= Date.now();
      if (Date.now() - stuckSince > 10_000) resolve();
    });
  });
  outbox.store.events.subscribe((event) => {
    if (event.type === "claim-won") stuckSince = undefined;
  });
});
await worker.start();
await idle;
await worker.stop({ graceMs: 1000 });
await outbox.close();
report({ processed, ...lock() });
