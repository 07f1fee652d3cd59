// FIFO per ordering key on PostgreSQL relies on READ COMMITTED: after waiting for a key's turn, the
// next statement must see what committed meanwhile. A keyed enqueue inside a transaction at a
// stricter level is refused with a named error before anything is written; an unkeyed one is not
// affected. The store's own sessions use READ COMMITTED whatever the database's default.

import { describe, expect, it } from "vitest";
import { InvalidArgumentError } from "../../src/outbox/errors.js";
import { PostgresOutboxStore } from "../../src/stores/postgres/postgres-outbox-store.js";
import { freshSchema, postgresAvailable, TEST_DATABASE_URL } from "../support/postgres.js";

const PG = await postgresAvailable();

describe.runIf(PG)("postgres: ordering keys and isolation levels", () => {
  it("refuses a keyed enqueue in a REPEATABLE READ or SERIALIZABLE transaction, and accepts an unkeyed one there", async () => {
    const store = await PostgresOutboxStore.connect({ url: TEST_DATABASE_URL, schema: freshSchema("wassal_iso") });
    try {
      await store.migrate();
      for (const level of ["REPEATABLE READ", "SERIALIZABLE"]) {
        const client = await store.pool.connect();
        try {
          await client.query(`BEGIN ISOLATION LEVEL ${level}`);
          const refused = store.enqueue(client, { type: "t", key: "k", payload: 1 });
          await expect(refused).rejects.toBeInstanceOf(InvalidArgumentError);
          await expect(refused).rejects.toThrow(
            new RegExp(`messages with an ordering key need a READ COMMITTED transaction on PostgreSQL \\(this one is ${level.toLowerCase()}\\)`),
          );
          await client.query("ROLLBACK");
          await client.query(`BEGIN ISOLATION LEVEL ${level}`);
          // enqueueMany alike: a list with one keyed message is refused, whole.
          await expect(
            store.enqueueMany(client, [
              { type: "t", payload: 1 },
              { type: "t", key: "k", payload: 2 },
            ]),
          ).rejects.toThrow(/messages with an ordering key need a READ COMMITTED transaction on PostgreSQL/);
          await client.query("ROLLBACK");
          await client.query(`BEGIN ISOLATION LEVEL ${level}`);
          await store.enqueue(client, { type: "t", payload: 1 });
          await store.enqueueMany(client, [{ type: "t", payload: 2 }]);
          await client.query("COMMIT");
        } finally {
          client.release();
        }
      }
      expect(await store.countByStatus()).toMatchObject({ pending: 4 });
      const own = await store.pool.query<{ level: string }>("SELECT current_setting('default_transaction_isolation') AS level");
      expect(own.rows[0]?.level).toBe("read committed");
    } finally {
      await store.close();
    }
  });
});
