// The raw loops' PostgreSQL statements (raw-child.ts), shared with the statements section
// (statements.ts), which runs the equal-work pair on one connection.

const ms = (column: string) => `floor(extract(epoch FROM m.${column}) * 1000)::float8`;

/** $1 batch: claims up to $1 due rows for 30 s; `guarded` returns what a handler and the lease need, else only the ids. */
export function rawClaimSql(schema: string, guarded: boolean): string {
  const t = `${schema}.outbox_messages`;
  const returning = guarded
    ? `m.id, m.type, m.dedupe_key, m.ordering_key, m.headers, m.destination, m.payload, m.lease_token, m.attempts, m.last_error, ${ms("created_at")} AS created_ms, ${ms("locked_until")} AS until_ms`
    : "m.id";
  return `WITH c AS MATERIALIZED (SELECT id FROM ${t} WHERE status IN ('pending', 'processing') AND key_state = 0 AND available_at <= now()
                                 ORDER BY available_at, id LIMIT $1 FOR UPDATE SKIP LOCKED)
       UPDATE ${t} m SET status = 'processing', locked_by = 'raw', locked_until = now() + interval '30 s', available_at = now() + interval '30 s',
              lease_token = m.lease_token + 1, attempts = m.attempts + 1
       FROM c WHERE m.id = c.id RETURNING ${returning}`;
}

/** $1 ids, $2 lease tokens: the guarded completion of a batch, returning the ids it completed. */
export function rawGuardedCompleteSql(schema: string): string {
  return `UPDATE ${schema}.outbox_messages m SET status = 'processed', processed_at = now(), locked_until = NULL, last_error = NULL
         FROM unnest($1::bigint[], $2::int[]) AS w(id, token)
         WHERE m.id = w.id AND m.lease_token = w.token AND m.status = 'processing' RETURNING m.id`;
}
