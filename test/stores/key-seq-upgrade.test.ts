// outbox-012-key-seq numbers each keyed message's place in its key's order. A database migrated
// before it keeps its messages: each key's holder (pending, processing or dead) becomes number 1,
// the messages waiting behind it are numbered as their turns come, and the call of a PostgreSQL
// process still running the old code (its hand-on with the keys alone) still hands keys on.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { ManualClock } from "../../src/outbox/clock.js";
import type { OutboxStore } from "../../src/outbox/store.js";
import { outboxMigrations } from "../../src/stores/postgres/outbox-sql.js";
import { PostgresOutboxStore } from "../../src/stores/postgres/postgres-outbox-store.js";
import { OUTBOX_MIGRATIONS } from "../../src/stores/sqlite/outbox-sql.js";
import { SqliteOutboxStore } from "../../src/stores/sqlite/sqlite-outbox-store.js";
import { freshSchema, postgresAvailable, TEST_DATABASE_URL, withClient } from "../support/postgres.js";

const PG = await postgresAvailable();
const BEFORE_012 = (name: string) => name < "outbox-012";
const dir = mkdtempSync(join(tmpdir(), "wassal-key-seq-upgrade-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Rows as the code before outbox-012 wrote them: key a's holder and one waiting behind it, key b's dead holder, one unkeyed. */
const OLD_ROWS: readonly (readonly [label: string, key: string | null, status: string, keyState: number])[] = [
  ["a1", "a", "pending", 0],
  ["a2", "a", "pending", 1],
  ["b1", "b", "dead", 0],
  ["u", null, "pending", 0],
];

async function expectUpgraded(store: OutboxStore<unknown>): Promise<void> {
  const byLabel = new Map((await store.listMessages()).map((m) => [(m.payload as { label: string }).label, m]));
  expect(["a1", "a2", "b1", "u"].map((l) => byLabel.get(l)?.keySeq)).toEqual([1, null, 1, null]);
  const [a1] = await store.claim("w", { limit: 1, leaseMs: 1_000 });
  expect(a1?.message.keySeq).toBe(1);
  await store.complete(a1!);
  const rest = await store.claim("w", { limit: 10, leaseMs: 1_000 });
  expect(rest.map((l) => `${(l.message.payload as { label: string }).label}#${l.message.keySeq}`)).toEqual(["a2#2", "u#null"]);
  await store.unblockKey("b", "skip");
  const b2 = await store.transaction((tx) => store.enqueue(tx, { type: "t", payload: { label: "b2" }, key: "b" }));
  expect(b2.keySeq).toBe(1); // b1 never went out: b2 takes its number
}

describe("key numbering upgrade (outbox-012-key-seq)", () => {
  it("sqlite: holders become number 1, waiting messages are numbered at their turn", async () => {
    const clock = new ManualClock(new Date("2026-12-01T09:00:00.000Z"));
    const store = new SqliteOutboxStore({ path: join(dir, "upgrade.db"), clock });
    try {
      await store.applyMigrations(OUTBOX_MIGRATIONS.filter((m) => BEFORE_012(m.name)));
      const insert = store.db.prepare(
        "INSERT INTO outbox_messages (type, payload, status, created_at, available_at, ordering_key, key_state) VALUES ('t', ?, ?, 0, 0, ?, ?)",
      );
      for (const [label, key, status, keyState] of OLD_ROWS) insert.run(JSON.stringify({ label }), status, key, keyState);
      await store.migrate();
      await expectUpgraded(store);
    } finally {
      await store.close();
    }
  });

  it.skipIf(!PG)("postgres: the same, and the old code's hand-on call (keys alone) still hands a key on", async () => {
    const schema = freshSchema("wassal_keyseq");
    const store = await PostgresOutboxStore.connect({ url: TEST_DATABASE_URL, schema, maxConnections: 2 });
    try {
      await store.applyMigrations(outboxMigrations(schema).filter((m) => BEFORE_012(m.name)));
      await withClient(async (client) => {
        for (const [label, key, status, keyState] of OLD_ROWS) {
          await client.query(
            `INSERT INTO ${schema}.outbox_messages (type, payload, status, created_at, available_at, ordering_key, key_state)
             VALUES ('t', $1, $2, now(), now(), $3, $4)`,
            [JSON.stringify({ label }), status, key, keyState],
          );
        }
      });
      await store.migrate();
      await expectUpgraded(store);
      // The old code's call: wassal_hand_on(keys), its holder c1 completed by hand.
      await store.transaction(async (tx) => {
        await store.enqueue(tx, { type: "t", payload: { label: "c1" }, key: "c" });
        await store.enqueue(tx, { type: "t", payload: { label: "c2" }, key: "c" });
      });
      await withClient(async (client) => {
        await client.query(`UPDATE ${schema}.outbox_messages SET status = 'processed' WHERE payload ->> 'label' = 'c1'`);
        expect((await client.query(`SELECT ${schema}.wassal_hand_on($1::text[]) AS promoted`, [["c"]])).rows[0]?.promoted).toBe(1);
      });
      const c2 = (await store.claim("w", { limit: 10, leaseMs: 1_000 })).find((l) => l.message.key === "c");
      // Without the completed holder's number the key's remembered one is used: none yet, so 1,
      // which c1 had too: during a rolling upgrade a key's numbers may repeat, and the consumer's
      // inbox applies the repeated one late (README, "Upgrading"). This pins what happens.
      expect(c2 && [(c2.message.payload as { label: string }).label, c2.message.keySeq]).toEqual(["c2", 1]);
    } finally {
      await store.close();
    }
  });
});
