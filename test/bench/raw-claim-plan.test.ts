// The bench's raw loops are the store's limit only while their claim reads the store's claimable
// index as Wassal's claim does. Priorities (outbox-018) put that index on the claim's rank; the
// raw claim, still ordered by available_at, then sorted every claimable row at each call, and
// the published third run of round 3 measured its server work at 3–4 × the run before. Here the
// raw claim, bare and with the handler's columns, takes 100 of 5,000 pending messages through the
// index, reading about as many entries as it claims; and the guarded completion, which compared
// the status with a constant the statistics misjudged, reads the table at most once, as the
// store's bulk completion does (test/stores/postgres-complete-plan.test.ts).

import type pg from "pg";
import { describe, expect, it } from "vitest";
import { rawClaimSql, rawGuardedCompleteSql } from "../../bench/raw-sql.js";
import { claimedRows, explainAnalyzed, planNodes, rowsExamined, storeWithPending } from "../support/pg-plan.js";
import { postgresAvailable } from "../support/postgres.js";

const PG = await postgresAvailable();

/** 5,000 pending messages, analyzed as the bench's seeded tables are, and one connection to them. */
async function withPending(work: (client: pg.PoolClient, schema: string) => Promise<void>): Promise<void> {
  const { store, schema } = await storeWithPending("wassal_raw_claim_plan", 5_000, 1);
  try {
    await store.pool.query(`ANALYZE ${schema}.outbox_messages`);
    const client = await store.pool.connect();
    try {
      await work(client, schema);
    } finally {
      client.release();
    }
  } finally {
    await store.close();
  }
}

describe.skipIf(!PG)("the bench's raw PostgreSQL claim", () => {
  for (const guarded of [false, true]) {
    it(`${guarded ? "with the handler's columns" : "bare"}: takes its rows in the claim's order through the claimable index, without a sort`, async () => {
      await withPending(async (client, schema) => {
        // A custom plan: the values are bound, the literal form (for EXECUTE) is not used.
        const plan = await explainAnalyzed(client, { text: rawClaimSql(schema, guarded), bound: [100], literal: "" }, "custom");
        expect(claimedRows(plan)).toBe(100);
        const nodes = [...planNodes(plan)];
        expect(nodes.some((node) => node["Index Name"] === "outbox_messages_claimable")).toBe(true);
        expect(nodes.filter((node) => node["Node Type"] === "Sort")).toEqual([]);
        // 100 index entries and 100 lookups by key; a sort of every claimable row would read 5,000.
        expect(rowsExamined(plan)).toBeLessThanOrEqual(300);
      });
    });
  }

  for (const remove of [false, true]) {
    it(`its guarded completion${remove ? " that deletes" : ""} reads the table at most once, as the store's own does`, async () => {
      await withPending(async (client, schema) => {
        const { rows } = await client.query<{ id: string; lease_token: number }>(rawClaimSql(schema, true), [100]);
        expect(rows).toHaveLength(100);
        const bound = [rows.map((r) => r.id), rows.map((r) => r.lease_token)];
        const plan = await explainAnalyzed(client, { text: rawGuardedCompleteSql(schema, remove), bound, literal: "" }, "custom");
        expect(claimedRows(plan)).toBe(100);
        // With 'processing' as a constant, statistics saying nothing processes made it filter a
        // scan for one row and compare each of the 100 leases with it: 14,900 rows and pairs.
        expect(rowsExamined(plan)).toBeLessThanOrEqual(5_000);
      });
    });
  }
});
