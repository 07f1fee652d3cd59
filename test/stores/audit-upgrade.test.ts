// outbox-010-audit-refused widens the audit trail (a "refused" action and its operation). A
// database migrated before it keeps its audit rows, and records refusals afterwards.

import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { outboxMigrations } from "../../src/stores/postgres/outbox-sql.js";
import { PostgresOutboxStore } from "../../src/stores/postgres/postgres-outbox-store.js";
import { OUTBOX_MIGRATIONS } from "../../src/stores/sqlite/outbox-sql.js";
import { SqliteOutboxStore } from "../../src/stores/sqlite/sqlite-outbox-store.js";
import { ManualClock } from "../../src/outbox/clock.js";
import type { OutboxStore } from "../../src/outbox/store.js";
import { freshSchema, postgresAvailable, TEST_DATABASE_URL, withClient } from "../support/postgres.js";
import { tempDir } from "../support/temp.js";

const PG = await postgresAvailable();
const dir = tempDir();
const BEFORE_010 = (name: string) => name !== "outbox-010-audit-refused";

/** After the upgrade: the old row is there, unchanged, and a stale lease's refused completion is recorded. */
async function expectUpgraded(store: OutboxStore<unknown>, clock: ManualClock) {
  expect(await store.auditTrail()).toEqual([
    {
      messageId: "7",
      token: 1,
      owner: "old-worker",
      action: "complete",
      at: new Date("2026-01-01T00:00:00.000Z"),
      previousStatus: null,
      previousOwner: null,
      previousLockedUntil: null,
      operation: null,
    },
  ]);
  const message = await store.transaction((tx) => store.enqueue(tx, { type: "t", payload: 1 }));
  const [stale] = await store.claim("worker-a", { limit: 1, leaseMs: 100 });
  clock.advance(100);
  await store.claim("worker-b", { limit: 1, leaseMs: 100 });
  expect((await store.complete(stale!)).outcome).toBe("lease-lost");
  expect((await store.auditTrail({ messageId: message.id })).map((e) => [e.action, e.owner, e.operation])).toEqual([
    ["claim", "worker-a", null],
    ["claim", "worker-b", null],
    ["refused", "worker-a", "complete"],
  ]);
}

describe("audit trail upgrade (outbox-010-audit-refused)", () => {
  it("sqlite: the audit table is rebuilt with its rows and ids kept", async () => {
    const path = join(dir, "upgrade.db");
    const clock = new ManualClock(new Date("2026-12-01T09:00:00.000Z"));
    const store = new SqliteOutboxStore({ path, audit: true, clock });
    try {
      await store.applyMigrations(OUTBOX_MIGRATIONS.filter((m) => BEFORE_010(m.name)));
      store.db
        .prepare("INSERT INTO outbox_audit (id, message_id, lease_token, owner, action, at) VALUES (41, 7, 1, 'old-worker', 'complete', ?)")
        .run(Date.parse("2026-01-01T00:00:00.000Z"));
      await store.migrate();
      await expectUpgraded(store, clock);
      // The rebuilt table continues the old ids (AUTOINCREMENT's sequence came along).
      expect(store.db.prepare("SELECT max(id) FROM outbox_audit").pluck().get()).toBe(44);
    } finally {
      await store.close();
    }
  });

  it("sqlite: ids keep growing after the upgrade even when every audit row had been purged", async () => {
    const path = join(dir, "purged.db");
    const store = new SqliteOutboxStore({ path, audit: true, clock: new ManualClock() });
    try {
      await store.applyMigrations(OUTBOX_MIGRATIONS.filter((m) => BEFORE_010(m.name)));
      store.db.prepare("INSERT INTO outbox_audit (id, message_id, lease_token, owner, action, at) VALUES (41, 7, 1, 'w', 'complete', 0)").run();
      store.db.prepare("DELETE FROM outbox_audit").run();
      await store.migrate();
      await store.transaction((tx) => store.enqueue(tx, { type: "t", payload: 1 }));
      await store.claim("w", { limit: 1, leaseMs: 100 });
      expect(store.db.prepare("SELECT id FROM outbox_audit").pluck().all()).toEqual([42]);
    } finally {
      await store.close();
    }
  });

  it.skipIf(!PG)("postgres: the constraint is widened and a column added, rows kept", async () => {
    const schema = freshSchema("wassal_upgrade");
    const clock = new ManualClock(new Date("2026-12-01T09:00:00.000Z"));
    const store = await PostgresOutboxStore.connect({ url: TEST_DATABASE_URL, schema, audit: true, clock, maxConnections: 2 });
    try {
      await store.applyMigrations(outboxMigrations(schema).filter((m) => BEFORE_010(m.name)));
      await withClient((client) =>
        client.query(
          `INSERT INTO ${schema}.outbox_audit (message_id, lease_token, owner, action, at) VALUES (7, 1, 'old-worker', 'complete', '2026-01-01T00:00:00Z')`,
        ),
      );
      await store.migrate();
      await expectUpgraded(store, clock);
    } finally {
      await store.close();
    }
  });
});
