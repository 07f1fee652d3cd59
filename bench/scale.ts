// Claim latency as processed history grows: the claim must stay flat from 10,000 to 1,000,000
// processed rows, because only claimable rows are in the claim's partial index.

import Database from "better-sqlite3";
import pg from "pg";
import { openOutbox } from "wassal";
import { spread, type Spread } from "./stats.js";

/** Adds `count` processed rows straight into the table (bulk SQL: history, not work). */
async function addHistory(db: string, schema: string | undefined, count: number): Promise<void> {
  if (schema) {
    const client = new pg.Client({ connectionString: db });
    await client.connect();
    await client.query(`INSERT INTO ${schema}.outbox_messages (type, payload, status, created_at, available_at, locked_by, lease_token, attempts, processed_at)
      SELECT 'bench.history', '{}'::jsonb, 'processed', now(), now(), 'history', 1, 1, now() FROM generate_series(1, $1)`, [count]);
    await client.query(`VACUUM ANALYZE ${schema}.outbox_messages`);
    await client.end();
    return;
  }
  const sqlite = new Database(db);
  sqlite.exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${count})
    INSERT INTO outbox_messages (type, payload, status, created_at, available_at, locked_by, lease_token, attempts, processed_at)
    SELECT 'bench.history', '{}', 'processed', 0, 0, 'history', 1, 1, 0 FROM n; ANALYZE;`);
  sqlite.close();
}

/** Median time of one claim(limit 1) + complete, over `samples` messages, after `history` processed rows. */
export async function claimLatency(db: string, schema: string | undefined, history: number, samples: number): Promise<Spread> {
  await addHistory(db, schema, history);
  const outbox = await openOutbox(db, { ...(schema ? { schema } : {}), synchronous: "NORMAL" });
  await outbox.store.transaction(async (tx) => {
    for (let n = 0; n < samples; n += 1) await outbox.store.enqueue(tx, { type: "bench.scale", payload: { n } });
  });
  const times: number[] = [];
  for (let n = 0; n < samples; n += 1) {
    const started = performance.now();
    const [lease] = await outbox.store.claim("scale", { limit: 1, leaseMs: 30_000 });
    times.push(performance.now() - started);
    if (lease) await outbox.store.complete(lease);
  }
  await outbox.close();
  return spread(times);
}
