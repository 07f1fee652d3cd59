// Schema names on PostgreSQL (issue 37, item 6). Every schema name goes into SQL quoted, so a
// reserved word (select, user, order, table) works end to end: the migrations with their SQL
// functions, enqueue, claim, complete, a key's hand-on, the SQL enqueue function, the payments
// tables and the CLI's outbox commands. PostgreSQL's own schemas (pg_* and information_schema,
// in any case) are refused by the one schema check, in the library and the CLI (exit 2, one
// line), and nothing is created.
//
// A reserved word cannot be made unique per test: each one is dropped before and after its test.
// Needs `npm run build` first (`npm test` does it).

import { mkdtempSync } from "node:fs";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { InvalidArgumentError } from "../../src/outbox/errors.js";
import { PostgresPaymentsRepository } from "../../src/lab/stores/postgres-payments.js";
import { PostgresOutboxStore } from "../../src/stores/postgres/postgres-outbox-store.js";
import { openOutbox } from "../../src/stores/open-outbox.js";
import { cliJson, killAll, requireBuiltCli, runCli } from "../support/cli.js";
import { postgresAvailable, TEST_DATABASE_URL, withClient } from "../support/postgres.js";
import { tempDir } from "../support/temp.js";

const PG = await postgresAvailable();
const dir = tempDir("wassal-schema-names-");
const cwd = () => mkdtempSync(join(dir, "cwd-"));

const RESERVED = ["select", "user", "order", "table"] as const;
const REFUSED = ["pg_foo", "PG_Foo", "information_schema", "INFORMATION_SCHEMA"] as const;
/** Wassal's tables, which must never appear in PostgreSQL's catalog schemas. */
const WASSAL_TABLES = [
  "outbox_messages",
  "outbox_audit",
  "outbox_keys",
  "outbox_owners",
  "outbox_schedules",
  "wassal_migrations",
  "wassal_inbox",
  "wassal_inbox_keys",
  "payments",
  "payment_statement",
];

