// A PostgreSQL claim reads only the due part of the claimable index. The index holds every pending
// and processing row, so messages scheduled for later and leases held sort after the due ones; a
// claim that finds fewer due rows than its limit must stop at the first row not yet due instead of
// reading them all (it did, when the due bound was a join filter: 49 ms behind 60,000 scheduled).
// Counted as the index scan's rows plus those its own filter dropped, so a bound that ends up as a
// filter on the scan fails too; in the custom plan and in the generic plan of a prepared claim.

import { describe, expect, it } from "vitest";
import { outboxSql } from "../../src/stores/postgres/outbox-sql.js";
import { PostgresOutboxStore } from "../../src/stores/postgres/postgres-outbox-store.js";
import { claimForms, explainAnalyzed, planNodes } from "../support/pg-plan.js";
import { freshSchema, postgresAvailable, TEST_DATABASE_URL, withClient } from "../support/postgres.js";

const PG = await postgresAvailable();

describe.skipIf(!PG)("postgres claim: the due range only", () => {
  it("behind 3,000 scheduled messages, a claim of 100 that finds 5 due reads 5 index entries, for all messages and for named types, with the limit bound or written in and in the large claim's form, custom plan or generic", async () => {
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
        const claims = claimForms(sql, 100);
        for (const plan of ["custom", "generic"] as const) {
          for (const claim of claims) {
            const scans = [...planNodes(await explainAnalyzed(client, claim, plan))].filter((n) => n["Index Name"] === "outbox_messages_claimable");
            expect(scans).toHaveLength(1);
            // Entries read: those the scan returned and those its own filter dropped.
            entries.push(scans[0]!["Actual Rows"]! + (scans[0]!["Rows Removed by Filter"] ?? 0));
          }
        }
        return entries;
      });
      expect(read).toEqual(Array.from({ length: 12 }, () => 5)); // six forms, custom plan and generic
      // And the claim itself takes the 5 due ones.
      expect((await store.claim("w", { limit: 100, leaseMs: 30_000 })).map((l) => l.message.payload)).toEqual([0, 1, 2, 3, 4]);
    } finally {
      await store.close();
    }
  });
});
