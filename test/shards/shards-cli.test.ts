// `wassal outbox stats --shard a --shard b …`: a sharded outbox's stats, each shard's and their
// sum, as text and as JSON; one --shard alone, or --shard with --db, refused with exit 2 and
// nothing opened. Needs `npm run build` first (`npm test` does it).

import { existsSync } from "node:fs";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { shardOfKey } from "../../src/shards/key-hash.js";
import { ShardedOutbox } from "../../src/shards/sharded-outbox.js";
import { SqliteOutboxStore, type SqliteTx } from "../../src/stores/sqlite/sqlite-outbox-store.js";
import { cliJson, cliOk, requireBuiltCli, runCli } from "../support/cli.js";
import { tempDir } from "../support/temp.js";

beforeAll(requireBuiltCli);

interface ShardedStatsJson {
  total: { counts: Record<string, number>; pendingByType: { type: string; count: number }[]; expiredLeases: number };
  shards: { shard: number; db: string; counts: { pending: number; processing: number } }[];
}

describe("wassal outbox stats over shards", () => {
  it("prints each shard's counts and their sum, with pending by type over all of them", async () => {
    const dir = tempDir("wassal-shards-cli-");
    const paths = [0, 1, 2].map((n) => join(dir, `shard-${n}.db`));
    const outbox = new ShardedOutbox<SqliteTx>(paths.map((path) => new SqliteOutboxStore({ path })));
    const keys = Array.from({ length: 12 }, (_, n) => `account-${n}`);
    try {
      await outbox.migrate();
      for (const key of keys) await outbox.enqueue({ type: key.endsWith("1") ? "a" : "b", key, payload: {} });
      const [lease] = await (outbox.shards[0] as SqliteOutboxStore).claim("w", { limit: 1, leaseMs: 60_000 });
      if (lease === undefined) throw new Error("shard 0 has no message");
    } finally {
      await outbox.close();
    }
    const expected = [0, 1, 2].map((shard) => keys.filter((key) => shardOfKey(key, 3) === shard).length);

    const args = paths.flatMap((path) => ["--shard", path]);
    const json = await cliJson<ShardedStatsJson>(["outbox", "stats", ...args, "--json"], { cwd: dir });
    expect(json.shards.map((s) => [s.shard, s.counts.pending + s.counts.processing])).toEqual(expected.map((n, shard) => [shard, n]));
    expect(json.total.counts).toMatchObject({ pending: 11, processing: 1 });
    expect(json.total.pendingByType.reduce((sum, t) => sum + t.count, 0)).toBe(11);

    const text = await cliOk(["outbox", "stats", ...args], { cwd: dir });
    expect(text).toContain("sharded outbox, 3 shards");
    expect(text).toContain("all shards: pending 11   processing 1");
    expect(text).toContain(`shard 2 ${paths[2]}: pending ${expected[2]}`);
    expect(text).toMatch(/leases by owner:\n {4}w: 1 held, 0 expired/);
  });

  it("refuses one --shard alone, and --shard with --db, before opening anything", async () => {
    const dir = tempDir("wassal-shards-cli-");
    const never = join(dir, "never.db");
    const one = await runCli(["outbox", "stats", "--shard", never], { cwd: dir });
    expect([one.code, one.stderr]).toEqual([2, expect.stringContaining("a sharded outbox has two or more shards")]);
    const both = await runCli(["outbox", "stats", "--db", never, "--shard", never, "--shard", never], { cwd: dir });
    expect([both.code, both.stderr]).toEqual([2, expect.stringContaining("give either --db (one outbox) or --shard once per shard")]);
    const neither = await runCli(["outbox", "stats"], { cwd: dir, env: { WASSAL_DATABASE_URL: "" } });
    expect(neither.code).toBe(2);
    expect(existsSync(never)).toBe(false);
  });
});
