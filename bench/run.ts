// `npm run bench`: throughput of the full cycle (claim → no-op handler → guarded complete) on each
// store, with 1 to 4 worker processes, claim batches of 1, 100 and 500 (100 is the raw loop's
// batch, so the first ratio column compares like with like; 500 is the batch graphile-worker
// fetches as tuned, the second ratio column's reference; on SQLite it shows what larger groups do
// on one writer), next to each store's raw limit (a bare SQL loop
// claiming 100 per statement) and the protocol's own limit (the same loop doing the protocol's
// work: the columns a handler needs returned, each completion guarded by its lease token; see
// raw-child.ts). Runs of the compared systems are interleaved (A B A B …) and every figure is the
// median of the repetitions, shown with min and max. Prints its settings and its tables, and
// writes bench/results/<timestamp>.json and .md. A Wassal worker of batch 100 runs
// at concurrency 200, so that its next claim overlaps the previous group's commit. Wassal also runs
// at batch 500 (concurrency 1,000, group commits of up to 500), the batch graphile-worker fetches
// as tuned (a row per store and process count, about a minute more in a full run). Rows bound by
// one commit per message (batch 1, no group commit) run 2,000 messages: their rates are steady
// long before N, and at N they would take most of the run. Payments rows run at most 20,000. PostgreSQL's
// statistics are refreshed (ANALYZE) after every seeding, for every system alike.
//
// Payments: the same cycle with the REAL reconciliation handler (PaymentsService.handler() with a
// zero-latency ProviderSimulator; the payment's Paid/Failed write commits in the guarded
// completion transaction), batch 100, at most 20,000 messages, 1 and 4 processes (1 with --quick),
// interleaved with the no-op Wassal batch-100 run it is compared with, on as many messages. Seeding creates the payments through
// PaymentsService.create (payment row + its message in one transaction), untimed; every run is
// checked afterwards: each payment Paid or Failed, every message processed.
//
// Enqueue: messages/s through store.transaction + store.enqueue, one message per transaction and
// 100 per transaction (100 enqueue calls sharing one commit), and 100 per transaction through one
// store.enqueueMany call (one multi-row INSERT), per store, interleaved, on a fresh store each run.
//
// Also: enqueue → handler start latency (p50/p95/p99) at a steady rate with wake-up on, per store,
// with the worker in the enqueuer's process and in another process,
// measured first (after a sync), before the throughput runs leave the disk busy.
//
// And: claim latency with 10,000 and with 1,000,000 processed rows in the table.
//
// And: the dashboard over a 10 MB message (dashboard.ts), its own process: the message's page
// (HTML size, time), GET / latency while 20 live streams watch that message, and the server's
// memory 10 s after 100 streams on a 1 MB message closed, against issue 37's targets.
//
// And (PostgreSQL on this machine): the backend CPU of the claim and the completion alone, on one
// connection, Wassal's against the equal-work loop's (statements.ts).
//
// Peers, in the same runs and interleaved with the rest, same message count, no-op handlers, each
// tuned for throughput as its own documentation recommends (the tuning is in the comment at the top
// of each child and in the system label): pg-boss and graphile-worker on the same PostgreSQL (own
// schema per run), plainjob on SQLite (it sets synchronous = NORMAL itself, so sqlite-NORMAL). The
// "batch" column is the peer's fetch size. Seeding goes through each peer's bulk insert, untimed.
//
// CPU per message, next to msg/s in the throughput, payments and keys tables (medians of the
// repetitions; every repetition's figures are in the JSON): noise on a shared 2-core machine moves
// a rate much more than the CPU a message costs. Three figures, each divided by the run's messages:
// - worker processes, user + system µs: each child's process.cpuUsage() from "go" to its end
//   (child-report.ts), summed over the run's processes. On SQLite this includes the database
//   engine, which runs inside the worker.
// - PostgreSQL server, user + system µs: every process of the server on this machine, backends
//   that lived only during the run included, from /proc (server-cpu.ts). The whole server: another
//   client's work in the same window counts too; "–" for SQLite, or when the server is elsewhere.
//   MariaDB server: the mariadbd process (its connections are threads), from /proc alike.
// - whole machine busy µs (/proc/stat, over the timed part): everything, the kernel's interrupt
//   time and any other load included; minus the two above it bounds what neither accounts for.
// MariaDB (--stores mariadb, --mariadb <url>): each run in a database of its own, created before
// it and dropped after it, its tables analysed after seeding as PostgreSQL's are. It has no
// LISTEN/NOTIFY: a worker in another process learns of new messages by its poll, which the
// latency section's "other process" row measures. Its sections: throughput (its raw loops
// included), payments, keys, enqueue and latency; not yet scale, relay, dashboard or statements.
//
// And (wal.ts): the polling relay against the WAL relay (WalRelay on openWalFeed), to NATS, on a
// private PostgreSQL server with wal_level = logical that the section starts and removes:
// throughput with CPU per message, and enqueue → acknowledgement latency, interleaved.
//
// And (shards.ts): an outbox split over 2 PostgreSQL shards (private servers the section starts and
// removes), drained by a worker process per shard or by one process for all (ShardWorkers), against
// the same messages on 1 shard with 1 process: messages/s and CPU per message, interleaved.
//
// And (schedules.ts): cron ticks under 4 competing schedulers: 100 every-minute schedules, 60
// minutes of ticks due at once, fired through fireSchedules by 4 stores (own connections) at the
// same time: ticks per second and CPU per tick, the split among schedulers, and an idle call's
// time (what each worker pays about once a second), per store, interleaved.
//
// And (priorities.ts): the claim with priorities unused and in use: one claimer draining 20,000
// due messages by claims of 100 and completeMany, every message of priority 0 against a quarter of
// them with a head start of 1 to 600 s: messages/s and CPU per message (this process's and the
// PostgreSQL server's), per store, the two mixes alternated in one run.
//
// And (limits.ts): rate-limited throughput against its limit: one type limited to 2,000 claims in
// any second, worked by 2 Workers with their own stores: the busiest second (checked against the
// limit) and the paced rate as a share of the limit, with CPU per message.
//
// And the write-ahead log each PostgreSQL row wrote per message, in a table of its own (records,
// full-page images, bytes; server-wal.ts, measured where the server's CPU is): work, not time.

import { execSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createConnection } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { Command } from "commander";
import pg from "pg";
import { PaymentsService, ProviderSimulator, openLabOutbox, openOutbox, postgresBinaries, type PrivatePostgres, startPrivatePostgres } from "wassal/lab";
import { type DashboardFigures, dashboardBench, dashboardRows } from "./dashboard.js";
import { enqueueRate } from "./enqueue.js";
import { LATENCY_POLL_MS, measureLatency } from "./latency.js";
import { machineBusyUs } from "./machine-cpu.js";
import { HISTORY_KEYS, RELAY_BROKERS, type RelayBroker, relayBench } from "./relay.js";
import { claimLatencies } from "./scale.js";
import { statementCosts } from "./statements.js";
import { analyzeMariaDb, locateMariadbd, mariadbScratch, mariadbServer } from "./mariadb.js";
import { backendCpuUs, locatePostmaster, processCpu, serverChildren, serverCpu, settleBackends } from "./server-cpu.js";
import { openWalReader, walBetween } from "./server-wal.js";
import { WAL_SETTINGS, walBench } from "./wal.js";
import { SHARD_KEYS, shardsBench } from "./shards.js";
import { PEER_STORE, preparePeer, type Peer } from "./peers.js";
import { spread, type Spread } from "./stats.js";
import { type PriorityFigures, type PriorityMix, priorityBench } from "./priorities.js";
import { type LimitFigures, limitBench } from "./limits.js";
import { type ScheduleFigures, scheduleBench } from "./schedules.js";

interface Settings {
  messages: number;
  /**
   * Messages each worker process of a throughput, payments or keys row works on a store of its own
   * before the timed start (warm-child.ts), at most the row's own messages per run; 0: none, every
   * process starts cold (the bench before this setting).
   */
  warmUp: number;
  reps: number;
  processes: number[];
  /** Process counts of the payments runs. */
  paymentsProcesses: number[];
  /** Process counts of the ordering-keys runs. */
  keysProcesses: number[];
  /** Messages of an enqueue run with one message per transaction. */
  singleEnqueues: number;
  stores: string[];
  postgresUrl: string;
  /** The PostgreSQL server's settings that shape the figures (postgresServer), null without PostgreSQL. */
  postgresServer: Record<string, string | null> | null;
  /** The MariaDB server of the mariadb runs (each run a database of its own there), and its settings that shape the figures (null without MariaDB). */
  mariadbUrl: string;
  mariadbServer: Record<string, string | null> | null;
  /** The latency section's worker: its poll interval (the longest wait for a message no wake-up reaches), ms. */
  latencyPollMs: number;
  /** The relay section: ordering keys of its keyed rows, and processed messages in the table of its history rows (0: none). */
  relayKeys: number;
  relayHistory: number;
  /** The private cluster of the postgres-autovacuum store (startPrivatePostgres, src/chaos/private-postgres.ts), once started: where, and its settings as postgresServer reads them. */
  privatePostgres: { url: string; bin: string; startSeconds: number; settings: Record<string, string | null> | null } | null;
}

interface Config {
  readonly system: "wassal" | "raw" | Peer;
  readonly store: string; // sqlite-FULL | sqlite-NORMAL | postgres | mariadb
  readonly processes: number;
  readonly batch: number;
  /** Wassal only: completions share commits (the worker's default). */
  readonly groupCommit?: boolean;
  /**
   * Messages of this row, when not the run's N: rows bound by one commit per message (batch 1, no
   * group commit) reach their steady rate within a few hundred messages, and at N they would take
   * most of the run's 20 minutes.
   */
  readonly messages?: number;
  /** Raw only: the equal-work loop (the handler's columns returned, completion guarded by the lease token); see raw-child.ts. */
  readonly guarded?: boolean;
  /** Wassal and the guarded raw loop: a completion deletes the row (onComplete "delete") instead of marking it processed. */
  readonly deleteOnComplete?: boolean;
  /** Wassal only: the real payments reconciliation handler instead of a no-op. */
  readonly payments?: boolean;
  /** Wassal only: the messages spread over this many ordering keys (absent: no keys). */
  readonly keys?: number;
  /** Which table the row belongs to (a no-op row run only as the payments' reference is "payments"). */
  readonly section: "throughput" | "payments" | "keys";
}

/** What the private cluster's postgresql.conf gets besides PostgreSQL's defaults (see startPrivatePostgres in wassal/lab). */
const PRIVATE_SETTINGS: Readonly<Record<string, string>> = { autovacuum: "on" };
/**
 * A private PostgreSQL cluster with autovacuum on and PostgreSQL's default settings, a server as
 * production runs one (startPrivatePostgres, src/chaos/private-postgres.ts): started before the first run that uses it and removed
 * at the end. The throughput, payments and relay sections measure it; the others leave it out.
 */