const dropSchema = (schema: string) => withClient((client) => client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`));

/** Wassal's objects in information_schema or in a pg_* schema (today's code put them there). */
async function wassalObjectsInCatalogSchemas(): Promise<string[]> {
  return withClient(async (client) => {
    const { rows } = await client.query<{ name: string }>(
      `SELECT n.nspname || '.' || c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE (n.nspname = 'information_schema' OR n.nspname LIKE 'pg\\_%') AND c.relname = ANY($1::text[])
       UNION ALL
       SELECT n.nspname || '.' || p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = 'information_schema' AND p.proname IN ('enqueue', 'wassal_hand_on')`,
      [WASSAL_TABLES],
    );
    return rows.map((r) => r.name);
  });
}

async function schemaExists(schema: string): Promise<boolean> {
  return withClient(async (client) => (await client.query("SELECT 1 FROM pg_namespace WHERE nspname = $1", [schema])).rowCount === 1);
}

beforeAll(requireBuiltCli);
afterEach(killAll);
afterAll(async () => {
  if (!PG) return;
  for (const schema of RESERVED) await dropSchema(schema);
  // Today's code created Wassal's tables in information_schema: leave the catalog as it was.
  await withClient(async (client) => {
    for (const name of await wassalObjectsInCatalogSchemas()) {
      const [schema, object] = name.split(".") as [string, string];
      if (schema !== "information_schema") continue;
      if (object === "enqueue" || object === "wassal_hand_on") await client.query(`DROP FUNCTION IF EXISTS information_schema.${object} CASCADE`);
      else await client.query(`DROP TABLE IF EXISTS information_schema.${object} CASCADE`);
    }
  });
});

describe.runIf(PG)("a schema named by a reserved word", () => {
  for (const schema of RESERVED) {
    it(`works end to end in schema "${schema}": the library's enqueue, claim, complete, hand-on and SQL enqueue, the payments tables, and the CLI`, async () => {
      await dropSchema(schema);
      try {
        const store = await PostgresOutboxStore.connect({ url: TEST_DATABASE_URL, schema });
        try {
          await store.migrate();
          const payments = new PostgresPaymentsRepository(store);
          await payments.migrate();
          expect(await store.isInstalled()).toBe(true);

          // Two messages of one key: completing the first hands the key on to the second (wassal_hand_on).
          const [first, second] = await store.transaction((tx) =>
            store.enqueueMany(tx, [
              { type: "t", payload: { n: 1 }, key: "k" },
              { type: "t", payload: { n: 2 }, key: "k" },
            ]),
          );
          const [lease] = await store.claim("w", { limit: 10, leaseMs: 60_000 });
          expect(lease?.messageId).toBe(first?.id);
          expect(await store.complete(lease!)).toMatchObject({ outcome: "completed" });
          const [next] = await store.claim("w", { limit: 10, leaseMs: 60_000 });
          expect(next?.messageId).toBe(second?.id);
          expect(next?.message.keySeq).toBe(2);
          expect(await store.fail(next!, new Error("no"), "dead")).toMatchObject({ outcome: "dead" });

          // The enqueue function in SQL, and a payment row, in the same schema.
          const viaSql = await withClient((client) => client.query<{ id: string }>(`SELECT "${schema}".enqueue('t', '{"n":3}'::jsonb) AS id`));
          expect(viaSql.rows[0]?.id).toMatch(/^\d+$/);
          expect((await store.stats()).counts).toMatchObject({ processed: 1, dead: 1, pending: 1 });
          expect(await store.describeSchema()).toContain(`CREATE TABLE "${schema}".outbox_messages`);
        } finally {
          await store.close();
        }

        // openOutbox, as the CLI opens it (outbox and payments migrated), read-only too.
        const opened = await openOutbox(TEST_DATABASE_URL, { schema });
        await opened.close();
        const reader = await openOutbox(TEST_DATABASE_URL, { schema, readOnly: true });
        try {
          expect((await reader.store.stats()).counts.pending).toBe(1);
        } finally {
          await reader.close();
        }

        // The CLI's commands in that schema.
        const at = { cwd: cwd() };
        const db = ["--db", TEST_DATABASE_URL, "--schema", schema];
        const payment = await cliJson<{ payment: { idempotencyKey: string } }>(
          ["payments", "create", ...db, "--key", "PAY-1", "--amount", "100", "--currency", "EUR"],
          at,
        );
        expect(JSON.stringify(payment)).toContain("PAY-1");
        const stats = await cliJson<{ counts: Record<string, number> }>(["outbox", "stats", ...db], at);
        expect(stats.counts).toMatchObject({ pending: 2, processed: 1, dead: 1 });
        expect(await cliJson<unknown[]>(["outbox", "dead", ...db], at)).toHaveLength(1);
        expect(await cliJson<unknown[]>(["outbox", "blocked-keys", ...db], at)).toHaveLength(1);
        expect(await cliJson(["outbox", "redrive", ...db, "--all"], at)).toMatchObject({ redriven: 1 });
        expect(await cliJson(["outbox", "purge", ...db, "--processed-before", "0s"], at)).toMatchObject({ processed: { deleted: 1 } });
        expect((await cliJson<{ counts: Record<string, number> }>(["outbox", "stats", ...db], at)).counts).toMatchObject({ pending: 3, processed: 0, dead: 0 });
      } finally {
        await dropSchema(schema);
      }
    });
  }
});

describe.runIf(PG)("PostgreSQL's own schemas", () => {
  for (const schema of REFUSED) {
    it(`refuses ${schema} in the library (InvalidArgumentError) and the CLI (exit 2, one line), and creates nothing`, async () => {
      const refusal = /is PostgreSQL's own \(it keeps pg_\* and information_schema for its catalogs\); give Wassal a schema of its own/;
      await expect(PostgresOutboxStore.connect({ url: TEST_DATABASE_URL, schema })).rejects.toThrow(InvalidArgumentError);
      await expect(PostgresOutboxStore.connect({ url: TEST_DATABASE_URL, schema })).rejects.toThrow(refusal);
      await expect(openOutbox(TEST_DATABASE_URL, { schema })).rejects.toThrow(refusal);

      const at = { cwd: cwd() };
      const db = ["--db", TEST_DATABASE_URL, "--schema", schema];
      for (const args of [
        ["payments", "create", ...db, "--key", "PAY-1", "--amount", "100", "--currency", "EUR"],
        ["outbox", "stats", ...db],
        ["outbox", "redrive", ...db, "--all"],
      ]) {
        const result = await runCli(args, at);
        expect(result.code, `wassal ${args.join(" ")}: ${result.stderr}`).toBe(2);
        expect(result.stderr).toMatch(refusal);
        expect(result.stderr.trim().split("\n")).toHaveLength(1);
      }
      expect(await schemaExists(schema)).toBe(schema === "information_schema");
      expect(await schemaExists(schema.toLowerCase())).toBe(schema.toLowerCase() === "information_schema");
      expect(await wassalObjectsInCatalogSchemas()).toEqual([]);
    });
  }
});
