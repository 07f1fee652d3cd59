// The benchmark's warm-up (bench/warm-child.ts): each worker process works a store of its own
// before the timed start, and the parent refuses a row whose warm-up did not process everything
// it was given. Run on SQLite NORMAL with a few hundred messages, peers left out: the point is that
// the warm-up happens and is checked, not how fast anything is (that is `npm run bench`'s job).
//
// And the wal section (bench/wal.ts), in this file so that one compile of the bench serves both (two
// files compiling bench/.build at once could each run the other's half-written output): both
// relays run on a private server with wal_level = logical, the WAL relay's messages pass through
// its slot, and no slot, server or stream is left behind. A few hundred messages, one repetition.
//
// And the shards section (bench/shards.ts): every layout drains all its messages, the sharded ones
// over both shards, and no private server's directory is left behind.

import { execFileSync, spawnSync } from "node:child_process";
import { readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { ROOT, requireBuilt } from "../support/cli.js";
import { postgresAvailable } from "../support/postgres.js";
import { natsAvailable } from "../support/services.js";

const RUN = join(ROOT, "bench", ".build", "run.js");

function bench(args: readonly string[]) {
  return spawnSync(process.execPath, [RUN, ...args], { cwd: ROOT, encoding: "utf8", timeout: 120_000 });
}

/** The throughput section alone on SQLite NORMAL, one rep, no peers. */
function throughput(processes: string, messages: number, warmUp: number) {
  return bench([
    ...["--sections", "throughput", "--stores", "sqlite-NORMAL", "--reps", "1", "--no-peers"],
    ...["--processes", processes, "--messages", String(messages), "--warm-up", String(warmUp)],
  ]);
}

/** The result files a run wrote (its last line names them); removed once read. */
function results<T = { settings: { warmUp: number }; rows: { config: { system: string; processes: number } }[] }>(stdout: string): T {
  const written = /written: (bench\/results\/[\w-]+)\.json and \.md/.exec(stdout)?.[1];
  if (written === undefined) throw new Error(`the bench named no result file:\n${stdout}`);
  const json = join(ROOT, `${written}.json`);
  try {
    return JSON.parse(readFileSync(json, "utf8")) as T;
  } finally {
    rmSync(json, { force: true });
    rmSync(join(ROOT, `${written}.md`), { force: true });
  }
}

beforeAll(() => {
  requireBuilt("index.js");
  execFileSync(join(ROOT, "node_modules", ".bin", "tsc"), ["-p", join(ROOT, "bench", "tsconfig.json")], { cwd: ROOT });
}, 120_000);

describe("npm run bench: the warm-up before the timed start", () => {
  it("runs every throughput row after its processes worked a warm-up store, Wassal's and the raw loops' alike", () => {
    const run = throughput("1,2", 300, 200);
    expect(run.stderr, run.stdout).not.toMatch(/warm-up processed/);
    expect(run.status, run.stderr).toBe(0);
    const { settings, rows } = results(run.stdout);
    expect(settings.warmUp).toBe(200);
    expect(new Set(rows.map((r) => r.config.system))).toEqual(new Set(["wassal", "raw"]));
    expect(new Set(rows.map((r) => r.config.processes))).toEqual(new Set([1, 2]));
  }, 120_000);

  it("still runs cold with --warm-up 0", () => {
    const run = throughput("1", 200, 0);
    expect(run.status, run.stderr).toBe(0);
    expect(results(run.stdout).settings.warmUp).toBe(0);
  }, 120_000);

  it("refuses a --warm-up that is not a whole number, naming the option", () => {
    const run = bench(["--warm-up", "lots"]);
    expect(run.status, `exit ${run.status}, stderr: ${run.stderr}`).toBe(2);
    expect(run.stderr).toContain('--warm-up must be a whole number >= 0 (got "lots")');
  });
});

const servicesUp = (await postgresAvailable()) && (await natsAvailable());

interface WalResults {
  wal: {
    server: { wal_level: string } | null;
    slotsLeft: number;
    rows: { system: string; drains: { rate: number; reportedBySlot: number | null; published: number }[]; latencies: { messages: number }[] }[];
  };
}

describe.skipIf(!servicesUp)("npm run bench: the wal section", () => {
  it("runs the polling relay and the WAL relay to NATS on a private server, the WAL relay's messages through its slot, and leaves nothing behind", () => {
    const run = bench(["--sections", "wal", "--stores", "postgres", "--reps", "1", "--messages", "300", "--quick"]);
    expect(run.status, run.stderr).toBe(0);
    const { wal } = results<WalResults>(run.stdout);
    expect(wal.server?.wal_level).toBe("logical");
    expect(wal.rows.map((r) => r.system)).toEqual(["polling relay", "WAL relay"]);
    for (const row of wal.rows) {
      expect(row.drains.map((d) => d.rate > 0)).toEqual([true]);
      expect(row.latencies.map((l) => l.messages)).toEqual([400]); // 2 s at 200 a second (--quick), every one published
    }
    const [walDrain] = wal.rows[1]?.drains ?? [];
    expect(walDrain?.reportedBySlot).toBe(300);
    expect(walDrain?.published).toBe(300);
    expect(wal.slotsLeft).toBe(0);
    expect(readdirSync(tmpdir()).filter((name) => name.startsWith("wassal-bench-wal-"))).toEqual([]);
  }, 120_000);
});

interface ShardsResults {
  shards: { rows: { layout: string; processes: number; perShard: { median: number }[]; runs: { rate: number }[] }[] };
}

describe.skipIf(!(await postgresAvailable()))("npm run bench: the shards section", () => {
  it("drains 1 shard with 1 process, 2 shards with a process per shard and with one process for all, and 3 with one, removing its servers", () => {
    const run = bench(["--sections", "shards", "--stores", "postgres", "--reps", "1", "--messages", "300"]);
    expect(run.status, run.stderr).toBe(0);
    const { rows } = results<ShardsResults>(run.stdout).shards;
    expect(rows.map((r) => [r.processes, r.perShard.length])).toEqual([
      [1, 1],
      [2, 2],
      [1, 2],
      [1, 3],
    ]);
    for (const row of rows) expect(row.runs.map((r) => r.rate > 0)).toEqual([true]);
    for (const row of rows.slice(1)) {
      expect(row.perShard.every((s) => s.median > 0)).toBe(true);
      expect(row.perShard.reduce((sum, s) => sum + s.median, 0)).toBe(300);
    }
    expect(readdirSync(tmpdir()).filter((name) => name.startsWith("wassal-bench-shard"))).toEqual([]);
  }, 120_000);
});
