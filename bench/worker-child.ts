// One benchmark worker process: waits for "go" on stdin, runs a Wassal Worker with a no-op
// handler until its claims find nothing, then prints what it did.
//   node bench/.build/worker-child.js <db> <schema> <synchronous> <concurrency> <groupCommit> <connections> <keyed> <onComplete> [<db> …]
// <groupCommit>: "off", or the largest group (groupCommit.maxBatch).
// <connections>: the PostgreSQL pool's size (the server allows 100 connections, shared by all children).
// <keyed>: "keyed" when the messages have ordering keys (see below), "-" when not.
// <onComplete>: "keep" (the default) or "delete" (a completion deletes the row).
// [<db> …]: further shards (the shards section): one Worker per shard in this process (ShardWorkers
// over a ShardedOutbox of the dbs, in order), each with the options above and a pool of its own, all
// in the same schema; the process is done when every shard's worker is.

import { Worker } from "wassal";
import { openOutbox } from "wassal/lab";
import { ShardedOutbox, ShardWorkers } from "wassal/shards";
import { readyThenGo, report, writeLockSince } from "./child-report.js";

const [db, schema, synchronous, concurrencyText, group, connectionsText, keyed, onComplete = "keep", ...moreShards] = process.argv.slice(2);
if (!db || (keyed !== "keyed" && keyed !== "-") || (group !== "off" && !(Number(group) >= 1)) || (onComplete !== "keep" && onComplete !== "delete")) {
  throw new Error("usage: worker-child <db> <schema> <synchronous> <concurrency> <groupCommit> <connections> <keyed|-> [keep|delete] [<db> …]");
}
const outboxes = await Promise.all(
  [db, ...moreShards].map((shard) =>
    openOutbox(shard, {
      ...(schema && schema !== "-" ? { schema } : {}),
      synchronous: synchronous === "NORMAL" ? "NORMAL" : "FULL",
      maxConnections: Math.max(2, Math.min(Number(concurrencyText), Number(connectionsText ?? 10))),
      onComplete,
    }),
  ),
);
let processed = 0;
const options = {
  concurrency: Number(concurrencyText),
  groupCommit: group === "off" ? (false as const) : { maxBatch: Number(group) },
  pollIntervalMs: 20,
  wakeOnNewMessages: false,
  handlers: {
    "bench.noop": async () => {
      processed += 1;
      return {};
    },
  },
};
const stores = outboxes.map((o) => o.store);
const sharded = stores.length > 1 ? new ShardWorkers(new ShardedOutbox(stores), options) : null;
const workers = sharded?.workers ?? stores.map((store) => new Worker({ ...options, store }));
const worker = sharded ?? (workers[0] as (typeof workers)[number]);
/** Each shard's store and the worker that claims from it. */
const shards = stores.map((store, i) => ({ store, worker: workers[i] as (typeof workers)[number] }));
await readyThenGo();
const lock = writeLockSince(stores[0] as object);
// Done when a claim finds nothing and nothing is running here, as the raw loops and the peers end:
// every message left is then held by another process, which finishes it. With ordering keys a
// claim also finds nothing while another process holds the key it would need, or while this
// process's own completion, which hands the key on, is still committing; so keyed runs also count
// what is left (a scan of the whole table, which is why unkeyed runs do not: counted at every
// empty claim near the end, it cost a 4-process run of 100,000 messages 1.5 s of server time).
// Should keyed work stay unfinished yet unclaimable for 10 s, give up: the parent then reports
// what was left.
// Once done, no more looks: a count started while the worker stops would meet the closed pool.
// With several shards: each shard's worker is done so on its own, and the process when all are.
const idle = Promise.all(
  shards.map(
    ({ store, worker }) =>
      new Promise<void>((resolve, reject) => {
        let looking = false;
        let done = false;
        let stuckSince: number | undefined;
        const finish = () => {
          done = true;
          resolve();
        };
        store.events.subscribe((event) => {
          if (event.type !== "claim-empty" || worker.inFlight !== 0 || looking || done) return;
          if (keyed === "-") return finish();
          looking = true;
          store.countByStatus().then((counts) => {
            looking = false;
            if (counts.pending === 0 && counts.processing === 0) return finish();
            stuckSince ??= Date.now();
            if (Date.now() - stuckSince > 10_000) finish();
          }, reject);
        });
        store.events.subscribe((event) => {
          if (event.type === "claim-won") stuckSince = undefined;
        });
      }),
  ),
);
await worker.start();
await idle;
await worker.stop({ graceMs: 1000 });
await Promise.all(outboxes.map((o) => o.close()));
report({ processed, ...lock() });
