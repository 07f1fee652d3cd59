// The relay's section of `npm run bench`: messages/s and CPU per message from the outbox to the
// broker, per store and per broker (NATS JetStream, RabbitMQ), for three systems in one
// interleaved run:
// - "relay": Wassal's Relay as shipped (256 publishes in flight, acknowledged ones group-committed);
// - "naive relay": the same relay awaiting each acknowledgement before the next publish
//   (maxInFlight 1), the usual hand-written relay;
// - "bare publish loop": the same number of messages published straight to the broker with 256
//   in flight, no database at all: the broker's own limit here.
// Each run seeds N messages (untimed), starts the relay and stops the clock when the last one is
// completed. CPU is this process's (user + system) over the timed part: the relay and its
// clients. The whole machine's CPU over the same time (broker, database and kernel included) is a
// second column, and the rate it allows if every core were busy: cores ÷ machine CPU per message.
//
// Then enqueue → broker acknowledgement latency (p50/p99) with the relay running, at a steady rate.

import { randomBytes } from "node:crypto";
import { availableParallelism } from "node:os";
import amqp from "amqplib";
import { connect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { openOutbox } from "wassal/lab";
import { NatsPublisher, type Publisher, RabbitMqPublisher, Relay } from "wassal/relay";
import { machineBusyUs } from "./machine-cpu.js";
import { percentile, type Spread, spread } from "./stats.js";

export const RELAY_BROKERS = ["nats", "rabbitmq"] as const;
export type RelayBroker = (typeof RELAY_BROKERS)[number];
export const RELAY_SYSTEMS = ["relay", "naive relay", "bare publish loop"] as const;
type RelaySystem = (typeof RELAY_SYSTEMS)[number];

const NATS_URL = process.env.TEST_NATS_URL ?? "nats://127.0.0.1:4222";
const AMQP_URL = process.env.TEST_AMQP_URL ?? "amqp://guest:guest@127.0.0.1:5672";
const IN_FLIGHT = 256;
/** The naive relay waits for each acknowledgement: its rate is steady long before N. */
const NAIVE_MESSAGES = 2_000;

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
  prepare(store: string): Promise<PreparedStore>;
}

/** A place on the broker for one run: where to route, and how to remove it. */
interface Target {
  readonly destination: string;
  count(): Promise<number>;
  remove(): Promise<void>;
}

