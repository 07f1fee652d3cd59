// Keyed relaying on PostgreSQL: the completion that hands keys on reads a bounded number of rows
// per message, whatever the table's size and statistics (issue 36). The relay's loop without a
// broker: 1,200 keyed messages over 30 keys, claimed 256 at a time (so 30 at most: one holder per
// key) and completed together, each completion handing its keys on (wassal_hand_on). Rows read
// are the table's counters (pg_stat_user_tables: seq_tup_read + idx_tup_fetch) around each
// completion, the store's one connection flushing them (pg_stat_force_next_flush); the claims are
// not counted (a claim of more than 100 is planned at every call; see postgres-claim-plan).
// Measured with 100 processed messages in the table, then with 20,000,
// on the same connection: its kept plans (the prepared completion, the function's) were made on
// the small table. Without ANALYZE (a server with autovacuum off, as the test server is) and with
// it after loading (statistics that see the backlog as the whole table).
//
// Before the key index held key_state (outbox-012), the hand-on's plans were pinned and the store
// made its kept plans again as the table grew, at 20,000: a sequential scan of the table per
// completion from a kept plan (1,435.8 rows per message), the primary key walked from its oldest
// row for each key after ANALYZE (1,493.4 at 100), and each key's whole backlog read twice.

import type pg from "pg";
import { describe, expect, it } from "vitest";
import { ManualClock } from "../../src/outbox/clock.js";
import { PostgresOutboxStore } from "../../src/stores/postgres/postgres-outbox-store.js";
import { freshSchema, postgresAvailable, TEST_DATABASE_URL, withClient } from "../support/postgres.js";

const PG = await postgresAvailable();
const KEYS = 30;
const PER_KEY = 40;

/** Rows of the outbox table read so far by every backend (seq_tup_read + idx_tup_fetch), as flushed. */
async function rowsRead(client: pg.Client, schema: string): Promise<number> {
  await client.query("SELECT pg_stat_clear_snapshot()");
  const { rows } = await client.query<{ n: string }>(
    `SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) AS n FROM pg_stat_user_tables WHERE relid = '${schema}.outbox_messages'::regclass`,
  );
  return Number(rows[0]?.n ?? 0);
}

/** `count` processed keyed messages, inserted directly (history), ids below the ones to come. */
async function addProcessed(client: pg.Client, schema: string, count: number): Promise<void> {
  await client.query(
    `INSERT INTO ${schema}.outbox_messages (type, payload, status, created_at, available_at, processed_at, ordering_key, key_state)
     SELECT 't', to_jsonb(g), 'processed', now(), now(), now(), 'key-' || (g % ${KEYS}), 0 FROM generate_series(1, $1) g`,
    [count],
  );
}

/** Enqueues KEYS × PER_KEY keyed messages, relays them (claim 256, complete them together), and returns the rows the completions read per message. */
async function relayKeyed(store: PostgresOutboxStore, observer: pg.Client, schema: string, analyze: boolean): Promise<number> {
  await store.transaction((tx) =>
    store.enqueueMany(
      tx,
      Array.from({ length: KEYS * PER_KEY }, (_, i) => ({ type: "t", payload: i, key: `key-${i % KEYS}` })),
    ),
  );
  if (analyze) await observer.query(`ANALYZE ${schema}.outbox_messages`);
  const flushed = async () => {
    await store.pool.query("SELECT pg_stat_force_next_flush()");
    await store.pool.query("SELECT 1");
    return rowsRead(observer, schema);
  };
  let done = 0;
  let read = 0;
  while (done < KEYS * PER_KEY) {
    const leases = await store.claim("relay", { limit: 256, leaseMs: 60_000 });
    expect(leases.length).toBeGreaterThan(0);
    expect(leases.length).toBeLessThanOrEqual(KEYS); // one holder per key
    const before = await flushed();
    const results = await store.completeMany(leases.map((lease) => ({ lease })));
    read += (await flushed()) - before;
    done += results.filter((r) => r.outcome === "completed").length;
  }
  return read / (KEYS * PER_KEY);
}

describe.skipIf(!PG)("postgres keyed relaying: rows read per message do not grow with the table", () => {
  for (const analyze of [false, true]) {
    it(`100 then 20,000 processed messages, plans kept from the small table${analyze ? ", ANALYZE after loading" : ", never analyzed"}`, async () => {
      const schema = freshSchema("wassal_keyed_rows");
      const clock = new ManualClock(new Date("2026-12-03T09:00:00.000Z"));
      const store = await PostgresOutboxStore.connect({ url: TEST_DATABASE_URL, schema, maxConnections: 1, clock });
      try {
        await store.migrate();
        const perMessage = await withClient(async (observer) => {
          await addProcessed(observer, schema, 100);
          const small = await relayKeyed(store, observer, schema, analyze);
          await addProcessed(observer, schema, 20_000 - 100 - KEYS * PER_KEY);
          clock.advance(1_100); // the store looks at the table's size at most once a second
          const large = await relayKeyed(store, observer, schema, analyze);
          return { small, large };
        });
        console.log(
          `rows read per keyed message${analyze ? " (analyzed)" : ""}: 100 processed ${perMessage.small.toFixed(1)}, 20,000 ${perMessage.large.toFixed(1)}`,
        );
        // On the small table a plan may read it once per completion (1,300 rows for 30 messages), not more.
        expect(perMessage.small).toBeLessThanOrEqual(((100 + KEYS * PER_KEY) / KEYS) * 1.5);
        // On the large one a completion looks each lease up by id, and each key's next message up in the key index.
        expect(perMessage.large).toBeLessThanOrEqual(15);
        expect(perMessage.large).toBeLessThanOrEqual(Math.max(perMessage.small, 15));
      } finally {
        await store.close();
      }
    }, 60_000);
  }
});
