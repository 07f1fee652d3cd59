// Without an injected clock, PostgreSQL takes lease times from its own clock, which has
// microseconds. The hot statements hand times back as whole epoch milliseconds instead of
// timestamps; what a lease or a completion reports must still be exactly what a later read finds.
// (The conformance suite runs on a manual clock with whole milliseconds, so it cannot see this.)

import { describe, expect, it } from "vitest";
import type { Completed, Lease } from "../../src/outbox/types.js";
import { PostgresOutboxStore } from "../../src/stores/postgres/postgres-outbox-store.js";
import { SqliteOutboxStore } from "../../src/stores/sqlite/sqlite-outbox-store.js";
import type { OutboxStore } from "../../src/outbox/store.js";
import { freshSchema, postgresAvailable, TEST_DATABASE_URL } from "../support/postgres.js";
import { tempDir } from "../support/temp.js";
import { join } from "node:path";

const PG = await postgresAvailable();
const dir = tempDir();

async function checkAgainstReads(store: OutboxStore<unknown>): Promise<void> {
  for (let n = 0; n < 20; n += 1) await store.transaction((tx) => store.enqueue(tx, { type: "clock.check", payload: { n } }));
  const leases: Lease[] = await store.claim("worker-a", { limit: 20, leaseMs: 30_000 });
  expect(leases).toHaveLength(20);
  for (const lease of leases) {
    const stored = await store.getMessage(lease.messageId);
    expect(stored).toEqual(lease.message);
    expect(lease.lockedUntil).toEqual(stored?.lockedUntil);
  }
  // Half complete together (one statement), half one by one.
  const grouped = await store.completeMany(leases.slice(0, 10).map((lease) => ({ lease })));
  const single = await Promise.all(leases.slice(10).map((lease) => store.complete(lease)));
  for (const result of [...grouped, ...single]) {
    expect(result.outcome).toBe("completed");
    const stored = await store.getMessage(result.messageId);
    expect(stored?.processedAt).toEqual((result as Completed).processedAt);
  }
}

describe("times reported by claims and completions match what is stored, on the store's own clock", () => {
  it.skipIf(!PG)("postgres (clock_timestamp, microseconds)", async () => {
    const store = await PostgresOutboxStore.connect({ url: TEST_DATABASE_URL, schema: freshSchema("wassal_clock"), maxConnections: 2 });
    try {
      await store.migrate();
      await checkAgainstReads(store);
    } finally {
      await store.close();
    }
  });

  it("sqlite (system clock)", async () => {
    const store = new SqliteOutboxStore({ path: join(dir, "clock.db") });
    try {
      await store.migrate();
      await checkAgainstReads(store);
    } finally {
      await store.close();
    }
  });
});
