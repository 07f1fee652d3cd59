// Enqueue from the app's own data layer: Kysely, Knex, TypeORM and Prisma on every store (SQLite,
// PostgreSQL, MariaDB), Drizzle on PostgreSQL and MariaDB. Prisma's clients are generated here
// first (prisma generate, with no engine download: a generated client needs none with a driver
// adapter).
// Each library writes a business row in its own transaction and enqueues through its integration:
// a commit keeps both, a rollback or a thrown error keeps neither, and a call outside a
// transaction, or on one that has already ended, gets NotInTransactionError and writes nothing.

import { spawnSync } from "node:child_process";
import { mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { PrismaBetterSqlite3 } from "@prisma/adapter-better-sqlite3";
import { PrismaMariaDb } from "@prisma/adapter-mariadb";
import { PrismaPg } from "@prisma/adapter-pg";
import Database from "better-sqlite3";
import { sql } from "drizzle-orm";
import { drizzle as drizzleMysql } from "drizzle-orm/mysql2";
import { drizzle } from "drizzle-orm/node-postgres";
import knex, { type Knex } from "knex";
import { Kysely, MysqlDialect, PostgresDialect, SqliteDialect } from "kysely";
import mysql2, { type Connection, createPool, type Pool, type PoolOptions } from "mysql2";
import pg from "pg";
import { DataSource, type EntityManager } from "typeorm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fromDrizzle } from "../../src/integrations/drizzle.js";
import { fromKnex } from "../../src/integrations/knex.js";
import { fromKysely } from "../../src/integrations/kysely.js";
import { fromPrisma, type PrismaTransactionClient } from "../../src/integrations/prisma.js";
import { fromTypeOrm } from "../../src/integrations/typeorm.js";
import { DuplicateMessageError, NotInTransactionError } from "../../src/outbox/errors.js";
import type { OutboxMessage } from "../../src/outbox/types.js";
import type { OutboxStore } from "../../src/outbox/store.js";
import type { ForeignTransaction, NewMessage } from "../../src/outbox/types.js";
import { MariaDbOutboxStore } from "../../src/stores/mariadb/mariadb-outbox-store.js";
import { PostgresOutboxStore } from "../../src/stores/postgres/postgres-outbox-store.js";
import { SqliteOutboxStore } from "../../src/stores/sqlite/sqlite-outbox-store.js";
import { ROOT } from "../support/cli.js";
import { type FreshDatabase, freshDatabase, mariadbAvailable } from "../support/mariadb.js";
import { freshSchema, postgresAvailable, TEST_DATABASE_URL } from "../support/postgres.js";
import { tempDir } from "../support/temp.js";

const PG = await postgresAvailable();
const MARIADB = await mariadbAvailable();

/** One data-access library on one store: its transaction, its business write, its integration. */
interface Layer {
  readonly name: string;
  readonly store: OutboxStore<unknown>;
  /** Runs `work` in the library's own transaction (commits when it resolves, rolls back when it throws). */
  transaction(work: (tx: unknown) => Promise<void>): Promise<void>;
  /** The business write, through the library, inside `tx`. */
  insertOrder(tx: unknown, id: string): Promise<void>;
  /** The integration's view of `tx`. */
  foreign(tx: unknown): ForeignTransaction;
  /** The library's database object itself, which is no transaction. */
  readonly root: unknown;
  orders(): Promise<string[]>;
  close(): Promise<void>;
}

async function sqliteLayers(): Promise<Layer[]> {
  const dir = tempDir("wassal-layers-");
  const layers: Layer[] = [];
  {
    const path = join(dir, "kysely.db");
    const store = new SqliteOutboxStore({ path });
    await store.migrate();
    const database = new Database(path, { timeout: 5_000 });
    database.exec("CREATE TABLE orders (id TEXT PRIMARY KEY)");
    const db = new Kysely<{ orders: { id: string } }>({ dialect: new SqliteDialect({ database }) });
    layers.push({
      name: "kysely on sqlite",
      store: store as OutboxStore<unknown>,
      transaction: (work) => db.transaction().execute((trx) => work(trx)),
      insertOrder: async (tx, id) => {
        await (tx as typeof db).insertInto("orders").values({ id }).execute();
      },
      foreign: (tx) => fromKysely(tx as typeof db),
      root: db,
      orders: async () => (await db.selectFrom("orders").select("id").orderBy("id").execute()).map((r) => r.id),
      close: async () => {
        await db.destroy();
        await store.close();
      },
    });
  }
  {
    const path = join(dir, "knex.db");
    const store = new SqliteOutboxStore({ path });
    await store.migrate();
    const db = knex({ client: "better-sqlite3", connection: { filename: path }, useNullAsDefault: true });
    await db.raw("CREATE TABLE orders (id TEXT PRIMARY KEY)");
    layers.push(knexLayer("knex on sqlite", store as OutboxStore<unknown>, db, store));
  }
  {
    const path = join(dir, "typeorm.db");
    const store = new SqliteOutboxStore({ path });
    await store.migrate();
    const source = new DataSource({ type: "better-sqlite3", database: path });
    await source.initialize();
    await source.query("CREATE TABLE orders (id TEXT PRIMARY KEY)");
    layers.push(typeOrmLayer("typeorm on sqlite", store as OutboxStore<unknown>, source, "orders", "?"));
  }
  return layers;
}

function typeOrmLayer(
  name: string,
  store: OutboxStore<unknown> & { close(): Promise<void> },
  source: DataSource,
  table: string,
  placeholder: string,
  after: () => Promise<void> = async () => undefined,
): Layer {
  return {
    name,
    store,
    transaction: (work) => source.transaction((manager) => work(manager)),
    insertOrder: async (tx, id) => {
      await (tx as EntityManager).query(`INSERT INTO ${table} (id) VALUES (${placeholder})`, [id]);
    },
    foreign: (tx) => fromTypeOrm(tx as EntityManager),
    root: source.manager,
    orders: async () => ((await source.query(`SELECT id FROM ${table} ORDER BY id`)) as { id: string }[]).map((r) => r.id),
    close: async () => {
      try {
        await source.destroy();
        await store.close();
      } finally {
        await after();
      }
    },
  };
}

function knexLayer(name: string, store: OutboxStore<unknown>, db: Knex, closeable: { close(): Promise<void> }, table = "orders"): Layer {
  return {
    name,
    store,
    transaction: (work) => db.transaction((trx) => work(trx)),
    insertOrder: async (tx, id) => {
      await (tx as Knex.Transaction)(table).insert({ id });
    },
    foreign: (tx) => fromKnex(tx as Knex.Transaction),
    root: db,
    orders: async () => (await db(table).select("id").orderBy("id")).map((r: { id: string }) => r.id),
    close: async () => {
      await db.destroy();
      await closeable.close();
    },
  };
}

async function postgresLayers(): Promise<Layer[]> {
  const layers: Layer[] = [];
  const open = async (prefix: string) => {
    const schema = freshSchema(prefix);
    const store = await PostgresOutboxStore.connect({ url: TEST_DATABASE_URL, schema });
    await store.migrate();
    await store.pool.query(`CREATE TABLE ${schema}.orders (id text PRIMARY KEY)`);
    return { schema, store };
  };
  {
    const { schema, store } = await open("wassal_kysely");
    const db = new Kysely<Record<string, { id: string }>>({
      dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: TEST_DATABASE_URL, max: 2 }) }),
    });
    const table = `${schema}.orders`;
    layers.push({
      name: "kysely on postgres",
      store: store as OutboxStore<unknown>,
      transaction: (work) => db.transaction().execute((trx) => work(trx)),
      insertOrder: async (tx, id) => {
        await (tx as typeof db).insertInto(table).values({ id }).execute();
      },
      foreign: (tx) => fromKysely(tx as typeof db),
      root: db,
      orders: async () => (await db.selectFrom(table).select("id").orderBy("id").execute()).map((r) => r.id),
      close: async () => {
        await db.destroy();
        await store.close();
      },
    });
  }
  {
    const { schema, store } = await open("wassal_knex");
    const db = knex({ client: "pg", connection: TEST_DATABASE_URL, pool: { min: 0, max: 2 } });
    layers.push(knexLayer("knex on postgres", store as OutboxStore<unknown>, db, store, `${schema}.orders`));
  }
  {
    const { schema, store } = await open("wassal_drizzle");
    const pool = new pg.Pool({ connectionString: TEST_DATABASE_URL, max: 2 });
    const db = drizzle(pool);
    type Tx = Parameters<Parameters<typeof db.transaction>[0]>[0];
    layers.push({
      name: "drizzle on postgres",
      store: store as OutboxStore<unknown>,
      transaction: (work) => db.transaction((tx) => work(tx)),
      insertOrder: async (tx, id) => {
        await (tx as Tx).execute(`INSERT INTO ${schema}.orders (id) VALUES ('${id}')`);
      },
      foreign: (tx) => fromDrizzle(tx as Tx),
      root: db,
      orders: async () => (await pool.query<{ id: string }>(`SELECT id FROM ${schema}.orders ORDER BY id`)).rows.map((r) => r.id),
      close: async () => {
        await pool.end();
        await store.close();
      },
    });
  }
  {
    const { schema, store } = await open("wassal_typeorm");
    const source = new DataSource({ type: "postgres", url: TEST_DATABASE_URL, extra: { max: 2 } });
    await source.initialize();
    layers.push(typeOrmLayer("typeorm on postgres", store as OutboxStore<unknown>, source, `${schema}.orders`, "$1"));
  }
  return layers;
}

