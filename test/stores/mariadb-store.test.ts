// What only the MariaDB store has to show: its sessions read committed data whatever the server's
// default (REPEATABLE READ), and one that does not is refused; a URL must name its database; an
// unmigrated database gives NotMigratedError; several stores migrating one database at once apply
// each migration once (GET_LOCK); dedupe keys too long to index whole are unique through their
// hash, byte for byte; another library's transaction is checked for being open and, for a keyed
// message, for reading committed data.

import { afterAll, describe, expect, it } from "vitest";
import {
  DatabaseOpenError,
  DuplicateMessageError,
  InvalidArgumentError,
  NotInTransactionError,
  NotMigratedError,
  StoreReadOnlyError,
} from "../../src/outbox/errors.js";
import type { ForeignTransaction } from "../../src/outbox/types.js";
import { checkSession } from "../../src/stores/mariadb/connect.js";
import { openOutbox } from "../../src/stores/open-outbox.js";
import { MariaDbOutboxStore } from "../../src/stores/mariadb/mariadb-outbox-store.js";
import { OUTBOX_MIGRATIONS } from "../../src/stores/mariadb/outbox-sql.js";
import { type FreshDatabase, freshDatabase, mariadbAvailable, mariadbConnection, TEST_MARIADB_URL } from "../support/mariadb.js";

const MARIADB = await mariadbAvailable();
const databases: FreshDatabase[] = [];

afterAll(async () => {
  for (const database of databases.splice(0)) await database.drop();
});

async function database(): Promise<FreshDatabase> {
  const fresh = await freshDatabase();
  databases.push(fresh);
  return fresh;
}

/** A store on a fresh database, migrated unless told not to; closed by the caller. */
async function store(options: { readonly migrate?: boolean } = {}): Promise<MariaDbOutboxStore> {
  const opened = await MariaDbOutboxStore.connect({ url: (await database()).url, maxConnections: 4 });
  if (options.migrate ?? true) await opened.migrate();
  return opened;
}

