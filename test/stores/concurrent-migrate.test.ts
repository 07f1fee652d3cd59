// Several processes may start at once: migrating concurrently must apply each migration once
// and leave every connection usable.

import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { PostgresOutboxStore } from "../../src/stores/postgres/postgres-outbox-store.js";
import { SqliteOutboxStore } from "../../src/stores/sqlite/sqlite-outbox-store.js";
import { freshSchema, postgresAvailable, TEST_DATABASE_URL, withClient } from "../support/postgres.js";
import { tempDir } from "../support/temp.js";

const PG = await postgresAvailable();
const dir = tempDir();

/** The outbox's migrations, the same names on both stores, in order (PostgreSQL has two more: enqueue in SQL, the partial dedupe index). */
const OUTBOX_MIGRATION_NAMES = [
  "outbox-001-create",
  "outbox-002-audit",
  "outbox-003-dead-index",
  "outbox-004-envelope",
  "outbox-005-key-order",
  "outbox-006-hand-on",
  "outbox-007-hand-on-wakes",
  "outbox-008-inbox",
  "outbox-010-audit-refused",
  "outbox-012-key-seq",
  "outbox-013-inbox-order",
  "outbox-015-owners",
  "outbox-017-schedules",
  "outbox-018-priority",
  "outbox-019-singletons",
  "outbox-020-limits",
  "outbox-021-cancelled",
];

describe("concurrent migrations", () => {
  it("sqlite: eight connections migrating one new file at once apply each migration once", async () => {
    const path = join(dir, "concurrent.db");
    const stores = Array.from({ length: 8 }, () => new SqliteOutboxStore({ path }));
    try {
      await Promise.all(stores.map((s) => s.migrate()));
      const applied = stores[0]!.db.prepare("SELECT name FROM wassal_migrations").pluck().all();
      expect(applied).toEqual(OUTBOX_MIGRATION_NAMES);
      await stores[3]!.transaction((tx) => stores[3]!.enqueue(tx, { type: "t", payload: 1 }));
      expect((await stores[5]!.countByStatus()).pending).toBe(1);
    } finally {
      for (const s of stores) await s.close();
    }
  });

  it.skipIf(!PG)("postgres: eight pools migrating one new schema at once apply each migration once (advisory lock)", async () => {
    const schema = freshSchema("wassal_migrate");
    const stores = await Promise.all(Array.from({ length: 8 }, () => PostgresOutboxStore.connect({ url: TEST_DATABASE_URL, schema, maxConnections: 1 })));
    try {
      await Promise.all(stores.map((s) => s.migrate()));
      const { rows } = await withClient((client) => client.query<{ name: string }>(`SELECT name FROM ${schema}.wassal_migrations`));
      expect(rows.map((r) => r.name).sort()).toEqual(
        [...OUTBOX_MIGRATION_NAMES, "outbox-009-sql-enqueue", "outbox-011-dedupe-partial", "outbox-016-turns-without-circles"].sort(),
      );
      await stores[3]!.transaction((tx) => stores[3]!.enqueue(tx, { type: "t", payload: 1 }));
      expect((await stores[5]!.countByStatus()).pending).toBe(1);
    } finally {
      for (const s of stores) await s.close();
    }
  });
});
