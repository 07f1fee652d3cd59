// The relay's section of `npm run bench`: messages/s and CPU per message from the outbox to the
// broker, per store and per broker (NATS JetStream, RabbitMQ), for these systems in one
// interleaved run:
// - "relay, no keys": Wassal's Relay as shipped (256 publishes in flight, acknowledged ones
//   group-committed), the messages without ordering keys;
// - "relay, 30 keys": the same relay, the same N messages spread round-robin over 30 ordering keys
//   (--relay-keys), set at enqueue: at most one message per key in flight, so at most 30;
// - "relay, 30 keys, 100,000 processed rows, as is" / "…, after ANALYZE": the keyed relay with
//   processed history already in the table (--relay-history; history.ts preloads it through the
//   public API, untimed, spread over 10,000 keys k0 … k9999, so the timed keys have processed rows
//   of their own), once as the preload left the table (the shared server, autovacuum off, has no
//   statistics of it; on postgres-autovacuum autovacuum may have analyzed it, which the run
//   records) and, on PostgreSQL, once after an ANALYZE of the table once all messages are in. Its
//   rate is compared with the keyed relay's on a fresh table: it should stay flat as the table grows;
// - "naive relay": the relay awaiting each acknowledgement before the next publish (maxInFlight 1,
//   no keys), the usual hand-written relay;
// - "bare publish loop": the same number of messages published straight to the broker with 256
//   in flight, no database at all: the broker's own limit here.
// Each run seeds N messages (untimed), flushes the disk (sync), starts the relay and stops the
// clock when the last one is completed. CPU per message over the timed part, per component:
// - relay: this process's (user + system): the relay and its clients (and SQLite, which runs in it);
// - broker: the broker's processes, found by name in /proc (nats-server; RabbitMQ's beam.smp) and,
//   of those, the one listening on the broker's port (another nats-server, a test's own, is not
//   counted), utime + stime before and after (every client of that broker counts, as on the server);
// - PostgreSQL: every process of the server the run uses (server-cpu.ts: backends, background
//   processes, autovacuum workers, and children that ended in between); the whole server, so on
//   the shared one another client's work in the same window counts too (the private cluster of
//   postgres-autovacuum has no other client);
// - whole machine (/proc/stat), and the rest: the machine minus the three (kernel interrupts, other
//   processes). The rate the whole machine's cost allows if every core were busy: cores ÷ machine
//   CPU per message.
//
// Then enqueue → broker acknowledgement latency (p50/p99) with the relay running, at a steady rate.

import { execSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { availableParallelism } from "node:os";
import amqp from "amqplib";
import pg from "pg";
import { connect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { openOutbox } from "wassal/lab";
import type { OutboxStore } from "wassal";
import { NatsPublisher, type Publisher, RabbitMqPublisher, Relay, type RelayEvent } from "wassal/relay";
import { preloadHistory } from "./history.js";
import { machineBusyUs } from "./machine-cpu.js";
import { listeningOn, processesNamed, processTicks, serverCpu, ticksBetweenUs, cpuUsPer } from "./server-cpu.js";
import { percentile, type Spread, spread } from "./stats.js";

export const RELAY_BROKERS = ["nats", "rabbitmq"] as const;
export type RelayBroker = (typeof RELAY_BROKERS)[number];
/** The broker's processes, by their name in /proc (comm); of those, the one listening on the broker's port (server-cpu.ts listeningOn). */
const BROKER_PROCESS: Record<RelayBroker, string> = { nats: "nats-server", rabbitmq: "beam.smp" };
type RelayKind = "relay" | "naive relay" | "bare publish loop";

const NATS_URL = process.env.TEST_NATS_URL ?? "nats://127.0.0.1:4222";
const AMQP_URL = process.env.TEST_AMQP_URL ?? "amqp://guest:guest@127.0.0.1:5672";
const BROKER_PORT: Record<RelayBroker, number> = {
  nats: Number(new URL(NATS_URL).port || 4222),
  rabbitmq: Number(new URL(AMQP_URL).port || 5672),
};
const IN_FLIGHT = 256;
/** The naive relay waits for each acknowledgement: its rate is steady long before N. */
const NAIVE_MESSAGES = 2_000;
/** The history rows' processed messages spread over this many keys, k0 … (see history.ts). */
export const HISTORY_KEYS = 10_000;

/** One row of the relay table. */
interface RelayConfig {
  /** "-" for the bare loop. */
  readonly store: string;
  readonly broker: RelayBroker;
  readonly kind: RelayKind;
  /** The relay's messages spread round-robin over this many ordering keys; absent: no keys. */
  readonly keys?: number;
  /** Processed messages already in the table, and whether the table is analyzed before the timed part. */
  readonly history?: { readonly rows: number; readonly analyzed: boolean };
  readonly messages: number;
}

const systemName = (c: Pick<RelayConfig, "kind" | "keys" | "history">) =>
  c.kind !== "relay"
    ? c.kind
    : `relay, ${c.keys === undefined ? "no keys" : `${c.keys} keys`}${c.history ? `, ${c.history.rows.toLocaleString("en")} processed rows, ${c.history.analyzed ? "after ANALYZE" : "as is"}` : ""}`;
const isPostgres = (store: string) => store.startsWith("postgres");

export interface PreparedStore {
  readonly db: string;
  readonly schema: string;
  readonly synchronous: "FULL" | "NORMAL";
  cleanup(): Promise<void>;
}

export interface RelayBenchOptions {
  readonly stores: readonly string[];
  readonly brokers: readonly RelayBroker[];
  readonly messages: number;
  readonly reps: number;
  readonly latencySeconds: number;
  /** Ordering keys of the keyed rows. */
  readonly keys: number;
  /** Processed messages in the table of the history rows; 0: no history rows. */
  readonly history: number;
  prepare(store: string): Promise<PreparedStore>;
  /** The postmaster of a PostgreSQL store's server when it runs on this machine (its CPU is measured), else null. */
  postmaster(store: string): number | null;
}

/** A place on the broker for one run: where to route, and how to remove it. */
export interface Target {
  readonly destination: string;
  count(): Promise<number>;
  remove(): Promise<void>;
}

/** A JetStream stream of the run's own (BENCH_<random>), deleted by remove(). */
export async function natsTarget(): Promise<Target> {
  const nc = await connect({ servers: NATS_URL });
  const jsm = await jetstreamManager(nc);
  const name = `BENCH_${randomBytes(4).toString("hex")}`;
  await jsm.streams.add({ name, subjects: [`${name}.>`] });
  return {
    destination: `${name}.events`,
    count: async () => (await jsm.streams.info(name)).state.messages,
    remove: async () => {
      await jsm.streams.delete(name);
      await nc.close();
    },
  };
}

async function rabbitTarget(): Promise<Target> {
  const model = await amqp.connect(AMQP_URL);
  const channel = await model.createChannel();
  const name = `bench-${randomBytes(4).toString("hex")}`;
  await channel.assertExchange(name, "fanout", { durable: true });
  await channel.assertQueue(name, { durable: true });
  await channel.bindQueue(name, name, "");
  return {
    destination: `${name}/events`,
    count: async () => (await channel.checkQueue(name)).messageCount,
    remove: async () => {
      await channel.deleteQueue(name);
      await channel.deleteExchange(name);
      await model.close();
    },
  };
}

export async function openPublisher(broker: RelayBroker): Promise<Publisher & { connected(): Promise<void> }> {
  return broker === "nats" ? NatsPublisher.open({ servers: NATS_URL }) : RabbitMqPublisher.open({ url: AMQP_URL });
}

/** Messages/s and CPU µs per message of one timed run, per component (null: not measured; see the top of this file). */
export interface RunFigures {
  readonly rate: number;
  readonly relayUs: number;
  readonly brokerUs: number | null;
  readonly postgresUs: number | null;
  readonly machineUs: number | null;
  /** History rows: how long the preload took, and the table's statistics before and after the timed part (PostgreSQL). */
  readonly historySeconds?: number;
  readonly table?: { readonly before: TableStats | null; readonly after: TableStats | null };
}

export async function timed(messages: number, broker: RelayBroker, postmaster: number | null, work: () => Promise<void>): Promise<RunFigures> {
  const brokerPids = listeningOn(processesNamed(BROKER_PROCESS[broker]), BROKER_PORT[broker]);
  const brokerBefore = processTicks(brokerPids);
  const serverBefore = postmaster === null ? null : serverCpu(postmaster);
  const machine = machineBusyUs();
  const cpu = process.cpuUsage();
  const started = performance.now();
  await work();
  const seconds = (performance.now() - started) / 1000;
  const used = process.cpuUsage(cpu);
  const machineAfter = machineBusyUs();
  const serverAfter = postmaster === null ? null : serverCpu(postmaster);
  const brokerUs = ticksBetweenUs(brokerBefore, processTicks(brokerPids));
  return {
    rate: messages / seconds,
    relayUs: (used.user + used.system) / messages,
    brokerUs: brokerUs === null ? null : brokerUs / messages,
    postgresUs: cpuUsPer(serverBefore, serverAfter, messages),
    machineUs: machine === null || machineAfter === null ? null : (machineAfter - machine) / messages,
  };
}

/** What PostgreSQL knows of a table: the planner's row estimate (-1: never analyzed or vacuumed) and the analyses and vacuums so far. */
interface TableStats {
  readonly reltuples: number;
  readonly analyzeCount: number;
  readonly autoanalyzeCount: number;
  readonly autovacuumCount: number;
}

/** A client statement on the run's own table (the bench is a client here, as raw-sql.ts): ANALYZE, or reading its statistics. */
export async function onTable<T>(db: string, work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: db });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

function tableStats(db: string, schema: string): Promise<TableStats | null> {
  return onTable(db, async (client) => {
    // The cumulative statistics are cached per transaction: a fresh one sees the latest.
    await client.query("SELECT pg_stat_clear_snapshot()");
    const { rows } = await client.query<{ reltuples: number; analyze_count: string; autoanalyze_count: string; autovacuum_count: string }>(
      `SELECT c.reltuples::float8 AS reltuples, s.analyze_count, s.autoanalyze_count, s.autovacuum_count
         FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid WHERE s.schemaname = $1 AND s.relname = 'outbox_messages'`,
      [schema],
    );
    const row = rows[0];
    return row === undefined
      ? null
      : {
          reltuples: row.reltuples,
          analyzeCount: Number(row.analyze_count),
          autoanalyzeCount: Number(row.autoanalyze_count),
          autovacuumCount: Number(row.autovacuum_count),
        };
  });
}

/** The relay's outbox on a prepared store (8 connections). */
function openRelayOutbox(prepared: PreparedStore) {
  return openOutbox(prepared.db, { ...(prepared.schema !== "-" ? { schema: prepared.schema } : {}), synchronous: prepared.synchronous, maxConnections: 8 });
}

/** Enqueues `messages` messages, 100 per transaction, spread round-robin over `keys` ordering keys (k0 …) when given. */
export async function seedMessages(store: OutboxStore<unknown>, messages: number, keys?: number): Promise<void> {
  for (let done = 0; done < messages; done += 100) {
    await store.transaction(async (tx) => {
      for (let n = done; n < Math.min(messages, done + 100); n += 1)
        await store.enqueue(tx, {
          type: "bench.event",
          payload: { order: n, total: 1250, currency: "EUR" },
          ...(keys === undefined ? {} : { key: `k${n % keys}` }),
        });
    });
  }
}

/** Resolves once the store has reported `messages` completions (subscribe before the relay starts). */
export function allCompleted(store: OutboxStore<unknown>, messages: number): Promise<void> {
  let completed = 0;
  return new Promise<void>((resolve) => {
    store.events.subscribe((event) => {
      if (event.type === "completed" && ++completed === messages) resolve();
    });
  });
}

async function runOnce(config: RelayConfig, storeOfBare: string, options: RelayBenchOptions): Promise<RunFigures> {
  const { broker, kind, messages } = config;
  const store = config.store === "-" ? storeOfBare : config.store;
  const target = broker === "nats" ? await natsTarget() : await rabbitTarget();
  const publisher = await openPublisher(broker);
  await publisher.connected();
  try {
    const body = JSON.stringify({ order: 42, total: 1250, currency: "EUR" });
    if (kind === "bare publish loop") {
      execSync("sync");
      return await timed(messages, broker, null, async () => {
        let next = 0;
        const lane = async () => {
          for (let n = next++; n < messages; n = next++) {
            await publisher.publish(
              {
                id: `bare-${n}`,
                messageId: String(n + 1),
                type: "bench.event",
                key: null,
                keySeq: null,
                destination: target.destination,
                headers: {},
                body,
                createdAt: new Date(),
              },
              new AbortController().signal,
            );
          }
        };
        await Promise.all(Array.from({ length: IN_FLIGHT }, lane));
      });
    }
    const prepared = await options.prepare(store);
    const outbox = await openRelayOutbox(prepared);
    try {
      const historySeconds = config.history ? await preloadHistory(outbox.store, { count: config.history.rows, keys: HISTORY_KEYS }) : undefined;
      await seedMessages(outbox.store, messages, config.keys);
      const postgres = prepared.schema !== "-";
      if (config.history?.analyzed && postgres) await onTable(prepared.db, (client) => client.query(`ANALYZE ${prepared.schema}.outbox_messages`));
      const before = config.history && postgres ? await tableStats(prepared.db, prepared.schema) : null;
      const all = allCompleted(outbox.store, messages);
      const relay = new Relay({
        store: outbox.store,
        publisher,
        routes: { default: target.destination },
        maxInFlight: kind === "relay" ? IN_FLIGHT : 1,
        pollIntervalMs: 20,
        wakeOnNewMessages: false,
      });
      execSync("sync"); // what seeding (and the history) wrote is not flushed during the timed part
      const figures = await timed(messages, broker, postgres ? options.postmaster(store) : null, async () => {
        await relay.start();
        await all;
      });
      await relay.stop({ graceMs: 1_000 });
      const after = config.history && postgres ? await tableStats(prepared.db, prepared.schema) : null;
      const stored = await target.count();
      if (stored !== messages) throw new Error(`${systemName(config)} to ${broker} on ${store}: the broker holds ${stored} of ${messages} messages`);
      return { ...figures, ...(historySeconds === undefined ? {} : { historySeconds }), ...(config.history && postgres ? { table: { before, after } } : {}) };
    } finally {
      await outbox.close();
      await prepared.cleanup();
    }
  } finally {
    await publisher.close();
    await target.remove();
  }
}

export interface LatencyFigures {
  readonly messages: number;
  readonly p50: number;
  readonly p99: number;
  readonly max: number;
}

/** Makes the relay of a latency run, reporting each publish to `onEvent`. */
export type RelayOf = (onEvent: (event: RelayEvent) => void) => { start(): Promise<void>; stop(options: { graceMs?: number }): Promise<void> };

/**
 * Enqueue → broker acknowledgement at `rate` per second for `seconds` (one message per
 * transaction), with the relay that `relayOf` makes running on `store`; stops it afterwards.
 */
export async function ackLatency(store: OutboxStore<unknown>, relayOf: RelayOf, rate: number, seconds: number): Promise<LatencyFigures> {
  const enqueuedAt = new Map<string, number>();
  // Kept by id and matched afterwards: on PostgreSQL the relay, woken by the commit's notification,
  // can publish a message before its enqueue call has returned the id.
  const publishedAt = new Map<string, number>();
  const relay = relayOf((event) => {
    if (event.type === "published" && !publishedAt.has(event.messageId)) publishedAt.set(event.messageId, performance.now());
  });
  try {
    await relay.start();
    const total = Math.round(rate * seconds);
    const started = performance.now();
    for (let n = 0; n < total; n += 1) {
      const wait = started + (n / rate) * 1000 - performance.now();
      if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
      const before = performance.now();
      const message = await store.transaction((tx) => store.enqueue(tx, { type: "bench.event", payload: { n } }));
      enqueuedAt.set(message.id, before);
    }
    const deadline = Date.now() + 10_000;
    while ([...enqueuedAt.keys()].some((id) => !publishedAt.has(id)) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
    const samples = [...enqueuedAt].flatMap(([id, at]) => {
      const published = publishedAt.get(id);
      return published === undefined ? [] : [published - at];
    });
    return { messages: samples.length, p50: percentile(samples, 50), p99: percentile(samples, 99), max: Math.max(...samples) };
  } finally {
    await relay.stop({ graceMs: 1_000 });
  }
}

/** Enqueue → broker acknowledgement at `rate` per second, with the relay running. */
async function latency(store: string, broker: RelayBroker, options: RelayBenchOptions, rate: number): Promise<LatencyFigures> {
  const target = broker === "nats" ? await natsTarget() : await rabbitTarget();
  const publisher = await openPublisher(broker);
  await publisher.connected();
  const prepared = await options.prepare(store);
  const outbox = await openRelayOutbox(prepared);
  try {
    return await ackLatency(
      outbox.store,
      (onEvent) => new Relay({ store: outbox.store, publisher, routes: { default: target.destination }, onEvent }),
      rate,
      options.latencySeconds,
    );
  } finally {
    await publisher.close();
    await outbox.close();
    await prepared.cleanup();
    await target.remove();
  }
}

export interface RelayBenchResult {
  readonly table: string[];
  /** The history rows against the keyed relay on a fresh table (empty without history rows). */
  readonly historyTable: string[];
  readonly latencyTable: string[];
  readonly data: unknown;
}

/** The relay table's rows, in the order they run in each repetition. */
function relayConfigs(options: Pick<RelayBenchOptions, "stores" | "brokers" | "messages" | "keys" | "history">): RelayConfig[] {
  const { messages, keys } = options;
  return options.stores.flatMap((store) =>
    options.brokers.flatMap((broker): RelayConfig[] => [
      { store, broker, kind: "relay", messages },
      { store, broker, kind: "relay", keys, messages },
      ...(options.history > 0
        ? (isPostgres(store) ? [false, true] : [false]).map(
            (analyzed): RelayConfig => ({
              store,
              broker,
              kind: "relay",
              keys,
              history: { rows: options.history, analyzed },
              messages,
            }),
          )
        : []),
      { store, broker, kind: "naive relay", messages: Math.min(NAIVE_MESSAGES, messages) },
      ...(store === options.stores[0] ? [{ store: "-", broker, kind: "bare publish loop", messages } as const] : []),
    ]),
  );
}

export async function relayBench(options: RelayBenchOptions): Promise<RelayBenchResult> {
  const configs = relayConfigs(options);
  const storeOfBare = options.stores[0] as string;
  const samples = new Map(configs.map((c) => [c, [] as RunFigures[]]));
  const us = (value: number | null) => (value === null ? "–" : value.toFixed(0));
  for (let rep = 1; rep <= options.reps; rep += 1) {
    for (const config of configs) {
      const figures = await runOnce(config, storeOfBare, options);
      samples.get(config)?.push(figures);
      const history = figures.historySeconds === undefined ? "" : `; history preloaded in ${figures.historySeconds.toFixed(1)} s`;
      const table = figures.table ? `; table: ${JSON.stringify(figures.table)}` : "";
      process.stderr.write(
        `rep ${rep}/${options.reps}  relay ${systemName(config).padEnd(52)} ${config.broker.padEnd(8)} ${config.store.padEnd(19)} ${Math.round(figures.rate)} msg/s; CPU µs/msg: relay ${us(figures.relayUs)}, broker ${us(figures.brokerUs)}, PostgreSQL ${us(figures.postgresUs)}, machine ${us(figures.machineUs)}${history}${table}\n`,
      );
    }
  }
  const fmt = (s: Spread) => `${Math.round(s.median)} (${Math.round(s.min)}–${Math.round(s.max)})`;
  const rows = configs.map((config) => {
    const runs = samples.get(config) ?? [];
    /** The median of a figure over the repetitions; null when a repetition did not measure it. */
    const of = (pick: (f: RunFigures) => number | null | undefined): Spread | null => {
      const values = runs.map(pick);
      return values.length > 0 && values.every((v): v is number => typeof v === "number") ? spread(values) : null;
    };
    const onPostgres = config.store !== "-" && isPostgres(config.store);
    return {
      config,
      name: systemName(config),
      rate: spread(runs.map((f) => f.rate)),
      cpuUsPerMessage: {
        relay: of((f) => f.relayUs),
        broker: of((f) => f.brokerUs),
        postgres: of((f) => f.postgresUs),
        machine: of((f) => f.machineUs),
        // The machine minus the components: the kernel's interrupt time, anything else running.
        rest: of((f) =>
          f.machineUs === null || f.brokerUs === null || (onPostgres && f.postgresUs === null)
            ? null
            : f.machineUs - f.relayUs - f.brokerUs - (f.postgresUs ?? 0),
        ),
      },
      historySeconds: of((f) => f.historySeconds),
      runs,
    };
  });
  const cores = availableParallelism();
  const find = (broker: RelayBroker, store: string, match: (c: RelayConfig) => boolean) =>
    rows.find((r) => r.config.broker === broker && r.config.store === store && match(r.config));
  const median = (s: Spread | null) => (s === null ? "–" : String(Math.round(s.median)));
  const table = [
    `| broker | system | store | messages | messages/s median (min–max) | CPU µs/msg: relay (this process) | CPU µs/msg: broker (${Object.values(BROKER_PROCESS).join(" / ")}) | CPU µs/msg: PostgreSQL server (all its processes) | CPU µs/msg: whole machine | CPU µs/msg: rest of the machine (kernel interrupts, other processes) | the machine's bound, messages/s | relay, no keys ÷ this | this ÷ bare loop |`,
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ...rows.map((r) => {
      const c = r.cpuUsPerMessage;
      const noKeys =
        find(r.config.broker, r.config.store === "-" ? storeOfBare : r.config.store, (o) => o.kind === "relay" && o.keys === undefined)?.rate.median ?? 0;
      const bare = find(r.config.broker, "-", (o) => o.kind === "bare publish loop")?.rate.median ?? 0;
      return `| ${r.config.broker} | ${r.name} | ${r.config.store === "-" ? "(none)" : r.config.store} | ${r.config.messages} | ${fmt(r.rate)} | ${median(c.relay)} | ${median(c.broker)} | ${median(c.postgres)} | ${median(c.machine)} | ${median(c.rest)} | ${c.machine === null ? "–" : Math.round((cores * 1e6) / c.machine.median)} | ${(noKeys / r.rate.median).toFixed(2)} | ${(r.rate.median / bare).toFixed(2)} |`;
    }),
  ];
  const historyRows = rows.filter((r) => r.config.history !== undefined);
  const historyTable =
    historyRows.length === 0
      ? []
      : [
          "| broker | store | table | messages/s median (min–max) | keyed relay on a fresh table, messages/s median | with history ÷ fresh | history preload s, median (min–max) | planner's row estimate at the start (median; none: never analyzed) | runs where autovacuum had analyzed the table before the timed part / did during it |",
          "|---|---|---|---|---|---|---|---|---|",
          ...historyRows.map((r) => {
            const history = r.config.history as NonNullable<RelayConfig["history"]>;
            const fresh =
              find(r.config.broker, r.config.store, (o) => o.kind === "relay" && o.keys === r.config.keys && o.history === undefined)?.rate.median ?? 0;
            const tables = r.runs.map((f) => f.table);
            const estimates = tables.map((t) => t?.before?.reltuples).filter((v): v is number => v !== undefined);
            const estimate = estimates.length === 0 ? "–" : spread(estimates).median < 0 ? "none" : String(Math.round(spread(estimates).median));
            const analyzedBefore = tables.filter((t) => (t?.before?.autoanalyzeCount ?? 0) > 0).length;
            const analyzedDuring = tables.filter((t) => t?.before && t.after && t.after.autoanalyzeCount > t.before.autoanalyzeCount).length;
            const autovacuum = isPostgres(r.config.store) ? `${analyzedBefore} / ${analyzedDuring} of ${r.runs.length}` : "–";
            const s = r.historySeconds;
            return `| ${r.config.broker} | ${r.config.store} | ${history.rows.toLocaleString("en")} processed rows, ${history.analyzed ? "after ANALYZE" : "as is"} | ${fmt(r.rate)} | ${Math.round(fresh)} | ${(r.rate.median / fresh).toFixed(2)} | ${s === null ? "–" : `${s.median.toFixed(1)} (${s.min.toFixed(1)}–${s.max.toFixed(1)})`} | ${estimate} | ${autovacuum} |`;
          }),
        ];
  const latencyTable = ["| broker | store | rate /s | messages | p50 ms | p99 ms | max ms |", "|---|---|---|---|---|---|---|"];
  const latencies: unknown[] = [];
  for (const store of options.stores) {
    for (const broker of options.brokers) {
      const result = await latency(store, broker, options, 200);
      latencies.push({ store, broker, ...result });
      latencyTable.push(`| ${broker} | ${store} | 200 | ${result.messages} | ${result.p50.toFixed(2)} | ${result.p99.toFixed(2)} | ${result.max.toFixed(2)} |`);
      process.stderr.write(`relay latency ${broker} ${store}: p50 ${result.p50.toFixed(2)} ms, p99 ${result.p99.toFixed(2)} ms\n`);
    }
  }
  return {
    table,
    historyTable,
    latencyTable,
    data: {
      keys: options.keys,
      history: options.history,
      historyKeys: HISTORY_KEYS,
      cores,
      rows: rows.map(({ config, name, rate, cpuUsPerMessage, historySeconds, runs }) => ({
        ...config,
        system: name,
        rate,
        cpuUsPerMessage,
        historySeconds,
        runs,
      })),
      latencies,
    },
  };
}
