// Seeding and inspecting a PostgreSQL outbox for the multi-process tests: the worker processes
// write through the built library; the test reads the tables directly, on connections of its own.

import { PostgresOutboxStore } from "../../src/stores/postgres/postgres-outbox-store.js";
import { TEST_DATABASE_URL, withClient } from "../support/postgres.js";

/**
 * Migrates `schema`, creates the business table `effects` (deliberately WITHOUT a unique
 * constraint, so a duplicated effect shows) and enqueues `count` messages through store.enqueue,
 * in `transactions` transactions running side by side. Returns the ids, in id order.
 */
export async function seedPostgresOutbox(schema: string, count: number, transactions = 1): Promise<string[]> {
  const store = await PostgresOutboxStore.connect({
    url: TEST_DATABASE_URL,
    schema,
    maxConnections: Math.max(2, transactions),
    applicationName: "wassal-test-seed",
  });
  try {
    await store.migrate();
    await store.transaction(async (tx) => {
      await tx.query(`CREATE TABLE ${schema}.effects (message_id bigint, worker text, token int)`);
    });
    const perTransaction = Math.ceil(count / transactions);
    const batches = await Promise.all(
      Array.from({ length: transactions }, (_, t) =>
        store.transaction(async (tx) => {
          const ids: string[] = [];
          for (let n = t * perTransaction; n < Math.min(count, (t + 1) * perTransaction); n += 1) {
            ids.push((await store.enqueue(tx, { type: "test.effect", payload: { n } })).id);
          }
          return ids;
        }),
      ),
    );
    return batches.flat().sort((a, b) => Number(BigInt(a) - BigInt(b)));
  } finally {
    await store.close();
  }
}

export interface PgRow {
  id: string;
  status: string;
  locked_by: string | null;
  locked_until: Date | null;
  lease_token: number;
  attempts: number;
  processed_at: Date | null;
  last_error: string | null;
}

export interface PgEffect {
  message_id: string;
  worker: string;
  token: number;
}

/** Every message row and every effects row, in id order. */
export async function readPgState(schema: string): Promise<{ rows: PgRow[]; effects: PgEffect[] }> {
  return withClient(async (client) => ({
    rows: (
      await client.query<PgRow>(
        `SELECT m.id::text AS id, status, locked_by, locked_until, lease_token, attempts, processed_at, last_error
       FROM ${schema}.outbox_messages m ORDER BY m.id`,
      )
    ).rows,
    effects: (
      await client.query<PgEffect>(`SELECT e.message_id::text AS message_id, e.worker, e.token FROM ${schema}.effects e ORDER BY e.message_id, e.token`)
    ).rows,
  }));
}

/**
 * What is wrong with the final state, as a list (empty when all is well): every message must be
 * processed with exactly one effects row, written by the row's final owner under its final token.
 */
export function finalStateProblems(rows: readonly PgRow[], effects: readonly PgEffect[]): string[] {
  const problems: string[] = [];
  const byMessage = new Map<string, PgEffect[]>();
  for (const e of effects) {
    const list = byMessage.get(e.message_id);
    if (list === undefined) byMessage.set(e.message_id, [e]);
    else list.push(e);
  }
  const ids = new Set(rows.map((r) => r.id));
  for (const e of effects) if (!ids.has(e.message_id)) problems.push(`effect for unknown message ${e.message_id}`);
  for (const row of rows) {
    if (row.status !== "processed") problems.push(`message ${row.id}: status ${row.status}, not processed`);
    if (row.processed_at === null) problems.push(`message ${row.id}: no processed_at`);
    if (row.locked_until !== null) problems.push(`message ${row.id}: still has locked_until`);
    if (row.last_error !== null) problems.push(`message ${row.id}: last_error ${row.last_error}`);
    const mine = byMessage.get(row.id) ?? [];
    if (mine.length !== 1) problems.push(`message ${row.id}: ${mine.length} effects rows (${mine.map((e) => `${e.worker}#${e.token}`).join(", ")})`);
    for (const e of mine) {
      if (e.worker !== row.locked_by || e.token !== row.lease_token) {
        problems.push(`message ${row.id}: ownership violation, effect by ${e.worker}#${e.token} but the row says ${row.locked_by}#${row.lease_token}`);
      }
    }
  }
  return problems;
}
