// A PostgreSQL claim reads only the due part of the claimable index. The index holds every pending
// and processing row, so messages scheduled for later and leases held sort after the due ones; a
// claim that finds fewer due rows than its limit must stop at the first row not yet due instead of
// reading them all (it did, when the due bound was a join filter: 49 ms behind 60,000 scheduled).
// Counted as the index scan's rows plus those its own filter dropped, so a bound that ends up as a
// filter on the scan fails too; in the custom plan and in the generic plan of a prepared claim.

import { describe, expect, it } from "vitest";
import { outboxSql } from "../../src/stores/postgres/outbox-sql.js";
import { PostgresOutboxStore } from "../../src/stores/postgres/postgres-outbox-store.js";
import { freshSchema, postgresAvailable, TEST_DATABASE_URL, withClient } from "../support/postgres.js";

const PG = await postgresAvailable();

interface PlanNode {
  "Node Type": string;
  "Index Name"?: string;
  "Actual Rows"?: number;
  "Rows Removed by Filter"?: number;
  Plans?: PlanNode[];
}

function* nodes(node: PlanNode): Generator<PlanNode> {
  yield node;
  for (const child of node.Plans ?? []) yield* nodes(child);
}

describe.skipIf(!PG)("postgres claim: the due range only", () => {
  it("behind 3,000 scheduled messages, a claim of 100 that finds 5 due reads 5 index entries, for all messages and for named types, custom plan or generic", async () => {
    const schema = freshSchema("wassal_claim_range");
    const store = await PostgresOutboxStore.connect({ url: TEST_DATABASE_URL, schema, maxConnections: 2 });
    try {
      await store.migrate();
      const later = new Date(Date.now() + 3_600_000);
      await store.transaction((tx) =>
        store.enqueueMany(
          tx,
          Array.from({ length: 3000 }, (_, i) => ({ type: "t", payload: i, availableAt: later })),
        ),
      );
      await store.transaction((tx) =>
        store.enqueueMany(
          tx,
          Array.from({ length: 5 }, (_, i) => ({ type: "t", payload: i })),
        ),
      );
      const sql = outboxSql(schema);
      const read = await withClient(async (client) => {
        await client.query(`ANALYZE ${schema}.outbox_messages`);
        const entries: number[] = [];
        // Both plans: the custom one (the values bound, as EXPLAIN plans them), and the generic one
        // a named statement settles on (the store prepares its claims), in which the bound is an
        // expression left for the executor: through PREPARE and EXECUTE under force_generic_plan.
        const claims = [
          { text: sql.claim, bound: [null, 100, "w", 30_000, false], literal: "NULL, 100, 'w', 30000, false" },
          { text: sql.claimOfTypes, bound: [null, 100, "w", 30_000, false, ["t"]], literal: "NULL, 100, 'w', 30000, false, ARRAY['t']" },
        ];
        for (const generic of [false, true]) {
          for (const { text, bound, literal } of claims) {
            await client.query("BEGIN");
            let plan: PlanNode;
            if (generic) {
              await client.query("SET LOCAL plan_cache_mode = force_generic_plan");
              await client.query(`PREPARE wassal_claim_range AS ${text}`);
              const { rows } = await client.query<{ "QUERY PLAN": [{ Plan: PlanNode }] }>(
                `EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE wassal_claim_range(${literal})`,
              );
              await client.query("DEALLOCATE wassal_claim_range"); // a prepared statement outlives ROLLBACK
              plan = rows[0]!["QUERY PLAN"][0].Plan;
            } else {
              const { rows } = await client.query<{ "QUERY PLAN": [{ Plan: PlanNode }] }>(`EXPLAIN (ANALYZE, FORMAT JSON) ${text}`, bound);
              plan = rows[0]!["QUERY PLAN"][0].Plan;
            }
            await client.query("ROLLBACK");
            const scans = [...nodes(plan)].filter((n) => n["Index Name"] === "outbox_messages_claimable");
            expect(scans).toHaveLength(1);
            // Entries read: those the scan returned and those its own filter dropped.
            entries.push(scans[0]!["Actual Rows"]! + (scans[0]!["Rows Removed by Filter"] ?? 0));
          }
        }
        return entries;
      });
      expect(read).toEqual([5, 5, 5, 5]);
      // And the claim itself takes the 5 due ones.
      expect((await store.claim("w", { limit: 100, leaseMs: 30_000 })).map((l) => l.message.payload)).toEqual([0, 1, 2, 3, 4]);
    } finally {
      await store.close();
    }
  });
});
