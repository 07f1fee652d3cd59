// <schema>.enqueue(...) on PostgreSQL: the library's enqueue as a SQL function that any client or
// language calls in its own transaction (psql, a trigger). It commits or rolls back with the
// caller's writes, wakes listening workers, keeps each ordering key's order, and checks its
// arguments as the library does.

import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PostgresOutboxStore } from "../../src/stores/postgres/postgres-outbox-store.js";
import { freshSchema, postgresAvailable, TEST_DATABASE_URL } from "../support/postgres.js";
import { until } from "../support/wait.js";

const PG = await postgresAvailable();

describe.runIf(PG)("postgres: enqueue from SQL", () => {
  const schema = freshSchema("wassal_sqlenq");
  let store: PostgresOutboxStore;
  /** Another client, as another language's driver or psql would be: it knows only SQL. */
  let client: pg.Client;

  beforeAll(async () => {
    store = await PostgresOutboxStore.connect({ url: TEST_DATABASE_URL, schema });
    await store.migrate();
    client = new pg.Client({ connectionString: TEST_DATABASE_URL });
    await client.connect();
    await client.query(`CREATE TABLE ${schema}.orders (id text PRIMARY KEY, total int NOT NULL)`);
  });

  afterAll(async () => {
    await client?.end();
    await store?.close();
  });

  it("commits with the caller's own write, rolls back with it, and wakes listening workers", async () => {
    let wakes = 0;
    const stop = await store.onNewMessages(() => {
      wakes += 1;
    });
    try {
      await client.query("BEGIN");
      await client.query(`INSERT INTO ${schema}.orders VALUES ('o-1', 1250)`);
      const { rows } = await client.query<{ id: string }>(
        `SELECT ${schema}.enqueue('order.paid', '{"orderId":"o-1","total":1250}'::jsonb, dedupe_key => 'paid-o-1', headers => '{"x-trace":"t1"}', destination => 'orders.paid') AS id`,
      );
      expect(wakes).toBe(0); // nothing is told before the commit
      await client.query("COMMIT");
      const id = String(rows[0]?.id);
      await until("the wake-up of the committed enqueue", () => wakes > 0);
      expect(await store.getMessage(id)).toMatchObject({
        id,
        type: "order.paid",
        dedupeKey: "paid-o-1",
        headers: { "x-trace": "t1" },
        destination: "orders.paid",
        payload: { orderId: "o-1", total: 1250 },
        status: "pending",
      });

      await client.query("BEGIN");
      await client.query(`INSERT INTO ${schema}.orders VALUES ('o-2', 99)`);
      await client.query(`SELECT ${schema}.enqueue('order.paid', '{"orderId":"o-2"}')`);
      await client.query("ROLLBACK");
      expect((await client.query(`SELECT id FROM ${schema}.orders ORDER BY id`)).rows).toEqual([{ id: "o-1" }]);
      expect((await store.listMessages()).map((m) => m.payload)).toEqual([{ orderId: "o-1", total: 1250 }]);

      // The same dedupe key again is the unique violation the library turns into DuplicateMessageError.
      await expect(client.query(`SELECT ${schema}.enqueue('order.paid', '{}', dedupe_key => 'paid-o-1')`)).rejects.toMatchObject({ code: "23505" });
    } finally {
      await stop();
    }
  });

  it("works from a trigger: each order row enqueues its event in the same transaction", async () => {
    await client.query(`
      CREATE FUNCTION ${schema}.order_created() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM ${schema}.enqueue('order.created', to_jsonb(NEW), dedupe_key => 'created-' || NEW.id, ordering_key => NEW.id);
        RETURN NEW;
      END $$;
      CREATE TRIGGER order_created AFTER INSERT ON ${schema}.orders FOR EACH ROW EXECUTE FUNCTION ${schema}.order_created();`);
    await client.query(`INSERT INTO ${schema}.orders VALUES ('o-3', 10), ('o-4', 20)`);
    const created = (await store.listMessages()).filter((m) => m.type === "order.created");
    expect(created.map((m) => [m.key, m.payload])).toEqual([
      ["o-3", { id: "o-3", total: 10 }],
      ["o-4", { id: "o-4", total: 20 }],
    ]);
    await client.query(`DROP TRIGGER order_created ON ${schema}.orders`);
  });

  it("keeps an ordering key's order and numbers its messages: the second message of a key waits until the first is done", async () => {
    await client.query(`SELECT ${schema}.enqueue('statement.line', '1', ordering_key => 'acct-9')`);
    await client.query(`SELECT ${schema}.enqueue('statement.line', '2', ordering_key => 'acct-9')`);
    const claimed = async () => (await store.claim("sql-test", { limit: 50, leaseMs: 30_000 })).filter((l) => l.message.key === "acct-9");
    const first = await claimed();
    expect(first.map((l) => [l.message.payload, l.message.keySeq])).toEqual([[1, 1]]);
    const [lease] = first;
    if (lease === undefined) throw new Error("no lease");
    await store.complete(lease);
    const second = await claimed();
    expect(second.map((l) => [l.message.payload, l.message.keySeq])).toEqual([[2, 2]]);
    await store.complete(second[0]!);
    // The key's queue emptied: the function's next message of the key goes on from 3.
    await client.query(`SELECT ${schema}.enqueue('statement.line', '3', ordering_key => 'acct-9')`);
    expect((await claimed()).map((l) => [l.message.payload, l.message.keySeq])).toEqual([[3, 3]]);
  });

  it("refuses bad arguments, naming them, and writes nothing", async () => {
    const before = (await store.listMessages()).length;
    const cases: [string, RegExp][] = [
      [`SELECT ${schema}.enqueue('', '{}')`, /wassal enqueue: type must be a non-empty string of at most 200 characters/],
      [`SELECT ${schema}.enqueue(NULL, '{}')`, /wassal enqueue: type must be/],
      [`SELECT ${schema}.enqueue('t', NULL)`, /wassal enqueue: payload must be JSON \(jsonb\), not NULL/],
      [`SELECT ${schema}.enqueue('t', '{}', ordering_key => '  ')`, /wassal enqueue: ordering_key must be/],
      [`SELECT ${schema}.enqueue('t', '{}', dedupe_key => repeat('d', 1001))`, /wassal enqueue: dedupe_key must be/],
      [`SELECT ${schema}.enqueue('t', '{}', destination => E'a\\nb')`, /wassal enqueue: destination contains a control character/],
      [`SELECT ${schema}.enqueue('t', '{}', headers => '[1]')`, /wassal enqueue: headers must be a JSON object/],
      [`SELECT ${schema}.enqueue('t', '{}', headers => '{"a b":"x"}')`, /wassal enqueue: headers must be/],
      [`SELECT ${schema}.enqueue('t', '{}', headers => '{"a":1}')`, /wassal enqueue: headers must be/],
    ];
    for (const [statement, message] of cases) {
      await expect(client.query(statement), statement).rejects.toMatchObject({ code: "22023", message: expect.stringMatching(message) });
    }
    await client.query("BEGIN ISOLATION LEVEL REPEATABLE READ");
    await expect(client.query(`SELECT ${schema}.enqueue('t', '{}', ordering_key => 'k')`)).rejects.toThrow(
      "wassal enqueue: a message with an ordering key needs a READ COMMITTED transaction (this one is repeatable read)",
    );
    await client.query("ROLLBACK");
    expect((await store.listMessages()).length).toBe(before);
  });
});
