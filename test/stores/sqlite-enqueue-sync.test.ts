// enqueueSync on SQLite: enqueue inside a synchronous transaction on another better-sqlite3
// connection to the store's file (better-sqlite3's db.transaction(), Drizzle's better-sqlite3
// transactions), which cannot await. Everything happens before it returns: a commit keeps the row
// and the message, a throw keeps neither, and a refused message (a taken dedupe key, a bad payload,
// no open transaction) throws at once, inside the transaction.

import { join } from "node:path";
import Database from "better-sqlite3";
import { sql } from "drizzle-orm";
import { drizzle } from "drizzle-orm/better-sqlite3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DuplicateMessageError, InvalidArgumentError, NotInTransactionError } from "../../src/outbox/errors.js";
import { SqliteOutboxStore } from "../../src/stores/sqlite/sqlite-outbox-store.js";
import { tempDir } from "../support/temp.js";

describe("sqlite: enqueueSync in a synchronous transaction", () => {
  const path = join(tempDir("wassal-sync-"), "app.db");
  let store: SqliteOutboxStore;
  let app: Database.Database;

  beforeAll(async () => {
    store = new SqliteOutboxStore({ path });
    await store.migrate();
    app = new Database(path, { timeout: 5_000 });
    app.exec("CREATE TABLE orders (id TEXT PRIMARY KEY)");
  });

  afterAll(async () => {
    app?.close();
    await store?.close();
  });

  const orders = () => app.prepare("SELECT id FROM orders ORDER BY id").pluck().all();

  it("with Drizzle's better-sqlite3 transaction: a commit keeps both, a throw keeps neither", async () => {
    const db = drizzle(app);
    const message = db.transaction((tx) => {
      tx.run(sql`INSERT INTO orders (id) VALUES ('o-1')`);
      return store.enqueueSync(db.$client, { type: "order.paid", payload: { orderId: "o-1" }, dedupeKey: "paid-o-1" });
    });
    expect(message).toMatchObject({ type: "order.paid", payload: { orderId: "o-1" }, status: "pending" });
    expect(() =>
      db.transaction((tx) => {
        tx.run(sql`INSERT INTO orders (id) VALUES ('o-2')`);
        store.enqueueSync(db.$client, { type: "order.paid", payload: { orderId: "o-2" } });
        throw new Error("the provider said no");
      }),
    ).toThrow("the provider said no");
    expect(orders()).toEqual(["o-1"]);
    expect((await store.listMessages()).map((m) => m.id)).toEqual([message.id]);
  });

  it("throws a refused message inside the transaction, which rolls the business write back", async () => {
    const before = (await store.listMessages()).length;
    const paid = app.transaction(() => {
      app.prepare("INSERT INTO orders (id) VALUES (?)").run("o-3");
      store.enqueueSync(app, { type: "order.paid", payload: {}, dedupeKey: "paid-o-1" });
    });
    expect(() => paid()).toThrow(DuplicateMessageError);
    const bad = app.transaction(() => {
      app.prepare("INSERT INTO orders (id) VALUES (?)").run("o-4");
      store.enqueueSync(app, { type: "order.paid", payload: { amount: 10n } as never });
    });
    expect(() => bad()).toThrow(InvalidArgumentError);
    expect(orders()).toEqual(["o-1"]);
    expect((await store.listMessages()).length).toBe(before);
  });

  it("refuses a connection outside a transaction at once, writing nothing", async () => {
    const before = (await store.listMessages()).length;
    expect(() => store.enqueueSync(app, { type: "t", payload: 1 })).toThrow(NotInTransactionError);
    expect((await store.listMessages()).length).toBe(before);
  });
});
