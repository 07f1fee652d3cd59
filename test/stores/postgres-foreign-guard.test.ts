// On PostgreSQL, enqueue through another library's transaction asks the database whether a
// transaction block is open before it writes (a savepoint is an error outside one). This holds
// whichever protocol the library's client speaks: here a client that sends every query with the
// extended protocol, as some drivers do.

import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NotInTransactionError } from "../../src/outbox/errors.js";
import type { ForeignTransaction } from "../../src/outbox/types.js";
import { PostgresOutboxStore } from "../../src/stores/postgres/postgres-outbox-store.js";
import { freshSchema, postgresAvailable, TEST_DATABASE_URL } from "../support/postgres.js";

const PG = await postgresAvailable();

describe.runIf(PG)("postgres: the foreign transaction guard", () => {
  let store: PostgresOutboxStore;
  let client: pg.Client;
  /** The client as a library that always uses the extended protocol, and checks nothing itself. */
  const extended = (): ForeignTransaction => ({
    placeholders: "numbered",
    problem: () => null,
    query: async (text, params) => (await client.query({ text, values: [...params], queryMode: "extended" } as pg.QueryConfig)).rows,
  });

  beforeAll(async () => {
    store = await PostgresOutboxStore.connect({ url: TEST_DATABASE_URL, schema: freshSchema("wassal_guard") });
    await store.migrate();
    client = new pg.Client({ connectionString: TEST_DATABASE_URL });
    await client.connect();
  });

  afterAll(async () => {
    await client?.end();
    await store?.close();
  });

  it("refuses outside a transaction block, writing nothing, and enqueues inside one", async () => {
    await expect(store.enqueueIn(extended(), { type: "t", payload: 1 })).rejects.toBeInstanceOf(NotInTransactionError);
    await expect(store.enqueueIn(extended(), { type: "t", payload: 2, key: "k" })).rejects.toThrow(
      "the database ran this outside a transaction block (was the transaction already committed or rolled back?); nothing was written",
    );
    expect(await store.listMessages()).toEqual([]);
    await client.query("BEGIN");
    await store.enqueueIn(extended(), { type: "t", payload: 3, key: "k" });
    await client.query("ROLLBACK");
    await client.query("BEGIN");
    const kept = await store.enqueueIn(extended(), { type: "t", payload: 4, key: "k" });
    await client.query("COMMIT");
    expect((await store.listMessages()).map((m) => [m.id, m.payload])).toEqual([[kept.id, 4]]);
  });

  it("an enqueue that outlives its transaction (not awaited) is NotInTransactionError, not the raw 25P01, and writes nothing", async () => {
    const before = (await store.listMessages()).length;
    // The transaction is open for the guard's savepoint and ends right after it, before the
    // savepoint's release: what an un-awaited enqueue meets when the callback returns and commits.
    let calls = 0;
    const endsAfterGuard: ForeignTransaction = {
      placeholders: "numbered",
      problem: () => null,
      query: async (text, params) => {
        calls += 1;
        const rows = (await client.query(text, [...params])).rows;
        if (calls === 1) await client.query("COMMIT");
        return rows;
      },
    };
    await client.query("BEGIN");
    const attempt = store.enqueueIn(endsAfterGuard, { type: "t", payload: 5 });
    await expect(attempt).rejects.toBeInstanceOf(NotInTransactionError);
    await expect(attempt).rejects.toThrow("await enqueue inside the transaction");
    expect(calls).toBe(2);
    expect((await store.listMessages()).length).toBe(before);
  });
});
