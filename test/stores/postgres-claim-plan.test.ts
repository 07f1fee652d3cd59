// A PostgreSQL claim looks the rows it claims up by id, whatever its limit, and a worker's claims
// are planned once (the limits it claims with most are written into the statement). With the candidates
// joined to the table alone, a limit that is large against the table (1,000 of 20,000 here; a
// batch of 500 against the benchmark's 20,000 messages) made the planner hash the candidates and
// read the whole table to match them, and the generic plan of the prepared claim did so at any
// limit. Counted as the rows the plan's scans of the table read (with what their filters dropped)
// plus the pairs its joins compared and dropped; in the custom plan and in the generic one.

import { describe, expect, it } from "vitest";
import { outboxSql } from "../../src/stores/postgres/outbox-sql.js";
import { claimForms, explainAnalyzed, planNodes, rowsExamined, storeWithPending } from "../support/pg-plan.js";
import { postgresAvailable, withClient } from "../support/postgres.js";

const PG = await postgresAvailable();

describe.skipIf(!PG)("postgres claim: the claimed rows by id, and one plan", () => {
  it("a claim of 1,000 from 20,000 pending messages reads about 2,000 rows, not the table, for all messages and for named types, with the limit bound or written in, custom plan or generic", async () => {
    const { store, schema } = await storeWithPending("wassal_claim_plan", 20_000, 2);
    try {
      const sql = outboxSql(schema);
      const examined = await withClient(async (client) => {
        await client.query(`VACUUM ANALYZE ${schema}.outbox_messages`);
        const counts: number[] = [];
        // With the limit bound and written in (the store writes in the limits it claims with most).
        const claims = claimForms(sql, 1000);
        for (const plan of ["custom", "generic"] as const) {
          for (const claim of claims) {
            const explained = await explainAnalyzed(client, claim, plan);
            const claimed = [...planNodes(explained)].find((n) => n["Node Type"] === "ModifyTable" && n["Relation Name"] === "outbox_messages");
            expect(claimed?.["Actual Rows"] ?? -1).toBe(1000); // the plan did claim them (then rolled back)
            counts.push(rowsExamined(explained));
          }
        }
        return counts;
      });
      // The claimable index's 1,000 entries and 1,000 lookups by key; the table is 20,000 rows.
      for (const count of examined) expect(count).toBeLessThanOrEqual(2_500);
      // And the store's own claim takes the oldest 1,000.
      const leases = await store.claim("w", { limit: 1000, leaseMs: 30_000 });
      expect(leases.map((l) => l.message.payload)).toEqual(Array.from({ length: 1000 }, (_, i) => i));
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
