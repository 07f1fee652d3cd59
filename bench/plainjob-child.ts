// One plainjob worker process for the peer race: waits for "go" on stdin, runs a plainjob worker
// with a no-op processor until no job is left pending or processing, then prints what it did.
//   node bench/.build/plainjob-child.js <sqliteFile>
//
// Tuning: plainjob's README ("Multi-process Workers") scales throughput by running one worker per
// process; a worker takes one job at a time and has no batch or concurrency option. better-sqlite3
// connection as the README shows; plainjob itself sets WAL, `synchronous = 1` (NORMAL) and
// busy_timeout 5000. `pollIntervall: 20` (default 1000; only used when a poll finds nothing).
// Logger silenced (its debug lines would go to stdout per job). Drain: a 10 ms poll of
// countJobs(pending) + countJobs(processing), as plainjob's own processAll() does every 50 ms.

import Database from "better-sqlite3";
import { better, defineQueue, defineWorker, JobStatus } from "plainjob";
import { PEER_QUEUE, silentLogger } from "./peers.js";
import { readyThenGo, report } from "./child-report.js";

const [file] = process.argv.slice(2);
if (!file) throw new Error("usage: plainjob-child <sqliteFile>");
const queue = defineQueue({ connection: better(new Database(file)), logger: silentLogger });
let processed = 0;
const worker = defineWorker(
  PEER_QUEUE,
  async () => {
    processed += 1;
  },
  { queue, pollIntervall: 20, logger: silentLogger },
);
await readyThenGo();

const running = worker.start();
while (queue.countJobs({ type: PEER_QUEUE, status: JobStatus.Pending }) + queue.countJobs({ type: PEER_QUEUE, status: JobStatus.Processing }) > 0) {
  await new Promise((resolve) => setTimeout(resolve, 10));
}
await worker.stop();
await running;
queue.close();
report({ processed });