const PRIVATE_STORE = "postgres-autovacuum";
/** The sections that measure the private cluster. */
const PRIVATE_SECTIONS: readonly string[] = ["throughput", "payments", "relay"];
/** Whether a store is a PostgreSQL server, the shared one or the private cluster. */
const isPostgresStore = (store: string) => store === "postgres" || store === PRIVATE_STORE;
const STORES = ["sqlite-FULL", "sqlite-NORMAL", "postgres", "mariadb", PRIVATE_STORE] as const;
/** The sections the mariadb store is measured in (scale and the relay write or read PostgreSQL's or SQLite's tables themselves; the dashboard's run is not yet checked on it). */
const MARIADB_SECTIONS: readonly string[] = ["throughput", "payments", "keys", "enqueue", "latency"];
const SECTIONS = [
  "throughput",
  "payments",
  "keys",
  "enqueue",
  "latency",
  "scale",
  "statements",
  "relay",
  "wal",
  "shards",
  "dashboard",
  "schedules",
  "priorities",
  "limits",
] as const;
/** The keys section's rows: no keys (the reference), then 10,000, 100 and 1 distinct ordering keys. */
const KEY_COUNTS = [undefined, 10_000, 100, 1] as const;
/** Wassal's large batch: the raw loop's batch, and the group commit's default maxBatch. */
const BATCH = 100;
/**
 * Wassal's wide batch, the peers' own: graphile-worker as tuned fetches 500 jobs at a time. Group
 * commits of up to 500 (groupCommit.maxBatch) and concurrency 1,000, so claims settle at 500.
 */
const WIDE_BATCH = 500;
/** Messages per transaction in the batched enqueue runs. */
const ENQUEUE_BATCH = 100;
/**
 * PostgreSQL connections of all Wassal worker processes of a run together, shared out among them:
 * the server allows 100 connections by default, and the bench itself holds a few. A worker whose
 * completions commit one by one (no group commit) uses as many as it may.
 */
const PG_CONNECTIONS = 80;
/**
 * The same for MariaDB, whose server here allows 151 connections (max_connections): 80 for the
 * run's workers, the rest for the bench's own and for any other client.
 */
const MARIADB_CONNECTIONS = 80;
/** Messages of the commit-bound rows (see Config.messages). */
const COMMIT_BOUND_MESSAGES = 2_000;
/**
 * Messages of a payments row and of the no-op row it is compared with. Seeding creates each payment
 * in its own transaction (untimed, a few seconds per row here); at 5,000 a run lasted a quarter of
 * a second, short enough for start-up and warm-up to weigh.
 */
const PAYMENTS_MESSAGES = 20_000;
/**
 * A Wassal worker's concurrency: the messages it holds at once. Twice the claim batch, so that the
 * next claim of up to a batch overlaps the previous group's commit (the worker claims as many as
 * it has free slots; once running, its claims settle at one batch each).
 */
const concurrencyOf = (c: Pick<Config, "batch">) => (c.batch === 1 ? 1 : 2 * c.batch);
/** The batch column: for Wassal also its concurrency. */
const batchText = (c: Config) => (c.system === "wassal" && c.batch > 1 ? `${c.batch} (concurrency ${concurrencyOf(c)})` : String(c.batch));

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

function wholeNumber(name: string): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (!/^\d+$/.test(value) || !Number.isSafeInteger(n)) refuse(`${name} must be a whole number >= 0 (got ${JSON.stringify(value)})`);
    return n;
  };
}

function listOf<T extends string>(name: string, valid: readonly T[]): (value: string) => T[] {
  return (value) => {
    const items = value
      .split(",")
      .map((s) => s.trim())
      .filter((s) => s !== "");
    const unknown = items.filter((s) => !(valid as readonly string[]).includes(s));
    if (items.length === 0 || unknown.length > 0) refuse(`${name} takes a comma-separated list of ${valid.join(", ")} (got ${JSON.stringify(value)})`);
    return items as T[];
  };
}

/** A comma-separated list of whole numbers >= 1, each at most `max`, in the order given, without repeats. */
function countsOf(name: string, max: number): (value: string) => number[] {
  return (value) => {
    const items = value.split(",").map((s) => s.trim());
    const valid = items.every((s) => /^\d+$/.test(s) && Number(s) >= 1 && Number(s) <= max);
    if (!valid || new Set(items.map(Number)).size !== items.length) {
      refuse(`${name} takes a comma-separated list of distinct whole numbers from 1 to ${max} (got ${JSON.stringify(value)})`);
    }
    return items.map(Number);
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
const systemName = (c: Config) =>
  isPeer(c.system)
    ? `${c.system} (${PEER_TUNING[c.system].tuning})`
    : c.payments
      ? `${c.system} (payments handler)`
      : c.groupCommit === false
        ? `${c.system} (no group commit)`
        : c.guarded
          ? `${c.system} (equal work: handler's columns, lease-token guard${c.deleteOnComplete ? ", delete on complete" : ""})`
          : c.deleteOnComplete
            ? `${c.system} (delete on complete)`
            : c.system;
const shortName = (c: Config) =>
  c.payments
    ? "wassal-payments"
    : c.groupCommit === false
      ? "wassal-no-gc"
      : c.keys !== undefined
        ? `wassal-keys-${c.keys}`
        : c.guarded
          ? c.deleteOnComplete
            ? "raw-guarded-del"
            : "raw-guarded"
          : c.deleteOnComplete
            ? "wassal-delete"
            : c.system;
const label = (c: Config) => `${shortName(c).padEnd(15)} ${c.store.padEnd(13)} procs ${c.processes} batch ${String(c.batch).padStart(3)}`;

/** Whether something accepts TCP connections on 127.0.0.1:port. */
function tcpReachable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: "127.0.0.1", port });
    socket.setTimeout(1_000, () => {
      socket.destroy();
      resolve(false);
    });
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}

/** The PostgreSQL server's settings the benchmark records (postgresServer). */
const SERVER_SETTINGS = [
  "server_version",
  "fsync",
  "synchronous_commit",
  "full_page_writes",
  "wal_level",
  "shared_buffers",
  "max_wal_size",
  "checkpoint_timeout",
  "autovacuum",
  "autovacuum_naptime",
  "autovacuum_analyze_threshold",
  "autovacuum_analyze_scale_factor",
  "autovacuum_vacuum_scale_factor",
  "jit",
] as const;

/**
 * The PostgreSQL server's settings that shape the figures (version, durability, WAL, memory,
 * checkpoints, autovacuum and JIT), as it reports them, each null where it reports none; null
 * when the server cannot be reached, and only the error when it can but does not answer the
 * query. With autovacuum off nothing analyzes a table during a run, so a prepared statement keeps
 * the plan it first kept (each run has fresh tables, so every system starts alike).
 */
async function postgresServer(url: string): Promise<Record<string, string | null> | null> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000, query_timeout: 3000 });
  try {
    await client.connect();
  } catch {
    await client.end().catch(() => undefined);
    return null;
  }
  try {
    const { rows } = await client.query<{ name: string; setting: string }>(
      "SELECT name, current_setting(name) AS setting FROM pg_settings WHERE name = ANY ($1)",
      [SERVER_SETTINGS],
    );
    const reported = new Map(rows.map((row) => [row.name, row.setting]));
    return Object.fromEntries(SERVER_SETTINGS.map((name) => [name, reported.get(name) ?? null]));
  } catch (error) {
    return { error: error instanceof Error ? error.message : String(error) };
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** A fresh, empty, migrated database. */
function prepareEmpty(store: string, settings: Settings) {
  return prepare(store, { ...settings, messages: 0 });
}

/** Runs `work(0)` … `work(total - 1)`, at most `parallel` at a time. */
async function inParallel(total: number, parallel: number, work: (n: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(parallel, total) }, async () => {
      while (next < total) await work(next++);
    }),
  );
}

/**
 * A fresh database holding `messages` pending messages; returns its --db, schema and a clean-up.
 * `payments`: each message is a payment's reconciliation message, created with its payment row
 * through PaymentsService.create (one transaction per payment, as an application would).
 * Seeding is untimed; on PostgreSQL a few transactions run at once to shorten it.
 */
/** The URL of a PostgreSQL store: the shared server's, or the private cluster's once started. */
function postgresUrlOf(store: string, settings: Settings): string {
  const url = store === "postgres" ? settings.postgresUrl : settings.privatePostgres?.url;
  if (url === undefined) throw new Error(`${store}: the private cluster is not running`);
  return url;
}

