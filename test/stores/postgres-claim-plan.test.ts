// A PostgreSQL claim keeps one plan where it is safe to keep, and is planned at every call where
// it is not. PostgreSQL makes a new plan of a kept (prepared) statement only when the table's
// statistics change (ANALYZE); a server with autovacuum off never makes one, so a kept plan must
// stay right as the table grows. Claims of up to 100 join their candidates by id alone, keep their
// plan (the limits a worker claims with most written into the statement) and look rows up by key
// at any size of the table. Claims of more than 100 also name the rows as an array of ids, so a
// large claim on a table not much larger is looked up by key rather than hashed; a kept plan of
// that form made on a new, small table read the whole table at every claim (20,031 rows for one
// message here), so it is sent unnamed and planned at every call. Counted as the rows the plan's
// scans of the table read (with what their filters dropped) plus the pairs its joins dropped.

import { describe, expect, it } from "vitest";
import { outboxSql } from "../../src/stores/postgres/outbox-sql.js";
import { claimedRows, claimForms, explainAnalyzed, rowsExamined, storeWithPending } from "../support/pg-plan.js";
import type { PlanNode } from "../support/pg-plan.js";
import { freshSchema, postgresAvailable, TEST_DATABASE_URL, withClient } from "../support/postgres.js";
import { PostgresOutboxStore } from "../../src/stores/postgres/postgres-outbox-store.js";

const PG = await postgresAvailable();