/**
 * A keyed enqueue on MariaDB needs a READ COMMITTED session, which the store checks
 * (SELECT @@tx_isolation): MariaDB shows no level set for one transaction alone (a one-shot SET
 * TRANSACTION ISOLATION LEVEL, what each library's isolation option sends), so the README tells
 * users to give their connections that default, as each library's connections here do.
 */
const READ_COMMITTED = "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED";

/** mysql2 with pools whose new connections read committed data (see READ_COMMITTED). */
function readCommittedPool(options: PoolOptions): Pool {
  const pool = createPool(options);
  pool.on("connection", (connection) => {
    // Queued before the connection's first use; a connection that cannot take it is not used.
    connection.query(READ_COMMITTED, (error) => {
      if (error) connection.destroy();
    });
  });
  return pool;
}

/**
 * Each library on a MariaDB store of its own, in a fresh database (dropped when the layer closes)
 * with its orders table, through mysql2 (Prisma: its mariadb adapter, on the mariadb package).
 */
async function mariadbLayers(): Promise<Layer[]> {
  const layers: Layer[] = [];
  const open = async () => {
    const database = await freshDatabase();
    const store = await MariaDbOutboxStore.connect({ url: database.url });
    await store.migrate();
    await store.pool.query("CREATE TABLE orders (id VARCHAR(64) PRIMARY KEY)");
    return { database, store };
  };
  /** Closes the layer's own library, then the store, then drops the database. */
  const closing = (database: FreshDatabase, store: MariaDbOutboxStore, library: () => Promise<void>) => async () => {
    try {
      await library();
      await store.close();
    } finally {
      await database.drop();
    }
  };
  {
    const { database, store } = await open();
    const db = new Kysely<{ orders: { id: string } }>({
      dialect: new MysqlDialect({ pool: readCommittedPool({ uri: database.url, connectionLimit: 2 }) }),
    });
    layers.push({
      name: "kysely on mariadb",
      store: store as OutboxStore<unknown>,
      transaction: (work) => db.transaction().execute((trx) => work(trx)),
      insertOrder: async (tx, id) => {
        await (tx as typeof db).insertInto("orders").values({ id }).execute();
      },
      foreign: (tx) => fromKysely(tx as typeof db),
      root: db,
      orders: async () => (await db.selectFrom("orders").select("id").orderBy("id").execute()).map((r) => r.id),
      close: closing(database, store, () => db.destroy()),
    });
  }
  {
    const { database, store } = await open();
    const db = knex({
      client: "mysql2",
      connection: database.url,
      pool: {
        min: 0,
        max: 2,
        afterCreate: (connection: Connection, done: (error: Error | null, connection: Connection) => void) => {
          connection.query(READ_COMMITTED, (error) => done(error, connection));
        },
      },
    });
    layers.push(knexLayer("knex on mariadb", store as OutboxStore<unknown>, db, { close: closing(database, store, async () => undefined) }));
  }
  {
    const { database, store } = await open();
    const pool = readCommittedPool({ uri: database.url, connectionLimit: 2 }).promise();
    const db = drizzleMysql({ client: pool });
    type Tx = Parameters<Parameters<typeof db.transaction>[0]>[0];
    layers.push({
      name: "drizzle on mariadb",
      store: store as OutboxStore<unknown>,
      transaction: (work) => db.transaction((tx) => work(tx)),
      insertOrder: async (tx, id) => {
        await (tx as Tx).execute(sql`INSERT INTO orders (id) VALUES (${id})`);
      },
      foreign: (tx) => fromDrizzle(tx as Tx),
      root: db,
      orders: async () => ((await pool.query("SELECT id FROM orders ORDER BY id"))[0] as { id: string }[]).map((r) => r.id),
      close: closing(database, store, () => pool.end()),
    });
  }
  {
    const { database, store } = await open();
    // TypeORM loads mysql2 itself when the mysql package is absent; it is handed here only for its pools' READ_COMMITTED.
    // TypeORM's defaults (bigNumberStrings: true) answer BIGINT times as decimal text, which the store reads as numbers.
    const source = new DataSource({
      type: "mariadb",
      url: database.url,
      extra: { connectionLimit: 2 },
      driver: { ...mysql2, createPool: readCommittedPool },
    });
    await source.initialize();
    layers.push(typeOrmLayer("typeorm on mariadb", store as OutboxStore<unknown>, source, "orders", "?", () => database.drop()));
  }
  {
    const { database, store } = await open();
    const PrismaClient = await prismaClientClass("mysql");
    const prisma = new PrismaClient({ adapter: new PrismaMariaDb(prismaMariaDbConfig(database.url)) });
    layers.push(prismaLayer("prisma on mariadb", store as OutboxStore<unknown>, prisma, "orders", "?", () => database.drop()));
  }
  return layers;
}

