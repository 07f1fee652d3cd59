// A refused lease write on PostgreSQL records who held the message as committed when it was
// refused, not as the statement's snapshot saw it. The race: the stale lease's token is still the
// committed one when its write starts, another session's reclaim holds the row, and the write waits;
// the reclaim commits and the write, re-checked on the new row, is refused. Its refusal (recorded in
// the same statement, FOR KEY SHARE) must name the new holder, not the stale lease itself.

import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { ManualClock } from "../../src/outbox/clock.js";
import type { Lease, LeaseLost } from "../../src/outbox/types.js";
import { PostgresOutboxStore } from "../../src/stores/postgres/postgres-outbox-store.js";
import { freshSchema, postgresAvailable, TEST_DATABASE_URL } from "../support/postgres.js";

const PG = await postgresAvailable();

describe.runIf(PG)("postgres: a refusal that waited for a reclaim", () => {
  let store: PostgresOutboxStore;
  let schema: string;

  beforeEach(async () => {
    schema = freshSchema("wassal_refusal");
    store = await PostgresOutboxStore.connect({ url: TEST_DATABASE_URL, schema, clock: new ManualClock(new Date("2026-01-01T09:00:00Z")), audit: true });
    await store.migrate();
  });

  afterEach(async () => {
    await store.pool.query(`DROP SCHEMA ${schema} CASCADE`);
    await store.close();
  });

  /** Runs `write` while another session's uncommitted reclaim holds the row, then commits the reclaim. */
  async function refusedAfterReclaim<R>(lease: Lease, write: () => Promise<R>): Promise<R> {
    const other = await store.pool.connect();
    try {
      await other.query("BEGIN");
      await other.query(`UPDATE ${schema}.outbox_messages SET lease_token = lease_token + 1, locked_by = 'worker-b' WHERE id = $1`, [lease.messageId]);
      const pid = (await other.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]?.pid;
      const written = write();
      // Until the write waits for the reclaim's row lock (its token still matched what committed).
      for (;;) {
        const { rows } = await store.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))", [pid]);
        if ((rows[0]?.n ?? 0) > 0) break;
        await new Promise((resolve) => setImmediate(resolve));
      }
      await other.query("COMMIT");
      return await written;
    } finally {
      other.release();
    }
  }

  it("names the reclaimer as the holder, in the result and in the audit trail, for a completion and a renewal", async () => {
    await store.transaction((tx) =>
      store.enqueueMany(tx, [
        { type: "t", payload: 1 },
        { type: "t", payload: 2 },
      ]),
    );
    const [first, second] = (await store.claim("worker-a", { limit: 2, leaseMs: 60_000 })) as [Lease, Lease];
    const results = [
      (await refusedAfterReclaim(first, () => store.complete(first))) as LeaseLost,
      (await refusedAfterReclaim(second, () => store.renew(second, 60_000))) as LeaseLost,
    ];
    for (const [index, lease] of [first, second].entries()) {
      expect(results[index]).toMatchObject({ outcome: "lease-lost", current: { status: "processing", lockedBy: "worker-b", leaseToken: lease.token + 1 } });
    }
    const refused = (await store.auditTrail()).filter((entry) => entry.action === "refused");
    expect(refused.map((entry) => [entry.messageId, entry.operation, entry.owner, entry.previousOwner])).toEqual([
      [first.messageId, "complete", "worker-a", "worker-b"],
      [second.messageId, "renew", "worker-a", "worker-b"],
    ]);
  });
});
