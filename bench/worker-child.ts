// One benchmark worker process: waits for "go" on stdin, runs a Wassal Worker with a no-op
// handler until its claims find nothing, then prints what it did.
//   node bench/.build/worker-child.js <db> <schema> <synchronous> <concurrency> <groupCommit> <connections> <keyed> <onComplete>
// <groupCommit>: "off", or the largest group (groupCommit.maxBatch).
// <connections>: the PostgreSQL pool's size (the server allows 100 connections, shared by all children).
// <keyed>: "keyed" when the messages have ordering keys (see below), "-" when not.
// <onComplete>: "keep" (the default) or "delete" (a completion deletes the row).

import { Worker } from "wassal";
import { openOutbox } from "wassal/lab";
import { readyThenGo, report, writeLockSince } from "./child-report.js";

const [db, schema, synchronous, concurrencyText, group, connectionsText, keyed, onComplete = "keep"] = process.argv.slice(2);
if (!db || (keyed !== "keyed" && keyed !== "-") || (group !== "off" && !(Number(group) >= 1)) || (onComplete !== "keep" && onComplete !== "delete")) {
  throw new Error("usage: worker-child <db> <schema> <synchronous> <concurrency> <groupCommit> <connections> <keyed|-> [keep|delete]");
}
const outbox = await openOutbox(db, {
  ...(schema && schema !== "-" ? { schema } : {}),
  synchronous: synchronous === "NORMAL" ? "NORMAL" : "FULL",
  maxConnections: Math.max(2, Math.min(Number(concurrencyText), Number(connectionsText ?? 10))),
  onComplete,
});
let processed = 0;
const worker = new Worker({
  store: outbox.store,
  concurrency: Number(concurrencyText),
  groupCommit: group === "off" ? false : { maxBatch: Number(group) },
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
// Done when a claim finds nothing and nothing is running here, as the raw loops and the peers end:
// every message left is then held by another process, which finishes it. With ordering keys a
// claim also finds nothing while another process holds the key it would need, or while this
// process's own completion, which hands the key on, is still committing; so keyed runs also count
// what is left (a scan of the whole table, which is why unkeyed runs do not: counted at every
// empty claim near the end, it cost a 4-process run of 100,000 messages 1.5 s of server time).
// Should keyed work stay unfinished yet unclaimable for 10 s, give up: the parent then reports
// what was left.
// Once done, no more looks: a count started while the worker stops would meet the closed pool.
const idle = new Promise<void>((resolve, reject) => {
  let looking = false;
  let done = false;
  let stuckSince: number | undefined;
  const finish = () => {
    done = true;
    resolve();
  };
  outbox.store.events.subscribe((event) => {
    if (event.type !== "claim-empty" || worker.inFlight !== 0 || looking || done) return;
    if (keyed === "-") return finish();
    looking = true;
    outbox.store.countByStatus().then((counts) => {
      looking = false;
      if (counts.pending === 0 && counts.processing === 0) return finish();
      stuckSince ??= Date.now();
      if (Date.now() - stuckSince > 10_000) finish();
    }, reject);
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
