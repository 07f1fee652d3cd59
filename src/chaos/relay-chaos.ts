// An end-to-end chaos run: the app enqueues N messages over K ordering keys at a steady rate; R
// `wassal relay` processes publish them to a NATS JetStream server of the run's own (own port, own
// store folder); a consumer applies each one through the inbox into the consumer's own database.
// Meanwhile relays are SIGKILLed and SIGSTOPped past their lease, and the broker is stopped and
// started again mid-run. Then the run reads what reached the consumer and judges it: every message
// has exactly one effect, none is lost, each key's effects are in enqueue order, and every
// duplicate delivery was absorbed.
//
// The consumer's effect is a row in its own database: it enqueues an "effect" message into the
// consumer's outbox, in the inbox's transaction (nothing deduplicates those rows, so a double
// effect would show as two), and the rows' ids give the order the effects were committed in.

import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { createConnection, createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { InvalidArgumentError } from "../outbox/errors.js";
import { seededRandom } from "../outbox/seeded-random.js";
import { Inbox } from "../relay/inbox.js";
import { NatsConsumer } from "../relay/nats-consumer.js";
import { importOptional } from "../relay/optional.js";
import { dropSchema, isPostgresUrl, redactUrl } from "../stores/admin.js";
import { openOutbox } from "../stores/open-outbox.js";
import { textTable } from "../lab/text-table.js";
import { ProcessPool } from "./process-pool.js";

export interface RelayChaosOptions {
  /** "sqlite" (temporary files) or a postgres:// URL (temporary schemas there). */
  readonly store: string;
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
    readonly streamMessages: number;
    readonly consumerApplied: number;
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

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => (typeof address === "object" && address ? resolve(address.port) : reject(new Error("no port"))));
    });
  });
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: "127.0.0.1", port });
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}

/** The run's own nats-server: its own port and JetStream folder, stopped and started at will. */
class Broker {
  readonly url: string;
  readonly #port: number;
  readonly #dir: string;
  #process: ChildProcess | undefined;

  constructor(port: number, dir: string) {
    this.#port = port;
    this.#dir = dir;
    this.url = `nats://127.0.0.1:${port}`;
  }

  async start(): Promise<void> {
    this.#process = spawn("nats-server", ["-a", "127.0.0.1", "-p", String(this.#port), "-js", "-sd", this.#dir], { stdio: "ignore" });
    this.#process.once("error", () => undefined);
    const by = performance.now() + 15_000;
    while (!(await accepts(this.#port))) {
      if (performance.now() > by) throw new InvalidArgumentError("nats-server did not start within 15 s: the relay chaos run needs nats-server on the PATH");
      await sleep(20);
    }
  }

  async stop(): Promise<void> {
    const child = this.#process;
    this.#process = undefined;
    if (child === undefined || child.exitCode !== null) return;
    const exited = new Promise((resolve) => child.once("exit", resolve));
    child.kill("SIGTERM");
    await exited;
  }
}

function checkOptions(o: RelayChaosOptions): void {
  const whole = (name: string, value: number, min: number) => {
    if (!Number.isInteger(value) || value < min) throw new InvalidArgumentError(`${name} must be a whole number >= ${min} (got ${value})`);
  };
  whole("relays", o.relays, 1);
  whole("messages", o.messages, 1);
  whole("keys", o.keys, 0);
  whole("leaseMs", o.leaseMs, 100);
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
  const stream = `CHAOS_${runId.toUpperCase()}`;
  const figures = {
    enqueued: 0,
    relayStarts: 0,
    kills: 0,
    pauses: 0,
    brokerRestarts: 0,
    streamMessages: 0,
    consumerApplied: 0,
    consumerDuplicates: 0,
    seconds: 0,
  };
  let timedOut = false;

  const brokerDir = join(workDir, "nats");
  mkdirSync(brokerDir);
  const broker = new Broker(await freePort(), brokerDir);
  await broker.start();
  const transport = await importOptional<typeof import("@nats-io/transport-node")>("@nats-io/transport-node", "the relay chaos run");
  const jetstream = await importOptional<typeof import("@nats-io/jetstream")>("@nats-io/jetstream", "the relay chaos run");
  const admin = await transport.connect({ servers: broker.url, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
  const jsm = await jetstream.jetstreamManager(admin);
  await jsm.streams.add({ name: stream, subjects: [`${stream}.>`] });

  const producer = await openOutbox(producerDb, { ...(producerSchema ? { schema: producerSchema } : {}) });
  const consumerOutbox = await openOutbox(consumerDb, { ...(consumerSchema ? { schema: consumerSchema } : {}) });
  const consumerStore = consumerOutbox.store;
  const consumer = await NatsConsumer.start({
    servers: broker.url,
    stream,
    durable: "chaos",
    retryDelayMs: 20,
    maxAttempts: 1_000,
    inbox: new Inbox({ store: consumerStore, source: stream }),
    handle: async (message, tx) => {
      await consumerStore.enqueue(tx, { type: "chaos.effect", payload: { id: message.id, key: message.key ?? "", body: JSON.stringify(message.body) } });
    },
  });

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
          `${stream}.{type}`,
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
        progress("stopping the broker for 1 s");
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
  figures.streamMessages = (await jsm.streams.info(stream)).state.messages;
  await admin.close();
  await broker.stop();

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
  readonly streamMessages: number;
  readonly consumerDuplicates: number;
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
      row("stream copies beyond one per message (re-publishes past the broker's window)", Math.max(0, e.streamMessages - e.expected), "info", true),
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
