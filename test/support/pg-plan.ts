// Plans of the PostgreSQL store's statements, as EXPLAIN (ANALYZE, FORMAT JSON) reports them, for
// the tests that count what a statement reads: in the custom plan (the values bound, as EXPLAIN
// plans them) or the generic one a prepared statement settles on (the store prepares its hot
// statements), through PREPARE and EXECUTE under force_generic_plan. The statement runs, inside a
// transaction that is rolled back.

import type pg from "pg";
import type { OutboxSql } from "../../src/stores/postgres/outbox-sql.js";
import { PostgresOutboxStore } from "../../src/stores/postgres/postgres-outbox-store.js";
import { freshSchema, TEST_DATABASE_URL } from "./postgres.js";

export interface PlanNode {
  "Node Type": string;
  "Relation Name"?: string;
  "Index Name"?: string;
  "Actual Rows"?: number;
  "Actual Loops"?: number;
  "Rows Removed by Filter"?: number;
  "Rows Removed by Join Filter"?: number;
  Plans?: PlanNode[];
}

/** The node and every node under it. */
export function* planNodes(node: PlanNode): Generator<PlanNode> {
  yield node;
  for (const child of node.Plans ?? []) yield* planNodes(child);
}

/** The rows the plan's UPDATE of the outbox table changed (-1 without one). */
export function claimedRows(plan: PlanNode): number {
  const update = [...planNodes(plan)].find((n) => n["Node Type"] === "ModifyTable" && n["Relation Name"] === "outbox_messages");
  return update?.["Actual Rows"] ?? -1;
}

/** Rows the plan read from the outbox table (over all loops, with those its filters dropped) and pairs its joins dropped. */
export function rowsExamined(plan: PlanNode): number {
  let examined = 0;
  for (const node of planNodes(plan)) {
    const loops = node["Actual Loops"] ?? 1;
    if (node["Relation Name"] === "outbox_messages" && node["Node Type"].endsWith("Scan")) {
      examined += ((node["Actual Rows"] ?? 0) + (node["Rows Removed by Filter"] ?? 0)) * loops;
    }
    examined += (node["Rows Removed by Join Filter"] ?? 0) * loops;
  }
  return examined;
}

/**
 * Runs `text` under EXPLAIN ANALYZE and rolls it back. `bound` are its values for the custom plan;
 * `literal` the same values written as SQL, for EXECUTE of the generic plan.
 */
export async function explainAnalyzed(
  client: pg.Client,
  statement: { readonly text: string; readonly bound: readonly unknown[]; readonly literal: string },
  plan: "custom" | "generic",
): Promise<PlanNode> {
  await client.query("BEGIN");
  try {
    if (plan === "custom") {
      const { rows } = await client.query<{ "QUERY PLAN": [{ Plan: PlanNode }] }>(`EXPLAIN (ANALYZE, FORMAT JSON) ${statement.text}`, [...statement.bound]);
      return rows[0]!["QUERY PLAN"][0].Plan;
    }
    await client.query("SET LOCAL plan_cache_mode = force_generic_plan");
    await client.query(`PREPARE wassal_explained AS ${statement.text}`);
    try {
      const { rows } = await client.query<{ "QUERY PLAN": [{ Plan: PlanNode }] }>(
        `EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE wassal_explained(${statement.literal})`,
      );
      return rows[0]!["QUERY PLAN"][0].Plan;
    } finally {
      await client.query("DEALLOCATE wassal_explained"); // a prepared statement outlives ROLLBACK
    }
  } finally {
    await client.query("ROLLBACK");
  }
}

/**
 * The claim's six forms, each with its values for a claim of `limit` messages owned by "w" (as
 * bound for the custom plan, and written as SQL for the generic one): for all types and for type
 * "t", with the limit bound ($2), written in, and bound in the large claim's form (its rows also
 * named as an array of ids).
 */
export function claimForms(sql: OutboxSql, limit: number): { readonly text: string; readonly bound: readonly unknown[]; readonly literal: string }[] {
  const all = { bound: [null, limit, "w", 30_000, false], literal: `NULL, ${limit}, 'w', 30000, false` };
  const typed = { bound: [null, limit, "w", 30_000, false, ["t"]], literal: `NULL, ${limit}, 'w', 30000, false, ARRAY['t']` };
  return [
    { text: sql.claim, ...all },
    { text: sql.claimOfTypes, ...typed },
    { text: sql.claimOfLimit(limit, false), ...all },
    { text: sql.claimOfLimit(limit, true), ...typed },
    { text: sql.claimLarge, ...all },
    { text: sql.claimLargeOfTypes, ...typed },
  ];
}

/**
 * A migrated store on a fresh schema holding `count` pending messages of type "t", payloads 0 to
 * count - 1 in id order (enqueued 10,000 per transaction). The caller closes it.
 */
export async function storeWithPending(prefix: string, count: number, maxConnections: number): Promise<{ store: PostgresOutboxStore; schema: string }> {
  const schema = freshSchema(prefix);
  const store = await PostgresOutboxStore.connect({ url: TEST_DATABASE_URL, schema, maxConnections });
  try {
    await store.migrate();
    for (let from = 0; from < count; from += 10_000) {
      const size = Math.min(10_000, count - from);
      await store.transaction((tx) =>
        store.enqueueMany(
          tx,
          Array.from({ length: size }, (_, i) => ({ type: "t", payload: from + i })),
        ),
      );
    }
    return { store, schema };
  } catch (error) {
    await store.close();
    throw error;
  }
}
