// A PostgreSQL bulk completion looks its leases up by id, or reads the table once; it never reads
// the table once per lease. Statistics taken while nothing was processing (here: every message
// pending at ANALYZE) say no row is processing. With 'processing' written as a constant the
// planner trusted that, expected one row from a scan filtered on status, and compared every
// processing row with every lease of the group: here 4,000 × 500, 2,019,500 rows examined (in a
// 4-process benchmark, 1.1 s per completion). Counted as the rows the plan's scans of the table
// read, with what their filters dropped, plus the pairs its joins compared and dropped; in the
// custom plan and the generic one a prepared completion settles on. Every form of the bulk
// completion: kept or deleted (onComplete "delete"), with the keys handed on or without.

import { describe, expect, it } from "vitest";
import type { Lease } from "../../src/index.js";
import { outboxSql } from "../../src/stores/postgres/outbox-sql.js";
import { explainAnalyzed, planNodes, rowsExamined, storeWithPending } from "../support/pg-plan.js";
import { postgresAvailable, withClient } from "../support/postgres.js";

const PG = await postgresAvailable();

describe.skipIf(!PG)("postgres bulk completion: by id, whatever the statistics say", () => {
  it("with 4,000 of 20,000 messages processing and statistics saying none is, completing 500 reads at most the table once, custom plan or generic, in each form (kept or deleted, keys handed on or not)", async () => {
    const { store, schema } = await storeWithPending("wassal_complete_plan", 20_000, 2);
    try {
      await withClient((client) => client.query(`VACUUM ANALYZE ${schema}.outbox_messages`));
      const leases: Lease[] = [];
      for (let claim = 0; claim < 4; claim += 1) leases.push(...(await store.claim("w", { limit: 1000, leaseMs: 60_000 })));
      expect(leases).toHaveLength(4000);
      const group = leases.slice(0, 500);
      const ids = `ARRAY[${group.map((l) => l.messageId).join(",")}]::bigint[]`;
      const tokens = `ARRAY[${group.map((l) => l.token).join(",")}]::int[]`;
      const owners = `ARRAY[${group.map(() => "'w'").join(",")}]::text[]`;
      const sql = outboxSql(schema);
      const forms = ["completeBulk", "completeBulkDelete", "completeBulkHandOn", "completeBulkHandOnDelete"] as const;
      const examined = await withClient(async (client) => {
        const counts: { form: string; plan: string; rows: number }[] = [];
        for (const form of forms) {
          const completion = {
            text: sql[form],
            bound: [null, group.map((l) => l.messageId), group.map((l) => l.token), group.map(() => "w"), false],
            literal: `NULL, ${ids}, ${tokens}, ${owners}, false`,
          };
          for (const which of ["custom", "generic"] as const) {
            const plan = await explainAnalyzed(client, completion, which);
            const completed = [...planNodes(plan)].find((n) => n["Node Type"] === "ModifyTable" && n["Relation Name"] === "outbox_messages");
            // The plan did complete the group (then rolled back): updated, or deleted.
            expect(completed?.["Actual Rows"] ?? -1, `${form}, ${which} plan`).toBe(500);
            counts.push({ form, plan: which, rows: rowsExamined(plan) });
          }
        }
        return counts;
      });
      expect(examined).toHaveLength(8);
      for (const count of examined) expect(count.rows, `${count.form}, ${count.plan} plan`).toBeLessThanOrEqual(20_000);
      // And the store's own completion completes the group.
      const results = await store.completeMany(group.map((lease) => ({ lease })));
      expect(results.map((r) => r.outcome)).toEqual(group.map(() => "completed"));
      expect((await store.countByStatus()).processed).toBe(500);
    } finally {
      await store.close();
    }
  });
});
