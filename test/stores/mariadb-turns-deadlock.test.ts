// MariaDB's counterpart of postgres-turns-deadlock.test.ts. A group completion hands several keys
// on, and an app's transaction enqueues for several keys: both take the keys' turns (outbox_keys
// rows, locked by lockKeys' INSERT … ON DUPLICATE KEY UPDATE and held to commit). The app takes them
// in the order it enqueues, which need not be sorted; the completion takes them sorted, in one
// statement that locked a's row and then waited for b's. Against an app holding b and then wanting
// a, that was a circle.

import type mysql from "mysql2/promise";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Lease } from "../../src/outbox/types.js";
import { MariaDbOutboxStore } from "../../src/stores/mariadb/mariadb-outbox-store.js";
import { type FreshDatabase, freshDatabase, mariadbAvailable, mariadbConnection } from "../support/mariadb.js";
import { until } from "../support/wait.js";

const MARIADB = await mariadbAvailable();

describe.skipIf(!MARIADB)("MariaDB: a group completion and an app's transaction take keys' turns in opposite orders", () => {
  let database: FreshDatabase;
  let store: MariaDbOutboxStore;
  let admin: mysql.Connection;
  beforeAll(async () => {
    database = await freshDatabase();
    store = await MariaDbOutboxStore.connect({ url: database.url, maxConnections: 4 });
    await store.migrate();
    admin = await mariadbConnection();
  });
  afterAll(async () => {
    await admin?.end();
    await store?.close();
    await database?.drop();
  });

  /**
   * This test's store's transactions (its connections are the only ones on its fresh database)
   * waiting for a row lock (a key's turn). INNODB_TRX is a cache that InnoDB refreshes only when it
   * was last read more than 100 ms before: polled faster, it never changes, hence the interval.
   */
  const waitingForTurns = async () => {
    const [rows] = await admin.query<mysql.RowDataPacket[]>(
      `SELECT COUNT(*) AS n FROM information_schema.INNODB_TRX t JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id
        WHERE t.trx_state = 'LOCK WAIT' AND p.DB = ?`,
      [database.name],
    );
    return Number(rows[0]?.n ?? 0);
  };

  // Before the fix the completion's hand-on took both turns in one statement (lockKeys: INSERT
  // INTO outbox_keys … VALUES ('a'), ('b') ON DUPLICATE KEY UPDATE), holding a's row while it
  // waited for b's, which the app's first enqueue held; the app's second enqueue then waited for
  // the completion, and InnoDB rolled back the app's transaction (ER_LOCK_DEADLOCK, 1213). Now the
  // hand-on takes several turns without waiting, and when one is busy rolls its transaction back,
  // waits for that turn alone and runs again.
  it("both commit: the completion does not hold one key's turn while it waits for another's", async () => {
    await store.transaction(async (tx) => {
      await store.enqueue(tx, { type: "t", key: "a", payload: { n: 1 } });
      await store.enqueue(tx, { type: "t", key: "b", payload: { n: 1 } });
    });
    const leases: Lease[] = await store.claim("worker", { limit: 10, leaseMs: 60_000 });
    expect(leases.map((lease) => lease.message.key).sort()).toEqual(["a", "b"]);

    let completing: Promise<unknown> | undefined;
    const app = store.transaction(async (tx) => {
      // The app takes b's turn first...
      await store.enqueue(tx, { type: "t", key: "b", payload: { n: 2 } });
      // ...the completion of a's and b's holders starts, takes a's turn and finds b's busy...
      completing = store.completeMany(leases.map((lease) => ({ lease }))).catch((error: unknown) => error);
      await until("the completion waiting for a key's turn", async () => (await waitingForTurns()) >= 1, { intervalMs: 250 });
      // ...and the app now wants a's turn. Holding a while waiting for b, the completion closes a circle here.
      await store.enqueue(tx, { type: "t", key: "a", payload: { n: 2 } });
    });
    const appError = await app.then(
      () => undefined,
      (error: unknown) => error,
    );
    const results = await completing;
    expect(appError).toBeUndefined();
    expect(Array.isArray(results) ? results.map((result: { outcome: string }) => result.outcome) : results).toEqual(["completed", "completed"]);
    // And each key's next message was handed on: both claimable now, numbered 2.
    const next = await store.claim("worker", { limit: 10, leaseMs: 60_000 });
    expect(next.map((lease) => [lease.message.key, lease.message.keySeq]).sort()).toEqual([
      ["a", 2],
      ["b", 2],
    ]);
  }, 30_000);
});
