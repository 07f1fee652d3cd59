// A group completion hands several keys on, and an app's transaction enqueues for several keys:
// both take the keys' turns (advisory locks held to commit). The app takes them in the order it
// enqueues, which need not be sorted. A completion that waited for key b while holding key a,
// against an app holding b and then waiting for a, was a deadlock: PostgreSQL aborted one of the
// two after deadlock_timeout (seen as "business write failed: deadlock detected" and a second
// publish of the group's messages, found by the WAL relay's test). The hand-on now never waits
// for one key's turn while it holds another: both must commit.

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Lease } from "../../src/outbox/types.js";
import { PostgresOutboxStore } from "../../src/stores/postgres/postgres-outbox-store.js";
import { freshSchema, postgresAvailable, TEST_DATABASE_URL, withClient } from "../support/postgres.js";
import { until } from "../support/wait.js";

const PG = await postgresAvailable();

describe.skipIf(!PG)("PostgreSQL: a group completion and an app's transaction take keys' turns in opposite orders", () => {
  let store: PostgresOutboxStore;
  let schema: string;
  beforeAll(async () => {
    schema = freshSchema("wassal_turns");
    store = await PostgresOutboxStore.connect({ url: TEST_DATABASE_URL, schema, applicationName: "wassal-turns-test" });
    await store.migrate();
  });
  afterAll(() => store?.close());

  /** This test's store's sessions waiting for an advisory lock (a key's turn). */
  const waitingForTurns = () =>
    withClient(async (client) => {
      const { rows } = await client.query<{ n: string }>(
        "SELECT count(*) AS n FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND NOT l.granted AND a.application_name = 'wassal-turns-test'",
      );
      return Number(rows[0]?.n ?? 0);
    });

  it("both commit: the completion gives back the turn it took and waits for the busy one alone", async () => {
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
      await until("the completion waiting for a key's turn", async () => (await waitingForTurns()) >= 1);
      // ...and the app now wants a's turn. Holding a while waiting for b, the completion would close a circle here.
      await store.enqueue(tx, { type: "t", key: "a", payload: { n: 2 } });
    });
    await expect(app).resolves.toBeUndefined();
    const results = await completing;
    expect(Array.isArray(results) ? results.map((result: { outcome: string }) => result.outcome) : results).toEqual(["completed", "completed"]);
    // And each key's next message was handed on: both claimable now, numbered 2.
    const next = await store.claim("worker", { limit: 10, leaseMs: 60_000 });
    expect(next.map((lease) => [lease.message.key, lease.message.keySeq]).sort()).toEqual([
      ["a", 2],
      ["b", 2],
    ]);
  }, 30_000);
});