describe.skipIf(!PG)("postgres claim: one plan, right as the table grows", () => {
  it("a claim planned on a new table still looks its rows up by key once 20,000 processed messages are behind it, with no ANALYZE in between", async () => {
    const schema = freshSchema("wassal_claim_plan");
    const store = await PostgresOutboxStore.connect({ url: TEST_DATABASE_URL, schema, maxConnections: 1 });
    try {
      await store.migrate();
      // A worker on a new outbox: one message at a time, claimed with a limit of 10, 30 times (the
      // store writes the limit in after 5 claims; PostgreSQL keeps a generic plan after 5 more).
      for (let round = 0; round < 30; round += 1) {
        await store.transaction((tx) => store.enqueue(tx, { type: "t", payload: round }));
        const [lease] = await store.claim("w", { limit: 10, leaseMs: 30_000 });
        expect(lease?.message.payload).toBe(round);
        if (lease) await store.complete(lease);
      }
      const prepared = await store.pool.query<{ name: string; generic_plans: string }>(
        `SELECT name, generic_plans FROM pg_prepared_statements WHERE statement LIKE '%FOR UPDATE OF m SKIP LOCKED%' AND statement ~ 'LIMIT 10\\s'`,
      );
      expect(prepared.rows).toHaveLength(1);
      expect(Number(prepared.rows[0]?.generic_plans)).toBeGreaterThanOrEqual(5);
      // The history grows, with no ANALYZE (as on a server with autovacuum off), then one message.
      await withClient(async (client) => {
        await client.query(
          `INSERT INTO ${schema}.outbox_messages (type, payload, status, created_at, available_at, processed_at)
           SELECT 't', '0', 'processed', now(), now(), now() FROM generate_series(1, 20000)`,
        );
      });
      await store.transaction((tx) => store.enqueue(tx, { type: "t", payload: "last" }));
      // The store's own prepared claim, on its one connection, as the next claim would run it.
      const client = await store.pool.connect();
      let plan: PlanNode;
      try {
        await client.query("BEGIN");
        const { rows } = await client.query<{ "QUERY PLAN": [{ Plan: PlanNode }] }>(
          `EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE ${prepared.rows[0]?.name}(NULL, 10, 'w', 30000, false)`,
        );
        plan = rows[0]!["QUERY PLAN"][0].Plan;
      } finally {
        await client.query("ROLLBACK");
        client.release();
      }
      expect(claimedRows(plan)).toBe(1);
      // One claimable index entry and one lookup by key; reading the table would be 20,031 rows.
      expect(rowsExamined(plan)).toBeLessThanOrEqual(10);
      const [lease] = await store.claim("w", { limit: 10, leaseMs: 30_000 });
      expect(lease?.message.payload).toBe("last");
    } finally {
      await store.close();
    }
  });

  it("a claim of more than 100 looks its rows up by key where the join alone would read the table (1,000 from 20,000 pending messages), and is planned at every call", async () => {
    const { store, schema } = await storeWithPending("wassal_claim_plan", 20_000, 1);
    try {
      const sql = outboxSql(schema);
      const examined = await withClient(async (client) => {
        await client.query(`VACUUM ANALYZE ${schema}.outbox_messages`);
        const counts: number[] = [];
        for (const claim of claimForms(sql, 1000).filter((form) => form.text === sql.claimLarge || form.text === sql.claimLargeOfTypes)) {
          const explained = await explainAnalyzed(client, claim, "custom");
          expect(claimedRows(explained)).toBe(1000); // the plan did claim them (then rolled back)
          counts.push(rowsExamined(explained));
        }
        return counts;
      });
      expect(examined).toHaveLength(2); // for all types and for named ones
      // The claimable index's 1,000 entries and 1,000 lookups by key; the table is 20,000 rows.
      for (const count of examined) expect(count).toBeLessThanOrEqual(2_500);
      // The store's own claims of 1,000 take the oldest, and leave no plan kept on its connection.
      for (let round = 0; round < 7; round += 1) {
        const leases = await store.claim("w", { limit: 1000, leaseMs: 30_000 });
        expect(leases.map((l) => l.message.payload)).toEqual(Array.from({ length: 1000 }, (_, i) => round * 1000 + i));
      }
      // Claims of 1,000 only: no claim of any form kept on the store's one connection.
      const kept = await store.pool.query(`SELECT 1 FROM pg_prepared_statements WHERE statement LIKE '%FOR UPDATE OF m SKIP LOCKED%'`);
      expect(kept.rowCount).toBe(0);
    } finally {
      await store.close();
    }
  });

  it("a worker's claims are planned once: after 5 claims of one limit, the claim with that limit written in keeps a generic plan, for all types and for named ones; other limits still claim as many as asked", async () => {
    const { store, schema } = await storeWithPending("wassal_claim_plan", 5000, 1);
    const claimStatements = async () =>
      (
        await store.pool.query<{ generic_plans: string; custom_plans: string; literal: boolean; typed: boolean }>(
          `SELECT generic_plans, custom_plans, statement NOT LIKE '%LIMIT $2%' AS literal, statement LIKE '%m.type = ANY%' AS typed
           FROM pg_prepared_statements WHERE statement LIKE '%FOR UPDATE OF m SKIP LOCKED%'`,
        )
      ).rows;
    try {
      await withClient((client) => client.query(`ANALYZE ${schema}.outbox_messages`));
      for (let claim = 0; claim < 20; claim += 1) {
        expect(await store.claim("w", { limit: 10, leaseMs: 30_000 })).toHaveLength(10);
        expect(await store.claim("w", { limit: 10, leaseMs: 30_000, types: ["t"] })).toHaveLength(10);
      }
      // One connection, so pg_prepared_statements is the worker's. PostgreSQL tries a custom plan 5
      // times, then keeps the generic one when it costs no more; with the limit bound (statistics
      // of 5,000 pending messages) it never did.
      const literal = (await claimStatements()).filter((s) => s.literal);
      expect(literal.map((s) => s.typed).sort()).toEqual([false, true]);
      for (const statement of literal) {
        expect(Number(statement.generic_plans)).toBeGreaterThanOrEqual(5);
        expect(Number(statement.custom_plans)).toBeLessThanOrEqual(5);
      }
      // 12 limits claimed once each: bound, and each claim takes as many as asked, the oldest first.
      const payloads: unknown[] = [];
      for (let limit = 1; limit <= 12; limit += 1) {
        const leases = await store.claim("w", { limit, leaseMs: 30_000 });
        expect(leases).toHaveLength(limit);
        payloads.push(...leases.map((l) => l.message.payload));
      }
      expect(payloads).toEqual(Array.from({ length: 78 }, (_, i) => 400 + i));
      expect((await claimStatements()).length).toBe(4); // 10 written in and bound, for all types and for named ones
      // Limits 1 to 8, 5 more claims each: 6 of them reach their fifth claim while there is room
      // (8 limits written in at most), the rest stay bound.
      for (let limit = 1; limit <= 8; limit += 1) {
        for (let claim = 0; claim < 5; claim += 1) expect(await store.claim("w", { limit, leaseMs: 30_000 })).toHaveLength(limit);
      }
      const statements = await claimStatements();
      expect(statements.filter((s) => s.literal)).toHaveLength(8);
      expect(statements.filter((s) => !s.literal)).toHaveLength(2);
    } finally {
      await store.close();
    }
  });
});
