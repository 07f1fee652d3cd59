// wassal_enqueue(...) on MariaDB: the library's enqueue as a stored procedure that any client or
// language calls in its own transaction (the mariadb client, a trigger). It commits or rolls back
// with the caller's writes, keeps each ordering key's order (taking the key's turn as the store
// does), and checks its arguments as the library does. Workers find its messages by polling.

import type mysql from "mysql2/promise";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MariaDbOutboxStore } from "../../src/stores/mariadb/mariadb-outbox-store.js";
import { SQL } from "../../src/stores/mariadb/outbox-sql.js";
import { type FreshDatabase, freshDatabase, mariadbAvailable, mariadbConnection } from "../support/mariadb.js";

const MARIADB = await mariadbAvailable();

type Rows = mysql.RowDataPacket[];

/** A fixed time in the past: the message is due at once, and its availableAt shows it came through. */
const DUE = 1_700_000_000_000;

describe.runIf(MARIADB)("mariadb: enqueue from SQL", () => {
  let database: FreshDatabase;
  let store: MariaDbOutboxStore;
  /** Another client, as another language's driver or the mariadb client would be: it knows only SQL. */
  let client: mysql.Connection;

  /** CALL wassal_enqueue(...) through `on` (the client by default): the new id, from the OUT argument. */
  async function enqueue(args: readonly unknown[], on: mysql.Connection = client): Promise<string> {
    await on.query("CALL wassal_enqueue(?, ?, ?, ?, ?, ?, ?, @wassal_id)", [...args]);
    const [rows] = await on.query<Rows>("SELECT @wassal_id AS id");
    return String(rows[0]?.id);
  }

  /** The leases a claim gets for `key`, completing none. */
  const claimedOf = async (key: string) => (await store.claim("sql-test", { limit: 50, leaseMs: 30_000 })).filter((l) => l.message.key === key);

  beforeAll(async () => {
    database = await freshDatabase();
    store = await MariaDbOutboxStore.connect({ url: database.url, maxConnections: 4 });
    await store.migrate();
    client = await mariadbConnection(database.name);
    await client.query("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
    await client.query("CREATE TABLE orders (id VARCHAR(20) PRIMARY KEY, total INT NOT NULL) ENGINE=InnoDB");
  });

  afterAll(async () => {
    await client?.end();
    await store?.close();
    await database?.drop();
  });

  it("commits with the caller's own write and rolls back with it; the store then claims the message as it was given", async () => {
    await client.query("BEGIN");
    await client.query("INSERT INTO orders VALUES ('o-1', 1250)");
    const id = await enqueue(["order.paid", '{"orderId":"o-1","total":1250}', "paid-o-1", null, '{"x-trace":"t1"}', "orders.paid", DUE]);
    expect(await store.getMessage(id), "not seen before the commit").toBeUndefined();
    await client.query("COMMIT");
    expect(await store.getMessage(id)).toMatchObject({
      id,
      type: "order.paid",
      dedupeKey: "paid-o-1",
      key: null,
      headers: { "x-trace": "t1" },
      destination: "orders.paid",
      payload: { orderId: "o-1", total: 1250 },
      status: "pending",
      availableAt: new Date(DUE),
    });

    await client.query("BEGIN");
    await client.query("INSERT INTO orders VALUES ('o-2', 99)");
    await enqueue(["order.paid", '{"orderId":"o-2"}', null, null, null, null, null]);
    await client.query("ROLLBACK");
    expect((await client.query<Rows>("SELECT id FROM orders ORDER BY id"))[0]).toEqual([{ id: "o-1" }]);
    expect((await store.listMessages()).map((m) => m.payload)).toEqual([{ orderId: "o-1", total: 1250 }]);

    // The same dedupe key again is the duplicate-key error the library turns into DuplicateMessageError.
    await client.query("BEGIN");
    await expect(enqueue(["order.paid", "{}", "paid-o-1", null, null, null, null])).rejects.toMatchObject({ errno: 1062 });
    await client.query("ROLLBACK");
    expect((await store.listMessages()).filter((m) => m.dedupeKey === "paid-o-1")).toHaveLength(1);

    const [lease] = await store.claim("sql-test", { limit: 10, leaseMs: 30_000 });
    expect(lease?.message).toMatchObject({
      id,
      type: "order.paid",
      headers: { "x-trace": "t1" },
      destination: "orders.paid",
      payload: { orderId: "o-1", total: 1250 },
    });
    await store.complete(lease!);
  });

  it("takes no headers as none, and its times from the database's clock when available_at_ms is NULL", async () => {
    const [clock] = await client.query<Rows>("SELECT UNIX_TIMESTAMP(NOW(3)) * 1000 AS now");
    const id = await enqueue(["t.empty", "null", null, null, "{}", null, null]);
    const message = await store.getMessage(id);
    expect(message).toMatchObject({ headers: {}, payload: null });
    expect(Math.abs(message!.availableAt.getTime() - Number(clock[0]?.now))).toBeLessThan(5_000);
    expect(message!.createdAt.getTime()).toBe(message!.availableAt.getTime());
    const [row] = await client.query<Rows>("SELECT headers FROM outbox_messages WHERE id = ?", [id]);
    expect(row[0]?.headers).toBeNull();
    const [lease] = await store.claim("sql-test", { limit: 10, leaseMs: 30_000 });
    await store.complete(lease!);
  });

  it("works from a trigger: each order row enqueues its event in the same transaction", async () => {
    await client.query(
      "CREATE TRIGGER order_created AFTER INSERT ON orders FOR EACH ROW CALL wassal_enqueue('order.created', JSON_OBJECT('id', NEW.id, 'total', NEW.total), CONCAT('created-', NEW.id), NEW.id, NULL, NULL, NULL, @wassal_trigger_id)",
    );
    try {
      await client.query("INSERT INTO orders VALUES ('o-3', 10), ('o-4', 20)");
      const created = (await store.listMessages()).filter((m) => m.type === "order.created");
      expect(created.map((m) => [m.key, m.keySeq, m.payload])).toEqual([
        ["o-3", 1, { id: "o-3", total: 10 }],
        ["o-4", 1, { id: "o-4", total: 20 }],
      ]);
      for (const lease of await store.claim("sql-test", { limit: 10, leaseMs: 30_000 })) await store.complete(lease);
    } finally {
      await client.query("DROP TRIGGER order_created");
    }
  });

  it("keeps an ordering key's order among SQL and library enqueues: each waits until the one before it is done, numbered in turn", async () => {
    const library = (payload: number) => store.transaction((tx) => store.enqueue(tx, { type: "statement.line", payload, key: "acct-9" }));
    await enqueue(["statement.line", "1", null, "acct-9", null, null, null]);
    await library(2);
    await enqueue(["statement.line", "3", null, "acct-9", null, null, null]);
    await library(4);
    for (const expected of [1, 2, 3, 4]) {
      const leases = await claimedOf("acct-9");
      expect(leases.map((l) => [l.message.payload, l.message.keySeq])).toEqual([[expected, expected]]);
      expect(await claimedOf("acct-9"), "the next one waits while this one is processing").toEqual([]);
      await store.complete(leases[0]!);
    }
    // The key's queue emptied: the procedure's next message of the key goes on from 5.
    await enqueue(["statement.line", "5", null, "acct-9", null, null, null]);
    const last = await claimedOf("acct-9");
    expect(last.map((l) => [l.message.payload, l.message.keySeq])).toEqual([[5, 5]]);
    await store.complete(last[0]!);
  });

  it("reads the key after taking its turn: a holder completed while it waited for the turn is not waited behind", async () => {
    await enqueue(["statement.line", "1", null, "acct-7", null, null, null]);
    const [holder] = await claimedOf("acct-7");
    // A completion that holds the key's turn, done as the store does it: the turn, the completion,
    // nobody waiting, so the key remembers its next number.
    const other = await mariadbConnection(database.name);
    try {
      await other.query("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
      await other.query("BEGIN");
      await other.query(SQL.lockKey, ["acct-7"]);
      await other.query(SQL.complete, [Date.now(), holder!.messageId, holder!.token]);
      await client.query("BEGIN");
      let settled = false;
      const call = enqueue(["statement.line", "2", null, "acct-7", null, null, null]).finally(() => {
        settled = true;
      });
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(settled, "the call waits for the key's turn").toBe(false);
      await other.query(SQL.rememberKeySeq, [2, "acct-7", "acct-7"]);
      await other.query("COMMIT");
      const id = await call;
      await client.query("COMMIT");
      expect(await store.getMessage(id)).toMatchObject({ status: "pending", keySeq: 2 });
      const next = await claimedOf("acct-7");
      expect(next.map((l) => [l.message.payload, l.message.keySeq])).toEqual([[2, 2]]);
      await store.complete(next[0]!);
    } finally {
      await other.end();
    }
  });

  it("refuses bad arguments with SQLSTATE 22023, naming them, and writes nothing", async () => {
    const before = (await store.listMessages()).length;
    const nested = (depth: number) => `${"[".repeat(depth)}${"]".repeat(depth)}`;
    const headers = (count: number) => JSON.stringify(Object.fromEntries(Array.from({ length: count }, (_, i) => [`h${i}`, "v"])));
    const cases: [readonly unknown[], RegExp][] = [
      [["", "{}"], /^wassal enqueue: type must be a non-empty string of at most 200 characters$/],
      [[null, "{}"], /^wassal enqueue: type must be/],
      [[" \t", "{}"], /^wassal enqueue: type must be/],
      [["t".repeat(201), "{}"], /^wassal enqueue: type must be/],
      [["t\u0000", "{}"], /^wassal enqueue: type contains a NUL character/],
      [["t", null], /^wassal enqueue: payload must be JSON text, not NULL/],
      [["t", "{not json"], /^wassal enqueue: payload must be valid JSON text nested at most 31 levels deep/],
      [["t", nested(32)], /^wassal enqueue: payload must be valid JSON/],
      [["t", '{"a":"x\\u0000"}'], /^wassal enqueue: payload contains a NUL character/],
      [["t", "{}", "d".repeat(1001)], /^wassal enqueue: dedupe_key must be a non-empty string of at most 1000 characters$/],
      [["t", "{}", null, "  "], /^wassal enqueue: ordering_key must be a non-empty string of at most 255 characters$/],
      [["t", "{}", null, "k".repeat(256)], /^wassal enqueue: ordering_key must be/],
      [["t", "{}", null, null, "[1]"], /^wassal enqueue: headers must be a JSON object/],
      [["t", "{}", null, null, "{"], /^wassal enqueue: headers must be/],
      [["t", "{}", null, null, '{"a b":"x"}'], /^wassal enqueue: headers must be/],
      [["t", "{}", null, null, '{"a\\n":"x"}'], /^wassal enqueue: headers must be/],
      [["t", "{}", null, null, '{"a":1}'], /^wassal enqueue: headers must be/],
      [["t", "{}", null, null, '{"a":"x","a":"y"}'], /^wassal enqueue: headers must be/],
      [["t", "{}", null, null, '{"a":"x\\ny"}'], /^wassal enqueue: headers must be/],
      [["t", "{}", null, null, JSON.stringify({ a: "v".repeat(4097) })], /^wassal enqueue: headers must be/],
      [["t", "{}", null, null, headers(65)], /^wassal enqueue: headers must be/],
      [["t", "{}", null, null, null, "a\nb"], /^wassal enqueue: destination contains a control character$/],
      [["t", "{}", null, null, null, "d".repeat(256)], /^wassal enqueue: destination must be a non-empty string of at most 255 characters$/],
      [["t", "{}", null, null, null, null, Date.UTC(9999, 11, 31, 23, 59, 59, 999) + 1], /^wassal enqueue: available_at_ms must be epoch milliseconds/],
    ];
    for (const [args, message] of cases) {
      const full = [...args, ...Array(7 - args.length).fill(null)];
      await expect(enqueue(full), JSON.stringify(args).slice(0, 120)).rejects.toMatchObject({
        sqlState: "22023",
        message: expect.stringMatching(message),
      });
    }
    // What the library accepts at the edges is accepted here too (then rolled back).
    await client.query("BEGIN");
    for (const args of [
      ["t".repeat(200), nested(31), "d".repeat(1000), "k".repeat(255), headers(64), "d".repeat(255), Date.UTC(9999, 11, 31, 23, 59, 59, 999)],
      ["t", '"a\\\\u0000"', null, null, JSON.stringify({ "x-tab": "a\tb", "!#$%&'*+-.^_`|~": "v".repeat(4096) }), "a\tb", Date.parse("0001-01-01T00:00:00Z")],
    ]) {
      await expect(enqueue(args)).resolves.toMatch(/^[0-9]+$/);
    }
    await client.query("ROLLBACK");

    // A keyed message needs a READ COMMITTED session, as through the library.
    const repeatable = await mariadbConnection(database.name);
    try {
      await repeatable.query("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ");
      await repeatable.query("BEGIN");
      await expect(enqueue(["t", "{}", null, "k", null, null, null], repeatable)).rejects.toMatchObject({
        sqlState: "22023",
        message: expect.stringContaining(
          "wassal enqueue: messages with an ordering key need a READ COMMITTED transaction on MariaDB (this connection's session is REPEATABLE-READ)",
        ),
      });
      await repeatable.query("ROLLBACK");
    } finally {
      await repeatable.end();
    }
    expect((await store.listMessages()).length).toBe(before);
  });
});
