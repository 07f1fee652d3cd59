// An end-to-end chaos run: the app enqueues N messages over K ordering keys at a steady rate; R
// `wassal relay` processes publish them to a broker of the run's own (a nats-server with
// JetStream, or a RabbitMQ node, each on its own port with its own data folder); a consumer
// applies each one through the inbox into the consumer's own database.
// Meanwhile relays are SIGKILLed and SIGSTOPped past their lease, and the broker is stopped and
// started again mid-run. Then the run reads what reached the consumer and judges it: every message
// has exactly one effect, none is lost, each key's effects are in enqueue order, and every
// duplicate delivery was absorbed.
//
// The consumer's effect is a row in its own database: it enqueues an "effect" message into the
// consumer's outbox, in the inbox's transaction (nothing deduplicates those rows, so a double
// effect would show as two), and the rows' ids give the order the effects were committed in.

import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { InvalidArgumentError } from "../outbox/errors.js";
import { seededRandom } from "../outbox/seeded-random.js";
import { Inbox } from "../relay/inbox.js";
import type { ConsumerStats, DeliveryHandler } from "../relay/deliver.js";
import { NatsConsumer } from "../relay/nats-consumer.js";
import { RabbitMqConsumer } from "../relay/rabbitmq-consumer.js";
import { importOptional } from "../outbox/optional.js";
import { dropSchema, isPostgresUrl, redactUrl } from "../stores/admin.js";
import { RE_PUBLISHED } from "../runtime/relay-runner.js";
import { openOutbox } from "../stores/open-outbox.js";
import { textTable } from "../lab/text-table.js";
import { freePort, waitForPort } from "./ports.js";
import { ProcessPool } from "./process-pool.js";

export type ChaosBrokerName = "nats" | "rabbitmq";
export const CHAOS_BROKERS: readonly ChaosBrokerName[] = ["nats", "rabbitmq"];

export interface RelayChaosOptions {
  /** "sqlite" (temporary files) or a postgres:// URL (temporary schemas there). */
  readonly store: string;
  /** The broker the run starts for itself: a nats-server with JetStream, or a RabbitMQ node. */
  readonly broker: ChaosBrokerName;
  readonly relays: number;
  readonly messages: number;
  /** Messages enqueued per second. */
  readonly rate: number;
  /** Ordering keys the messages are spread over (round-robin); 0: none. */
  readonly keys: number;
  readonly seed: number;
  readonly leaseMs: number;
  /** SIGKILL a random relay (and restart it) this often; 0 = never. */
  readonly killEveryMs: number;
  /** SIGSTOP a random relay for 1.5 leases, then SIGCONT, this often; 0 = never. */
  readonly pauseEveryMs: number;
  /** Stop the broker for a second and start it again once, mid-run. */
  readonly brokerRestart: boolean;
  /** Give up waiting after this long (default: 30 s + the enqueue time + 20 ms per message). */
  readonly timeoutMs?: number;
  readonly keep: boolean;
  readonly onProgress?: (line: string) => void;
}

export const RELAY_CHAOS_DEFAULTS: Omit<RelayChaosOptions, "store"> = {
  broker: "nats",
  relays: 2,
  messages: 2_000,
  rate: 500,
  keys: 50,
  seed: 1,
  leaseMs: 1_000,
  killEveryMs: 400,
  pauseEveryMs: 1_500,
  brokerRestart: true,
  keep: false,
};

export interface RelayChaosRow {
  readonly name: string;
  readonly observed: number;
  readonly expected: string;
  readonly ok: boolean;
}

export interface RelayChaosResult {
  readonly passed: boolean;
  readonly rows: readonly RelayChaosRow[];
  readonly figures: {
    readonly enqueued: number;
    readonly relayStarts: number;
    readonly kills: number;
    readonly pauses: number;
    readonly brokerRestarts: number;
    /** Messages the broker stored (NATS: the stream; RabbitMQ keeps none once consumed: null). */
    readonly streamMessages: number | null;
    readonly consumerApplied: number;
    /** Re-publishes the broker recognised and dropped (its duplicate window), from the relays' logs. */
    readonly brokerAbsorbedDuplicates: number;
    /** Deliveries the consumer's inbox had seen already. */
    readonly consumerDuplicates: number;
    readonly seconds: number;
  };
  readonly location: string;
  readonly workDir: string | null;
  readonly timedOut: boolean;
  /** First problems found, for the reader. */
  readonly examples: readonly string[];
}

const CLI = fileURLToPath(new URL("../cli/main.js", import.meta.url));
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
const READY_WAIT_MS = 60_000;

