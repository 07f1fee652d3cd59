// outbox-011-dedupe-partial (PostgreSQL) replaces the dedupe keys' unique constraint with a unique
// index over the rows that have a key. A schema migrated before it keeps its messages, and a taken
// key is still refused, by name, afterwards; rows without a key are not in the index at all.

import pg from "pg";
import { describe, expect, it } from "vitest";
import { DuplicateMessageError } from "../../src/outbox/errors.js";
import { outboxMigrations } from "../../src/stores/postgres/outbox-sql.js";
import { PostgresOutboxStore } from "../../src/stores/postgres/postgres-outbox-store.js";
import { freshSchema, postgresAvailable, TEST_DATABASE_URL, withClient } from "../support/postgres.js";
import { until } from "../support/wait.js";

const PG = await postgresAvailable();

describe.skipIf(!PG)("dedupe key index upgrade (outbox-011-dedupe-partial)", () => {
  it("postgres: messages are kept, a taken key is refused after the upgrade, and keyless rows have no index entry", async () => {
    const schema = freshSchema("wassal_dedupe");
    const store = await PostgresOutboxStore.connect({ url: TEST_DATABASE_URL, schema, maxConnections: 2 });
    try {
      await store.applyMigrations(outboxMigrations(schema).filter((m) => m.name !== "outbox-011-dedupe-partial"));
      await store.transaction(async (tx) => {
        await store.enqueue(tx, { type: "t", payload: 1, dedupeKey: "order-1" });
        await store.enqueue(tx, { type: "t", payload: 2 });
        await store.enqueue(tx, { type: "t", payload: 3 });
      });
      await store.migrate();

      expect((await store.countByStatus()).pending).toBe(3);
      const taken = store.transaction((tx) => store.enqueue(tx, { type: "t", payload: 4, dedupeKey: "order-1" }));
      await expect(taken).rejects.toBeInstanceOf(DuplicateMessageError);
      await expect(taken).rejects.toThrow(/order-1/);
      // Two more messages without a key, and one with a new key, are accepted.
      await store.transaction(async (tx) => {
        await store.enqueue(tx, { type: "t", payload: 5 });
        await store.enqueue(tx, { type: "t", payload: 6 });
        await store.enqueue(tx, { type: "t", payload: 7, dedupeKey: "order-2" });
      });
      expect((await store.countByStatus()).pending).toBe(6);

      await withClient(async (client) => {
        const { rows } = await client.query<{ indexname: string; indexdef: string }>(
          "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1 AND indexdef LIKE '%(dedupe_key)%'",
          [schema],
        );
        expect(rows.map((r) => r.indexname)).toEqual(["outbox_messages_dedupe"]);
        expect(rows[0]!.indexdef).toMatch(/^CREATE UNIQUE INDEX .* WHERE \(dedupe_key IS NOT NULL\)$/);
        // Only the two keyed messages have an entry: a rebuild counts the index's tuples exactly.
        await client.query(`REINDEX INDEX ${schema}.outbox_messages_dedupe`);
        const entries = await client.query<{ reltuples: number }>("SELECT reltuples FROM pg_class WHERE oid = $1::regclass", [
          `${schema}.outbox_messages_dedupe`,
        ]);
        expect(entries.rows[0]!.reltuples).toBe(2);
      });
    } finally {
      await store.close();
    }
  });

  it("postgres: an upgrade beside a worker's transaction that read a row and then writes it waits for it, and neither fails (no deadlock)", async () => {
    const schema = freshSchema("wassal_dedupe");
    const store = await PostgresOutboxStore.connect({ url: TEST_DATABASE_URL, schema, maxConnections: 2 });
    const worker = new pg.Client({ connectionString: TEST_DATABASE_URL });
    await worker.connect();
    try {
      await store.applyMigrations(outboxMigrations(schema).filter((m) => m.name !== "outbox-011-dedupe-partial"));
      const message = await store.transaction((tx) => store.enqueue(tx, { type: "t", payload: 1 }));
      // As claimMessage does: read the row FOR UPDATE, then write it, in one transaction.
      await worker.query("BEGIN");
      await worker.query(`SELECT id FROM ${schema}.outbox_messages WHERE id = $1 FOR UPDATE`, [message.id]);
      const upgrading = store.migrate();
      upgrading.catch(() => undefined);
      await until("the upgrade to wait for the table", () =>
        withClient(async (client) => {
          const { rows } = await client.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_locks WHERE relation = $1::regclass AND NOT granted", [
            `${schema}.outbox_messages`,
          ]);
          return rows[0]!.n > 0;
        }),
      );
      await worker.query(`UPDATE ${schema}.outbox_messages SET attempts = attempts + 1 WHERE id = $1`, [message.id]);
      await worker.query("COMMIT");
      await upgrading;
      expect((await store.getMessage(message.id))?.attempts).toBe(1);
    } finally {
      await worker.end();
      await store.close();
    }
  });
});
