// Claim latency as processed history grows: the claim must stay flat from 10,000 to 1,000,000
// processed rows, with ordering keys and without, because only claimable rows are in the claim's
// partial index (and the rows waiting behind their key are not).

import { execSync } from "node:child_process";
import Database from "better-sqlite3";
import pg from "pg";
import { openOutbox } from "wassal/lab";
import { spread, type Spread } from "./stats.js";

/** Adds `count` processed rows straight into the table (bulk SQL: history, not work); with `keys`, each with an ordering key of its own. */
async function addHistory(db: string, schema: string | undefined, count: number, keys: boolean): Promise<void> {
  if (schema) {
    const client = new pg.Client({ connectionString: db });
    await client.connect();
    await client.query(
      `INSERT INTO ${schema}.outbox_messages (type, payload, status, created_at, available_at, locked_by, lease_token, attempts, processed_at, ordering_key)
      SELECT 'bench.history', '{}'::jsonb, 'processed', now(), now(), 'history', 1, 1, now(), CASE WHEN $2 THEN 'h' || i END FROM generate_series(1, $1) AS i`,
      [count, keys],
    );
    await client.query(`VACUUM ANALYZE ${schema}.outbox_messages`);
    await client.end();
    return;
  }
  const sqlite = new Database(db);
  sqlite.exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${count})
    INSERT INTO outbox_messages (type, payload, status, created_at, available_at, locked_by, lease_token, attempts, processed_at, ordering_key)
    SELECT 'bench.history', '{}', 'processed', 0, 0, 'history', 1, 1, 0, ${keys ? "'h' || i" : "NULL"} FROM n; ANALYZE;`);
  sqlite.close();
}

/** A database to measure: `history` processed rows are added to it first. */
export interface ScaleSubject {
  readonly db: string;
  readonly schema: string | undefined;
  readonly history: number;
  /** History rows with keys, and the claimed messages spread over 100 keys. */
  readonly keys: boolean;
}

/**
 * Time of one claim(limit 1) per message, then its completion, on each subject. The subjects are
 * filled first, the disk is flushed, then they are measured in interleaved rounds (A B A B …) of
 * `samples` claims each, so that a noisy moment of the machine falls on all of them alike.
 */
export async function claimLatencies(subjects: readonly ScaleSubject[], samples: number, rounds: number): Promise<Spread[]> {
  const opened = [];
  for (const subject of subjects) {
    await addHistory(subject.db, subject.schema, subject.history, subject.keys);
    const outbox = await openOutbox(subject.db, { ...(subject.schema ? { schema: subject.schema } : {}), synchronous: "NORMAL" });
    await outbox.store.transaction(async (tx) => {
      for (let n = 0; n < samples * rounds; n += 1) {
        await outbox.store.enqueue(tx, { type: "bench.scale", payload: { n }, ...(subject.keys ? { key: `k${n % 100}` } : {}) });
      }
    });
    opened.push(outbox);
  }
  execSync("sync"); // the history just written must not be flushed during the measurement
  const times: number[][] = subjects.map(() => []);
  for (let round = 0; round < rounds; round += 1) {
    for (const [i, outbox] of opened.entries()) {
      for (let n = 0; n < samples; n += 1) {
        const started = performance.now();
        const [lease] = await outbox.store.claim("scale", { limit: 1, leaseMs: 30_000 });
        times[i]?.push(performance.now() - started);
        if (lease) await outbox.store.complete(lease);
      }
    }
  }
  for (const outbox of opened) await outbox.close();
  return times.map((t) => spread(t));
}