/** The mariadb package's pool options for a test database's URL (mysql://user[:password]@host[:port]/database). */
function prismaMariaDbConfig(url: string) {
  const parsed = new URL(url);
  const user = decodeURIComponent(parsed.username);
  const password = decodeURIComponent(parsed.password);
  return {
    host: parsed.hostname,
    port: parsed.port === "" ? 3306 : Number(parsed.port),
    ...(user === "" ? {} : { user }),
    ...(password === "" ? {} : { password }),
    database: parsed.pathname.slice(1),
    connectionLimit: 2,
    initSql: READ_COMMITTED,
  };
}

/** What the tests use of a generated PrismaClient. */
interface PrismaLike extends PrismaTransactionClient {
  $transaction<T>(work: (tx: PrismaTransactionClient & { $executeRawUnsafe(sql: string, ...values: unknown[]): Promise<number> }) => Promise<T>): Promise<T>;
  $executeRawUnsafe(sql: string, ...values: unknown[]): Promise<number>;
  $disconnect(): Promise<void>;
}

/**
 * Generates a Prisma client for `provider` in a folder of its own (linked to this repository's
 * node_modules, which the generated code imports from) and returns its PrismaClient class.
 * PRISMA_SCHEMA_ENGINE_BINARY names any file: generate then downloads no engine.
 */
