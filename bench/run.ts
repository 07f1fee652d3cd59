// `npm run bench`: throughput of the full cycle (claim → no-op handler → guarded complete) on each
// store, with 1 to 4 worker processes, claim batches of 1 and 50, next to each store's raw limit
// (a bare SQL loop). Runs of the compared systems are interleaved (A B A B …) and every figure is
// the median of the repetitions, shown with min and max. Prints its settings and a table, and
// writes bench/results/<timestamp>.json and .md.
//
// Also: enqueue → handler start latency (p50/p95/p99) at a steady rate with wake-up on, per store.
//
// And: claim latency with 10,000 and with 1,000,000 processed rows in the table.
//
// Peers, in the same runs and interleaved with the rest, same message count, no-op handlers, each
// tuned for throughput as its own documentation recommends (the tuning is in the comment at the top
// of each child and in the system label): pg-boss and graphile-worker on the same PostgreSQL (own
// schema per run), plainjob on SQLite (it sets synchronous = NORMAL itself, so sqlite-NORMAL). The
// "batch" column is the peer's fetch size. Seeding goes through each peer's bulk insert, untimed.
//
// Not yet here (see CHANGELOG / the issue): enqueue batching.

import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { Command } from "commander";
import pg from "pg";
import { openOutbox } from "wassal";
import { measureLatency } from "./latency.js";
import { claimLatency } from "./scale.js";
import { PEER_STORE, preparePeer, type Peer } from "./peers.js";
import { spread, type Spread } from "./stats.js";

interface Settings {
  messages: number;
  reps: number;
  processes: number[];
  stores: string[];
  postgresUrl: string;
}

interface Config {
  readonly system: "wassal" | "raw" | Peer;
  readonly store: string; // sqlite-FULL | sqlite-NORMAL | postgres
  readonly processes: number;
  readonly batch: number;
  /** Wassal only: completions share commits (the worker's default). */
  readonly groupCommit?: boolean;
}

const STORES = ["sqlite-FULL", "sqlite-NORMAL", "postgres"] as const;
const SECTIONS = ["throughput", "latency", "scale"] as const;

/** Bad input: one line naming the option and what is valid, exit 2. */
function refuse(message: string): never {
  process.stderr.write(`bench: ${message}\n`);
  process.exit(2);
}

function positive(name: string): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (!/^\d+$/.test(value) || !Number.isSafeInteger(n) || n < 1) refuse(`${name} must be a whole number >= 1 (got ${JSON.stringify(value)})`);
    return n;
  };
}

function listOf<T extends string>(name: string, valid: readonly T[]): (value: string) => T[] {
  return (value) => {
    const items = value.split(",").map((s) => s.trim()).filter((s) => s !== "");
    const unknown = items.filter((s) => !(valid as readonly string[]).includes(s));
    if (items.length === 0 || unknown.length > 0) refuse(`${name} takes a comma-separated list of ${valid.join(", ")} (got ${JSON.stringify(value)})`);
    return items as T[];
  };
}

const HERE = fileURLToPath(new URL(".", import.meta.url));
/** How each peer is tuned (see the comment at the top of its child script). */
const PEER_TUNING: Record<Peer, { script: string; batch: number; tuning: string }> = {
  "pg-boss": { script: "pgboss-child.js", batch: 1000, tuning: "work() batchSize 1000, burstWhenBatchFull, poll 0.5 s" },
  "graphile-worker": { script: "graphile-child.js", batch: 500, tuning: "runOnce, concurrentJobs 24, pool 25, localQueue 500, completeJobBatchDelay 0" },
  plainjob: { script: "plainjob-child.js", batch: 1, tuning: "1 worker per process (no batch/concurrency option), poll 20 ms" },
};
const isPeer = (system: Config["system"]): system is Peer => system in PEER_TUNING;
const systemName = (c: Config) => (isPeer(c.system) ? `${c.system} (${PEER_TUNING[c.system].tuning})` : c.groupCommit === false ? `${c.system} (no group commit)` : c.system);
const label = (c: Config) => `${c.system.padEnd(15)} ${c.store.padEnd(13)} procs ${c.processes} batch ${String(c.batch).padStart(3)}`;

