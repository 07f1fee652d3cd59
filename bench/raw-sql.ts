// The raw loops' PostgreSQL statements (raw-child.ts), shared with the statements section
// (statements.ts), which runs the equal-work pair on one connection; and their MariaDB statements.

const ms = (column: string) => `floor(extract(epoch FROM m.${column}) * 1000)::float8`;

/** $1 batch: claims up to $1 due rows for 30 s; `guarded` returns what a handler and the lease need, else only the ids. */
export function rawClaimSql(schema: string, guarded: boolean): string {
  const t = `${schema}.outbox_messages`;
  const returning = guarded
    ? `m.id, m.type, m.dedupe_key, m.ordering_key, m.headers, m.destination, m.payload, m.lease_token, m.attempts, m.last_error, ${ms("created_at")} AS created_ms, ${ms("locked_until")} AS until_ms`
    : "m.id";
  // Ordered by the claim's rank, the expression the store's claimable index is on (outbox-018-priority),
  // as Wassal's claim is: ordered by available_at, this claim sorted every claimable row at each call.
  // And its UPDATE names the rows as an array of ids too, as Wassal's large claims do: by the join
  // alone, planned at each call, it hashed the candidates and read the whole table
  // (test/bench/raw-claim-plan.test.ts).
  const rank = `CASE WHEN status = 'pending' THEN (available_at AT TIME ZONE 'UTC') - priority * interval '1 second' ELSE available_at AT TIME ZONE 'UTC' END`;
  return `WITH c AS MATERIALIZED (SELECT id FROM ${t} WHERE status IN ('pending', 'processing') AND key_state = 0
                                   AND (${rank}) <= (now() AT TIME ZONE 'UTC') AND available_at <= now()
                                 ORDER BY ${rank}, id LIMIT $1 FOR UPDATE SKIP LOCKED)
       UPDATE ${t} m SET status = 'processing', locked_by = 'raw', locked_until = now() + interval '30 s', available_at = now() + interval '30 s',
              lease_token = m.lease_token + 1, attempts = m.attempts + 1
       FROM c WHERE m.id = c.id AND m.id = ANY (ARRAY(SELECT id FROM c)) RETURNING ${returning}`;
}

/** $1 ids, $2 lease tokens: the guarded completion of a batch, returning the ids it completed; `remove`: the rows deleted. */
// The status compared with a value the planner does not know, as the store's bulk completion
// compares it (PROCESSING in its outbox-sql.ts): with 'processing' as a constant, statistics taken
// while nothing was processing made the plan read the whole table at each completion.
export function rawGuardedCompleteSql(schema: string, remove = false): string {
  return `${
    remove
      ? `DELETE FROM ${schema}.outbox_messages m USING unnest($1::bigint[], $2::int[]) AS w(id, token)`
      : `UPDATE ${schema}.outbox_messages m SET status = 'processed', processed_at = now(), locked_until = NULL, last_error = NULL
         FROM unnest($1::bigint[], $2::int[]) AS w(id, token)`
  }
         WHERE m.id = w.id AND m.lease_token = w.token AND m.status = (SELECT 'processing'::text) RETURNING m.id`;
}

/**
 * The raw loops' MariaDB statements (raw-child.ts). MariaDB has no UPDATE … RETURNING and no
 * SKIP LOCKED on an UPDATE, so a claim is a transaction: the due rows locked by a SELECT … FOR
 * UPDATE SKIP LOCKED over the claimable range (claim_at, the generated column the claimable index
 * covers, as Wassal's claim reads it), then one UPDATE of those ids. Times are epoch milliseconds,
 * as Wassal's MariaDB columns hold them.
 */
export const MARIADB_RAW = {
  /** Params: now, limit. The bare loop's candidates: their ids. */
  candidates: "SELECT id FROM outbox_messages WHERE claim_at <= ? ORDER BY claim_at, id LIMIT ? FOR UPDATE SKIP LOCKED",
  /**
   * Params: now, limit. The equal-work loop's candidates: what a handler and the lease need, read
   * with the lock (the claim that follows sets the lease end and adds one to the token and the
   * attempts, so the loop knows them without reading the rows again; Wassal reads them back).
   */
  candidatesGuarded: `SELECT id, type, dedupe_key, ordering_key, CONVERT(headers USING utf8mb4) AS headers, destination,
      CONVERT(payload USING utf8mb4) AS payload, created_at, lease_token, attempts, last_error
    FROM outbox_messages WHERE claim_at <= ? ORDER BY claim_at, id LIMIT ? FOR UPDATE SKIP LOCKED`,
  /** Params: lease end, lease end, ids (an array, expanded). */
  claim: `UPDATE outbox_messages SET status = 'processing', locked_by = 'raw', locked_until = ?, available_at = ?,
      lease_token = lease_token + 1, attempts = attempts + 1 WHERE id IN (?)`,
  /** Params: now, ids (an array, expanded). */
  complete: "UPDATE outbox_messages SET status = 'processed', processed_at = ?, locked_until = NULL WHERE id IN (?) AND status = 'processing'",
  /** Params: now, ids, (id, token) pairs (arrays, expanded). One statement; its affected rows are the leases it completed. */
  completeGuarded: `UPDATE outbox_messages SET status = 'processed', processed_at = ?, locked_until = NULL, last_error = NULL
      WHERE id IN (?) AND (id, lease_token) IN (?) AND status = 'processing'`,
  /** Params: ids, (id, token) pairs (arrays, expanded). As completeGuarded, the rows deleted. */
  completeGuardedDelete: "DELETE FROM outbox_messages WHERE id IN (?) AND (id, lease_token) IN (?) AND status = 'processing'",
  /** Each connection's session, as the MariaDB store sets its own: READ COMMITTED, UTC. */
  session: "SET SESSION tx_isolation = 'READ-COMMITTED', SESSION time_zone = '+00:00'",
} as const;