describe.skipIf(!MARIADB)("the MariaDB store", () => {
  it("sets every connection of its pool to READ COMMITTED and UTC, whatever the server's default", async () => {
    const admin = await mariadbConnection();
    const outbox = await store({ migrate: false });
    try {
      const [server] = await admin.query<import("mysql2/promise").RowDataPacket[]>("SELECT @@tx_isolation AS isolation");
      expect(server[0]?.isolation).toBe("REPEATABLE-READ"); // the server's default, which the store must not use
      // Every connection the pool makes, not only the first.
      const connections = await Promise.all([0, 1, 2, 3].map(() => outbox.pool.getConnection()));
      try {
        for (const connection of connections) {
          const [rows] = await connection.query<import("mysql2/promise").RowDataPacket[]>("SELECT @@tx_isolation AS isolation, @@time_zone AS tz");
          expect(rows[0]).toEqual({ isolation: "READ-COMMITTED", tz: "+00:00" });
        }
      } finally {
        for (const connection of connections) connection.release();
      }
    } finally {
      await outbox.close();
      await admin.end();
    }
  });

  it("refuses a session that does not read committed data, naming the level it needs", async () => {
    const plain = await mariadbConnection();
    try {
      const refused = await checkSession(plain, false).catch((error: unknown) => error);
      expect(refused).toBeInstanceOf(DatabaseOpenError);
      expect((refused as Error).message).toMatch(/REPEATABLE-READ.*READ-COMMITTED/);
      await plain.query("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
      await expect(checkSession(plain, false)).resolves.toBeUndefined();
      await expect(checkSession(plain, true)).rejects.toThrow(/not read-only/);
    } finally {
      await plain.end();
    }
  });

  it("refuses a URL that names no database, or has query parameters, before connecting", async () => {
    const base = new URL(TEST_MARIADB_URL);
    for (const url of [`mysql://${base.host}`, `mysql://${base.host}/`, `mariadb://root@${base.host}`]) {
      const refused = await MariaDbOutboxStore.connect({ url }).catch((error: unknown) => error);
      expect(refused, url).toBeInstanceOf(InvalidArgumentError);
      expect((refused as Error).message, url).toMatch(/names no database/);
    }
    await expect(MariaDbOutboxStore.connect({ url: `mysql://${base.host}/app?ssl=true` })).rejects.toThrow(/query parameters/);
    await expect(MariaDbOutboxStore.connect({ url: "mariadb://root:hunter2@[::1/app" })).rejects.toThrow(InvalidArgumentError);
  });

  it("refuses --schema (openOutbox's schema), which a MariaDB URL's database replaces, instead of ignoring it", async () => {
    const refused = await openOutbox(TEST_MARIADB_URL, { schema: "wassal" }).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(InvalidArgumentError);
    expect((refused as Error).message).toMatch(/--schema is PostgreSQL's: on MariaDB the URL names the database/);
  });

  it("names a database that does not exist, and how to create it", async () => {
    const url = new URL(TEST_MARIADB_URL);
    url.pathname = "/wassal_t_missing_database";
    await expect(MariaDbOutboxStore.connect({ url: url.toString(), connectTimeoutMs: 5000 })).rejects.toThrow(
      /database wassal_t_missing_database does not exist.*CREATE DATABASE/,
    );
  });

  it("gives NotMigratedError from enqueue, enqueueMany and claim on a database without its tables", async () => {
    const outbox = await store({ migrate: false });
    try {
      await expect(outbox.transaction((tx) => outbox.enqueue(tx, { type: "t", payload: 1 }))).rejects.toBeInstanceOf(NotMigratedError);
      await expect(outbox.transaction((tx) => outbox.enqueueMany(tx, [{ type: "t", payload: 1 }]))).rejects.toBeInstanceOf(NotMigratedError);
      await expect(outbox.claim("w", { limit: 1, leaseMs: 1000 })).rejects.toBeInstanceOf(NotMigratedError);
      expect(await outbox.isInstalled()).toBe(false);
      expect((await outbox.pendingMigrations()).map((m) => m.name)).toEqual(OUTBOX_MIGRATIONS.map((m) => m.name));
    } finally {
      await outbox.close();
    }
  });

  it("eight stores migrating one new database at once apply each migration once (GET_LOCK)", async () => {
    const { url, name } = await database();
    const stores = await Promise.all(Array.from({ length: 8 }, () => MariaDbOutboxStore.connect({ url, maxConnections: 1 })));
    try {
      await Promise.all(stores.map((s) => s.migrate()));
      const admin = await mariadbConnection(name);
      try {
        const [rows] = await admin.query<import("mysql2/promise").RowDataPacket[]>("SELECT name FROM wassal_migrations ORDER BY name");
        expect(rows.map((r) => r.name)).toEqual(OUTBOX_MIGRATIONS.map((m) => m.name));
      } finally {
        await admin.end();
      }
      await stores[3]!.transaction((tx) => stores[3]!.enqueue(tx, { type: "t", payload: 1 }));
      expect((await stores[5]!.countByStatus()).pending).toBe(1);
      expect(await stores[6]!.pendingMigrations()).toEqual([]);
    } finally {
      for (const s of stores) await s.close();
    }
  });

  it("keeps dedupe keys unique through their hash: 1000 characters of 4 bytes each, and keys that differ by case, a trailing space or the last character", async () => {
    const outbox = await store();
    try {
      const long = "😀".repeat(500); // 1000 UTF-16 code units, 2000 bytes in utf8mb4
      const wide = `${"é".repeat(999)}x`; // 1000 characters, more than a key index could hold
      const keys = [long, wide, `${"é".repeat(999)}y`, "Order-1", "order-1", "order-1 "];
      for (const dedupeKey of keys) await outbox.transaction((tx) => outbox.enqueue(tx, { type: "t", payload: 1, dedupeKey }));
      for (const dedupeKey of keys) {
        const refused = await outbox.transaction((tx) => outbox.enqueue(tx, { type: "t", payload: 2, dedupeKey })).catch((error: unknown) => error);
        expect(refused).toBeInstanceOf(DuplicateMessageError);
      }
      // A list refused for one taken key names it.
      const refused = await outbox
        .transaction((tx) =>
          outbox.enqueueMany(tx, [
            { type: "t", payload: 3, dedupeKey: "fresh" },
            { type: "t", payload: 3, dedupeKey: wide },
          ]),
        )
        .catch((error: unknown) => error);
      expect(refused).toBeInstanceOf(DuplicateMessageError);
      expect((refused as DuplicateMessageError).message).toContain("messages[1]");
      expect((await outbox.findMessages("Order-1")).map((m) => m.dedupeKey)).toEqual(["Order-1"]);
      expect((await outbox.countByStatus()).pending).toBe(keys.length);
    } finally {
      await outbox.close();
    }
  });

  it("through another library's transaction: refuses one that is not open, and a keyed message outside READ COMMITTED", async () => {
    const outbox = await store();
    const { name } = { name: outbox.database };
    const connection = await mariadbConnection(name);
    const foreign: ForeignTransaction = {
      placeholders: "question",
      problem: () => null,
      query: async (sql, params) => {
        const [result] = await connection.query(sql, params as unknown[]);
        return Array.isArray(result) ? (result as Record<string, unknown>[]) : [];
      },
    };
    try {
      await expect(outbox.enqueueIn(foreign, { type: "t", payload: 1 })).rejects.toBeInstanceOf(NotInTransactionError);
      await connection.query("START TRANSACTION"); // the connection's default: REPEATABLE READ
      await expect(outbox.enqueueIn(foreign, { type: "t", payload: 1, key: "k" })).rejects.toThrow(/READ COMMITTED/);
      const unkeyed = await outbox.enqueueIn(foreign, { type: "t", payload: { n: 1 } });
      await connection.query("COMMIT");
      expect((await outbox.getMessage(unkeyed.id))?.payload).toEqual({ n: 1 });
      // MariaDB shows a session's level, not one set for the next transaction alone: the session's is what is checked.
      await connection.query("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
      await connection.query("START TRANSACTION");
      const keyed = await outbox.enqueueIn(foreign, { type: "t", payload: 2, key: "k" });
      await connection.query("COMMIT");
      expect(keyed).toMatchObject({ key: "k", keySeq: 1 });
    } finally {
      await connection.end();
      await outbox.close();
    }
  });

  it("opened readOnly: reads, and refuses to migrate", async () => {
    const writer = await store();
    const reader = await MariaDbOutboxStore.connect({ url: (await database()).url.replace(/[^/]+$/, writer.database), readOnly: true });
    try {
      const message = await writer.transaction((tx) => writer.enqueue(tx, { type: "t", payload: 1 }));
      expect((await reader.getMessage(message.id))?.id).toBe(message.id);
      await expect(reader.migrate()).rejects.toBeInstanceOf(StoreReadOnlyError);
      await expect(reader.transaction((tx) => reader.enqueue(tx, { type: "t", payload: 1 }))).rejects.toThrow(/read only|READ ONLY/i);
    } finally {
      await reader.close();
      await writer.close();
    }
  });
});
