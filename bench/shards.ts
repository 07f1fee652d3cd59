// The shards section of `npm run bench`: an outbox split over 2 PostgreSQL shards, drained by one
// worker process per shard, or by one process that claims from all of them (ShardWorkers: a
// Worker per shard in one process); over 3 shards by one process; and, as the baseline, the same
// messages on 1 shard drained by 1 process. Each shard is a private PostgreSQL server of its own (PostgreSQL's defaults) that the
// section starts and removes at its end; the baseline runs on the first of them.
//
// A run: a fresh schema on each of the layout's shards, N messages over SHARD_KEYS ordering keys
// (round-robin), each on the shard its key hashes to (ShardedOutbox.shardIndex; seeded per shard
// through enqueueMany, 1,000 per transaction, untimed, then ANALYZE and a sync), then the worker
// processes started by run.ts's race over worker-child.ts (a process per shard gets its shard's URL;
// the one process for all gets every shard's, and runs ShardWorkers), released together and timed
// to the last one's end. Every worker as the throughput section's Wassal batch-100 row: concurrency
// 200, group commits of up to 100, a no-op handler, keyed (a process ends once its shards hold
// nothing pending or processing); a pool of SHARD_CONNECTIONS per shard per process. No warm-up:
// every process starts cold, so a layout with more processes pays more start-up.
// CPU µs per message over the timed part: the worker processes (each child's own, summed), each
// shard's server (all its processes, server-cpu.ts), and the whole machine (/proc/stat).
// The layouts are interleaved, each repetition running all of them, the order rotated by one each time.

import { execSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import type { NewMessage } from "wassal";
import { openOutbox, type PrivatePostgres, startPrivatePostgres } from "wassal/lab";
import { ShardedOutbox } from "wassal/shards";
import { onTable } from "./relay.js";
import { locatePostmaster } from "./server-cpu.js";
import { type Spread, spread } from "./stats.js";

/** Ordering keys the messages spread over, round-robin. */
export const SHARD_KEYS = 1_000;
/** The most shards of a layout: the servers the section starts. */
const SHARDS = 3;
/** Each worker process's pool on each shard. */
const SHARD_CONNECTIONS = 40;
/** Wassal's worker as the throughput section's batch-100 row. */
const CONCURRENCY = 200;
const GROUP = 100;

interface Layout {
  readonly name: string;
  readonly shards: number;
  /** "per shard": a process per shard, given its shard; "all": one process given every shard. */
  readonly processes: "per shard" | "all";
}

const LAYOUTS: readonly Layout[] = [
  { name: "1 shard, 1 process (baseline)", shards: 1, processes: "all" },
  { name: "2 shards, 1 process per shard", shards: 2, processes: "per shard" },
  { name: "2 shards, 1 process for all (ShardWorkers)", shards: 2, processes: "all" },
  { name: "3 shards, 1 process for all (ShardWorkers)", shards: 3, processes: "all" },
];

/** What run.ts's race reports that this section reads. */
export interface ShardRace {
  readonly seconds: number;
  readonly reports: readonly { readonly processed: number; readonly cpuUserUs: number; readonly cpuSystemUs: number }[];
  readonly cpu: { readonly machineUs: number | null; readonly serversUs: readonly (number | null)[] };
}

export interface ShardsBenchOptions {
  readonly messages: number;
  readonly reps: number;
  /** Where initdb and pg_ctl are (null: the PATH). */
  readonly bin: string | null;
  /** The server's settings that shape the figures (run.ts postgresServer). */
  describe(url: string): Promise<Record<string, string | null> | null>;
  /** run.ts's race over worker-child.js: `count` processes, child n with argsOf(n), each of `postmasters`' CPU read over the run. */
  race(argsOf: (child: number) => readonly string[], count: number, postmasters: readonly number[]): Promise<ShardRace>;
}

export interface ShardsBenchResult {
  readonly heading: string[];
  readonly table: string[];
  readonly data: unknown;
}

/** One run's figures, per message where CPU. */
interface RunFigures {
  readonly rate: number;
  readonly seconds: number;
  /** Messages seeded on each shard. */
  readonly perShard: number[];
  readonly workersUs: number;
  /** Each shard's server, null where not read. */
  readonly serversUs: (number | null)[];
  readonly machineUs: number | null;
}

/** Seeds N keyed messages over the layout's shards (a fresh schema on each), returns how many went to each. */
async function seed(urls: readonly string[], schema: string, messages: number): Promise<number[]> {
  const outboxes = await Promise.all(urls.map((url) => openOutbox(url, { schema, maxConnections: 2 })));
  try {
    const sharded = new ShardedOutbox(outboxes.map((o) => o.store));
    const perShard: NewMessage<{ n: number }>[][] = urls.map(() => []);
    for (let n = 0; n < messages; n += 1) {
      const key = `k${n % SHARD_KEYS}`;
      perShard[sharded.shardIndex({ key })]?.push({ type: "bench.noop", payload: { n }, key });
    }
    await Promise.all(
      sharded.shards.map(async (store, shard) => {
        const list = perShard[shard] ?? [];
        for (let at = 0; at < list.length; at += 1_000) await store.transaction((tx) => store.enqueueMany(tx, list.slice(at, at + 1_000)));
      }),
    );
    return perShard.map((list) => list.length);
  } finally {
    await Promise.all(outboxes.map((o) => o.close()));
  }
}

async function runLayout(layout: Layout, servers: readonly { url: string; postmaster: number | null }[], options: ShardsBenchOptions): Promise<RunFigures> {
  const used = servers.slice(0, layout.shards);
  const urls = used.map((s) => s.url);
  const schema = `wassal_bench_shards_${randomBytes(4).toString("hex")}`;
  try {
    const perShard = await seed(urls, schema, options.messages);
    for (const url of urls) await onTable(url, (client) => client.query(`ANALYZE ${schema}.outbox_messages`));
    execSync("sync");
    const argsFor = (own: readonly string[]) => [
      own[0] as string,
      schema,
      "FULL",
      String(CONCURRENCY),
      String(GROUP),
      String(SHARD_CONNECTIONS),
      "keyed",
      "keep",
      ...own.slice(1),
    ];
    const count = layout.processes === "per shard" ? urls.length : 1;
    const postmasters = used.flatMap((s) => (s.postmaster === null ? [] : [s.postmaster]));
    const { seconds, reports, cpu } = await options.race(
      (child) => (layout.processes === "per shard" ? argsFor([urls[child] as string]) : argsFor(urls)),
      count,
      postmasters,
    );
    const processed = reports.reduce((sum, r) => sum + r.processed, 0);
    if (processed !== options.messages) throw new Error(`shards ${layout.name}: processed ${processed} of ${options.messages}`);
    const per = (us: number | null) => (us === null ? null : us / options.messages);
    // A server whose postmaster was not found here has no reading: keep the shard's place in the list.
    let next = 0;
    const serversUs = used.map((s) => (s.postmaster === null ? null : per(cpu.serversUs[next++] ?? null)));
    return {
      rate: options.messages / seconds,
      seconds,
      perShard,
      workersUs: reports.reduce((sum, r) => sum + r.cpuUserUs + r.cpuSystemUs, 0) / options.messages,
      serversUs,
      machineUs: per(cpu.machineUs),
    };
  } finally {
    for (const url of urls) await onTable(url, (client) => client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`));
  }
}

export async function shardsBench(options: ShardsBenchOptions): Promise<ShardsBenchResult> {
  const started: PrivatePostgres[] = [];
  try {
    for (let shard = 0; shard < SHARDS; shard += 1) started.push(await startPrivatePostgres({ bin: options.bin, settings: {}, label: `bench-shard${shard}` }));
    const servers = await Promise.all(
      started.map(async (s) => ({ url: s.url, postmaster: await locatePostmaster(s.url), bin: s.bin, startSeconds: s.startSeconds })),
    );
    const serverSettings = await options.describe(servers[0]?.url ?? "");
    const runs = new Map(LAYOUTS.map((l) => [l, [] as RunFigures[]]));
    const us = (v: number | null) => (v === null ? "–" : v.toFixed(0));
    for (let rep = 1; rep <= options.reps; rep += 1) {
      const shift = (rep - 1) % LAYOUTS.length;
      const order = [...LAYOUTS.slice(shift), ...LAYOUTS.slice(0, shift)];
      for (const layout of order) {
        const f = await runLayout(layout, servers, options);
        runs.get(layout)?.push(f);
        process.stderr.write(
          `rep ${rep}/${options.reps}  shards ${layout.name.padEnd(45)} ${Math.round(f.rate)} msg/s (${f.perShard.join(" + ")} messages); CPU µs/msg: workers ${us(f.workersUs)}, servers ${f.serversUs.map(us).join(" + ")}, machine ${us(f.machineUs)}\n`,
        );
      }
    }
    const of = (samples: readonly RunFigures[], pick: (f: RunFigures) => number | null | undefined): Spread | null => {
      const values = samples.map(pick);
      return values.length > 0 && values.every((v): v is number => typeof v === "number") ? spread(values) : null;
    };
    const fmt = (s: Spread | null, digits = 0) => (s === null ? "–" : `${s.median.toFixed(digits)} (${s.min.toFixed(digits)}–${s.max.toFixed(digits)})`);
    const sum = (values: readonly (number | null)[]) => (values.every((v): v is number => v !== null) ? values.reduce((a, b) => a + b, 0) : null);
    const rows = LAYOUTS.map((layout) => {
      const samples = runs.get(layout) ?? [];
      return {
        layout: layout.name,
        shards: layout.shards,
        processes: layout.processes === "per shard" ? layout.shards : 1,
        rate: of(samples, (f) => f.rate),
        perShard: Array.from({ length: layout.shards }, (_, i) => of(samples, (f) => f.perShard[i])),
        cpuUsPerMessage: {
          workers: of(samples, (f) => f.workersUs),
          servers: Array.from({ length: layout.shards }, (_, i) => of(samples, (f) => f.serversUs[i])),
          serversTotal: of(samples, (f) => sum(f.serversUs)),
          machine: of(samples, (f) => f.machineUs),
        },
        runs: samples,
      };
    });
    const baseline = rows[0]?.rate?.median ?? null;
    const table = [
      `| layout | shards | worker processes | messages/s median (min–max) | ÷ baseline | CPU µs/msg: workers | ${Array.from({ length: SHARDS }, (_, i) => `CPU µs/msg: shard ${i} server`).join(" | ")} | CPU µs/msg: servers together | CPU µs/msg: whole machine |`,
      `|---|---|---|---|---|---|${"---|".repeat(SHARDS)}---|---|`,
      ...rows.map(
        (r) =>
          `| ${r.layout} | ${r.shards} | ${r.processes} | ${fmt(r.rate)} | ${baseline === null || r.rate === null ? "–" : (r.rate.median / baseline).toFixed(2)} | ${fmt(r.cpuUsPerMessage.workers)} | ${Array.from({ length: SHARDS }, (_, i) => fmt(r.cpuUsPerMessage.servers[i] ?? null)).join(" | ")} | ${fmt(r.cpuUsPerMessage.serversTotal)} | ${fmt(r.cpuUsPerMessage.machine)} |`,
      ),
    ];
    const split = (shards: number) =>
      rows
        .find((r) => r.shards === shards)
        ?.perShard.map((s) => Math.round(s?.median ?? 0))
        .join(" + ") ?? "–";
    const heading = [
      `Shards: an outbox split over 2 PostgreSQL shards, drained by a worker process per shard or by one process claiming from all (ShardWorkers); over 3 shards by one process; and the same messages on 1 shard with 1 process: ${options.messages} messages per run over ${SHARD_KEYS} ordering keys (by their keys' hash: ${split(2)} on 2 shards, ${split(3)} on 3), median (min–max) of ${options.reps} repetitions, interleaved (each repetition runs every layout, the order rotated). Every worker: concurrency ${CONCURRENCY}, group commits of up to ${GROUP}, a no-op handler, a pool of ${SHARD_CONNECTIONS} per shard; no warm-up (every process starts cold). Seeding untimed (enqueueMany, 1,000 per transaction, then ANALYZE and a sync); the clock runs from "go" to the last process's end. CPU µs per message over the timed part, each divided by all N messages (so the shards' servers add up): the worker processes together, each shard's server (all its processes), the whole machine.`,
      `PostgreSQL: ${SHARDS} private servers the section started (${servers[0]?.bin ?? "–"}, in ${servers.map((s) => s.startSeconds.toFixed(1)).join(", ")} s), PostgreSQL's defaults, removed at the end; the first reports ${JSON.stringify(serverSettings)}. The baseline runs on the first.`,
    ];
    return {
      heading,
      table,
      data: { shards: SHARDS, keys: SHARD_KEYS, messages: options.messages, reps: options.reps, server: serverSettings, rows },
    };
  } finally {
    for (const s of started) s.stop();
  }
}