async function prismaClientClass(provider: "postgresql" | "mysql" | "sqlite"): Promise<new (options: { adapter: unknown }) => PrismaLike> {
  const dir = tempDir("wassal-prisma-");
  symlinkSync(join(ROOT, "node_modules"), join(dir, "node_modules"), "dir");
  mkdirSync(join(dir, "prisma"));
  const schema = join(dir, "prisma", "schema.prisma");
  writeFileSync(
    schema,
    `generator client {\n  provider = "prisma-client"\n  output   = "../client"\n}\ndatasource db {\n  provider = "${provider}"\n}\nmodel Order {\n  id String @id\n  @@map("orders")\n}\n`,
  );
  const generated = spawnSync(process.execPath, [join(ROOT, "node_modules", "prisma", "build", "index.js"), "generate", "--schema", schema], {
    cwd: dir,
    encoding: "utf8",
    env: { ...process.env, PRISMA_SCHEMA_ENGINE_BINARY: process.execPath, CHECKPOINT_DISABLE: "1", PRISMA_HIDE_UPDATE_MESSAGE: "1" },
    timeout: 120_000,
  });
  if (generated.status !== 0) throw new Error(`prisma generate failed: ${generated.stdout}\n${generated.stderr}`);
  const module = (await import(join(dir, "client", "client.ts"))) as { PrismaClient: new (options: { adapter: unknown }) => PrismaLike };
  return module.PrismaClient;
}

function prismaLayer(
  name: string,
  store: OutboxStore<unknown>,
  prisma: PrismaLike,
  table: string,
  placeholder: string,
  after: () => Promise<void> = async () => undefined,
): Layer {
  type Tx = Parameters<Parameters<PrismaLike["$transaction"]>[0]>[0];
  return {
    name,
    store,
    transaction: (work) => prisma.$transaction((tx) => work(tx)),
    insertOrder: async (tx, id) => {
      await (tx as Tx).$executeRawUnsafe(`INSERT INTO ${table} (id) VALUES (${placeholder})`, id);
    },
    foreign: (tx) => fromPrisma(tx as Tx),
    root: prisma,
    orders: async () => (await prisma.$queryRawUnsafe<{ id: string }[]>(`SELECT id FROM ${table} ORDER BY id`)).map((r) => r.id),
    close: async () => {
      try {
        await prisma.$disconnect();
        await store.close();
      } finally {
        await after();
      }
    },
  };
}