async function prepare(
  store: string,
  settings: Settings,
  content: "noop" | "payments" = "noop",
  keys?: number,
): Promise<{ db: string; schema: string; cleanup: () => Promise<void> }> {
  let db: string;
  let schema = "-";
  let dir: string | undefined;
  let dropDatabase: (() => Promise<void>) | undefined;
  if (store === "mariadb") {
    ({ db, drop: dropDatabase } = await mariadbScratch(settings.mariadbUrl));
  } else if (isPostgresStore(store)) {
    db = postgresUrlOf(store, settings);
    schema = `wassal_bench_${randomBytes(4).toString("hex")}`;
  } else {
    dir = mkdtempSync(join(tmpdir(), "wassal-bench-"));
    db = join(dir, "bench.db");
  }
  const parallel = isPostgresStore(store) || store === "mariadb" ? (content === "payments" ? 8 : 4) : 1;
  let outbox: Awaited<ReturnType<typeof openLabOutbox>>;
  try {
    outbox = await openLabOutbox(db, { ...(schema !== "-" ? { schema } : {}), synchronous: "NORMAL", maxConnections: parallel });
  } catch (error) {
    await dropDatabase?.();
    throw error;
  }
  try {
    if (content === "payments") {
      const service = new PaymentsService({ store: outbox.store, repository: outbox.payments, provider: new ProviderSimulator({ latencyMs: 0 }) });
      await inParallel(settings.messages, parallel, async (n) => {
        const { created } = await service.create({ idempotencyKey: `bench-${n}`, amount: 1_000 + n, currency: "EUR" });
        if (!created) throw new Error(`payments seed: bench-${n} was not created`);
      });
    } else {
      await inParallel(Math.ceil(settings.messages / 1000), parallel, (chunk) =>
        outbox.store.transaction(async (tx) => {
          for (let n = chunk * 1000; n < Math.min(settings.messages, (chunk + 1) * 1000); n += 1)
            await outbox.store.enqueue(tx, { type: "bench.noop", payload: { n }, ...(keys === undefined ? {} : { key: `k${n % keys}` }) });
        }),
      );
    }
  } catch (error) {
    await outbox.close();
    await dropDatabase?.();
    throw error;
  }
  await outbox.close();
  return {
    db,
    schema,
    cleanup: async () => {
      if (dir) rmSync(dir, { recursive: true, force: true });
      await dropDatabase?.();
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
  /** With a warm-up: the messages this process worked on the warm-up store before "ready". */
  warmedUp?: number;
  maxRssMb: number;
  /** CPU the child spent from "go" to its end (see child-report.ts). */
  cpuUserUs: number;
  cpuSystemUs: number;
  /** Wassal on SQLite: how long the child held the file's write lock from "go" on, and waited for it. */
  lockHeldMs?: number;
  /** ... of which in COMMIT (see WriteLockStats.committingMs). */
  lockCommitMs?: number;
  lockWaitedMs?: number;
  /** ... of the held time, the process on a CPU and its thread waiting for one (WriteLockStats; null: not Linux). */
  lockOnCpuMs?: number | null;
  lockRunnableMs?: number | null;
}

/** A write-lock figure summed over the processes, in µs; null unless every process reported it. */
function lockSumUs(reports: readonly ChildReport[], figure: (report: ChildReport) => number | null | undefined): number | null {
  let sum = 0;
  for (const report of reports) {
    const ms = figure(report);
    if (typeof ms !== "number") return null;
    sum += ms * 1000;
  }
  return sum;
}

/** CPU time of one run, in µs: the worker processes together, the PostgreSQL server (null: not measured), the whole machine (null: no /proc/stat). */
interface RunCpu {
  workerUserUs: number;
  workerSystemUs: number;
  serverUserUs: number | null;
  serverSystemUs: number | null;
  machineUs: number | null;
  /** Wassal on SQLite: the write lock held, all processes together (null: not SQLite, or not Wassal). */
  lockHeldUs: number | null;
  /** ... of which in COMMIT, which returns after the lock is released (held minus this is a lower bound). */
  lockCommitUs: number | null;
  /** ... and the time its processes waited for it. */
  lockWaitedUs: number | null;
  /** Of the held time, the holders on a CPU (the whole process), and waiting for one (null: not measured). */
  lockOnCpuUs: number | null;
  lockRunnableUs: number | null;
  /** PostgreSQL on this machine: the WAL the cluster wrote during the run (server-wal.ts), else null. */
  walRecords: number | null;
  walFpi: number | null;
  walBytes: number | null;
  /** The shards section: each of race's `postmasters` (its shards' servers), user + system µs over the run, null where not read. */
  serversUs: (number | null)[];
}

/** After a payments run: every payment Paid or Failed, every message processed; throws otherwise. */
async function verifyPayments(db: string, schema: string, expected: number): Promise<{ paid: number; failed: number }> {
  const outbox = await openLabOutbox(db, { ...(schema !== "-" ? { schema } : {}), synchronous: "NORMAL", mustExist: true });
  try {
    const payments = await outbox.payments.list();
    const paid = payments.filter((p) => p.status === "Paid").length;
    const failed = payments.filter((p) => p.status === "Failed").length;
    const counts = await outbox.store.countByStatus();
    if (payments.length !== expected || paid + failed !== expected || counts.processed !== expected) {
      throw new Error(
        `payments run: ${payments.length} payments (${paid} Paid, ${failed} Failed, ${payments.length - paid - failed} not final) and ${counts.processed} messages processed, expected ${expected} of each (message counts ${JSON.stringify(counts)})`,
      );
    }
    return { paid, failed };
  } finally {
    await outbox.close();
  }
}

/**
 * Starts the children, waits until all are ready, releases them together, times them to the end.
 * Also the run's CPU: the children's own reports, and, with `server`, the PostgreSQL server's
 * time and WAL between "go" and the end (read once the backends of the run have exited, see
 * server-cpu.ts and server-wal.ts), and the whole machine's busy time over the timed part.
 * `args`: every child's, or each child's by its number (the shards section: a shard per child).
 * `postmasters`: further servers (the shards section's), each one's CPU read alike (RunCpu.serversUs).
 */
async function race(
  script: string,
  args: readonly string[] | ((child: number) => readonly string[]),
  count: number,
  server: { readonly postmaster: number; readonly url: string } | { readonly mariadbd: number } | null,
  warmUp: readonly string[] | null,
  postmasters: readonly number[] = [],
): Promise<{ seconds: number; reports: ChildReport[]; cpu: RunCpu }> {
  const postmaster = server !== null && "postmaster" in server ? server.postmaster : null;
  const mariadbd = server !== null && "mariadbd" in server ? server.mariadbd : null;
  // Connected before the baseline, so its backend is neither waited for nor started within the run.
  const walReader = server !== null && "url" in server ? await openWalReader(server.url) : null;
  try {
    const baseline = postmaster === null ? [] : serverChildren(postmaster);
    const baselines = postmasters.map(serverChildren);
    // With a warm-up, each child first works the warm-up store (its leading arguments replaced), then the run's.
    const command = (child: number) => {
      const own = typeof args === "function" ? args(child) : args;
      return warmUp === null ? [join(HERE, script), ...own] : [join(HERE, "warm-child.js"), script, ...own];
    };
    const env = warmUp === null ? process.env : { ...process.env, WASSAL_BENCH_WARM_UP: JSON.stringify(warmUp) };
    const children = Array.from({ length: count }, (_, child) => spawn(process.execPath, command(child), { stdio: ["pipe", "pipe", "inherit"], env }));
    const outputs = children.map(() => "");
    const ready = children.map(
      (child, i) =>
        new Promise<void>((resolve, reject) => {
          child.stdout.on("data", (chunk: Buffer) => {
            outputs[i] += chunk.toString();
            if (outputs[i]?.startsWith("ready\n")) resolve();
          });
          child.on("exit", (code) => (code === 0 ? undefined : reject(new Error(`${script} exited ${code}`))));
        }),
    );
    const exited = children.map((child) => new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code))));
    await Promise.all(ready);
    const walBefore = (await walReader?.read()) ?? null;
    const serverBefore = postmaster !== null ? serverCpu(postmaster) : mariadbd !== null ? processCpu(mariadbd) : null;
    const serversBefore = postmasters.map(serverCpu);
    const machineBefore = machineBusyUs();
    const started = performance.now();
    for (const child of children) child.stdin.end("go\n");
    const codes = await Promise.all(exited);
    const seconds = (performance.now() - started) / 1000;
    const machineAfter = machineBusyUs();
    if (codes.some((code) => code !== 0)) throw new Error(`${script}: a child failed (${codes.join(", ")})`);
    const reports = outputs.map((out) => JSON.parse(out.trim().split("\n").at(-1) ?? "{}") as ChildReport);
    let serverAfter: ReturnType<typeof serverCpu> = null;
    if (postmaster !== null && serverBefore) {
      await settleBackends(postmaster, baseline);
      serverAfter = serverCpu(postmaster);
    } else if (mariadbd !== null && serverBefore) {
      // A connection's thread ends with it, and its time stays in the process's.
      serverAfter = processCpu(mariadbd);
    }
    const serversUs: (number | null)[] = [];
    for (const [i, pm] of postmasters.entries()) {
      await settleBackends(pm, baselines[i] ?? []);
      const before = serversBefore[i];
      const after = serverCpu(pm);
      serversUs.push(before && after ? after.userUs - before.userUs + after.systemUs - before.systemUs : null);
    }
    const wal = walBetween(walBefore, (await walReader?.read()) ?? null);
    const serverTime =
      serverBefore && serverAfter ? { userUs: serverAfter.userUs - serverBefore.userUs, systemUs: serverAfter.systemUs - serverBefore.systemUs } : null;
    const cpu: RunCpu = {
      workerUserUs: reports.reduce((sum, r) => sum + r.cpuUserUs, 0),
      workerSystemUs: reports.reduce((sum, r) => sum + r.cpuSystemUs, 0),
      serverUserUs: serverTime?.userUs ?? null,
      serverSystemUs: serverTime?.systemUs ?? null,
      machineUs: machineBefore !== null && machineAfter !== null ? machineAfter - machineBefore : null,
      lockHeldUs: lockSumUs(reports, (r) => r.lockHeldMs),
      lockCommitUs: lockSumUs(reports, (r) => r.lockCommitMs),
      lockWaitedUs: lockSumUs(reports, (r) => r.lockWaitedMs),
      lockOnCpuUs: lockSumUs(reports, (r) => r.lockOnCpuMs),
      lockRunnableUs: lockSumUs(reports, (r) => r.lockRunnableMs),
      walRecords: wal?.records ?? null,
      walFpi: wal?.fpi ?? null,
      walBytes: wal?.bytes ?? null,
      serversUs,
    };
    return { seconds, reports, cpu };
  } finally {
    await walReader?.close();
  }
}

/**
 * Refreshes PostgreSQL's statistics after seeding, for every system alike: in production
 * autovacuum has analysed a busy queue table long before; a table filled a second ago has none,
 * and the planner then picks plans no running system would see.
 */
async function analyze(url: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query("ANALYZE");
  } finally {
    await client.end();
  }
}

/** What a run that processed too few left in the outbox: counts, and whether any of it can be claimed now. */
async function leftBehind(db: string, schema: string): Promise<string> {
  const outbox = await openOutbox(db, { ...(schema !== "-" ? { schema } : {}), mustExist: true });
  try {
    const counts = await outbox.store.countByStatus();
    const claimable = await outbox.store.claim("bench-check", { limit: 10, leaseMs: 60_000 });
    return `left ${JSON.stringify(counts)}; ${claimable.length} claimable now (0 with pending messages would mean stranded ones)`;
  } finally {
    await outbox.close();
  }
}

/** CPU µs per message of one run (RunCpu divided by the messages), and the share of the run SQLite's write lock was held (0–1 per process). */
type CpuPerMessage = RunCpu & { lockBeforeCommitUs: number | null; lockBusy: number | null; lockBusyBeforeCommit: number | null };

