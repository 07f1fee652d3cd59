// The raw limit of a store: a bare SQL loop, no library around it, that claims `batch` rows in
// one statement and completes them in another, until nothing is left. Same schema as Wassal's,
// and the same claimable range (status IN ('pending', 'processing') AND key_state = 0 AND available_at <= now), so
// both use the partial index: SQLite does not infer that status = 'pending' implies the index's
// condition, and a loop written that way scans the table at every claim.
//   node bench/.build/raw-child.js <db> <schema> <synchronous> <batch>

import Database from "better-sqlite3";
import pg from "pg";
import { readyThenGo, report } from "./child-report.js";

const [db, schema, synchronous, batchText] = process.argv.slice(2);
if (!db) throw new Error("usage: raw-child <db> <schema> <synchronous> <batch>");
const batch = Number(batchText);
let processed = 0;

await readyThenGo();

if (db.startsWith("postgres")) {
  const client = new pg.Client({ connectionString: db });
  await client.connect();
  const t = `${schema}.outbox_messages`;
  for (;;) {
    const { rows } = await client.query<{ id: string }>(
      `WITH c AS MATERIALIZED (SELECT id FROM ${t} WHERE status IN ('pending', 'processing') AND key_state = 0 AND available_at <= now()
                                 ORDER BY available_at, id LIMIT $1 FOR UPDATE SKIP LOCKED)
       UPDATE ${t} m SET status = 'processing', locked_by = 'raw', locked_until = now() + interval '30 s', available_at = now() + interval '30 s',
              lease_token = m.lease_token + 1, attempts = m.attempts + 1
       FROM c WHERE m.id = c.id RETURNING m.id`,
      [batch],
    );
    if (rows.length === 0) break;
    await client.query(
      `UPDATE ${t} SET status = 'processed', processed_at = now(), locked_until = NULL WHERE id = ANY($1::bigint[]) AND status = 'processing'`,
      [rows.map((r) => r.id)],
    );
    processed += rows.length;
  }
  await client.end();
} else {
  const sqlite = new Database(db, { timeout: 10_000 });
  sqlite.pragma("journal_mode = WAL");
  sqlite.pragma(`synchronous = ${synchronous === "NORMAL" ? "NORMAL" : "FULL"}`);
  const claim = sqlite.prepare(`UPDATE outbox_messages SET status = 'processing', locked_by = 'raw', locked_until = @until, available_at = @until,
      lease_token = lease_token + 1, attempts = attempts + 1
    WHERE id IN (SELECT id FROM outbox_messages WHERE status IN ('pending', 'processing') AND key_state = 0 AND available_at <= @now
                 ORDER BY available_at, id LIMIT @batch) RETURNING id`);
  const complete = sqlite.prepare(`UPDATE outbox_messages SET status = 'processed', processed_at = @now, locked_until = NULL
    WHERE id IN (SELECT value FROM json_each(@ids)) AND status = 'processing'`);
  const claimTx = sqlite.transaction((now: number) => claim.all({ now, until: now + 30_000, batch }) as { id: number }[]);
  const completeTx = sqlite.transaction((ids: number[]) => complete.run({ now: Date.now(), ids: JSON.stringify(ids) }));
  for (;;) {
    const rows = claimTx.immediate(Date.now());
    if (rows.length === 0) break;
    completeTx.immediate(rows.map((r) => r.id));
    processed += rows.length;
  }
  sqlite.close();
}
report({ processed });
