// One benchmark worker process running the REAL payments reconciliation handler: waits for "go" on
// stdin, runs a Wassal Worker with PaymentsService.handler() (the provider's status check outside
// any transaction, the payment's Paid/Failed write committed with the guarded completion) against
// a ProviderSimulator with zero latency and no log file, wired as src/runtime/payments-worker.ts
// wires it (answerUnknownKeys: the payments were created by another process's simulator). Runs
// until the store has no pending or processing message left, then prints what it did.
//   node bench/.build/payments-child.js <db> <schema> <synchronous> <concurrency> <maxConnections>
//
// Group commit is on (the worker's default): the completions and their business writes share
// commits, each in a savepoint (see src/outbox/completion-batcher.ts). On PostgreSQL several
// groups commit at once over the pool, whose size the parent sets to keep all processes under the
// server's max_connections.

import { Worker } from "wassal";
import { PaymentsService, ProviderSimulator, RECONCILE_MESSAGE_TYPE, openLabOutbox } from "wassal/lab";
import { readyThenGo, report, writeLockSince } from "./child-report.js";

const [db, schema, synchronous, concurrencyText, connectionsText] = process.argv.slice(2);
if (!db || !connectionsText) throw new Error("usage: payments-child <db> <schema> <synchronous> <concurrency> <maxConnections>");
const outbox = await openLabOutbox(db, {
  ...(schema && schema !== "-" ? { schema } : {}),
  synchronous: synchronous === "NORMAL" ? "NORMAL" : "FULL",
  maxConnections: Number(connectionsText),
});
// keep: "counts", as the worker runtime's (src/runtime/payments-handlers.ts): the child reads only the total.
const provider = new ProviderSimulator({ answerUnknownKeys: true, latencyMs: 0, keep: "counts" });
const payments = new PaymentsService({ store: outbox.store, repository: outbox.payments, provider });
let processed = 0;
let failed = 0;
const worker = new Worker({
  store: outbox.store,
  concurrency: Number(concurrencyText),
  pollIntervalMs: 20,
  wakeOnNewMessages: false,
  handlers: { [RECONCILE_MESSAGE_TYPE]: payments.handler() },
});
await readyThenGo();
const lock = writeLockSince(outbox.store);
// Counted from the event stream: a message is processed once its completion (with the payment's
// write) committed. Done when a claim finds nothing and nothing is running.
const idle = new Promise<void>((resolve) => {
  outbox.store.events.subscribe((event) => {
    if (event.type === "processing-finished") {
      if (event.result === "completed") processed += 1;
      else failed += 1;
    }
    if (event.type === "claim-empty" && worker.inFlight === 0) resolve();
  });
});
await worker.start();
await idle;
await worker.stop({ graceMs: 1000 });
await outbox.close();
report({ processed, failed, statusChecks: provider.statusChecks(), ...lock() });