async function runOnce(
  config: Config,
  all: Settings,
  postmasters: ReadonlyMap<string, number | null>,
  mariadbd: number | null,
): Promise<{ rate: number; maxRssMb: number; cpu: CpuPerMessage }> {
  const system = config.system;
  const settings = { ...all, messages: config.messages ?? all.messages };
  const seed = (messages: number) =>
    isPeer(system)
      ? // plainjob runs on SQLite: no server to name (a run of SQLite stores alone starts none)
        preparePeer(system, messages, config.store.startsWith("sqlite") ? "" : postgresUrlOf(config.store, settings))
      : prepare(config.store, { ...settings, messages }, config.payments ? "payments" : "noop", config.keys);
  // The warm-up's store: seeded alike, as many messages per process as the setting says (the
  // row's own count at most), worked by the same processes before "ready" (warm-child.ts).
  const warmMessages = Math.min(all.warmUp, settings.messages) * config.processes;
  const warm = warmMessages > 0 ? await seed(warmMessages) : null;
  let prepared: Awaited<ReturnType<typeof seed>>;
  try {
    prepared = await seed(settings.messages);
  } catch (error) {
    await warm?.cleanup();
    throw error;
  }
  const { db, schema } = prepared;
  const cleanup = async () => {
    await prepared.cleanup();
    await warm?.cleanup();
  };
  const warmUp = warm === null ? null : system === "plainjob" ? [warm.db] : [warm.db, warm.schema];
  const postmaster = postmasters.get(config.store) ?? null;
  try {
    // Both servers alike (the private one's autovacuum would analyze the seeded table within a minute).
    if (isPostgresStore(config.store)) await analyze(postgresUrlOf(config.store, settings));
    if (config.store === "mariadb") {
      await analyzeMariaDb(db);
      if (warm !== null) await analyzeMariaDb(warm.db);
    }
    const synchronous = config.store === "sqlite-NORMAL" ? "NORMAL" : "FULL";
    const connections = isPostgresStore(config.store)
      ? Math.floor(PG_CONNECTIONS / config.processes)
      : config.store === "mariadb"
        ? Math.floor(MARIADB_CONNECTIONS / config.processes)
        : 2;
    const server =
      isPostgresStore(config.store) && postmaster !== null
        ? { postmaster, url: postgresUrlOf(config.store, settings) }
        : config.store === "mariadb" && mariadbd !== null
          ? { mariadbd }
          : null;
    const { seconds, reports, cpu } = isPeer(system)
      ? await race(PEER_TUNING[system].script, system === "plainjob" ? [db] : [db, schema], config.processes, server, warmUp)
      : config.payments
        ? await race("payments-child.js", [db, schema, synchronous, String(concurrencyOf(config)), String(connections)], config.processes, server, warmUp)
        : system === "wassal"
          ? await race(
              "worker-child.js",
              [
                db,
                schema,
                synchronous,
                String(concurrencyOf(config)),
                config.groupCommit === false || config.batch === 1 ? "off" : String(config.batch),
                String(connections),
                config.keys === undefined ? "-" : "keyed",
                config.deleteOnComplete ? "delete" : "keep",
              ],
              config.processes,
              server,
              warmUp,
            )
          : await race(
              "raw-child.js",
              [db, schema, synchronous, String(config.batch), config.guarded ? (config.deleteOnComplete ? "guarded-delete" : "guarded") : "bare"],
              config.processes,
              server,
              warmUp,
            );
    const processed = reports.reduce((sum, r) => sum + r.processed, 0);
    const warmedUp = reports.reduce((sum, r) => sum + (r.warmedUp ?? 0), 0);
    if (warmedUp !== (warm === null ? 0 : warmMessages)) throw new Error(`${label(config)}: the warm-up processed ${warmedUp} of ${warmMessages}`);
    if (processed !== settings.messages) throw new Error(`${label(config)}: processed ${processed} of ${settings.messages}; ${await leftBehind(db, schema)}`);
    if (config.payments) await verifyPayments(db, schema, settings.messages);
    const per = (us: number | null) => (us === null ? null : us / settings.messages);
    return {
      rate: settings.messages / seconds,
      maxRssMb: Math.max(...reports.map((r) => r.maxRssMb)),
      cpu: {
        workerUserUs: cpu.workerUserUs / settings.messages,
        workerSystemUs: cpu.workerSystemUs / settings.messages,
        serverUserUs: per(cpu.serverUserUs),
        serverSystemUs: per(cpu.serverSystemUs),
        machineUs: per(cpu.machineUs),
        lockHeldUs: per(cpu.lockHeldUs),
        lockCommitUs: per(cpu.lockCommitUs),
        lockBeforeCommitUs: cpu.lockHeldUs === null || cpu.lockCommitUs === null ? null : per(cpu.lockHeldUs - cpu.lockCommitUs),
        lockWaitedUs: per(cpu.lockWaitedUs),
        lockOnCpuUs: per(cpu.lockOnCpuUs),
        lockRunnableUs: per(cpu.lockRunnableUs),
        walRecords: per(cpu.walRecords),
        walFpi: per(cpu.walFpi),
        walBytes: per(cpu.walBytes),
        serversUs: cpu.serversUs.map(per),
        lockBusy: cpu.lockHeldUs === null ? null : cpu.lockHeldUs / (seconds * 1e6),
        lockBusyBeforeCommit: cpu.lockHeldUs === null || cpu.lockCommitUs === null ? null : (cpu.lockHeldUs - cpu.lockCommitUs) / (seconds * 1e6),
      },
    };
  } finally {
    await cleanup();
  }
}

