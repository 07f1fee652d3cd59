// One graphile-worker 0.18 process for the peer race: waits for "go" on stdin, then runOnce(): works
// the seeded jobs with a no-op task until none is runnable, and exits; prints what it did.
//   node bench/.build/graphile-child.js <postgresUrl> <schema>
//
// Tuning: exactly the configuration of graphile-worker's "Performance" page
// (https://worker.graphile.org/docs/performance): `concurrentJobs: 24`, `maxPoolSize: 25`,
// `localQueue: { size: 500 }` (the pool locks and pulls 500 jobs per fetch and hands them out
// locally), `completeJobBatchDelay: 0` and `failJobBatchDelay: 0` (completions batched into one
// statement per tick). Migrations were run by the seeding step.

import { runOnce, Logger } from "graphile-worker";
import { PEER_QUEUE } from "./peers.js";
import { readyThenGo, report } from "./child-report.js";

const [url, schema] = process.argv.slice(2);
if (!url || !schema) throw new Error("usage: graphile-child <postgresUrl> <schema>");
let processed = 0;
const logger = new Logger(() => () => undefined);
await readyThenGo();

await runOnce({
  connectionString: url,
  schema,
  concurrency: 24,
  maxPoolSize: 25,
  logger,
  noHandleSignals: true,
  taskList: {
    [PEER_QUEUE]: async () => {
      processed += 1;
    },
  },
  preset: { worker: { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } },
});
report({ processed });