/** A broker of the run's own: its own port and data folder, stopped and started at will. */
interface ChaosBroker {
  /** The relays' --to URL. */
  readonly url: string;
  /** The relays' --destination. */
  readonly destination: string;
  start(): Promise<void>;
  stop(): Promise<void>;
  /** Creates where the messages go (a stream; an exchange and a durable queue). */
  prepare(): Promise<void>;
  /** Starts the consumer. */
  consume(inbox: Inbox<unknown>, handle: DeliveryHandler<unknown>): Promise<{ readonly stats: ConsumerStats; stop(): Promise<void> }>;
  /** Messages the broker stored, when it keeps them after consumption (a stream); else null. */
  stored(): Promise<number | null>;
  close(): Promise<void>;
}

async function natsBroker(dir: string, runId: string): Promise<ChaosBroker> {
  const port = await freePort();
  const url = `nats://127.0.0.1:${port}`;
  const stream = `CHAOS_${runId.toUpperCase()}`;
  const transport = await importOptional<typeof import("@nats-io/transport-node")>("@nats-io/transport-node", "the relay chaos run");
  const jetstream = await importOptional<typeof import("@nats-io/jetstream")>("@nats-io/jetstream", "the relay chaos run");
  let child: ChildProcess | undefined;
  let admin: Awaited<ReturnType<typeof transport.connect>> | undefined;
  return {
    url,
    destination: `${stream}.{type}`,
    async start() {
      child = spawn("nats-server", ["-a", "127.0.0.1", "-p", String(port), "-js", "-sd", dir], { stdio: "ignore" });
      child.once("error", () => undefined);
      await waitForPort(port, true, "nats-server (it must be on the PATH)", 15_000);
    },
    async stop() {
      const running = child;
      child = undefined;
      if (running === undefined || running.exitCode !== null) return;
      const exited = new Promise((resolve) => running.once("exit", resolve));
      running.kill("SIGTERM");
      await exited;
    },
    async prepare() {
      admin = await transport.connect({ servers: url, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
      await (await jetstream.jetstreamManager(admin)).streams.add({ name: stream, subjects: [`${stream}.>`] });
    },
    consume: (inbox, handle) => NatsConsumer.start({ servers: url, stream, durable: "chaos", retryDelayMs: 20, maxAttempts: 1_000, inbox, handle }),
    async stored() {
      if (admin === undefined) return null;
      return (await (await jetstream.jetstreamManager(admin)).streams.info(stream)).state.messages;
    },
    async close() {
      await admin?.close();
    },
  };
}

async function rabbitBroker(runId: string): Promise<ChaosBroker> {
  // A folder of its own, outside the run's (private) one: the node runs as the rabbitmq user.
  const dir = mkdtempSync(join(tmpdir(), "wassal-rabbitmq-"));
  const port = await freePort();
  const distPort = await freePort();
  const node = `wassal-chaos-${runId}@localhost`;
  const url = `amqp://guest:guest@127.0.0.1:${port}`;
  const exchange = `chaos-${runId}`;
  const queue = `chaos-${runId}`;
  writeFileSync(join(dir, "rabbitmq.conf"), `listeners.tcp.local = 127.0.0.1:${port}\n`);
  writeFileSync(join(dir, "enabled_plugins"), "[].\n");
  // Started as root, rabbitmq-server runs as the rabbitmq user, which must own the node's folder.
  if (process.getuid?.() === 0) spawnSync("chown", ["-R", "rabbitmq:rabbitmq", dir], { stdio: "ignore" });
  const env = {
    ...process.env,
    RABBITMQ_NODENAME: node,
    RABBITMQ_CONFIG_FILE: join(dir, "rabbitmq.conf"),
    RABBITMQ_ENABLED_PLUGINS_FILE: join(dir, "enabled_plugins"),
    RABBITMQ_MNESIA_BASE: join(dir, "mnesia"),
    RABBITMQ_MNESIA_DIR: join(dir, "mnesia", "node"),
    RABBITMQ_FEATURE_FLAGS_FILE: join(dir, "feature_flags"),
    RABBITMQ_PLUGINS_EXPAND_DIR: join(dir, "plugins"),
    RABBITMQ_LOG_BASE: join(dir, "log"),
    RABBITMQ_DIST_PORT: String(distPort),
  };
  const amqp = await importOptional<typeof import("amqplib")>("amqplib", "the relay chaos run");
  return {
    url,
    destination: `${exchange}/events`,
    async start() {
      const child = spawn("rabbitmq-server", [], { env, cwd: dir, stdio: "ignore" });
      child.once("error", () => undefined);
      await waitForPort(port, true, "the run's RabbitMQ node (rabbitmq-server must be on the PATH)", 90_000);
    },
    async stop() {
      spawnSync("rabbitmqctl", ["-n", node, "stop"], { env, stdio: "ignore", timeout: 60_000 });
      await waitForPort(port, false, "the run's RabbitMQ node", 60_000);
    },
    async prepare() {
      const model = await amqp.connect(url);
      const channel = await model.createChannel();
      await channel.assertExchange(exchange, "direct", { durable: true });
      await channel.assertQueue(queue, { durable: true });
      await channel.bindQueue(queue, exchange, "events");
      await model.close();
    },
    consume: (inbox, handle) => RabbitMqConsumer.start({ url, queue, retryDelayMs: 20, maxAttempts: 1_000, inbox, handle }),
    stored: async () => null,
    async close() {
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

function checkOptions(o: RelayChaosOptions): void {
  const whole = (name: string, value: number, min: number) => {
    if (!Number.isInteger(value) || value < min) throw new InvalidArgumentError(`${name} must be a whole number >= ${min} (got ${value})`);
  };
  whole("relays", o.relays, 1);
  whole("messages", o.messages, 1);
  whole("keys", o.keys, 0);
  whole("leaseMs", o.leaseMs, 100);
  if (!CHAOS_BROKERS.includes(o.broker)) throw new InvalidArgumentError(`broker must be one of ${CHAOS_BROKERS.join(", ")} (got ${JSON.stringify(o.broker)})`);
  if (!(o.rate > 0)) throw new InvalidArgumentError(`rate must be a positive number of messages per second (got ${o.rate})`);
  if (o.store !== "sqlite" && !isPostgresUrl(o.store))
    throw new InvalidArgumentError(`store must be "sqlite" or a postgres:// URL (got ${JSON.stringify(o.store)})`);
}

export function relayChaosTimeoutMs(o: Pick<RelayChaosOptions, "messages" | "rate">): number {
  return Math.round(30_000 + (o.messages / o.rate) * 1000 + o.messages * 20);
}

export async function runRelayChaos(options: RelayChaosOptions): Promise<RelayChaosResult> {
  checkOptions(options);
  const started = performance.now();
  const progress = options.onProgress ?? (() => undefined);
  const random = seededRandom(options.seed);
  const runId = randomBytes(3).toString("hex");
  const workDir = mkdtempSync(join(tmpdir(), "wassal-relay-chaos-"));
  const postgres = options.store !== "sqlite";
  const producerSchema = postgres ? `wassal_chaosr_${runId}` : undefined;
  const consumerSchema = postgres ? `wassal_chaosc_${runId}` : undefined;
  const producerDb = postgres ? options.store : join(workDir, "producer.db");
  const consumerDb = postgres ? options.store : join(workDir, "consumer.db");
  const location = postgres ? `${redactUrl(options.store)} (schemas ${producerSchema}, ${consumerSchema})` : workDir;
  const figures = {
    enqueued: 0,
    relayStarts: 0,
    kills: 0,
    pauses: 0,
    brokerRestarts: 0,
    streamMessages: null as number | null,
    consumerApplied: 0,
    brokerAbsorbedDuplicates: 0,
    consumerDuplicates: 0,
    seconds: 0,
  };
  let timedOut = false;

  const brokerDir = join(workDir, options.broker);
  mkdirSync(brokerDir);
  const broker = options.broker === "nats" ? await natsBroker(brokerDir, runId) : await rabbitBroker(runId);
  progress(`starting the run's own ${options.broker} broker`);
  // Set up the broker, both databases and the consumer; if any of it fails, undo what was done.
  const opened: { close(): Promise<void> }[] = [];
  const undo = async () => {
    for (const thing of opened.reverse()) await thing.close().catch(() => undefined);
    await broker.stop().catch(() => undefined);
    await broker.close().catch(() => undefined);
    if (!options.keep) {
      if (producerSchema) await dropSchema(options.store, producerSchema).catch(() => undefined);
      if (consumerSchema) await dropSchema(options.store, consumerSchema).catch(() => undefined);
      rmSync(workDir, { recursive: true, force: true });
    }
  };
  let producer: Awaited<ReturnType<typeof openOutbox>>;
  let consumerOutbox: Awaited<ReturnType<typeof openOutbox>>;
  let consumer: Awaited<ReturnType<ChaosBroker["consume"]>>;
  try {
    await broker.start();
    await broker.prepare();
    producer = await openOutbox(producerDb, { ...(producerSchema ? { schema: producerSchema } : {}) });
    opened.push(producer);
    consumerOutbox = await openOutbox(consumerDb, { ...(consumerSchema ? { schema: consumerSchema } : {}) });
    opened.push(consumerOutbox);
    const consumerStore = consumerOutbox.store;
    consumer = await broker.consume(new Inbox({ store: consumerStore, source: runId }), async (message, tx) => {
      await consumerStore.enqueue(tx, { type: "chaos.effect", payload: { id: message.id, key: message.key ?? "", body: JSON.stringify(message.body) } });
    });
  } catch (error) {
    await undo();
    throw error;
  }
  const consumerStore = consumerOutbox.store;

  const pool = new ProcessPool({
    size: options.relays,
    workDir,
    leaseMs: options.leaseMs,
    random,
    command: (index, generation) => {
      const name = `chaos-${runId}-r${index}-g${generation}`;
      return {
        name,
        args: [
          CLI,
          "relay",
          "--db",
          producerDb,
          ...(producerSchema ? ["--schema", producerSchema] : []),
          "--to",
          broker.url,
          "--destination",
          broker.destination,
          "--name",
          name,
          "--lease-ms",
          String(options.leaseMs),
          "--poll-ms",
          "200",
          "--max-attempts",
          "1000",
          "--retry-base-ms",
          "20",
          "--grace-ms",
          "500",
          "--log-level",
          process.env.WASSAL_CHAOS_LOG_LEVEL ?? "warn",
        ],
      };
    },
  });
  const timers: NodeJS.Timeout[] = [];
  const every = (ms: number, action: () => void) => {
    if (ms > 0) timers.push(setInterval(action, ms));
  };
  const enqueuedIds: { id: string; key: string | null }[] = [];
  try {
    await pool.start(READY_WAIT_MS);
    progress(`${options.relays} relays ready after ${Math.round(performance.now() - started)} ms`);
    every(options.killEveryMs, () => pool.killOne());
    every(options.pauseEveryMs, () => pool.pauseOne());

    const from = performance.now();
    const restartAt = options.brokerRestart ? Math.floor(options.messages * 0.4) : -1;
    for (let n = 0; n < options.messages; n += 1) {
      const wait = from + (n / options.rate) * 1000 - performance.now();
      if (wait > 0) await sleep(wait);
      if (n === restartAt) {
        progress(`restarting the ${options.broker} broker`);
        await broker.stop();
        await sleep(1_000);
        await broker.start();
        figures.brokerRestarts += 1;
      }
      const key = options.keys > 0 ? `key-${n % options.keys}` : null;
      const message = await producer.store.transaction((tx) => producer.store.enqueue(tx, { type: "chaos.event", payload: { n }, ...(key ? { key } : {}) }));
      enqueuedIds.push({ id: message.id, key });
      figures.enqueued += 1;
      if ((n + 1) % Math.max(1, Math.floor(options.messages / 10)) === 0) progress(`enqueued ${n + 1}/${options.messages}`);
    }

    const timeoutMs = options.timeoutMs ?? relayChaosTimeoutMs(options);
    const deadline = performance.now() + timeoutMs;
    let lastReport = 0;
    for (;;) {
      const counts = await producer.store.countByStatus().catch(() => undefined);
      const applied = consumer.stats.applied;
      if (counts && counts.pending + counts.processing === 0 && applied >= options.messages) break;
      if (performance.now() > deadline) {
        progress(`timed out after ${timeoutMs} ms: ${applied} of ${options.messages} applied`);
        timedOut = true;
        break;
      }
      if (performance.now() - lastReport > 1000) {
        lastReport = performance.now();
        progress(`published ${counts?.processed ?? "?"}, applied ${applied} of ${options.messages}`);
      }
      await sleep(100);
    }
  } finally {
    for (const timer of timers) clearInterval(timer);
    await pool.stop();
    figures.relayStarts = pool.starts;
    figures.kills = pool.kills;
    figures.pauses = pool.pauses;
  }
  await sleep(200); // a delivery in hand finishes
  await consumer.stop();
  figures.consumerApplied = consumer.stats.applied;
  figures.consumerDuplicates = consumer.stats.duplicates;
  figures.streamMessages = await broker.stored();
  figures.brokerAbsorbedDuplicates = pool.countLogLines((line) => line.includes(RE_PUBLISHED));
  await broker.stop();
  await broker.close();

  // Judge what reached the consumer.
  const effects = (await consumerStore.listMessages()).filter((m) => m.type === "chaos.effect").map((m) => (m.payload as { id: string }).id);
  const unpublished = (await producer.store.listMessages()).filter((m) => m.status !== "processed").length;
  const { rows, examples } = judgeRelayChaos({
    expected: options.messages,
    enqueued: enqueuedIds,
    effects,
    unpublished,
    streamMessages: figures.streamMessages,
    consumerDuplicates: figures.consumerDuplicates,
    brokerAbsorbedDuplicates: figures.brokerAbsorbedDuplicates,
  });
  figures.seconds = Math.round((performance.now() - started) / 100) / 10;
  await producer.close();
  await consumerOutbox.close();
  if (!options.keep) {
    if (producerSchema) await dropSchema(options.store, producerSchema).catch(() => undefined);
    if (consumerSchema) await dropSchema(options.store, consumerSchema).catch(() => undefined);
    rmSync(workDir, { recursive: true, force: true });
  }
  return {
    passed: rows.every((r) => r.ok) && !timedOut,
    rows,
    figures,
    location,
    workDir: options.keep ? workDir : null,
    timedOut,
    examples,
  };
}

export interface RelayChaosEvidence {
  /** Messages the run meant to enqueue. */
  readonly expected: number;
  /** What was enqueued, in order: each message's id and ordering key. */
  readonly enqueued: readonly { readonly id: string; readonly key: string | null }[];
  /** The message id of each effect at the consumer, in the order the effects were committed. */
  readonly effects: readonly string[];
  /** Outbox messages a relay never completed. */
  readonly unpublished: number;
  readonly streamMessages: number | null;
  readonly consumerDuplicates: number;
  /** Re-publishes the broker itself dropped (0 where it has no duplicate window). */
  readonly brokerAbsorbedDuplicates?: number;
}

/** Judges a relay chaos run from what was enqueued and what the consumer committed. */
export function judgeRelayChaos(e: RelayChaosEvidence): { rows: RelayChaosRow[]; examples: string[] } {
  const examples: string[] = [];
  const note = (text: string) => {
    if (examples.length < 10) examples.push(text);
  };
  const effectsOf = new Map<string, number>();
  for (const id of e.effects) effectsOf.set(id, (effectsOf.get(id) ?? 0) + 1);
  const lost = e.enqueued.filter(({ id }) => !effectsOf.has(id));
  for (const { id } of lost.slice(0, 3)) note(`message ${id}: no effect at the consumer`);
  const doubled = [...effectsOf].filter(([, n]) => n > 1);
  for (const [id, n] of doubled.slice(0, 3)) note(`message ${id}: ${n} effects`);
  const keyOf = new Map(e.enqueued.map((m) => [m.id, m.key]));
  const position = new Map(e.enqueued.map((m, i) => [m.id, i]));
  let inversions = 0;
  const lastByKey = new Map<string, { at: number; id: string }>();
  for (const id of e.effects) {
    const key = keyOf.get(id);
    const at = position.get(id);
    if (!key || at === undefined) continue;
    const previous = lastByKey.get(key);
    if (previous !== undefined && previous.at > at) {
      inversions += 1;
      note(`key ${key}: message ${id}'s effect came after message ${previous.id}'s, enqueued later`);
    }
    if (previous === undefined || at > previous.at) lastByKey.set(key, { at, id });
  }
  const unknown = [...effectsOf.keys()].filter((id) => !keyOf.has(id)).length;
  const row = (name: string, observed: number, expected: string, ok: boolean): RelayChaosRow => ({ name, observed, expected, ok });
  return {
    rows: [
      row("messages enqueued", e.enqueued.length, String(e.expected), e.enqueued.length === e.expected),
      row("messages with no effect at the consumer (lost)", lost.length, "0", lost.length === 0),
      row("messages with more than one effect", doubled.length, "0", doubled.length === 0),
      row("effects of messages never enqueued", unknown, "0", unknown === 0),
      row("keys: effects committed out of enqueue order", inversions, "0", inversions === 0),
      row("outbox messages not completed by a relay", e.unpublished, "0", e.unpublished === 0),
      ...(e.streamMessages === null
        ? []
        : [row("stream copies beyond one per message (re-publishes past the broker's window)", Math.max(0, e.streamMessages - e.expected), "info", true)]),
      row("re-publishes the broker dropped (its duplicate window)", e.brokerAbsorbedDuplicates ?? 0, "info", true),
      row("duplicate deliveries absorbed by the consumer's inbox", e.consumerDuplicates, "info", true),
    ],
    examples,
  };
}

export function renderRelayChaos(result: RelayChaosResult): string {
  const table = textTable(
    ["", "check", "observed", "expected"],
    result.rows.map((r) => [r.expected === "info" ? "info" : r.ok ? "PASS" : "FAIL", r.name, r.observed, r.expected]),
  );
  return `${table}\n${result.examples.length ? `\nExamples:\n${result.examples.map((e) => `  ${e}`).join("\n")}\n` : ""}`;
}
