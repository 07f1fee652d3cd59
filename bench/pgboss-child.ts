// One pg-boss 12 worker process for the peer race: waits for "go" on stdin, works the seeded queue
// with a no-op handler until no job is left queued or active, then prints what it did.
//   node bench/.build/pgboss-child.js <postgresUrl> <schema>
//
// Tuning (pg-boss docs, "Workers" / work() options): batch fetching with `batchSize: 1000` (one
// fetch locks and returns up to 1,000 jobs, the handler gets the array and they are completed in
// one statement), `burstWhenBatchFull: true` (fetch again immediately while fetches come back full
// instead of waiting for the polling interval), `pollingIntervalSeconds: 0.5` (the documented
// minimum). Worker-only instance: `supervise: false`, `schedule: false`, `migrate: false`
// (maintenance, cron and migrations are not a worker's job here; the seeding step migrated).
// Drain: a 10 ms poll of the job table for jobs still queued (created/retry) or active.

import pg from "pg";
import { PgBoss } from "pg-boss";
import { PEER_QUEUE } from "./peers.js";
import { readyThenGo, report } from "./child-report.js";

const [url, schema] = process.argv.slice(2);
if (!url || !schema) throw new Error("usage: pgboss-child <postgresUrl> <schema>");
const boss = new PgBoss({ connectionString: url, schema, supervise: false, schedule: false, migrate: false });
boss.on("error", (error) => process.stderr.write(`pg-boss: ${String(error)}\n`));
await boss.start();
const probe = new pg.Client({ connectionString: url });
await probe.connect();
let processed = 0;
await readyThenGo();

await boss.work(PEER_QUEUE, { batchSize: 1000, burstWhenBatchFull: true, pollingIntervalSeconds: 0.5 }, async (jobs) => {
  processed += jobs.length;
});
for (;;) {
  const { rows } = await probe.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM ${schema}.job WHERE name = $1 AND state IN ('created', 'retry', 'active')`,
    [PEER_QUEUE],
  );
  if ((rows[0]?.n ?? 0) === 0) break;
  await new Promise((resolve) => setTimeout(resolve, 10));
}
await boss.stop({ graceful: true, timeout: 5000 });
await probe.end();
report({ processed });