async function postgresReachable(url: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000 });
  try {
    await client.connect();
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** A fresh, empty, migrated database. */
function prepareEmpty(store: string, settings: Settings) {
  return prepare(store, { ...settings, messages: 0 });
}

/** A fresh database holding `messages` pending messages; returns its --db, schema and a clean-up. */
async function prepare(store: string, settings: Settings): Promise<{ db: string; schema: string; cleanup: () => Promise<void> }> {
  let db: string;
  let schema = "-";
  let dir: string | undefined;
  if (store === "postgres") {
    db = settings.postgresUrl;
    schema = `wassal_bench_${randomBytes(4).toString("hex")}`;
  } else {
    dir = mkdtempSync(join(tmpdir(), "wassal-bench-"));
    db = join(dir, "bench.db");
  }
  const outbox = await openOutbox(db, { ...(schema !== "-" ? { schema } : {}), synchronous: "NORMAL" });
  for (let done = 0; done < settings.messages; done += 1000) {
    await outbox.store.transaction(async (tx) => {
      for (let n = done; n < Math.min(settings.messages, done + 1000); n += 1) await outbox.store.enqueue(tx, { type: "bench.noop", payload: { n } });
    });
  }
  await outbox.close();
  return {
    db,
    schema,
    cleanup: async () => {
      if (dir) rmSync(dir, { recursive: true, force: true });
      if (schema !== "-") {
        const client = new pg.Client({ connectionString: db });
        await client.connect();
        await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
        await client.end();
      }
    },
  };
}

interface ChildReport {
  processed: number;
  maxRssMb: number;
}

/** Starts the children, waits until all are ready, releases them together, times them to the end. */
async function race(script: string, args: readonly string[], count: number): Promise<{ seconds: number; reports: ChildReport[] }> {
  const children = Array.from({ length: count }, () => spawn(process.execPath, [join(HERE, script), ...args], { stdio: ["pipe", "pipe", "inherit"] }));
  const outputs = children.map(() => "");
  const ready = children.map((child, i) => new Promise<void>((resolve, reject) => {
    child.stdout.on("data", (chunk: Buffer) => {
      outputs[i] += chunk.toString();
      if (outputs[i]?.startsWith("ready\n")) resolve();
    });
    child.on("exit", (code) => (code === 0 ? undefined : reject(new Error(`${script} exited ${code}`))));
  }));
  const exited = children.map((child) => new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code))));
  await Promise.all(ready);
  const started = performance.now();
  for (const child of children) child.stdin.end("go\n");
  const codes = await Promise.all(exited);
  const seconds = (performance.now() - started) / 1000;
  if (codes.some((code) => code !== 0)) throw new Error(`${script}: a child failed (${codes.join(", ")})`);
  const reports = outputs.map((out) => JSON.parse(out.trim().split("\n").at(-1) ?? "{}") as ChildReport);
  return { seconds, reports };
}

async function runOnce(config: Config, settings: Settings): Promise<{ rate: number; maxRssMb: number }> {
  const system = config.system;
  const { db, schema, cleanup } = isPeer(system) ? await preparePeer(system, settings.messages, settings.postgresUrl) : await prepare(config.store, settings);
  try {
    const synchronous = config.store === "sqlite-NORMAL" ? "NORMAL" : "FULL";
    const { seconds, reports } = isPeer(system)
      ? await race(PEER_TUNING[system].script, system === "plainjob" ? [db] : [db, schema], config.processes)
      : system === "wassal"
        ? await race("worker-child.js", [db, schema, synchronous, String(config.batch), String(config.groupCommit ?? config.batch > 1)], config.processes)
        : await race("raw-child.js", [db, schema, synchronous, String(config.batch)], config.processes);
    const processed = reports.reduce((sum, r) => sum + r.processed, 0);
    if (processed !== settings.messages) throw new Error(`${label(config)}: processed ${processed} of ${settings.messages}`);
    return { rate: settings.messages / seconds, maxRssMb: Math.max(...reports.map((r) => r.maxRssMb)) };
  } finally {
    await cleanup();
  }
}