const layers: Layer[] = [];

beforeAll(async () => {
  layers.push(...(await sqliteLayers()));
  {
    const path = join(tempDir("wassal-layers-"), "prisma.db");
    const store = new SqliteOutboxStore({ path });
    await store.migrate();
    const PrismaClient = await prismaClientClass("sqlite");
    const prisma = new PrismaClient({ adapter: new PrismaBetterSqlite3({ url: `file:${path}` }) });
    await prisma.$executeRawUnsafe("CREATE TABLE orders (id TEXT PRIMARY KEY)");
    layers.push(prismaLayer("prisma on sqlite", store as OutboxStore<unknown>, prisma, "orders", "?"));
  }
  if (PG) {
    layers.push(...(await postgresLayers()));
    const schema = freshSchema("wassal_prisma");
    const store = await PostgresOutboxStore.connect({ url: TEST_DATABASE_URL, schema });
    await store.migrate();
    await store.pool.query(`CREATE TABLE ${schema}.orders (id text PRIMARY KEY)`);
    const PrismaClient = await prismaClientClass("postgresql");
    const prisma = new PrismaClient({ adapter: new PrismaPg({ connectionString: TEST_DATABASE_URL, max: 2 }) });
    layers.push(prismaLayer("prisma on postgres", store as OutboxStore<unknown>, prisma, `${schema}.orders`, "$1"));
  }
  if (MARIADB) layers.push(...(await mariadbLayers()));
}, 240_000);

afterAll(async () => {
  for (const layer of layers.splice(0)) await layer.close();
});

