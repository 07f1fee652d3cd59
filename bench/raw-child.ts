// The raw limit of a store: a bare SQL loop, no library around it, that claims `batch` rows in
// one statement and completes them in another, until nothing is left. Same schema as Wassal's,
// and the same claimable range (status IN ('pending', 'processing') AND key_state = 0 AND available_at <= now), so
// both use the partial index: SQLite does not infer that status = 'pending' implies the index's
// condition, and a loop written that way scans the table at every claim.
//   node bench/.build/raw-child.js <db> <schema> <synchronous> <batch> [bare|guarded|guarded-delete]
//
// bare (the default): the claim returns only the ids, the completion checks only the status.
// guarded: the work the protocol itself requires, with no library around it. The claim returns
// what a handler and the lease need, the columns Wassal's claim returns (PostgreSQL: the times as
// epoch milliseconds, as Wassal's does; SQLite: the payload and headers parsed from their JSON
// text, as Wassal's store does), and the completion is guarded by each row's lease token (one
// statement for the batch, the (id, token) pairs joined as Wassal's bulk completion joins them),
// returning the ids it completed; a lost one stops the loop with an error. On MariaDB (no UPDATE …
// RETURNING) the claim is a transaction, the due rows locked by SELECT … FOR UPDATE SKIP LOCKED
// (the guarded loop reading the handler's columns there), then one UPDATE of their ids; the
// guarded completion is one UPDATE matching the (id, token) pairs, its affected rows the count.
// The gap between the two loops is the protocol's own cost; the gap from guarded to Wassal is the
// library's. guarded-delete: as guarded, the guarded completion deleting the rows (Wassal's
// onComplete "delete").

import Database from "better-sqlite3";
import type { ResultSetHeader, RowDataPacket } from "mysql2/promise";
import pg from "pg";
import { readyThenGo, report } from "./child-report.js";
import { mariadbConnection } from "./mariadb.js";
import { MARIADB_RAW, rawClaimSql, rawGuardedCompleteSql } from "./raw-sql.js";

const [db, schema, synchronous, batchText, mode = "bare"] = process.argv.slice(2);
if (!db || !schema || (mode !== "bare" && mode !== "guarded" && mode !== "guarded-delete"))
  throw new Error("usage: raw-child <db> <schema> <synchronous> <batch> [bare|guarded|guarded-delete]");
const guarded = mode !== "bare";
const remove = mode === "guarded-delete";
const batch = Number(batchText);
let processed = 0;

await readyThenGo();