async function natsTarget(): Promise<Target> {
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

async function openPublisher(broker: RelayBroker): Promise<Publisher & { connected(): Promise<void> }> {
  return broker === "nats" ? NatsPublisher.open({ servers: NATS_URL }) : RabbitMqPublisher.open({ url: AMQP_URL });
}

/** Messages/s and CPU µs per message of one timed run: this process's, and the whole machine's (null off Linux). */
interface RunFigures {
  readonly rate: number;
  readonly cpuUsPerMessage: number;
  readonly machineUsPerMessage: number | null;
}

async function timed(messages: number, work: () => Promise<void>): Promise<RunFigures> {
  const cpu = process.cpuUsage();
  const machine = machineBusyUs();
  const started = performance.now();
  await work();
  const seconds = (performance.now() - started) / 1000;
  const used = process.cpuUsage(cpu);
  const machineAfter = machineBusyUs();
  return {
    rate: messages / seconds,
    cpuUsPerMessage: (used.user + used.system) / messages,
    machineUsPerMessage: machine === null || machineAfter === null ? null : (machineAfter - machine) / messages,
  };
}

async function runOnce(store: string, broker: RelayBroker, system: RelaySystem, messages: number, options: RelayBenchOptions): Promise<RunFigures> {
  const target = broker === "nats" ? await natsTarget() : await rabbitTarget();
  const publisher = await openPublisher(broker);
  await publisher.connected();
  try {
    const body = JSON.stringify({ order: 42, total: 1250, currency: "EUR" });
    if (system === "bare publish loop") {
      return await timed(messages, async () => {
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
    const outbox = await openOutbox(prepared.db, {
      ...(prepared.schema !== "-" ? { schema: prepared.schema } : {}),
      synchronous: prepared.synchronous,
      maxConnections: 8,
    });
    try {
      for (let done = 0; done < messages; done += 100) {
        await outbox.store.transaction(async (tx) => {
          for (let n = done; n < Math.min(messages, done + 100); n += 1)
            await outbox.store.enqueue(tx, { type: "bench.event", payload: { order: n, total: 1250, currency: "EUR" } });
        });
      }
      let published = 0;
      let finish: () => void = () => undefined;
      const all = new Promise<void>((resolve) => (finish = resolve));
      outbox.store.events.subscribe((event) => {
        if (event.type === "completed" && ++published === messages) finish();
      });
      const relay = new Relay({
        store: outbox.store,
        publisher,
        routes: { default: target.destination },
        maxInFlight: system === "relay" ? IN_FLIGHT : 1,
        pollIntervalMs: 20,
        wakeOnNewMessages: false,
      });
      const figures = await timed(messages, async () => {
        await relay.start();
        await all;
      });
      await relay.stop({ graceMs: 1_000 });
      const stored = await target.count();
      if (stored !== messages) throw new Error(`${system} to ${broker} on ${store}: the broker holds ${stored} of ${messages} messages`);
      return figures;
    } finally {
      await outbox.close();
      await prepared.cleanup();
    }
  } finally {
    await publisher.close();
    await target.remove();
  }
}

/** Enqueue → broker acknowledgement at `rate` per second, with the relay running. */
async function latency(
  store: string,
  broker: RelayBroker,
  options: RelayBenchOptions,
  rate: number,
): Promise<{ messages: number; p50: number; p99: number; max: number }> {
  const target = broker === "nats" ? await natsTarget() : await rabbitTarget();
  const publisher = await openPublisher(broker);
  await publisher.connected();
  const prepared = await options.prepare(store);
  const outbox = await openOutbox(prepared.db, {
    ...(prepared.schema !== "-" ? { schema: prepared.schema } : {}),
    synchronous: prepared.synchronous,
    maxConnections: 8,
  });
  const enqueuedAt = new Map<string, number>();
  // Kept by id and matched afterwards: on PostgreSQL the relay, woken by the commit's notification,
  // can publish a message before its enqueue call has returned the id.
  const publishedAt = new Map<string, number>();
  const relay = new Relay({
    store: outbox.store,
    publisher,
    routes: { default: target.destination },
    onEvent: (event) => {
      if (event.type === "published" && !publishedAt.has(event.messageId)) publishedAt.set(event.messageId, performance.now());
    },
  });
  try {
    await relay.start();
    const total = Math.round(rate * options.latencySeconds);
    const started = performance.now();
    for (let n = 0; n < total; n += 1) {
      const wait = started + (n / rate) * 1000 - performance.now();
      if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
      const before = performance.now();
      const message = await outbox.store.transaction((tx) => outbox.store.enqueue(tx, { type: "bench.event", payload: { n } }));
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
    await publisher.close();
    await outbox.close();
    await prepared.cleanup();
    await target.remove();
  }
}

export interface RelayBenchResult {
  readonly table: string[];
  readonly latencyTable: string[];
  readonly data: unknown;
}

export async function relayBench(options: RelayBenchOptions): Promise<RelayBenchResult> {
  const configs = options.stores.flatMap((store) =>
    options.brokers.flatMap((broker) =>
      RELAY_SYSTEMS.filter((system) => system !== "bare publish loop" || store === options.stores[0]).map((system) => ({
        store: system === "bare publish loop" ? "-" : store,
        broker,
        system,
        messages: system === "naive relay" ? Math.min(NAIVE_MESSAGES, options.messages) : options.messages,
      })),
    ),
  );
  const samples = new Map(configs.map((c) => [c, { rates: [] as number[], cpu: [] as number[], machine: [] as number[] }]));
  for (let rep = 1; rep <= options.reps; rep += 1) {
    for (const config of configs) {
      const figures = await runOnce(
        config.store === "-" ? (options.stores[0] as string) : config.store,
        config.broker,
        config.system,
        config.messages,
        options,
      );
      samples.get(config)?.rates.push(figures.rate);
      samples.get(config)?.cpu.push(figures.cpuUsPerMessage);
      if (figures.machineUsPerMessage !== null) samples.get(config)?.machine.push(figures.machineUsPerMessage);
      process.stderr.write(
        `rep ${rep}/${options.reps}  relay ${config.system.padEnd(17)} ${config.broker.padEnd(8)} ${config.store.padEnd(13)} ${Math.round(figures.rate)} msg/s, ${figures.cpuUsPerMessage.toFixed(0)} µs CPU/msg (machine ${figures.machineUsPerMessage?.toFixed(0) ?? "?"})\n`,
      );
    }
  }
  const fmt = (s: Spread) => `${Math.round(s.median)} (${Math.round(s.min)}–${Math.round(s.max)})`;
  const rows = configs.map((config) => {
    const s = samples.get(config) ?? { rates: [], cpu: [], machine: [] };
    return { ...config, rate: spread(s.rates), cpu: spread(s.cpu), machine: s.machine.length > 0 ? spread(s.machine) : null };
  });
  const cores = availableParallelism();
  const find = (broker: string, system: RelaySystem, store: string) =>
    rows.find((r) => r.broker === broker && r.system === system && (system === "bare publish loop" || r.store === store));
  const table = [
    "| broker | system | store | messages | messages/s median (min–max) | CPU µs per message: this process (median) | CPU µs per message: whole machine (median) | the machine's bound, messages/s | relay ÷ this | this ÷ bare loop |",
    "|---|---|---|---|---|---|---|---|---|---|",
    ...rows.map((r) => {
      const relay = find(r.broker, "relay", r.store === "-" ? (options.stores[0] as string) : r.store)?.rate.median ?? 0;
      const bare = find(r.broker, "bare publish loop", "-")?.rate.median ?? 0;
      return `| ${r.broker} | ${r.system} | ${r.store === "-" ? "(none)" : r.store} | ${r.messages} | ${fmt(r.rate)} | ${Math.round(r.cpu.median)} | ${r.machine === null ? "n/a" : Math.round(r.machine.median)} | ${r.machine === null ? "n/a" : Math.round((cores * 1e6) / r.machine.median)} | ${(relay / r.rate.median).toFixed(2)} | ${(r.rate.median / bare).toFixed(2)} |`;
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
  return { table, latencyTable, data: { rows, latencies } };
}