describe("enqueue from the app's data layer", () => {
  it("runs on every library and store here", () => {
    expect(layers.map((l) => l.name)).toEqual([
      "kysely on sqlite",
      "knex on sqlite",
      "typeorm on sqlite",
      "prisma on sqlite",
      ...(PG ? ["kysely on postgres", "knex on postgres", "drizzle on postgres", "typeorm on postgres", "prisma on postgres"] : []),
      ...(MARIADB ? ["kysely on mariadb", "knex on mariadb", "drizzle on mariadb", "typeorm on mariadb", "prisma on mariadb"] : []),
    ]);
  });

  it("a commit keeps the row and the message; a rollback or a thrown error keeps neither", async () => {
    for (const layer of layers) {
      await layer.transaction(async (tx) => {
        await layer.insertOrder(tx, "o-1");
        const message = await layer.store.enqueueIn(layer.foreign(tx), {
          type: "order.paid",
          payload: { orderId: "o-1" },
          headers: { "x-trace": "t1" },
          key: "o-1",
        });
        expect(message, layer.name).toMatchObject({
          type: "order.paid",
          payload: { orderId: "o-1" },
          headers: { "x-trace": "t1" },
          key: "o-1",
          status: "pending",
        });
      });
      await expect(
        layer.transaction(async (tx) => {
          await layer.insertOrder(tx, "o-2");
          await layer.store.enqueueIn(layer.foreign(tx), { type: "order.paid", payload: { orderId: "o-2" } });
          throw new Error("the payment provider said no");
        }),
        layer.name,
      ).rejects.toThrow("the payment provider said no");
      expect(await layer.orders(), layer.name).toEqual(["o-1"]);
      const messages = await layer.store.listMessages();
      expect(
        messages.map((m) => m.payload),
        layer.name,
      ).toEqual([{ orderId: "o-1" }]);
    }
  });

  it("keeps an ordering key's order and refuses a dedupe key already taken", async () => {
    for (const layer of layers) {
      await layer.transaction(async (tx) => {
        await layer.store.enqueueIn(layer.foreign(tx), { type: "line", payload: 1, key: "acct", dedupeKey: "line-1" });
        await layer.store.enqueueIn(layer.foreign(tx), { type: "line", payload: 2, key: "acct" });
      });
      const claimed = await layer.store.claim("layers-test", { limit: 10, leaseMs: 30_000 });
      expect(
        claimed.filter((l) => l.message.key === "acct").map((l) => l.message.payload),
        layer.name,
      ).toEqual([1]);
      await expect(
        layer.transaction((tx) => layer.store.enqueueIn(layer.foreign(tx), { type: "line", payload: 3, dedupeKey: "line-1" }).then(() => undefined)),
        layer.name,
      ).rejects.toBeInstanceOf(DuplicateMessageError);
    }
  });

  it("takes a priority, and a singleton joins (and debounces) the waiting one, through each library's raw SQL", async () => {
    for (const layer of layers) {
      const got: OutboxMessage[] = [];
      for (const [payload, priority] of [
        [1, 30],
        [2, 0],
      ] as const) {
        await layer.transaction(async (tx) => {
          got.push(
            await layer.store.enqueueIn(layer.foreign(tx), { type: "reindex", payload, singletonKey: "u-17", key: "users", debounceMs: 60_000, priority }),
          );
        });
      }
      expect(got[0], layer.name).toMatchObject({ singletonKey: "u-17", priority: 30, key: "users", payload: 1 });
      expect(got[1], layer.name).toMatchObject({ id: got[0]?.id, payload: 2, priority: 0 });
      await expect(
        layer.transaction((tx) =>
          layer.store.enqueueIn(layer.foreign(tx), { type: "reindex", payload: 3, singletonKey: "u-17", key: "others" }).then(() => undefined),
        ),
        layer.name,
      ).rejects.toThrow(/waits unclaimed with another ordering key than "others"/);
      const waiting = (await layer.store.listMessages()).filter((m) => m.type === "reindex");
      expect(
        waiting.map((m) => [m.id, m.payload]),
        layer.name,
      ).toEqual([[got[0]?.id, 2]]);
    }
  });

  it("enqueueManyIn: a list in one statement, in list order, with the row; a taken dedupe key refuses the list, naming the key", async () => {
    for (const layer of layers) {
      const list: NewMessage[] = [1, 2, 3, 4].map((n) => ({
        type: "many",
        payload: { n, text: "مرحبا" },
        key: n % 2 === 0 ? "many-even" : "many-odd",
        headers: { "x-n": String(n) },
        dedupeKey: `many-${n}`,
        ...(n === 4 ? { availableAt: new Date("2001-01-01T00:00:00.000Z") } : {}),
      }));
      let stored: Awaited<ReturnType<OutboxStore<unknown>["enqueueManyIn"]>> = [];
      await layer.transaction(async (tx) => {
        await layer.insertOrder(tx, "o-many");
        stored = await layer.store.enqueueManyIn(layer.foreign(tx), list);
      });
      expect(
        stored.map((m) => [m.payload, m.key, m.headers, m.dedupeKey]),
        layer.name,
      ).toEqual(list.map((m) => [m.payload, m.key, m.headers, m.dedupeKey]));
      expect(stored[3]?.availableAt, layer.name).toEqual(new Date("2001-01-01T00:00:00.000Z"));
      expect(new Set(stored.map((m) => m.id)).size, layer.name).toBe(4);
      for (const message of stored) expect(await layer.store.getMessage(message.id), layer.name).toEqual(message);
      expect(await layer.orders(), layer.name).toContain("o-many");
      const claimed = await layer.store.claim("layers-test", { limit: 10, leaseMs: 30_000 });
      expect(
        claimed.filter((l) => l.message.type === "many").map((l) => (l.message.payload as { n: number }).n),
        layer.name,
      ).toEqual([1, 2]); // each key's first in list order: 4 waits behind 2, its earlier availableAt notwithstanding
      const attempt = layer.transaction((tx) =>
        layer.store.enqueueManyIn(layer.foreign(tx), [{ type: "many", payload: 5, dedupeKey: "many-5" }, list[2] as NewMessage]).then(() => undefined),
      );
      await expect(attempt, layer.name).rejects.toBeInstanceOf(DuplicateMessageError);
      await expect(attempt, layer.name).rejects.toMatchObject({ dedupeKey: "many-3" });
      expect((await layer.store.listMessages()).filter((m) => m.type === "many").length, layer.name).toBe(4);
    }
  });

  it("outside a transaction, or on one that has ended, gets NotInTransactionError and writes nothing", async () => {
    for (const layer of layers) {
      const before = (await layer.store.listMessages()).length;
      await expect(layer.store.enqueueIn(layer.foreign(layer.root), { type: "t", payload: 1 }), layer.name).rejects.toBeInstanceOf(NotInTransactionError);
      let ended: unknown;
      await layer.transaction(async (tx) => {
        ended = tx;
      });
      await expect(layer.store.enqueueIn(layer.foreign(ended), { type: "t", payload: 2 }), layer.name).rejects.toBeInstanceOf(NotInTransactionError);
      expect((await layer.store.listMessages()).length, layer.name).toBe(before);
    }
  });
});