if (db.startsWith("postgres")) {
  const client = new pg.Client({ connectionString: db });
  await client.connect();
  const t = `${schema}.outbox_messages`;
  const claim = rawClaimSql(schema, guarded);
  for (;;) {
    const { rows } = await client.query<{ id: string; lease_token: number }>(claim, [batch]);
    if (rows.length === 0) break;
    if (guarded) {
      const done = await client.query<{ id: string }>(rawGuardedCompleteSql(schema, remove), [rows.map((r) => r.id), rows.map((r) => r.lease_token)]);
      if (done.rows.length !== rows.length) throw new Error(`raw-child: ${rows.length - done.rows.length} of ${rows.length} leases lost`);
    } else {
      await client.query(
        `UPDATE ${t} SET status = 'processed', processed_at = now(), locked_until = NULL WHERE id = ANY($1::bigint[]) AND status = 'processing'`,
        [rows.map((r) => r.id)],
      );
    }
    processed += rows.length;
  }
  await client.end();
} else if (/^(mysql|mariadb):/.test(db)) {
  const connection = await mariadbConnection(db);
  await connection.query(MARIADB_RAW.session);
  const candidates = guarded ? MARIADB_RAW.candidatesGuarded : MARIADB_RAW.candidates;
  type Claimed = RowDataPacket & { id: number; lease_token: number; payload?: string; headers?: string | null };
  for (;;) {
    const now = Date.now();
    await connection.query("BEGIN");
    const [rows] = await connection.query<Claimed[]>(candidates, [now, batch]);
    if (rows.length === 0) {
      await connection.query("COMMIT");
      break;
    }
    const ids = rows.map((r) => r.id);
    const [claimed] = await connection.query<ResultSetHeader>(MARIADB_RAW.claim, [now + 30_000, now + 30_000, ids]);
    await connection.query("COMMIT");
    if (claimed.affectedRows !== rows.length) throw new Error(`raw-child: claimed ${claimed.affectedRows} of ${rows.length} locked rows`);
    if (guarded) {
      // The handler's payload and headers parsed, and the lease's token the claim gave each row.
      const leases = rows.map((r) => ({
        ...r,
        payload: JSON.parse(r.payload ?? "null") as unknown,
        headers: r.headers ? (JSON.parse(r.headers) as unknown) : null,
        lease_token: r.lease_token + 1,
      }));
      const pairs = leases.map((l) => [l.id, l.lease_token]);
      const [done] = remove
        ? await connection.query<ResultSetHeader>(MARIADB_RAW.completeGuardedDelete, [ids, pairs])
        : await connection.query<ResultSetHeader>(MARIADB_RAW.completeGuarded, [Date.now(), ids, pairs]);
      if (done.affectedRows !== rows.length) throw new Error(`raw-child: ${rows.length - done.affectedRows} of ${rows.length} leases lost`);
    } else {
      await connection.query(MARIADB_RAW.complete, [Date.now(), ids]);
    }
    processed += rows.length;
  }
  await connection.end();
} else {
  const sqlite = new Database(db, { timeout: 10_000 });
  sqlite.pragma("journal_mode = WAL");
  sqlite.pragma(`synchronous = ${synchronous === "NORMAL" ? "NORMAL" : "FULL"}`);
  const returning = guarded ? "id, type, dedupe_key, ordering_key, headers, destination, payload, created_at, lease_token, attempts, last_error" : "id";
  const claim = sqlite.prepare(`UPDATE outbox_messages SET status = 'processing', locked_by = 'raw', locked_until = @until, available_at = @until,
      lease_token = lease_token + 1, attempts = attempts + 1
    WHERE id IN (SELECT id FROM outbox_messages WHERE status IN ('pending', 'processing') AND key_state = 0 AND available_at <= @now
                 ORDER BY available_at, id LIMIT @batch) RETURNING ${returning}`);
  const complete = sqlite.prepare(`UPDATE outbox_messages SET status = 'processed', processed_at = @now, locked_until = NULL
    WHERE id IN (SELECT value FROM json_each(@ids)) AND status = 'processing'`);
  const completeGuarded = remove
    ? sqlite.prepare(`DELETE FROM outbox_messages WHERE status = 'processing' AND id IN (SELECT value ->> 0 FROM json_each(@pairs))
        AND (id, lease_token) IN (SELECT value ->> 0, value ->> 1 FROM json_each(@pairs)) RETURNING id`)
    : sqlite.prepare(`UPDATE outbox_messages SET status = 'processed', processed_at = @now, locked_until = NULL, last_error = NULL
    FROM (SELECT value ->> 0 AS id, value ->> 1 AS token FROM json_each(@pairs)) AS done
    WHERE outbox_messages.id = done.id AND outbox_messages.lease_token = done.token AND outbox_messages.status = 'processing'
    RETURNING outbox_messages.id`);
  type Claimed = { id: number; lease_token: number; payload: string; headers: string | null };
  const claimTx = sqlite.transaction((now: number) => claim.all({ now, until: now + 30_000, batch }) as Claimed[]);
  // The JSON parsed after the claim's commit, outside the write lock.
  const parsed = (rows: Claimed[]) =>
    rows.map((r) => ({ ...r, payload: JSON.parse(r.payload) as unknown, headers: r.headers === null ? null : (JSON.parse(r.headers) as unknown) }));
  const completeTx = sqlite.transaction((ids: number[]) => complete.run({ now: Date.now(), ids: JSON.stringify(ids) }));
  const completeGuardedTx = sqlite.transaction(
    (pairs: [number, number][]) => completeGuarded.all(remove ? { pairs: JSON.stringify(pairs) } : { now: Date.now(), pairs: JSON.stringify(pairs) }).length,
  );
  for (;;) {
    const claimed = claimTx.immediate(Date.now());
    if (claimed.length === 0) break;
    const rows = guarded ? parsed(claimed) : claimed;
    if (guarded) {
      const done = completeGuardedTx.immediate(rows.map((r) => [r.id, r.lease_token]));
      if (done !== rows.length) throw new Error(`raw-child: ${rows.length - done} of ${rows.length} leases lost`);
    } else {
      completeTx.immediate(rows.map((r) => r.id));
    }
    processed += rows.length;
  }
  sqlite.close();
}
report({ processed });