async function main(): Promise<void> {
  const options = new Command("bench")
    .description("measure Wassal's throughput on each store next to the store's raw limit")
    .option("--quick", "a smoke run: 1,000 messages, 1 and 4 processes")
    .option("--messages <n>", "messages per run (default 20,000; 1,000 with --quick)", positive("--messages"))
    .option("--reps <n>", "repetitions per figure (median, min, max)", positive("--reps"), 3)
    .option("--stores <list>", `comma-separated: ${STORES.join(", ")}`, listOf("--stores", STORES), [...STORES])
    .option("--sections <list>", `comma-separated: ${SECTIONS.join(", ")}`, listOf("--sections", SECTIONS), [...SECTIONS])
    .option("--no-peers", "leave out the peer job queues (pg-boss, graphile-worker, plainjob)")
    .option("--postgres <url>", "PostgreSQL for the postgres runs", process.env.WASSAL_TEST_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test")
    .parse()
    .opts<{ quick?: boolean; messages?: number; reps: number; stores: string[]; sections: string[]; postgres: string; peers: boolean }>();
  const run = (section: (typeof SECTIONS)[number]) => options.sections.includes(section);
  const settings: Settings = {
    messages: options.messages ?? (options.quick ? 1_000 : 20_000),
    reps: options.reps,
    processes: options.quick ? [1, 4] : [1, 2, 4],
    stores: options.stores,
    postgresUrl: options.postgres,
  };
  if (settings.stores.includes("postgres") && !(await postgresReachable(settings.postgresUrl))) {
    process.stderr.write(`bench: PostgreSQL at ${settings.postgresUrl} is unreachable; leaving it out\n`);
    settings.stores = settings.stores.filter((s) => s !== "postgres");
  }
  const configs: Config[] = [];
  for (const store of run("throughput") ? settings.stores : []) {
    for (const processes of settings.processes) {
      configs.push({ system: "wassal", store, processes, batch: 1 }, { system: "wassal", store, processes, batch: 50 }, { system: "raw", store, processes, batch: 100 });
      // What group commit is worth: the same batch with every completion committed on its own.
      if (processes === 1) configs.push({ system: "wassal", store, processes, batch: 50, groupCommit: false });
      for (const peer of Object.keys(PEER_TUNING) as Peer[]) {
        if (PEER_STORE[peer] === store && options.peers) configs.push({ system: peer, store, processes, batch: PEER_TUNING[peer].batch });
      }
    }
  }
  process.stdout.write(`settings: ${JSON.stringify({ ...settings, node: process.version, cpus: (await import("node:os")).cpus().length })}\n`);
  const samples = new Map<Config, { rates: number[]; rss: number[] }>(configs.map((c) => [c, { rates: [], rss: [] }]));
  for (let rep = 1; rep <= settings.reps; rep += 1) {
    for (const config of configs) {
      const { rate, maxRssMb } = await runOnce(config, settings);
      samples.get(config)?.rates.push(rate);
      samples.get(config)?.rss.push(maxRssMb);
      process.stderr.write(`rep ${rep}/${settings.reps}  ${label(config)}  ${Math.round(rate)} msg/s\n`);
    }
  }
  const rows = configs.map((config) => {
    const s = samples.get(config) ?? { rates: [], rss: [] };
    return { config, throughput: spread(s.rates), peakRssMb: Math.max(...s.rss) };
  });
  const wassalBest = (store: string, processes: number) => rows.find((r) => r.config.system === "wassal" && r.config.store === store && r.config.processes === processes && r.config.batch === 50 && r.config.groupCommit !== false)?.throughput.median ?? 0;
  const fmt = (s: Spread) => `${Math.round(s.median)} (${Math.round(s.min)}–${Math.round(s.max)})`;
  const lines = [
    "| system | store | processes | batch | messages/s median (min–max) | Wassal batch 50 ÷ this | peak RSS MB |",
    "|---|---|---|---|---|---|---|",
    ...rows.map((r) => `| ${systemName(r.config)} | ${r.config.store} | ${r.config.processes} | ${r.config.batch} | ${fmt(r.throughput)} | ${(wassalBest(r.config.store, r.config.processes) / r.throughput.median).toFixed(2)} | ${r.peakRssMb} |`),
  ];
  if (run("throughput")) process.stdout.write(`\n${lines.join("\n")}\n`);
  else lines.length = 0;

  // Latency: one run per store (the percentiles come from hundreds of samples).
  const latencyRows: string[] = ["| store | rate /s | messages | p50 ms | p95 ms | p99 ms | max ms |", "|---|---|---|---|---|---|---|"];
  const latency: Record<string, unknown> = {};
  for (const store of run("latency") ? settings.stores : []) {
    const rate = 500;
    const seconds = options.quick ? 2 : 10;
    const prepared = await prepareEmpty(store, settings);
    try {
      const result = await measureLatency(prepared.db, { ...(prepared.schema !== "-" ? { schema: prepared.schema } : {}), synchronous: store === "sqlite-NORMAL" ? "NORMAL" : "FULL", rate, seconds });
      latency[store] = result;
      latencyRows.push(`| ${store} | ${rate} | ${result.messages} | ${result.p50.toFixed(2)} | ${result.p95.toFixed(2)} | ${result.p99.toFixed(2)} | ${result.max.toFixed(2)} |`);
      process.stderr.write(`latency ${store}: p99 ${result.p99.toFixed(2)} ms\n`);
    } finally {
      await prepared.cleanup();
    }
  }
  if (run("latency")) {
    lines.push("", "Enqueue → handler start, wake-up on:", "", ...latencyRows);
    process.stdout.write(`\n${latencyRows.join("\n")}\n`);
  }
  // Scale: claim latency with little and with much processed history (FULL durability is not the
  // point here, so SQLite runs NORMAL).
  const big = options.quick ? 100_000 : 1_000_000;
  const scaleRows: string[] = ["| store | processed rows | claim median ms | min | max | ratio to 10,000 |", "|---|---|---|---|---|---|"];
  const scale: Record<string, unknown> = {};
  for (const store of run("scale") ? settings.stores.filter((s) => s !== "sqlite-FULL") : []) {
    const results: Spread[] = [];
    for (const history of [10_000, big]) {
      const prepared = await prepareEmpty(store, settings);
      try {
        results.push(await claimLatency(prepared.db, prepared.schema !== "-" ? prepared.schema : undefined, history, 500));
      } finally {
        await prepared.cleanup();
      }
    }
    scale[store] = results;
    const base = results[0]?.median ?? 1;
    [10_000, big].forEach((history, i) => {
      const r = results[i];
      if (r) scaleRows.push(`| ${store} | ${history} | ${r.median.toFixed(3)} | ${r.min.toFixed(3)} | ${r.max.toFixed(3)} | ${(r.median / base).toFixed(2)} |`);
    });
    process.stderr.write(`scale ${store}: ${results.map((r) => r.median.toFixed(3)).join(" ms → ")} ms\n`);
  }
  if (run("scale")) {
    lines.push("", "Claim latency (claim of 1, then complete) as processed history grows:", "", ...scaleRows);
    process.stdout.write(`\n${scaleRows.join("\n")}\n`);
  }

  const stamp = new Date().toISOString().replaceAll(":", "-").slice(0, 19);
  const dir = join(HERE, "..", "results");
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, `${stamp}.json`), JSON.stringify({ settings, rows, latency, scale }, null, 2));
  writeFileSync(join(dir, `${stamp}.md`), `# Benchmark ${stamp}\n\nSettings: ${JSON.stringify(settings)}\n\n${lines.join("\n")}\n`);
  process.stdout.write(`\nwritten: bench/results/${stamp}.json and .md\n`);
}

await main();
