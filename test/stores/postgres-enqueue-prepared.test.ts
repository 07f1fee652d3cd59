// A single enqueue is a named prepared statement, parsed once per connection, and so is a keyed
// enqueue's key lock: sent unnamed, the enqueue's parse and plan took about 0.3 ms of each call. (generic_plans and custom_plans: PostgreSQL 14+.) Prepared, it must behave as before: a refused
// dedupe key leaves it usable on the connection, and under the generic plan that a prepared
// statement moves to, a keyed message still waits behind its key's holder.

import { describe, expect, it } from "vitest";
import { DuplicateMessageError, NotMigratedError } from "../../src/outbox/errors.js";
import { outboxSql } from "../../src/stores/postgres/outbox-sql.js";
import { PostgresOutboxStore } from "../../src/stores/postgres/postgres-outbox-store.js";
import { freshSchema, postgresAvailable, TEST_DATABASE_URL } from "../support/postgres.js";

const PG = await postgresAvailable();

describe.skipIf(!PG)("postgres single enqueue: prepared once per connection", () => {
  it("is prepared once on its connection, survives a refused dedupe key there, and keeps a key's order under the generic plan", async () => {
    const schema = freshSchema("wassal_enqueue_prepared");
    // One connection, so every transaction below runs on the same one.
    const store = await PostgresOutboxStore.connect({ url: TEST_DATABASE_URL, schema, maxConnections: 1 });
    try {
      await store.migrate();
      await store.transaction((tx) => store.enqueue(tx, { type: "t", payload: 0, dedupeKey: "d" }));
      await expect(store.transaction((tx) => store.enqueue(tx, { type: "t", payload: 1, dedupeKey: "d" }))).rejects.toThrow(DuplicateMessageError);
      const { enqueue, lockKeys } = outboxSql(schema);
      const prepared = await store.transaction(async (tx) => {
        await tx.query("SET LOCAL plan_cache_mode = force_generic_plan");
        for (let i = 0; i < 3; i += 1) await store.enqueue(tx, { type: "t", payload: i, key: "k" });
        await store.enqueue(tx, { type: "t", payload: 3 });
        return (
          await tx.query<{ statement: string; calls: number; generic: number }>(
            `SELECT CASE statement WHEN $1 THEN 'enqueue' ELSE 'lockKeys' END AS statement,
                    (generic_plans + custom_plans)::int AS calls, generic_plans::int AS generic
             FROM pg_prepared_statements WHERE statement IN ($1, $2) ORDER BY 1`,
            [enqueue, lockKeys],
          )
        ).rows;
      });
      // One prepared statement for all six calls on the connection (the refused one included), the
      // last four under the generic plan; and one for the three keyed enqueues' key locks.
      expect(prepared).toEqual([
        { statement: "enqueue", calls: 6, generic: 4 },
        { statement: "lockKeys", calls: 3, generic: 3 },
      ]);
      const { rows } = await store.pool.query<{ payload: number; key_state: number }>(
        `SELECT payload::int AS payload, key_state FROM ${schema}.outbox_messages WHERE ordering_key = 'k' ORDER BY id`,
      );
      expect(rows).toEqual([
        { payload: 0, key_state: 0 },
        { payload: 1, key_state: 1 },
        { payload: 2, key_state: 1 },
      ]);
    } finally {
      await store.close();
    }
  });

  it("an enqueue whose statement could not be prepared (its table not there yet) leaves the connection able to prepare it later", async () => {
    const schema = freshSchema("wassal_enqueue_unprepared");
    const store = await PostgresOutboxStore.connect({ url: TEST_DATABASE_URL, schema, maxConnections: 1 });
    try {
      // Before migrate: the server refuses to parse the statement, so it must not count as prepared.
      await expect(store.transaction((tx) => store.enqueue(tx, { type: "t", payload: 0 }))).rejects.toThrow(NotMigratedError);
      await store.migrate();
      const sent = await store.transaction((tx) => store.enqueue(tx, { type: "t", payload: 1 }));
      expect(sent.payload).toBe(1);
    } finally {
      await store.close();
    }
  });
});