async function main(): Promise<void> {
  const program = new Command("bench")
    .description(
      "measure Wassal's throughput on each store next to the store's raw limit, with the payments handler, its enqueue rate, latency, claims under history, (PostgreSQL on this machine) the server CPU of its claim and completion alone, the relay from the outbox to NATS and RabbitMQ, and the WAL relay against the polling relay",
    )
    .option(
      "--quick",
      "a smoke run: 500 messages, 2 repetitions, 1 and 4 processes (payments: 1), 500 single enqueues, shorter latency and scale runs, 10,000 processed messages in the relay's history rows",
    )
    .option(
      "--messages <n>",
      "messages per run, and batched enqueues per run (default 20,000; 500 with --quick); rows bound by one commit per message (batch 1, no group commit) run at most 2,000, payments rows (and their no-op reference) at most 20,000",
      positive("--messages"),
    )
    .option(
      "--warm-up <n>",
      "messages each worker process of the throughput, payments and keys rows works, untimed, on a store of its own before the timed start, at most the row's messages (0: every process starts cold, as the bench did before this option) (default 5,000; 500 with --quick)",
      wholeNumber("--warm-up"),
    )
    .option("--reps <n>", "repetitions per figure (median, min, max) (default 3; 2 with --quick)", positive("--reps"))
    .option(
      "--stores <list>",
      `comma-separated: ${STORES.join(", ")} (${PRIVATE_STORE}: a private PostgreSQL cluster with autovacuum on and default settings, started by the bench and removed at its end, measured in the ${PRIVATE_SECTIONS.join(", ")} sections; the relay section leaves out sqlite-FULL)`,
      listOf("--stores", STORES),
      [...STORES],
    )
    .option(
      "--sections <list>",
      `comma-separated: ${SECTIONS.join(", ")} (statements: PostgreSQL on this machine only; wal: the polling relay against the WAL relay to NATS, throughput with CPU per message and latency, on a private PostgreSQL server it starts with ${JSON.stringify(WAL_SETTINGS)} and removes, when --stores has postgres or ${PRIVATE_STORE}; shards: 2 PostgreSQL shards drained by a worker process per shard or by one process for all (ShardWorkers), and 1 shard with 1 process, ${SHARD_KEYS.toLocaleString("en")} ordering keys, on private servers it starts and removes, likewise; schedules: cron ticks fired by 4 competing schedulers, PostgreSQL and SQLite; priorities: the claim with priorities unused and in use, one claimer, PostgreSQL and SQLite; limits: a type limited to 2,000 claims a second worked by 2 Workers, its busiest second and paced rate against the limit, PostgreSQL and SQLite)`,
      listOf("--sections", SECTIONS),
      [...SECTIONS],
    )
    .option(
      "--processes <list>",
      "comma-separated process counts, each from 1 to 4 (the peers' pools need 25 connections per process): the throughput rows run at each; the payments and keys rows at those of theirs (1 and 4; 1 with --quick) that are in it (default: 1,2,4; 1,4 with --quick)",
      countsOf("--processes", 4),
    )
    .option("--no-peers", "leave out the peer job queues (pg-boss, graphile-worker, plainjob)")
    .option("--postgres <url>", "PostgreSQL for the postgres runs", process.env.WASSAL_TEST_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test")
    .option(
      "--mariadb <url>",
      "MariaDB for the mariadb runs: each run creates a database of its own on that server and drops it afterwards (the URL's own database is only connected to)",
      process.env.WASSAL_TEST_MARIADB_URL ?? "mysql://root@127.0.0.1:3306/test",
    )
    .option("--relay-keys <n>", "relay section: the ordering keys its keyed rows spread their messages over, round-robin", positive("--relay-keys"), 30)
    .option(
      "--relay-history <n>",
      `relay section: processed messages already in the table of its history rows (the keyed relay with them, as is and, on PostgreSQL, after ANALYZE; preloaded untimed over ${HISTORY_KEYS.toLocaleString("en")} keys); 0 leaves those rows out (default 100,000; 10,000 with --quick)`,
      wholeNumber("--relay-history"),
    )
    .option(
      "--postgres-bin <dir>",
      `where initdb and pg_ctl are, for ${PRIVATE_STORE} (default: pg_config --bindir, else the directory of the postgres server's own binary, else the PATH)`,
    );
  program.parse();
  const options = program.opts<{
    quick?: boolean;
    messages?: number;
    warmUp?: number;
    reps?: number;
    processes?: number[];
    stores: string[];
    sections: string[];
    postgres: string;
    mariadb: string;
    peers: boolean;
    relayKeys: number;
    relayHistory?: number;
    postgresBin?: string;
  }>();
  const run = (section: (typeof SECTIONS)[number]) => options.sections.includes(section);
  const processes = options.processes ?? (options.quick ? [1, 4] : [1, 2, 4]);
  const settings: Settings = {
    messages: options.messages ?? (options.quick ? 500 : 20_000),
    warmUp: options.warmUp ?? (options.quick ? 500 : 5_000),
    reps: options.reps ?? (options.quick ? 2 : 3),
    processes,
    paymentsProcesses: (options.quick ? [1] : [1, 4]).filter((n) => processes.includes(n)),
    keysProcesses: (options.quick ? [1] : [1, 4]).filter((n) => processes.includes(n)),
    singleEnqueues: options.quick ? 500 : 2_000,
    stores: options.stores,
    postgresUrl: options.postgres,
    postgresServer: null,
    mariadbUrl: options.mariadb,
    mariadbServer: null,
    latencyPollMs: LATENCY_POLL_MS,
    relayKeys: options.relayKeys,
    relayHistory: options.relayHistory ?? (options.quick ? 10_000 : 100_000),
    privatePostgres: null,
  };
  for (const section of ["payments", "keys"] as const) {
    const own = section === "payments" ? settings.paymentsProcesses : settings.keysProcesses;
    if (run(section) && own.length === 0) {
      refuse(
        `--processes ${processes.join(",")} leaves the ${section} section no rows: it runs with ${options.quick ? "1 process; add 1" : "1 and 4 processes; add 1 or 4"}, or leave ${section} out of --sections`,
      );
    }
  }
  if (settings.stores.includes("postgres")) {
    settings.postgresServer = await postgresServer(settings.postgresUrl);
    if (settings.postgresServer === null) {
      process.stderr.write(`bench: PostgreSQL at ${settings.postgresUrl} is unreachable; leaving it out\n`);
      settings.stores = settings.stores.filter((s) => s !== "postgres");
    }
  }
  if (settings.stores.includes("mariadb")) {
    if (!/^(mysql|mariadb):\/\/[^/]+\/./.test(settings.mariadbUrl))
      refuse(`--mariadb takes mysql://user@host:3306/database (got ${JSON.stringify(settings.mariadbUrl)})`);
    settings.mariadbServer = await mariadbServer(settings.mariadbUrl);
    if (settings.mariadbServer === null) {
      process.stderr.write(`bench: MariaDB at ${settings.mariadbUrl} is unreachable; leaving it out\n`);
      settings.stores = settings.stores.filter((s) => s !== "mariadb");
    } else {
      const without = options.sections.filter((section) => !MARIADB_SECTIONS.includes(section));
      if (without.length > 0) process.stderr.write(`bench: the ${without.join(", ")} section(s) do not measure MariaDB yet; they leave it out\n`);
    }
  }
  if (settings.stores.includes(PRIVATE_STORE) && !PRIVATE_SECTIONS.some((section) => options.sections.includes(section))) {
    if (program.getOptionValueSource("stores") === "cli")
      process.stderr.write(`bench: ${PRIVATE_STORE} is measured in the ${PRIVATE_SECTIONS.join(", ")} sections, which --sections leaves out; leaving it out\n`);
    settings.stores = settings.stores.filter((s) => s !== PRIVATE_STORE);
  }
  let privatePostgres: PrivatePostgres | null = null;
  if (settings.stores.includes(PRIVATE_STORE)) {
    try {
      privatePostgres = await startPrivatePostgres({
        bin: postgresBinaries(options.postgresBin, await locatePostmaster(settings.postgresUrl)),
        settings: PRIVATE_SETTINGS,
        label: "bench-pg",
      });
      settings.privatePostgres = {
        url: privatePostgres.url,
        bin: privatePostgres.bin,
        startSeconds: privatePostgres.startSeconds,
        settings: await postgresServer(privatePostgres.url),
      };
      process.stdout.write(`${PRIVATE_STORE}: ${JSON.stringify(settings.privatePostgres)}\n`);
    } catch (error) {
      privatePostgres?.stop();
      privatePostgres = null;
      process.stderr.write(
        `bench: the private PostgreSQL cluster did not start (${error instanceof Error ? error.message : String(error)}); leaving ${PRIVATE_STORE} out\n`,
      );
      settings.stores = settings.stores.filter((s) => s !== PRIVATE_STORE);
    }
  }
  /** Every store measured; storesOf says which a section takes. */
  const stores = settings.stores;
  /** The stores of a section: MariaDB only in those that measure it (MARIADB_SECTIONS), the private cluster likewise (PRIVATE_SECTIONS). */
  const storesOf = (section: (typeof SECTIONS)[number]) =>
    stores.filter((s) => (s !== "mariadb" || MARIADB_SECTIONS.includes(section)) && (s !== PRIVATE_STORE || PRIVATE_SECTIONS.includes(section)));
  const configs: Config[] = [];
  for (const store of stores) {
    for (const processes of settings.processes) {
      const payments = run("payments") && settings.paymentsProcesses.includes(processes);
      if (run("throughput")) {
        const section = "throughput";
        configs.push(
          { system: "wassal", store, processes, batch: 1, messages: Math.min(COMMIT_BOUND_MESSAGES, settings.messages), section },
          { system: "wassal", store, processes, batch: BATCH, section },
          { system: "wassal", store, processes, batch: WIDE_BATCH, section },
          { system: "raw", store, processes, batch: 100, section },
          { system: "raw", store, processes, batch: 100, guarded: true, section },
          // onComplete "delete": the completion deletes the row; against the guarded raw loop's delete form.
          { system: "wassal", store, processes, batch: BATCH, deleteOnComplete: true, section },
          { system: "wassal", store, processes, batch: WIDE_BATCH, deleteOnComplete: true, section },
          { system: "raw", store, processes, batch: 100, guarded: true, deleteOnComplete: true, section },
        );
        // What group commit is worth: the same batch with every completion committed on its own.
        if (processes === 1)
          configs.push({
            system: "wassal",
            store,
            processes,
            batch: BATCH,
            groupCommit: false,
            messages: Math.min(COMMIT_BOUND_MESSAGES, settings.messages),
            section,
          });
        for (const peer of Object.keys(PEER_TUNING) as Peer[]) {
          if ((PEER_STORE[peer] === store || (PEER_STORE[peer] === "postgres" && store === PRIVATE_STORE)) && options.peers)
            configs.push({ system: peer, store, processes, batch: PEER_TUNING[peer].batch, section });
        }
      }
      if (payments) {
        // The no-op reference the payments handler is compared with: the same worker on the same
        // number of messages, interleaved with it. (Compared with the throughput row instead, at
        // 20,000 messages against 5,000, the second full run's payments ratios were 0.28–0.41; with
        // equal counts, six alternated rounds of the same code later gave medians of 0.47–0.67: a
        // short run's start-up and warm-up weigh more per message.)
        const messages = Math.min(PAYMENTS_MESSAGES, settings.messages);
        configs.push(
          { system: "wassal", store, processes, batch: BATCH, messages, section: "payments" },
          { system: "wassal", store, processes, batch: BATCH, payments: true, messages, section: "payments" },
        );
      }
      // What ordering keys cost: the same worker on the same number of messages, spread over many
      // keys, a few, or one (one key is sequential by definition: one message in flight at a time).
      if (run("keys") && storesOf("keys").includes(store) && settings.keysProcesses.includes(processes)) {
        for (const keys of KEY_COUNTS) {
          configs.push({
            system: "wassal",
            store,
            processes,
            batch: BATCH,
            section: "keys",
            ...(keys === undefined ? {} : { keys }),
            ...(keys === 1 ? { messages: Math.min(COMMIT_BOUND_MESSAGES, settings.messages) } : {}),
          });
        }
      }
    }
  }
  process.stdout.write(`settings: ${JSON.stringify({ ...settings, node: process.version, cpus: (await import("node:os")).cpus().length })}\n`);
  // Latency first, on a quiet machine: the throughput runs leave the disk flushing for a while.
  // One run per store (the percentiles come from thousands of samples).
  const latencyRows: string[] = [
    "| store | worker | rate /s asked | rate /s reached | messages | p50 ms | p95 ms | p99 ms | max ms | enqueue's commit p50 / p99 ms | commit → start p50 / p99 ms |",
    "|---|---|---|---|---|---|---|---|---|---|---|",
  ];
  const latency: Record<string, Record<string, unknown>> = {};
  for (const store of run("latency") ? storesOf("latency") : []) {
    const rate = 500;
    const seconds = options.quick ? 2 : 10;
    latency[store] = {};
    for (const place of ["in-process", "other process"] as const) {
      const prepared = await prepareEmpty(store, settings);
      execSync("sync");
      try {
        const result = await measureLatency(prepared.db, place, {
          ...(prepared.schema !== "-" ? { schema: prepared.schema } : {}),
          synchronous: store === "sqlite-NORMAL" ? "NORMAL" : "FULL",
          rate,
          seconds,
        });
        (latency[store] as Record<string, unknown>)[place] = result;
        latencyRows.push(
          `| ${store} | ${place} | ${rate} | ${Math.round(result.enqueued)} | ${result.messages} | ${result.p50.toFixed(2)} | ${result.p95.toFixed(2)} | ${result.p99.toFixed(2)} | ${result.max.toFixed(2)} | ${result.commit.p50.toFixed(2)} / ${result.commit.p99.toFixed(2)} | ${result.afterCommit.p50.toFixed(2)} / ${result.afterCommit.p99.toFixed(2)} |`,
        );
        process.stderr.write(
          `latency ${store} (${place}): p50 ${result.p50.toFixed(2)} ms, p99 ${result.p99.toFixed(2)} ms (its commit p99 ${result.commit.p99.toFixed(2)}, commit → start p99 ${result.afterCommit.p99.toFixed(2)}; enqueued at ${Math.round(result.enqueued)}/s)\n`,
        );
      } finally {
        await prepared.cleanup();
      }
    }
  }

  // The PostgreSQL server's CPU is read from /proc when it runs on this machine (see server-cpu.ts):
  // for the tables and for the statements section.
  const postmaster = settings.stores.includes("postgres") ? await locatePostmaster(settings.postgresUrl) : null;
  if (settings.stores.includes("postgres") && configs.length > 0 && postmaster === null)
    process.stderr.write("bench: PostgreSQL does not run on this machine (or not in this PID namespace); its server CPU is not measured\n");
  const postmasters = new Map<string, number | null>([
    ["postgres", postmaster],
    [PRIVATE_STORE, privatePostgres === null ? null : await locatePostmaster(privatePostgres.url)],
  ]);
  // MariaDB's likewise: the mariadbd process listening on the URL's port (mariadb.ts).
  const mariadbd = settings.stores.includes("mariadb") && configs.length > 0 ? locateMariadbd(settings.mariadbUrl) : null;
  if (settings.stores.includes("mariadb") && configs.length > 0 && mariadbd === null)
    process.stderr.write("bench: MariaDB does not run on this machine (or its mariadbd is not in this PID namespace); its server CPU is not measured\n");
  const samples = new Map<Config, { rates: number[]; rss: number[]; cpu: CpuPerMessage[] }>(configs.map((c) => [c, { rates: [], rss: [], cpu: [] }]));
  for (let rep = 1; rep <= settings.reps; rep += 1) {
    for (const config of configs) {
      const { rate, maxRssMb, cpu } = await runOnce(config, settings, postmasters, mariadbd);
      samples.get(config)?.rates.push(rate);
      samples.get(config)?.rss.push(maxRssMb);
      samples.get(config)?.cpu.push(cpu);
      const server = cpu.serverUserUs === null || cpu.serverSystemUs === null ? "" : `, server ${Math.round(cpu.serverUserUs + cpu.serverSystemUs)}`;
      const wal = cpu.walRecords === null ? "" : `; WAL records/msg ${cpu.walRecords.toFixed(2)}`;
      process.stderr.write(
        `rep ${rep}/${settings.reps}  ${label(config)}  ${Math.round(rate)} msg/s  (CPU µs/msg: workers ${Math.round(cpu.workerUserUs + cpu.workerSystemUs)}${server}${wal})\n`,
      );
    }
  }
  const rows = configs.map((config) => {
    const s = samples.get(config) ?? { rates: [], rss: [], cpu: [] };
    const of = (pick: (c: CpuPerMessage) => number | null): Spread | null => {
      const values = s.cpu.map(pick);
      return values.every((v): v is number => v !== null) ? spread(values) : null;
    };
    return {
      config,
      throughput: spread(s.rates),
      peakRssMb: Math.max(...s.rss),
      cpuPerMessageUs: {
        workerUser: of((c) => c.workerUserUs),
        workerSystem: of((c) => c.workerSystemUs),
        serverUser: of((c) => c.serverUserUs),
        serverSystem: of((c) => c.serverSystemUs),
        machine: of((c) => c.machineUs),
        lockHeld: of((c) => c.lockHeldUs),
        lockCommit: of((c) => c.lockCommitUs),
        lockBeforeCommit: of((c) => c.lockBeforeCommitUs),
        lockWaited: of((c) => c.lockWaitedUs),
        lockOnCpu: of((c) => c.lockOnCpuUs),
        lockRunnable: of((c) => c.lockRunnableUs),
        lockBusy: of((c) => c.lockBusy),
        lockBusyBeforeCommit: of((c) => c.lockBusyBeforeCommit),
        walRecords: of((c) => c.walRecords),
        walFpi: of((c) => c.walFpi),
        walBytes: of((c) => c.walBytes),
      },
    };
  });
  /** CPU µs per message, medians: "user + system" of the workers, of the database server ("–": not measured), the whole machine. */
  /** "user + system" medians, rounded; "–" when not measured. */
  const pair = (user: Spread | null, system: Spread | null) => (user && system ? `${Math.round(user.median)} + ${Math.round(system.median)}` : "–");
  const cpuCells = (r: (typeof rows)[number]) => {
    const c = r.cpuPerMessageUs;
    return `${pair(c.workerUser, c.workerSystem)} | ${pair(c.serverUser, c.serverSystem)} | ${c.machine ? Math.round(c.machine.median) : "–"}`;
  };
  const CPU_HEADER =
    "worker processes CPU µs/msg, user + sys | server CPU µs/msg, user + sys (/proc: PostgreSQL all its processes, MariaDB its mariadbd) | whole machine busy µs/msg (incl. anything else running)";
  /** The no-op Wassal row at batch 100 (or `batch`) with group commit, history kept (or deleted on complete): what the ratios compare against. */
  const wassalBestRow = (store: string, processes: number, batch = BATCH, deleting = false) =>
    rows.find(
      (r) =>
        r.config.system === "wassal" &&
        !r.config.payments &&
        r.config.store === store &&
        r.config.processes === processes &&
        r.config.batch === batch &&
        r.config.groupCommit !== false &&
        !r.config.payments &&
        r.config.section === "throughput" &&
        (r.config.deleteOnComplete ?? false) === deleting,
    );
  const wassalBest = (store: string, processes: number, batch = BATCH, deleting = false) =>
    wassalBestRow(store, processes, batch, deleting)?.throughput.median ?? 0;
  /** The payments section's no-op row, same store, processes and messages: what a payments row is compared with. */
  const paymentsReference = (r: (typeof rows)[number]) =>
    rows.find(
      (o) =>
        o.config.section === "payments" &&
        !o.config.payments &&
        o.config.store === r.config.store &&
        o.config.processes === r.config.processes &&
        o.config.messages === r.config.messages,
    );
  /** A row's CPU µs per message, workers and database server together (user + sys), medians; "–" when not measured. */
  const totalCpu = (r: (typeof rows)[number] | undefined) => {
    const c = r?.cpuPerMessageUs;
    if (!c?.workerUser || !c.workerSystem) return "–";
    const server = c.serverUser && c.serverSystem ? c.serverUser.median + c.serverSystem.median : 0;
    return String(Math.round(c.workerUser.median + c.workerSystem.median + server));
  };
  const fmt = (s: Spread) => `${Math.round(s.median)} (${Math.round(s.min)}–${Math.round(s.max)})`;
  const lines: string[] = [];
  if (run("throughput")) {
    const table = [
      `| system | store | processes | batch | messages | messages/s median (min–max) | ${CPU_HEADER} | Wassal batch ${BATCH} ÷ this | Wassal batch ${WIDE_BATCH} ÷ this | Wassal delete, batch ${BATCH} ÷ this | Wassal delete, batch ${WIDE_BATCH} ÷ this | peak RSS MB |`,
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
      ...rows
        .filter((r) => r.config.section === "throughput")
        .map(
          (r) =>
            `| ${systemName(r.config)} | ${r.config.store} | ${r.config.processes} | ${batchText(r.config)} | ${r.config.messages ?? settings.messages} | ${fmt(r.throughput)} | ${cpuCells(r)} | ${(wassalBest(r.config.store, r.config.processes) / r.throughput.median).toFixed(2)} | ${(wassalBest(r.config.store, r.config.processes, WIDE_BATCH) / r.throughput.median).toFixed(2)} | ${(wassalBest(r.config.store, r.config.processes, BATCH, true) / r.throughput.median).toFixed(2)} | ${(wassalBest(r.config.store, r.config.processes, WIDE_BATCH, true) / r.throughput.median).toFixed(2)} | ${r.peakRssMb} |`,
        ),
    ];
    lines.push(...table);
    process.stdout.write(`\n${table.join("\n")}\n`);
    // SQLite has one writer per file: a message's share of it bounds what any number of processes can do.
    const lockRows = rows.filter((r) => r.config.section === "throughput" && r.config.system === "wassal" && r.cpuPerMessageUs.lockHeld !== null);
    if (lockRows.length > 0) {
      const lockTable = [
        "| system | store | processes | batch | messages/s median | write lock held µs/msg (all processes): upper bound | of which in COMMIT | lower bound (held before COMMIT) | lock held, share of the run: upper – lower | rate the lock allows (1 s ÷ upper) – (1 s ÷ lower) | of the upper bound: holder on a CPU (process) | holder waiting for a core | the rest (disk, …) | waited for the lock µs/msg (all processes) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ...lockRows.map((r) => {
          const c = r.cpuPerMessageUs;
          const held = c.lockHeld?.median ?? 0;
          const commit = c.lockCommit?.median ?? 0;
          const before = c.lockBeforeCommit?.median ?? 0;
          const allows = (us: number) => (us > 0 ? Math.round(1e6 / us) : "–");
          const onCpu = c.lockOnCpu?.median;
          const runnable = c.lockRunnable?.median;
          const split =
            onCpu === undefined || runnable === undefined
              ? "– | – | –"
              : `${onCpu.toFixed(1)} | ${runnable.toFixed(1)} | ${(held - onCpu - runnable).toFixed(1)}`;
          return `| ${systemName(r.config)} | ${r.config.store} | ${r.config.processes} | ${batchText(r.config)} | ${Math.round(r.throughput.median)} | ${held.toFixed(1)} | ${commit.toFixed(1)} | ${before.toFixed(1)} | ${Math.round((c.lockBusy?.median ?? 0) * 100)} – ${Math.round((c.lockBusyBeforeCommit?.median ?? 0) * 100)} % | ${allows(held)} – ${allows(before)} | ${split} | ${Math.round(c.lockWaited?.median ?? 0)} |`;
        }),
      ];
      lines.push(
        "",
        "SQLite's one writer: how long Wassal's processes held the file's write lock, medians. The upper bound is timed from BEGIN IMMEDIATE's return to COMMIT's, and COMMIT returns after the lock is released and any checkpoint it set off has run (the processes' shares can add up to more than the run); the lower bound leaves COMMIT out, though COMMIT writes the transaction under the lock. The upper bound is then split (WriteLock.measureHolding): the holding process's CPU time (every thread, so it can exceed the wall time), its thread's time ready to run but waiting for a core (Linux's run_delay), and the rest (waiting on the disk, or for nothing the scheduler counts; negative when the process's other threads ran). Taking these readings adds about 3 µs per transaction, about half of it inside the held time:",
        "",
        ...lockTable,
      );
      process.stdout.write(`\n${lockTable.join("\n")}\n`);
    }
  }
  if (run("keys")) {
    const noKeys = (r: (typeof rows)[number]) =>
      rows.find(
        (o) => o.config.section === "keys" && o.config.keys === undefined && o.config.store === r.config.store && o.config.processes === r.config.processes,
      )?.throughput.median ?? 0;
    const table = [
      `| store | processes | ordering keys | messages | messages/s median (min–max) | ${CPU_HEADER} | ÷ no keys | peak RSS MB |`,
      "|---|---|---|---|---|---|---|---|---|---|",
      ...rows
        .filter((r) => r.config.section === "keys")
        .map(
          (r) =>
            `| ${r.config.store} | ${r.config.processes} | ${r.config.keys ?? "none"} | ${r.config.messages ?? settings.messages} | ${fmt(r.throughput)} | ${cpuCells(r)} | ${(r.throughput.median / noKeys(r)).toFixed(2)} | ${r.peakRssMb} |`,
        ),
    ];
    lines.push(
      ...(lines.length > 0 ? [""] : []),
      `Ordering keys (Wassal batch ${BATCH}, no-op handler; the messages spread round-robin over the keys):`,
      "",
      ...table,
    );
    process.stdout.write(`\n${table.join("\n")}\n`);
  }
  const paymentRows = rows.filter((r) => r.config.payments);
  if (run("payments")) {
    const table = [
      `| system | store | processes | batch | messages | messages/s median (min–max) | ${CPU_HEADER} | this ÷ no-op Wassal batch ${BATCH} on as many messages (no-op msg/s) | CPU µs/msg, workers + server: this (no-op) | peak RSS MB |`,
      "|---|---|---|---|---|---|---|---|---|---|---|---|",
      ...paymentRows.map((r) => {
        const reference = paymentsReference(r);
        const noop = reference?.throughput.median ?? 0;
        return `| ${systemName(r.config)} | ${r.config.store} | ${r.config.processes} | ${batchText(r.config)} | ${r.config.messages ?? settings.messages} | ${fmt(r.throughput)} | ${cpuCells(r)} | ${(r.throughput.median / noop).toFixed(2)} (${Math.round(noop)}) | ${totalCpu(r)} (${totalCpu(reference)}) | ${r.peakRssMb} |`;
      }),
    ];
    lines.push(
      ...(lines.length > 0 ? [""] : []),
      "Payments reconciliation handler (provider at zero latency, Paid/Failed written in the completion transaction), every run verified:",
      "",
      ...table,
    );
    process.stdout.write(`\n${table.join("\n")}\n`);
  }
  // What each PostgreSQL row wrote: work, not time, so the same on a busy machine as on a quiet one.
  const walRows = rows.filter((r) => isPostgresStore(r.config.store) && r.cpuPerMessageUs.walRecords !== null);
  if (walRows.length > 0) {
    const median = (s: Spread | null, digits: number) => (s === null ? "–" : s.median.toFixed(digits));
    const table = [
      "| system | section | processes | batch | WAL records/msg | full-page images/msg | WAL bytes/msg | PostgreSQL server CPU µs/msg, user + sys |",
      "|---|---|---|---|---|---|---|---|",
      ...walRows.map((r) => {
        const c = r.cpuPerMessageUs;
        return `| ${systemName(r.config)} | ${r.config.section === "keys" ? `keys (${r.config.keys ?? "none"})` : r.config.section} | ${r.config.processes} | ${batchText(r.config)} | ${median(c.walRecords, 2)} | ${median(c.walFpi, 3)} | ${median(c.walBytes, 0)} | ${pair(c.serverUser, c.serverSystem)} |`;
      }),
    ];
    lines.push(
      ...(lines.length > 0 ? [""] : []),
      "PostgreSQL's write-ahead log per message (the cluster's pg_stat_wal over each run, medians): the rows and index entries each system writes",
      "",
      ...table,
    );
    process.stdout.write(`\n${table.join("\n")}\n`);
  }

  // Enqueue: one message per transaction against 100 per transaction (100 enqueue calls, or one
  // enqueueMany), interleaved, on a fresh store each run.
  const enqueueVariants = [
    { perTransaction: 1, many: false, messages: settings.singleEnqueues },
    { perTransaction: ENQUEUE_BATCH, many: false, messages: settings.messages },
    { perTransaction: ENQUEUE_BATCH, many: true, messages: settings.messages },
  ];
  const enqueueCall = (v: { perTransaction: number; many: boolean }) =>
    v.many ? "enqueueMany" : v.perTransaction === 1 ? "enqueue" : `enqueue × ${v.perTransaction}`;
  const enqueueSamples = new Map<string, number[]>();
  for (let rep = 1; rep <= (run("enqueue") ? settings.reps : 0); rep += 1) {
    for (const store of storesOf("enqueue")) {
      for (const variant of enqueueVariants) {
        const prepared = await prepareEmpty(store, settings);
        try {
          const rate = await enqueueRate(prepared.db, {
            ...(prepared.schema !== "-" ? { schema: prepared.schema } : {}),
            synchronous: store === "sqlite-NORMAL" ? "NORMAL" : "FULL",
            ...variant,
          });
          const key = `${store} ${enqueueCall(variant)}`;
          enqueueSamples.set(key, [...(enqueueSamples.get(key) ?? []), rate]);
          process.stderr.write(
            `rep ${rep}/${settings.reps}  enqueue ${store.padEnd(13)} ${String(variant.perTransaction).padStart(3)} per transaction (${enqueueCall(variant)})  ${Math.round(rate)} msg/s\n`,
          );
        } finally {
          await prepared.cleanup();
        }
      }
    }
  }
  const enqueue: Record<string, { perTransaction: number; many: boolean; messages: number; rate: Spread }[]> = {};
  const enqueueRows: string[] = [
    "| store | messages per transaction | call | messages | messages/s median (min–max) | ÷ 1 per transaction |",
    "|---|---|---|---|---|---|",
  ];
  for (const store of run("enqueue") ? storesOf("enqueue") : []) {
    enqueue[store] = enqueueVariants.map((v) => ({ ...v, rate: spread(enqueueSamples.get(`${store} ${enqueueCall(v)}`) ?? []) }));
    const single = enqueue[store]?.[0]?.rate.median ?? 0;
    for (const v of enqueue[store] ?? [])
      enqueueRows.push(`| ${store} | ${v.perTransaction} | ${enqueueCall(v)} | ${v.messages} | ${fmt(v.rate)} | ${(v.rate.median / single).toFixed(2)} |`);
  }
  if (run("enqueue")) {
    lines.push(...(lines.length > 0 ? [""] : []), "Enqueue (store.transaction + store.enqueue, or store.enqueueMany):", "", ...enqueueRows);
    process.stdout.write(`\n${enqueueRows.join("\n")}\n`);
  }

  if (run("latency")) {
    const heading = `Enqueue → handler start, wake-up on, the worker polling every ${settings.latencyPollMs} ms (its wake-up: PostgreSQL LISTEN/NOTIFY, also across processes; SQLite a watch on the commit, also across processes; MariaDB none across processes, so its "other process" row is the poll's):`;
    lines.push(...(lines.length > 0 ? [""] : []), heading, "", ...latencyRows);
    process.stdout.write(`\n${heading}\n\n${latencyRows.join("\n")}\n`);
  }
  // Scale: claim latency with little and with much processed history (FULL durability is not the
  // point here, so SQLite runs NORMAL).
  const big = options.quick ? 100_000 : 1_000_000;
  const scaleRows: string[] = [
    "| store | ordering keys | processed rows | claim median ms | min | max | ratio to 10,000 without keys |",
    "|---|---|---|---|---|---|---|",
  ];
  const scale: Record<string, unknown> = {};
  // Each store: 10,000 and `big` processed rows, without keys and with (history rows each with a
  // key of their own, the claimed messages over 100 keys), all four measured in interleaved rounds.
  const variants = [
    { history: 10_000, keys: false },
    { history: big, keys: false },
    { history: 10_000, keys: true },
    { history: big, keys: true },
  ];
  for (const store of run("scale") ? storesOf("scale").filter((s) => s !== "sqlite-FULL") : []) {
    const prepared = await Promise.all(variants.map(() => prepareEmpty(store, settings)));
    let results: Spread[];
    try {
      results = await claimLatencies(
        prepared.map((p, i) => ({ db: p.db, schema: p.schema !== "-" ? p.schema : undefined, ...(variants[i] as { history: number; keys: boolean }) })),
        100,
        5,
      );
    } finally {
      for (const p of prepared) await p.cleanup();
    }
    scale[store] = variants.map((v, i) => ({ ...v, latency: results[i] }));
    const base = results[0]?.median ?? 1;
    variants.forEach((v, i) => {
      const r = results[i];
      if (r)
        scaleRows.push(
          `| ${store} | ${v.keys ? "yes" : "none"} | ${v.history} | ${r.median.toFixed(3)} | ${r.min.toFixed(3)} | ${r.max.toFixed(3)} | ${(r.median / base).toFixed(2)} |`,
        );
    });
    process.stderr.write(`scale ${store}: ${results.map((r) => r.median.toFixed(3)).join(" ms, ")} ms\n`);
  }
  if (run("scale")) {
    lines.push(...(lines.length > 0 ? [""] : []), "Claim latency (claim of 1, then complete) as processed history grows:", "", ...scaleRows);
    process.stdout.write(`\n${scaleRows.join("\n")}\n`);
  }

  // Statements: the server CPU of Wassal's claim and completion against the equal-work loop's, on
  // one connection (statements.ts); needs the server's processes, so PostgreSQL on this machine.
  let statements: unknown = null;
  if (run("statements")) {
    if (!settings.stores.includes("postgres")) {
      process.stderr.write("bench: the statements section measures PostgreSQL, which --stores leaves out; leaving it out\n");
    } else if (postmaster === null || backendCpuUs(postmaster) === null) {
      process.stderr.write(
        "bench: PostgreSQL does not run on this machine (or not in this PID namespace, or /proc has no schedstat); leaving out the statements section\n",
      );
    } else {
      const costs = await statementCosts(settings.reps, settings.messages, async () => {
        const prepared = await prepare("postgres", settings);
        await analyze(settings.postgresUrl);
        return prepared;
      });
      statements = costs;
      const range = (s: Spread) => `${s.median.toFixed(1)} (${s.min.toFixed(1)}–${s.max.toFixed(1)})`;
      const table = [
        `| PostgreSQL, batch 100, one connection (${settings.messages} messages, median (min–max) of ${settings.reps}) | claim µs/msg | completion µs/msg | both (medians) | client wall µs/msg |`,
        "|---|---|---|---|---|",
        ...costs.map(
          (c) =>
            `| ${c.subject} | ${range(c.claimUs)} | ${range(c.completeUs)} | ${(c.claimUs.median + c.completeUs.median).toFixed(1)} | ${range(c.wallUs)} |`,
        ),
      ];
      lines.push(...(lines.length > 0 ? [""] : []), "Server (backend) CPU of the claim and the completion alone:", "", ...table);
      process.stdout.write(`\n${table.join("\n")}\n`);
    }
  }

  // The relay: outbox → broker, next to the naive relay and a bare publish loop, per broker.
  let relay: unknown = null;
  if (run("relay")) {
    const brokers: RelayBroker[] = [];
    for (const [broker, port] of [
      ["nats", 4222],
      ["rabbitmq", 5672],
    ] as const) {
      if (await tcpReachable(port)) brokers.push(broker);
      else process.stderr.write(`bench: ${broker} is unreachable on 127.0.0.1:${port}; leaving it out of the relay section\n`);
    }
    const relayStores = storesOf("relay").filter((s) => s !== "sqlite-FULL");
    if (relayStores.length === 0) process.stderr.write("bench: no store is left for the relay section; leaving it out\n");
    else {
      for (const store of relayStores) {
        if (postmasters.has(store) && postmasters.get(store) === null)
          process.stderr.write(`bench: the ${store} server does not run on this machine (or not in this PID namespace); its CPU is not measured\n`);
      }
      const result = await relayBench({
        stores: relayStores,
        brokers: RELAY_BROKERS.filter((b) => brokers.includes(b)),
        messages: settings.messages,
        reps: settings.reps,
        latencySeconds: options.quick ? 2 : 10,
        keys: settings.relayKeys,
        history: settings.relayHistory,
        prepare: async (store) => ({ ...(await prepareEmpty(store, settings)), synchronous: store === "sqlite-NORMAL" ? "NORMAL" : "FULL" }),
        postmaster: (store) => postmasters.get(store) ?? null,
      });
      relay = result.data;
      const servers = [
        ...(relayStores.includes("postgres") ? [`postgres (the shared server, ${settings.postgresUrl}): ${JSON.stringify(settings.postgresServer)}`] : []),
        ...(settings.privatePostgres && relayStores.includes(PRIVATE_STORE)
          ? [
              `${PRIVATE_STORE} (a private cluster the bench started for this run and removed at its end: PostgreSQL's defaults and ${JSON.stringify(PRIVATE_SETTINGS)}): ${JSON.stringify(settings.privatePostgres.settings)}`,
            ]
          : []),
      ];
      const heading = [
        `Relay, outbox → broker: ${settings.messages} messages per run (the naive relay at most 2,000), median (min–max) of ${settings.reps} repetitions, interleaved. 256 in flight; the keyed rows spread their messages round-robin over ${settings.relayKeys} ordering keys (--relay-keys)${settings.relayHistory > 0 ? `; the history rows have ${settings.relayHistory.toLocaleString("en")} processed messages in the table first (--relay-history; preloaded untimed through enqueueMany, claim and completeMany, over ${HISTORY_KEYS.toLocaleString("en")} keys), as is and, on PostgreSQL, after ANALYZE of the table` : ""}; the naive relay awaits each acknowledgement; the bare loop publishes with no database. CPU µs per message over the timed part, medians, per component: the relay (this process; SQLite runs in it), the broker's processes, the PostgreSQL server's processes, the whole machine, and the machine minus those.`,
        ...servers.map((line) => `PostgreSQL ${line}`),
      ];
      lines.push(...(lines.length > 0 ? [""] : []), ...heading, "", ...result.table);
      process.stdout.write(`\n${heading.join("\n")}\n\n${result.table.join("\n")}\n`);
      if (result.historyTable.length > 0) {
        const note = `The keyed relay (${settings.relayKeys} keys) with ${settings.relayHistory.toLocaleString("en")} processed messages in the table, against the same relay on a fresh table (it should stay flat as the table grows):`;
        lines.push("", note, "", ...result.historyTable);
        process.stdout.write(`\n${note}\n\n${result.historyTable.join("\n")}\n`);
      }
      lines.push("", "Relay latency, enqueue → broker acknowledgement, relay running (wake-up on):", "", ...result.latencyTable);
      process.stdout.write(`\n${result.latencyTable.join("\n")}\n`);
    }
  }

  // WAL (wal.ts): the polling relay against the WAL relay, to NATS, on a private server with wal_level = logical.
  let wal: unknown = null;
  if (run("wal")) {
    if (!options.stores.some(isPostgresStore)) process.stderr.write("bench: the wal section measures PostgreSQL, which --stores leaves out; leaving it out\n");
    else if (!(await tcpReachable(4222))) process.stderr.write("bench: nats is unreachable on 127.0.0.1:4222; leaving out the wal section\n");
    else {
      const result = await walBench({
        messages: settings.messages,
        reps: settings.reps,
        latencySeconds: options.quick ? 2 : 10,
        bin: postgresBinaries(options.postgresBin, postmaster),
        describe: postgresServer,
      });
      wal = result.data;
      const latencyHeading = "WAL relay against the polling relay: enqueue → broker acknowledgement, relay running:";
      lines.push(...(lines.length > 0 ? [""] : []), ...result.heading, "", ...result.table, "", latencyHeading, "", ...result.latencyTable);
      process.stdout.write(`\n${result.heading.join("\n")}\n\n${result.table.join("\n")}\n\n${latencyHeading}\n\n${result.latencyTable.join("\n")}\n`);
    }
  }

  // Shards (shards.ts): 2 shards, a worker process per shard or one for all, and 1 shard with 1 process, on private servers.
  let shards: unknown = null;
  if (run("shards")) {
    if (!options.stores.some(isPostgresStore))
      process.stderr.write("bench: the shards section measures PostgreSQL, which --stores leaves out; leaving it out\n");
    else {
      const result = await shardsBench({
        messages: settings.messages,
        reps: settings.reps,
        bin: postgresBinaries(options.postgresBin, postmaster),
        describe: postgresServer,
        race: (argsOf, count, postmasters) => race("worker-child.js", argsOf, count, null, null, postmasters),
      });
      shards = result.data;
      lines.push(...(lines.length > 0 ? [""] : []), ...result.heading, "", ...result.table);
      process.stdout.write(`\n${result.heading.join("\n")}\n\n${result.table.join("\n")}\n`);
    }
  }

  // Dashboard (dashboard.ts): the built CLI's dashboard over a 10 MB and a 1 MB message, per store
  // (SQLite in NORMAL: its sync mode plays no part in reads), against issue 37's targets.
  const dashboard: Record<string, DashboardFigures> = {};
  const dashboardTable = ["| store | measure | figure | target | |", "|---|---|---|---|---|"];
  for (const store of run("dashboard") ? storesOf("dashboard").filter((s) => s !== "sqlite-FULL") : []) {
    const prepared = await prepareEmpty(store, settings);
    try {
      const figures = await dashboardBench({
        cli: join(HERE, "..", "..", "dist", "cli", "main.js"),
        db: prepared.db,
        schema: prepared.schema !== "-" ? prepared.schema : undefined,
        requests: options.quick ? 100 : 300,
        holdMs: 5_000,
      });
      dashboard[store] = figures;
      dashboardTable.push(...dashboardRows(store, figures));
      process.stderr.write(`dashboard ${store}: ${JSON.stringify(figures)}\n`);
    } finally {
      await prepared.cleanup();
    }
  }
  if (Object.keys(dashboard).length > 0) {
    const heading =
      "Dashboard over a 10 MB message (wassal dashboard, --poll-ms 1000, its own process; GET / sequential; memory is the server's VmRSS; 20 and 100 streams are /events?message=<id> clients, the message claimed and released every second):";
    lines.push(...(lines.length > 0 ? [""] : []), heading, "", ...dashboardTable);
    process.stdout.write(`\n${heading}\n\n${dashboardTable.join("\n")}\n`);
  }

  // Schedules (schedules.ts): cron ticks fired by 4 competing schedulers, per store, interleaved.
  const schedules: Record<string, ScheduleFigures[]> = {};
  for (let rep = 1; rep <= (run("schedules") ? settings.reps : 0); rep += 1) {
    for (const store of storesOf("schedules")) {
      const prepared = await prepareEmpty(store, settings);
      try {
        const figures = await scheduleBench(prepared.db, {
          ...(prepared.schema !== "-" ? { schema: prepared.schema } : {}),
          synchronous: store === "sqlite-NORMAL" ? "NORMAL" : "FULL",
          schedulers: 4,
          schedules: options.quick ? 20 : 100,
          minutes: options.quick ? 10 : 60,
        });
        schedules[store] = [...(schedules[store] ?? []), figures];
        process.stderr.write(
          `rep ${rep}/${settings.reps}  schedules ${store.padEnd(13)} ${Math.round(figures.ticksPerSecond)} ticks/s, ${Math.round(figures.cpuUsPerTick)} µs CPU per tick, split ${figures.perScheduler.join("/")}, idle call ${Math.round(figures.idleCallUs)} µs\n`,
        );
      } finally {
        await prepared.cleanup();
      }
    }
  }
  if (Object.keys(schedules).length > 0) {
    const table = [
      "| store | schedules | ticks | ticks/s median (min–max) | CPU µs per tick (this process) | ticks per scheduler (last rep) | idle call µs (median) |",
      "|---|---|---|---|---|---|---|",
      ...Object.entries(schedules).map(([store, runs]) => {
        const rate = spread(runs.map((r) => r.ticksPerSecond));
        const last = runs.at(-1) as ScheduleFigures;
        return `| ${store} | ${last.schedules} | ${last.ticks} | ${Math.round(rate.median)} (${Math.round(rate.min)}–${Math.round(rate.max)}) | ${Math.round(spread(runs.map((r) => r.cpuUsPerTick)).median)} | ${last.perScheduler.join(" / ")} | ${Math.round(spread(runs.map((r) => r.idleCallUs)).median)} |`;
      }),
    ];
    const heading =
      "Cron ticks under 4 competing schedulers (every-minute schedules, an hour of ticks due at once, each scheduler a store with its own connections calling fireSchedules until none is due; every tick checked fired once; the idle call: schedules exist, none due):";
    lines.push(...(lines.length > 0 ? [""] : []), heading, "", ...table);
    process.stdout.write(`\n${heading}\n\n${table.join("\n")}\n`);
  }

  // Priorities (priorities.ts): the claim with priorities unused and in use, alternated, per store.
  const priorities: Record<string, PriorityFigures[]> = {};
  for (let rep = 1; rep <= (run("priorities") ? settings.reps : 0); rep += 1) {
    const mixes: readonly PriorityMix[] = rep % 2 === 1 ? ["unused", "in use"] : ["in use", "unused"];
    for (const store of storesOf("priorities")) {
      for (const mix of mixes) {
        const prepared = await prepareEmpty(store, settings);
        try {
          const figures = await priorityBench(prepared.db, {
            ...(prepared.schema !== "-" ? { schema: prepared.schema } : {}),
            synchronous: store === "sqlite-NORMAL" ? "NORMAL" : "FULL",
            mix,
            messages: options.quick ? 2_000 : 20_000,
            batch: 100,
          });
          priorities[`${store}|${mix}`] = [...(priorities[`${store}|${mix}`] ?? []), figures];
          process.stderr.write(
            `rep ${rep}/${settings.reps}  priorities ${store.padEnd(13)} ${mix.padEnd(6)} ${Math.round(figures.perSecond)} msg/s, ${figures.cpuUsPerMessage.toFixed(1)} µs CPU per message${figures.serverUsPerMessage === null ? "" : `, server ${figures.serverUsPerMessage.toFixed(1)} µs`}\n`,
          );
        } finally {
          await prepared.cleanup();
        }
      }
    }
  }
  if (Object.keys(priorities).length > 0) {
    const fixed = (values: readonly (number | null)[]) =>
      values.every((v): v is number => v !== null) && values.length > 0 ? spread(values).median.toFixed(1) : "–";
    const table = [
      "| store | priorities | messages | msg/s median (min–max) | CPU µs per message (this process) | server CPU µs per message |",
      "|---|---|---|---|---|---|",
      ...Object.entries(priorities).map(([key, runs]) => {
        const [store, mix] = key.split("|") as [string, string];
        const rate = spread(runs.map((r) => r.perSecond));
        return `| ${store} | ${mix} | ${(runs[0] as PriorityFigures).messages} | ${Math.round(rate.median)} (${Math.round(rate.min)}–${Math.round(rate.max)}) | ${spread(runs.map((r) => r.cpuUsPerMessage)).median.toFixed(1)} | ${fixed(runs.map((r) => r.serverUsPerMessage))} |`;
      }),
    ];
    const heading =
      "The claim with priorities unused and in use (one claimer in the bench's process, claims of 100 completed by completeMany, due times spread over ten minutes; in use: a quarter of the messages with a head start of 1 to 600 s; the claim order checked; the two mixes alternated):";
    lines.push(...(lines.length > 0 ? [""] : []), heading, "", ...table);
    process.stdout.write(`\n${heading}\n\n${table.join("\n")}\n`);
  }

  // Limits (limits.ts): rate-limited throughput against its limit, per store.
  const limits: Record<string, LimitFigures[]> = {};
  const LIMIT_RATE = 2_000;
  for (let rep = 1; rep <= (run("limits") ? settings.reps : 0); rep += 1) {
    for (const store of storesOf("limits")) {
      const prepared = await prepareEmpty(store, settings);
      try {
        const figures = await limitBench(prepared.db, {
          ...(prepared.schema !== "-" ? { schema: prepared.schema } : {}),
          synchronous: store === "sqlite-NORMAL" ? "NORMAL" : "FULL",
          rate: LIMIT_RATE,
          messages: options.quick ? 2 * LIMIT_RATE : 5 * LIMIT_RATE,
          workers: 2,
        });
        limits[store] = [...(limits[store] ?? []), figures];
        process.stderr.write(
          `rep ${rep}/${settings.reps}  limits ${store.padEnd(13)} paced ${Math.round(figures.pacedPerSecond)} claims/s of ${figures.rate} (${(100 * figures.ofLimit).toFixed(1)} %), busiest second ${figures.busiestSecond}, ${figures.cpuUsPerMessage.toFixed(1)} µs CPU per message${figures.serverUsPerMessage === null ? "" : `, server ${figures.serverUsPerMessage.toFixed(1)} µs`}\n`,
        );
      } finally {
        await prepared.cleanup();
      }
    }
  }
  if (Object.keys(limits).length > 0) {
    const fixed = (values: readonly (number | null)[]) =>
      values.every((v): v is number => v !== null) && values.length > 0 ? spread(values).median.toFixed(1) : "–";
    const table = [
      "| store | limit (claims per second) | messages | paced claims/s median (min–max) | of the limit | busiest second (max) | CPU µs per message (this process) | server CPU µs per message |",
      "|---|---|---|---|---|---|---|---|",
      ...Object.entries(limits).map(([store, runs]) => {
        const paced = spread(runs.map((r) => r.pacedPerSecond));
        const first = runs[0] as LimitFigures;
        return `| ${store} | ${first.rate} | ${first.messages} | ${Math.round(paced.median)} (${Math.round(paced.min)}–${Math.round(paced.max)}) | ${(100 * spread(runs.map((r) => r.ofLimit)).median).toFixed(1)} % | ${Math.max(...runs.map((r) => r.busiestSecond))} | ${spread(runs.map((r) => r.cpuUsPerMessage)).median.toFixed(1)} | ${fixed(runs.map((r) => r.serverUsPerMessage))} |`;
      }),
    ];
    const heading =
      "Rate-limited throughput against its limit (one type limited to 2,000 claims in any second; 2 Workers in the bench's process, each with its own store, 100 slots, a 50 ms poll, a no-op handler; claim times from the stores' claim-won events; paced: the claims after the first second's burst per second they took):";
    lines.push(...(lines.length > 0 ? [""] : []), heading, "", ...table);
    process.stdout.write(`\n${heading}\n\n${table.join("\n")}\n`);
  }

  privatePostgres?.stop();
  const stamp = new Date().toISOString().replaceAll(":", "-").slice(0, 19);
  const dir = join(HERE, "..", "results");
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    join(dir, `${stamp}.json`),
    JSON.stringify({ settings, rows, enqueue, latency, scale, statements, relay, wal, shards, dashboard, schedules, priorities, limits }, null, 2),
  );
  writeFileSync(join(dir, `${stamp}.md`), `# Benchmark ${stamp}\n\nSettings: ${JSON.stringify(settings)}\n\n${lines.join("\n")}\n`);
  process.stdout.write(`\nwritten: bench/results/${stamp}.json and .md\n`);
}

await main();
