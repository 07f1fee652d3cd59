// Finding the test PostgreSQL server. Tests use WASSAL_TEST_DATABASE_URL (default
// postgres://postgres@127.0.0.1:5432/test), each test file in a schema of its own. With CI set,
// an unreachable server fails the run; without it, PostgreSQL tests are skipped, loudly.

import { randomBytes } from "node:crypto";
import pg from "pg";
import { afterAll } from "vitest";

export const TEST_DATABASE_URL = process.env.WASSAL_TEST_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";

let probe: Promise<string | null> | undefined;

/** null when the server answers, else why not. */
function reachable(): Promise<string | null> {
  probe ??= (async () => {
    const client = new pg.Client({ connectionString: TEST_DATABASE_URL, connectionTimeoutMillis: 5000 });
    try {
      await client.connect();
      await client.query("SELECT 1");
      return null;
    } catch (error) {
      return (error as Error).message || String(error);
    } finally {
      await client.end().catch(() => undefined);
    }
  })();
  return probe;
}

/**
 * True when PostgreSQL tests can run. Throws under CI when the server is unreachable; prints one
 * loud line and returns false otherwise.
 */
export async function postgresAvailable(): Promise<boolean> {
  const why = await reachable();
  if (why === null) return true;
  const message = `PostgreSQL at ${TEST_DATABASE_URL} is unreachable (${why}). Start it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start, or point WASSAL_TEST_DATABASE_URL at a server.`;
  if (process.env.CI) throw new Error(`CI is set, so PostgreSQL tests must run: ${message}`);
  console.warn(`\n!!! SKIPPING POSTGRESQL TESTS: ${message}\n`);
  return false;
}

const schemas: string[] = [];

afterAll(async () => {
  if (schemas.length === 0) return;
  const client = new pg.Client({ connectionString: TEST_DATABASE_URL });
  await client.connect();
  try {
    for (const schema of schemas.splice(0)) await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  } finally {
    await client.end();
  }
});

/** Runs `work` on a connection of its own to the test server (application name "wassal-test-observer"), closed afterwards. */
export async function withClient<T>(work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: TEST_DATABASE_URL, application_name: "wassal-test-observer" });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

/** A new schema name, dropped (with everything in it) when the test file finishes. */
export function freshSchema(prefix = "wassal_test"): string {
  const schema = `${prefix}_${randomBytes(6).toString("hex")}`;
  schemas.push(schema);
  return schema;
}
