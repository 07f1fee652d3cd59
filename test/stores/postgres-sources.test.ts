// Where a PostgreSQL store's connections come from: a URL (the other tests), the app's own pg.Pool,
// or a pg pool config (with its own settings: ssl, a password function). With the app's pool the store shares it and
// never ends it; its LISTEN connection is made like the pool's. A pool whose sessions default to a
// stricter isolation than read committed is refused, and so is anything but exactly one source.

import pg from "pg";
import { describe, expect, it } from "vitest";
import { DatabaseOpenError, InvalidArgumentError } from "../../src/outbox/errors.js";
import { PostgresOutboxStore, type PostgresStoreOptions } from "../../src/stores/postgres/postgres-outbox-store.js";
import { freshSchema, postgresAvailable, TEST_DATABASE_URL } from "../support/postgres.js";
import { until } from "../support/wait.js";

const PG = await postgresAvailable();

describe.runIf(PG)("postgres: the store's connection sources", () => {
  it("shares the app's own pool: the business write and the message commit together, wake-ups arrive, and close() leaves the pool open", async () => {
    const pool = new pg.Pool({ connectionString: TEST_DATABASE_URL, max: 4 });
    const schema = freshSchema("wassal_pool");
    try {
      const store = await PostgresOutboxStore.connect({ pool, schema });
      expect(store.pool).toBe(pool);
      await store.migrate();
      await pool.query(`CREATE TABLE ${schema}.orders (id text PRIMARY KEY)`);
      let wakes = 0;
      const stopListening = await store.onNewMessages(() => {
        wakes += 1;
      });
      const client = await pool.connect();
      try {
        await client.query("BEGIN");
        await client.query(`INSERT INTO ${schema}.orders (id) VALUES ('order-1')`);
        await store.enqueue(client, { type: "order.ship", payload: { orderId: "order-1" } });
        await client.query("COMMIT");
        await client.query("BEGIN");
        await client.query(`INSERT INTO ${schema}.orders (id) VALUES ('order-2')`);
        await store.enqueue(client, { type: "order.ship", payload: { orderId: "order-2" } });
        await client.query("ROLLBACK");
      } finally {
        client.release();
      }
      await until("a wake-up from the committed enqueue", () => wakes > 0);
      const listeners = await pool.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'wassal-listen' AND datname = current_database()",
      );
      expect(listeners.rows[0]?.n).toBeGreaterThanOrEqual(1);
      expect((await pool.query(`SELECT id FROM ${schema}.orders`)).rows).toEqual([{ id: "order-1" }]);
      expect(await store.countByStatus()).toMatchObject({ pending: 1 });
      await stopListening();
      await store.close();
      expect((await pool.query<{ one: number }>("SELECT 1 AS one")).rows).toEqual([{ one: 1 }]);
    } finally {
      await pool.end();
    }
  });

  it("opens its own pool from a pg config (its own settings kept, a password function accepted), and its sessions read committed", async () => {
    const url = new URL(TEST_DATABASE_URL);
    const store = await PostgresOutboxStore.connect({
      config: {
        host: url.hostname,
        port: Number(url.port || 5432),
        user: decodeURIComponent(url.username),
        database: url.pathname.slice(1),
        // The test server trusts local connections, so it never asks for it.
        password: async () => "not-asked-under-trust",
        ssl: false,
        application_name: "shop-app",
      },
      schema: freshSchema("wassal_config"),
    });
    try {
      await store.migrate();
      await store.transaction((tx) => store.enqueue(tx, { type: "t", payload: 1 }));
      expect(await store.countByStatus()).toMatchObject({ pending: 1 });
      const level = await store.pool.query<{ level: string }>("SELECT current_setting('default_transaction_isolation') AS level");
      expect(level.rows[0]?.level).toBe("read committed");
      const name = await store.pool.query<{ name: string }>("SELECT current_setting('application_name') AS name");
      expect(name.rows[0]?.name).toBe("shop-app");
    } finally {
      await store.close();
    }
  });

  it("refuses an app pool whose sessions default to repeatable read, saying what to set", async () => {
    const pool = new pg.Pool({ connectionString: TEST_DATABASE_URL, max: 1, options: "-c default_transaction_isolation=repeatable\\ read" });
    try {
      const opening = PostgresOutboxStore.connect({ pool, schema: freshSchema("wassal_rr") });
      await expect(opening).rejects.toBeInstanceOf(DatabaseOpenError);
      await expect(opening).rejects.toThrow(
        /default to repeatable read isolation, and Wassal's statements need read committed \(the per-key order relies on it\): create the pool with options/,
      );
      expect((await pool.query("SELECT 1 AS one")).rows).toEqual([{ one: 1 }]); // left open
    } finally {
      await pool.end();
    }
  });

  it("refuses a URL whose own options set a stricter isolation, which would replace Wassal's", async () => {
    const url = new URL(TEST_DATABASE_URL);
    url.searchParams.set("options", "-c default_transaction_isolation=serializable");
    const opening = PostgresOutboxStore.connect({ url: url.toString(), schema: freshSchema("wassal_opts") });
    await expect(opening).rejects.toBeInstanceOf(DatabaseOpenError);
    await expect(opening).rejects.toThrow(/default to serializable isolation, .* the URL's or config's options override it/);
  });

  it("says which server a config could not reach", async () => {
    const opening = PostgresOutboxStore.connect({ config: { host: "127.0.0.1", port: 1, user: "app", database: "shop" } });
    await expect(opening).rejects.toBeInstanceOf(DatabaseOpenError);
    await expect(opening).rejects.toThrow(
      "cannot connect to PostgreSQL at host 127.0.0.1 port 1 database shop (user app): connection refused; is the server running and listening there?",
    );
  });

  it("takes exactly one source, and a pool must be a pg.Pool", async () => {
    const pool = new pg.Pool({ connectionString: TEST_DATABASE_URL, max: 1 });
    try {
      for (const options of [{}, { url: TEST_DATABASE_URL, pool }, { url: TEST_DATABASE_URL, config: {} }] as unknown as PostgresStoreOptions[]) {
        await expect(PostgresOutboxStore.connect(options)).rejects.toThrow(
          new InvalidArgumentError("give exactly one of url (postgres://…), pool (your pg.Pool) or config (a pg pool config)"),
        );
      }
      await expect(PostgresOutboxStore.connect({ pool: {} as pg.Pool })).rejects.toThrow("pool must be a pg.Pool (new pg.Pool({ … }))");
    } finally {
      await pool.end();
    }
  });
});
