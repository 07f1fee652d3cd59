// An end-to-end chaos run: the app enqueues N messages over K ordering keys at a steady rate; R
// `wassal relay` processes publish them to a broker of the run's own (a nats-server with
// JetStream, a RabbitMQ node, or a redis-server, each on its own port with its own data folder);
// C consumer processes (consumer-process.ts) share the broker's durable consumer, queue or group
// and apply each message through the inbox into the consumer's own database.
// Meanwhile relays are SIGKILLed and SIGSTOPped past their lease, consumers are SIGKILLed (and
// restarted) and SIGSTOPped past the ack wait, and the broker is stopped and started again
// mid-run. Then the run reads what reached the consumer's database and judges it: every message
// has exactly one effect, none is lost, each key's effects are in enqueue order, and every
// duplicate delivery was absorbed.
//
// The consumer's effect is a row in its own database: it enqueues an "effect" message into the
// consumer's outbox, in the inbox's transaction (nothing deduplicates those rows, so a double
// effect would show as two), and the rows' ids give the order the effects were committed in. The
// run counts the effects there, not from the consumer processes' counters (a killed one's are lost).

import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { DuplicateMessageError, InvalidArgumentError, WassalError } from "../outbox/errors.js";
import { seededRandom } from "../outbox/seeded-random.js";
import { checkStore, scratchPlace } from "../lab/stores/places.js";
import { dropWalFeed } from "../stores/open-outbox.js";
import { type PrivatePostgres, startPrivatePostgres } from "./private-postgres.js";
import { ShardedOutbox } from "../shards/sharded-outbox.js";
import { shardIdPrefix } from "../shards/key-hash.js";
import { redactUrl } from "../outbox/redact.js";
import { RE_PUBLISHED } from "../runtime/relay-runner.js";
import { openOutbox } from "../stores/open-outbox.js";
import { textTable } from "../lab/text-table.js";
import { CHAOS_BROKERS, type ChaosBroker, type ChaosBrokerName, chaosBroker } from "./chaos-brokers.js";
import type { ChaosConsumerReport, ChaosConsumerSettings } from "./consumer-process.js";
import { ProcessPool } from "./process-pool.js";

export { CHAOS_BROKERS, type ChaosBrokerName };

export interface RelayChaosOptions {
  /** "sqlite" (temporary files) or a postgres:// URL (temporary schemas there). */
  readonly store: string;
  /** The broker the run starts for itself: a nats-server with JetStream, a RabbitMQ node, or a redis-server. */
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
  /** Fault the broker once, mid-run: stop it for a second and start it again (a cluster: SIGKILL the stream leader's node, then restart it). */
  readonly brokerRestart: boolean;
  /** Consumer processes sharing the broker's durable consumer (NATS), queue (RabbitMQ) or group (Redis Streams). */
  readonly consumers: number;
  /** SIGKILL a random consumer process (and restart it) this often; 0 = never. */
  readonly consumerKillEveryMs: number;
  /** SIGSTOP a random consumer process for 1.5 ack waits, then SIGCONT, this often; 0 = never. */
  readonly consumerPauseEveryMs: number;
  /**
   * NATS: the durable consumer's ack wait (NatsConsumer's ackWaitMs). Every broker: a consumer
   * process is faulted only once it has been ready this long, paused again only once it has run
   * this long since its last pause, and a pause lasts 1.5 times it.
   */
  readonly ackWaitMs: number;
  /**
   * The relays read a logical replication slot of the run's own (`wassal relay --from-wal`): one
   * streams from it, the others wait as standbys and take over when it dies. Needs PostgreSQL with
   * wal_level = logical: with the store "sqlite" (the default) the run starts a private server
   * for its data (initdb, removed at the end); a postgres:// store must have logical replication.
   */
  readonly fromWal?: boolean;
  /**
   * A sharded outbox (wassal/shards) of this many shards, 2 to 8, each a private PostgreSQL server
   * of the run's own (initdb, removed at the end); the app enqueues through ShardedOutbox and each
   * relay process works every shard (`wassal relay --shard …`). One shard is crashed (`pg_ctl stop
   * -m immediate`) mid-run and started again `shardDownMs` later; the run records each shard's
   * completions over time and checks that the others kept flowing meanwhile. 0 or absent: one outbox.
   */
  readonly shards?: number;
  /** How long the crashed shard stays down (default 3000 ms). */
  readonly shardDownMs?: number;
  /** Give up waiting after this long (default: 30 s + the enqueue time + 20 ms per message, + the shard's downtime). */
  readonly timeoutMs?: number;
  readonly keep: boolean;
  readonly onProgress?: (line: string) => void;
  /** Aborted (SIGINT, SIGTERM): the run stops, removes what it started, and throws RelayChaosInterruptedError. */
  readonly signal?: AbortSignal;
}

/** Resolves once the signal aborts (never, without one). */
function aborted(signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    if (signal === undefined) return;
    if (signal.aborted) return resolve();
    signal.addEventListener("abort", () => resolve(), { once: true });
  });
}

/** The run was aborted through its signal; it removed what it had started (unless --keep). */
export class RelayChaosInterruptedError extends WassalError {
  override name = "RelayChaosInterruptedError";
  constructor(message: string) {
    super("CHAOS_INTERRUPTED", message);
  }
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
  consumers: 1,
  consumerKillEveryMs: 0,
  consumerPauseEveryMs: 0,
  ackWaitMs: 2_000,
  keep: false,
};

/** The bounds of the options, checked here and by the CLI (which names the flag). */
export const RELAY_CHAOS_LIMITS = {
  relays: [1, 64],
  shards: [2, 8],
  shardDownMs: [2_000, 600_000],
  consumers: [1, 64],
  leaseMs: [100, 600_000],
  ackWaitMs: [100, 600_000],
} as const;

export interface RelayChaosRow {
  readonly name: string;
  readonly observed: number;
  readonly expected: string;
  readonly ok: boolean;
}

export interface RelayChaosFigures {
  readonly enqueued: number;
  /** From the first enqueue to the last: the rate the app achieved is enqueued / enqueueSeconds. */
  readonly enqueueSeconds: number;
  readonly relayStarts: number;
  /** Relays SIGKILLed (each restarted). */
  readonly kills: number;
  /** Relays SIGSTOPped past their lease. */
  readonly pauses: number;
  readonly brokerRestarts: number;
  /** Messages the broker stored (NATS: the stream; Redis: the stream's length; RabbitMQ keeps none once consumed: null). */
  readonly streamMessages: number | null;
  /** Effects committed in the consumer's database (all of them: a message applied twice counts twice). */
  readonly consumerApplied: number;
  /** Re-publishes the broker recognised and dropped (its duplicate window), from the relays' logs. */
  readonly brokerAbsorbedDuplicates: number;
  /** Deliveries the consumer's inbox had seen already, as the consumer processes reported them. */
  readonly consumerDuplicates: number;
  readonly consumers: number;
  /** Consumer processes started, restarts included. */
  readonly consumerStarts: number;
  /** Consumer processes SIGKILLed (each restarted). */
  readonly consumerKills: number;
  /** Consumer processes SIGSTOPped for 1.5 ack waits. */
  readonly consumerPauses: number;
  /** Handler runs that threw and were rolled back (reported). */
  readonly consumerFailed: number;
  /** Messages a consumer gave up after its attempts (reported). */
  readonly consumerTerminated: number;
  /**
   * Every counter of the consumers' ConsumerStats, summed over the processes: each process's last
   * report (every 250 ms, and on its graceful stop), so a SIGKILLed one's last moments are missing.
   */
  readonly consumerReported: Readonly<Record<string, number>>;
  readonly seconds: number;
}

/** The options a run was given (a PostgreSQL URL with its password hidden), to read or replay it. */
export type RelayChaosSettings = Omit<RelayChaosOptions, "onProgress" | "keep" | "timeoutMs" | "signal"> & { readonly timeoutMs: number };

/** A sharded run's shards over time: the outage, and each shard's completed messages, sampled. */
export interface ShardTimeline {
  readonly shards: number;
  /** The shard crashed, and when (seconds since the first enqueue) it went down and answered again (null: never back). */
  readonly outage: { readonly shard: number; readonly downAt: number; readonly upAt: number | null } | null;
  /** Messages the relays completed on each shard in each second of the run (null: the shard did not answer that second). */
  readonly perSecond: readonly { readonly second: number; readonly completed: readonly (number | null)[] }[];
}

export interface RelayChaosResult {
  readonly passed: boolean;
  readonly settings: RelayChaosSettings;
  readonly rows: readonly RelayChaosRow[];
  readonly figures: RelayChaosFigures;
  readonly location: string;
  readonly workDir: string | null;
  readonly timedOut: boolean;
  /** First problems found, for the reader. */
  readonly examples: readonly string[];
  /** A sharded run's shards over time; null for one outbox. */
  readonly shards: ShardTimeline | null;
}

const CLI = fileURLToPath(new URL("../cli/main.js", import.meta.url));
const CONSUMER = fileURLToPath(new URL("./consumer-process.js", import.meta.url));
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
const READY_WAIT_MS = 60_000;
const REPORT_EVERY_MS = 250;

function checkOptions(o: RelayChaosOptions): void {
  const whole = (name: string, value: number, min: number, max = Number.MAX_SAFE_INTEGER) => {
    if (!Number.isSafeInteger(value) || value < min || value > max)
      throw new InvalidArgumentError(
        `${name} must be a whole number ${max === Number.MAX_SAFE_INTEGER ? `>= ${min}` : `from ${min} to ${max}`} (got ${value})`,
      );
  };
  whole("relays", o.relays, ...RELAY_CHAOS_LIMITS.relays);
  whole("messages", o.messages, 1);
  whole("keys", o.keys, 0);
  whole("leaseMs", o.leaseMs, ...RELAY_CHAOS_LIMITS.leaseMs);
  whole("killEveryMs", o.killEveryMs, 0);
  whole("pauseEveryMs", o.pauseEveryMs, 0);
  whole("consumers", o.consumers, ...RELAY_CHAOS_LIMITS.consumers);
  whole("consumerKillEveryMs", o.consumerKillEveryMs, 0);
  whole("consumerPauseEveryMs", o.consumerPauseEveryMs, 0);
  whole("ackWaitMs", o.ackWaitMs, ...RELAY_CHAOS_LIMITS.ackWaitMs);
  if (!CHAOS_BROKERS.includes(o.broker)) throw new InvalidArgumentError(`broker must be one of ${CHAOS_BROKERS.join(", ")} (got ${JSON.stringify(o.broker)})`);
  if (!(o.rate > 0)) throw new InvalidArgumentError(`rate must be a positive number of messages per second (got ${o.rate})`);
  checkStore(o.store);
  if (o.shards !== undefined && o.shards !== 0) whole("shards", o.shards, ...RELAY_CHAOS_LIMITS.shards);
  if (o.shardDownMs !== undefined) whole("shardDownMs", o.shardDownMs, ...RELAY_CHAOS_LIMITS.shardDownMs);
  if (o.fromWal && o.store !== "sqlite" && !/^postgres(ql)?:\/\//.test(o.store)) {
    throw new InvalidArgumentError(
      `--from-wal needs PostgreSQL with logical replication: leave --store out (the run starts a private server) or give a postgres:// URL (got ${redactUrl(o.store)})`,
    );
  }
}

export function relayChaosTimeoutMs(o: Pick<RelayChaosOptions, "messages" | "rate" | "shards" | "shardDownMs">): number {
  const outage = (o.shards ?? 0) >= 2 ? (o.shardDownMs ?? SHARD_DOWN_MS) : 0;
  return Math.round(30_000 + (o.messages / o.rate) * 1000 + o.messages * 20 + outage);
}

const SHARD_DOWN_MS = 3_000;
const SAMPLE_EVERY_MS = 250;

function isReport(message: unknown): message is ChaosConsumerReport {
  return typeof message === "object" && message !== null && typeof (message as { stats?: unknown }).stats === "object";
}

/** Sums each numeric counter over the reports. */
function sumReports(reports: Iterable<Readonly<Record<string, number>>>): Record<string, number> {
  const total: Record<string, number> = {};
  for (const report of reports) for (const [name, value] of Object.entries(report)) if (typeof value === "number") total[name] = (total[name] ?? 0) + value;
  return total;
}

export async function runRelayChaos(options: RelayChaosOptions): Promise<RelayChaosResult> {
  checkOptions(options);
  const started = performance.now();
  const progress = options.onProgress ?? (() => undefined);
  const random = seededRandom(options.seed);
  const runId = randomBytes(3).toString("hex");
  const shardCount = options.shards !== undefined && options.shards >= 2 ? options.shards : 0;
  const shardDownMs = options.shardDownMs ?? SHARD_DOWN_MS;
  const workDir = mkdtempSync(join(tmpdir(), "wassal-relay-chaos-"));
  const walSettings = { wal_level: "logical", max_replication_slots: "10", max_wal_senders: "20" };
  // Private PostgreSQL servers: the shards, or the WAL relays' server when no PostgreSQL URL was given.
  const servers: PrivatePostgres[] = [];
  const stopServers = () => {
    for (const server of servers) server.stop();
  };
  const startServer = async (label: string, settings: Readonly<Record<string, string>>) => {
    const server = await startPrivatePostgres({ settings, label, onSignals: false }).catch((error: unknown) => {
      stopServers();
      rmSync(workDir, { recursive: true, force: true });
      throw error;
    });
    servers.push(server);
    return server;
  };
  for (let shard = 0; shard < shardCount; shard += 1) {
    const server = await startServer(`relay-chaos-shard${shard}`, options.fromWal ? walSettings : {});
    progress(`started shard ${shard}: a private PostgreSQL server in ${server.startSeconds.toFixed(1)} s`);
  }
  const walServer = shardCount === 0 && options.fromWal && options.store === "sqlite" ? await startServer("relay-chaos-pg", walSettings) : undefined;
  if (walServer !== undefined) progress(`started a private PostgreSQL server with wal_level = logical in ${walServer.startSeconds.toFixed(1)} s`);
  const store = walServer?.url ?? options.store;
  const slot = options.fromWal ? `chaos_${runId}` : undefined;
  // One outbox: a scratch place on the store. Shards: the private servers' own databases.
  const producerPlace =
    shardCount > 0
      ? undefined
      : await scratchPlace(store, workDir, "chaosr").catch((error: unknown) => {
          stopServers();
          throw error;
        });
  const consumerPlace = await scratchPlace(store, workDir, "chaosc").catch(async (error: unknown) => {
    await producerPlace?.remove().catch(() => undefined);
    stopServers();
    throw error;
  });
  const producerSchema = producerPlace?.options.schema;
  const producerDbs = producerPlace === undefined ? servers.map((server) => server.url) : [producerPlace.db];
  const {
    db: consumerDb,
    options: { schema: consumerSchema },
  } = consumerPlace;
  const location =
    shardCount > 0
      ? `${shardCount} shards (${producerDbs.join(", ")}), ${consumerPlace.location}`
      : `${producerPlace?.location ?? ""}, ${consumerPlace.location}`;
  let timedOut = false;
  const stopIfAborted = () => {
    if (options.signal?.aborted)
      throw new RelayChaosInterruptedError(
        `interrupted; the run's processes and broker were stopped${options.keep ? ` (kept: ${workDir})` : ", its temporary files and schemas removed"}`,
      );
  };

  // Everything the run starts is undone in the finally below, whatever fails: the processes, the
  // broker (and its folder), the databases' handles, the schemas, the servers and the folder (unless --keep).
  let broker: ChaosBroker | undefined;
  const producers: Awaited<ReturnType<typeof openOutbox>>[] = [];
  let consumerOutbox: Awaited<ReturnType<typeof openOutbox>> | undefined;
  let relays: ProcessPool | undefined;
  let consumers: ProcessPool | undefined;
  const timers: NodeJS.Timeout[] = [];
  let outage: Promise<void> | undefined;
  let brokerFaultDone: Promise<void> | undefined;
  let stopPumpsOnExit: (() => Promise<void>) | undefined;
  try {
    const brokerDir = join(workDir, options.broker);
    mkdirSync(brokerDir);
    broker = await chaosBroker(options.broker, brokerDir, runId, options.ackWaitMs);
    progress(`starting the run's own ${options.broker} broker`);
    // A cluster takes a while to start: where the broker can be closed while it starts, a signal
    // meanwhile ends the wait, and the finally below stops what was started (and nothing more starts).
    const starting = broker.start();
    if (broker.closesWhileStarting === true) {
      starting.catch(() => undefined); // an abandoned start's failure is the signal's
      await Promise.race([starting, aborted(options.signal)]);
    } else {
      await starting;
    }
    stopIfAborted();
    await broker.prepare();
    for (const db of producerDbs) producers.push(await openOutbox(db, { ...(producerSchema ? { schema: producerSchema } : {}) }));
    const producerStores = producers.map((producer) => producer.store);
    const sharded = shardCount > 0 ? new ShardedOutbox(producerStores) : undefined;
    // Opened (and migrated) here before any consumer process opens it; the run reads the effects through it.
    consumerOutbox = await openOutbox(consumerDb, { ...(consumerSchema ? { schema: consumerSchema } : {}) });
    const consumerStore = consumerOutbox.store;

    // The last counters each consumer process (slot/start) reported.
    const reports = new Map<string, Readonly<Record<string, number>>>();
    const consumerBroker = broker.consumer;
    consumers = new ProcessPool({
      size: options.consumers,
      workDir,
      leaseMs: options.ackWaitMs,
      restAfterPause: true,
      random,
      onMessage: (message, index, generation) => {
        if (isReport(message)) reports.set(`${index}/${generation}`, message.stats);
      },
      command: (index, generation) => {
        const settings: ChaosConsumerSettings = {
          broker: consumerBroker,
          db: consumerDb,
          ...(consumerSchema ? { schema: consumerSchema } : {}),
          source: runId,
          name: `chaos-c${index}`,
          reportEveryMs: REPORT_EVERY_MS,
        };
        return { name: `chaos-${runId}-c${index}-g${generation}`, args: [CONSUMER, JSON.stringify(settings)] };
      },
    });
    const relayBroker = broker;
    // Each relay process works the one outbox, or every shard (one relay per shard inside it).
    const outboxArgs = sharded ? producerDbs.flatMap((db) => ["--shard", db]) : ["--db", producerDbs[0] as string];
    relays = new ProcessPool({
      size: options.relays,
      workDir,
      leaseMs: options.leaseMs,
      // Else a relay woken from a pause could be paused again at once, again and again: seen
      // holding the producer's SQLite write lock so long that the app's enqueue gave up (30 s).
      restAfterPause: true,
      random,
      command: (index, generation) => {
        const name = `chaos-${runId}-r${index}-g${generation}`;
        return {
          name,
          args: [
            CLI,
            "relay",
            ...outboxArgs,
            ...(producerSchema ? ["--schema", producerSchema] : []),
            ...(slot === undefined ? [] : ["--from-wal", slot]),
            "--to",
            relayBroker.url,
            "--destination",
            relayBroker.destination,
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
    const every = (ms: number, action: () => void) => {
      if (ms > 0) timers.push(setInterval(action, ms));
    };
    const enqueuedIds: { id: string; key: string | null }[] = [];
    stopIfAborted();
    await consumers.start(READY_WAIT_MS);
    stopIfAborted();
    progress(`${options.consumers} consumer${options.consumers === 1 ? "" : "s"} ready after ${Math.round(performance.now() - started)} ms`);
    await relays.start(READY_WAIT_MS);
    stopIfAborted();
    progress(`${options.relays} relays ready after ${Math.round(performance.now() - started)} ms`);
    const relayPool = relays;
    const consumerPool = consumers;
    every(options.killEveryMs, () => relayPool.killOne());
    every(options.pauseEveryMs, () => relayPool.pauseOne());
    // The pause first: at a tick of both, a consumer that can be paused is paused, and one woken
    // from a pause (not to be paused again yet) is killed; equal periods alternate the two.
    every(options.consumerPauseEveryMs, () => consumerPool.pauseOne());
    every(options.consumerKillEveryMs, () => consumerPool.killOne());

    let brokerRestarts = 0;
    const from = performance.now();
    const secondsSince = () => (performance.now() - from) / 1000;
    /** When the last message was enqueued (seconds since the first); the rate the app achieved is enqueued over it. */
    let lastEnqueuedAt = 0;
    // Shards: each shard's completed messages, sampled; the app's messages for a shard that does not
    // answer wait in that shard's queue, in order, and go once it answers (so a key's order holds).
    const samples: { at: number; processed: (number | null)[] }[] = [];
    let shardOutage = null as { shard: number; downAt: number; upAt: number | null } | null;
    const backlogs: { n: number; key: string | null }[][] = producerStores.map(() => []);
    if (sharded) {
      let sampling = false;
      every(SAMPLE_EVERY_MS, () => {
        if (sampling) return;
        sampling = true;
        const at = secondsSince();
        void Promise.all(producerStores.map((shardStore) => answered(shardStore.countByStatus(), SAMPLE_EVERY_MS)))
          .then((counts) => samples.push({ at, processed: counts.map((c) => c?.processed ?? null) }))
          .finally(() => {
            sampling = false;
          });
      });
    }
    const enqueueOn = async (shard: number, item: { n: number; key: string | null }): Promise<string> => {
      const shardStore = producerStores[shard] as (typeof producerStores)[number];
      // Shards: a dedupe key, so that an enqueue whose commit went unanswered (the server crashed)
      // and is tried again is found, not doubled.
      const dedupeKey = sharded ? `chaos-${runId}-${item.n}` : undefined;
      try {
        const message = await shardStore.transaction((tx) =>
          shardStore.enqueue(tx, {
            type: "chaos.event",
            payload: { n: item.n },
            ...(item.key ? { key: item.key } : {}),
            ...(dedupeKey ? { dedupeKey } : {}),
          }),
        );
        return message.id;
      } catch (error) {
        const found =
          error instanceof DuplicateMessageError ? (await shardStore.findMessages(error.dedupeKey)).find((m) => m.dedupeKey === dedupeKey) : undefined;
        if (found !== undefined) return found.id;
        throw error;
      }
    };
    // Each shard's own app thread: it enqueues that shard's messages one after another, in order,
    // while the others go on; a message its shard refuses (the server does not answer) is tried
    // again a moment later, and the ones behind it wait. One outbox: a failure fails the run.
    let producing = true;
    /** The run is ending on an error or a signal: the pumps stop at once, waiting messages and all. */
    let abandoned = false;
    let pumpFailure: unknown;
    const wakeups = producerStores.map(() => (): void => undefined);
    const pump = async (shard: number) => {
      const backlog = backlogs[shard] as { n: number; key: string | null }[];
      while (!abandoned && !options.signal?.aborted && pumpFailure === undefined) {
        const item = backlog[0];
        if (item === undefined) {
          if (!producing) return;
          await new Promise<void>((resolve) => {
            wakeups[shard] = resolve;
          });
          continue;
        }
        try {
          const id = await enqueueOn(shard, item);
          backlog.shift();
          enqueuedIds.push({ id: sharded ? `${shardIdPrefix(shard)}${id}` : id, key: item.key });
          lastEnqueuedAt = secondsSince();
        } catch (error) {
          if (!sharded) {
            pumpFailure = error;
            return;
          }
          if (performance.now() - from > (options.timeoutMs ?? relayChaosTimeoutMs(options))) return;
          await sleep(250);
        }
      }
    };
    const pumps = producerStores.map((_, shard) => pump(shard));
    const stopPumps = async () => {
      producing = false;
      for (const wake of wakeups) wake();
      await Promise.all(pumps);
    };
    stopPumpsOnExit = () => {
      abandoned = true;
      return stopPumps();
    };
    const restartAt = options.brokerRestart ? Math.floor(options.messages * 0.4) : -1;
    const outageAt = sharded ? Math.floor(options.messages * 0.2) : -1;
    let brokerFaulted = false;
    /** A fault that could not be done (the broker's, or the shard's crash or restart): the run fails with it. */
    let faultFailure: unknown;
    let brokerFault: Promise<void> | undefined;
    const faultingBroker = broker;
    const faultBroker = () => {
      brokerFaulted = true;
      progress(`faulting the ${options.broker} broker`);
      brokerFault = faultingBroker.fault().then(
        (said) => {
          progress(said);
          brokerRestarts += 1;
        },
        (error: unknown) => {
          faultFailure ??= error;
        },
      );
      brokerFaultDone = brokerFault;
    };
    for (let n = 0; n < options.messages; n += 1) {
      const wait = from + (n / options.rate) * 1000 - performance.now();
      if (wait > 0) await sleep(wait);
      stopIfAborted();
      // The broker's fault runs beside the enqueues (the app goes on); with shards, only once the
      // crashed shard is back, so that the other shards' flow during its outage is theirs alone.
      if (!brokerFaulted && restartAt >= 0 && n >= restartAt && (outageAt < 0 || shardOutage?.upAt != null)) faultBroker();
      if (n === outageAt) {
        const shard = Math.floor(random() * shardCount);
        const server = servers[shard] as PrivatePostgres;
        outage = (async () => {
          const downAt = secondsSince();
          shardOutage = { shard, downAt, upAt: null };
          await server.crash();
          progress(`crashed shard ${shard} (pg_ctl stop -m immediate); starting it again in ${shardDownMs} ms`);
          await sleep(shardDownMs);
          await server.restart();
          shardOutage = { shard, downAt, upAt: secondsSince() };
          progress(`shard ${shard} answers again`);
        })().catch((error: unknown) => {
          faultFailure ??= error;
        });
      }
      const key = options.keys > 0 ? `key-${n % options.keys}` : null;
      // Routed as ShardedOutbox routes it: by its ordering key, else by its dedupe key.
      const shard = sharded ? sharded.shardIndex(key ? { key } : { dedupeKey: `chaos-${runId}-${n}` }) : 0;
      (backlogs[shard] as { n: number; key: string | null }[]).push({ n, key });
      wakeups[shard]?.();
      if (pumpFailure !== undefined) throw pumpFailure;
      if (faultFailure !== undefined) throw faultFailure;
      if ((n + 1) % Math.max(1, Math.floor(options.messages / 10)) === 0) progress(`enqueued ${n + 1}/${options.messages}`);
    }
    await outage;
    if (!brokerFaulted && restartAt >= 0) faultBroker();
    await brokerFault;
    if (faultFailure !== undefined) throw faultFailure;
    // What waits for a shard that was down goes now.
    await stopPumps();
    stopIfAborted();
    if (pumpFailure !== undefined) throw pumpFailure;
    // The last enqueue's time, not now: the run also waited for the broker's fault to end.
    const enqueueSeconds = lastEnqueuedAt;

    // Done when the relays completed everything and every message has an effect in the consumer's
    // database (counted there: a killed consumer's counters are gone).
    const effectRows = async () => Object.values(await consumerStore.countByStatus()).reduce((sum, n) => sum + n, 0);
    const everyOneApplied = async () => {
      const applied = new Set((await consumerStore.listMessages()).map((m) => (m.payload as { id: string }).id));
      return enqueuedIds.every(({ id }) => applied.has(id));
    };
    const producerCounts = async () => {
      const counts = await Promise.all(producerStores.map((producerStore) => producerStore.countByStatus()));
      return counts.reduce(
        (sum, c) => ({ pending: sum.pending + c.pending, processing: sum.processing + c.processing, processed: sum.processed + c.processed }),
        {
          pending: 0,
          processing: 0,
          processed: 0,
        },
      );
    };
    const timeoutMs = options.timeoutMs ?? relayChaosTimeoutMs(options);
    const deadline = performance.now() + timeoutMs;
    let lastReport = 0;
    for (;;) {
      stopIfAborted();
      const counts = await producerCounts().catch(() => undefined);
      const applied = await effectRows().catch(() => undefined);
      const published = counts !== undefined && counts.pending + counts.processing === 0;
      if (published && applied !== undefined && applied >= enqueuedIds.length && (await everyOneApplied().catch(() => false))) break;
      if (performance.now() > deadline) {
        progress(`timed out after ${timeoutMs} ms: ${applied ?? "?"} effects of ${options.messages} messages`);
        timedOut = true;
        break;
      }
      if (performance.now() - lastReport > 1000) {
        lastReport = performance.now();
        progress(
          `published ${counts?.processed ?? "?"}, applied ${applied ?? "?"} of ${options.messages}` +
            ` (relays killed ${relayPool.kills}, paused ${relayPool.pauses}; consumers killed ${consumerPool.kills}, paused ${consumerPool.pauses})`,
        );
      }
      await sleep(100);
    }

    // Stop the faults and the relays, then the consumers gracefully: a paused one wakes, finishes
    // what it holds (a double effect it would commit now still counts), and sends its last counters.
    for (const timer of timers.splice(0)) clearInterval(timer);
    await relays.stop();
    await consumers.stop();
    const reported = sumReports(reports.values());
    const streamMessages = await broker.stored();
    const brokerAbsorbedDuplicates = relays.countLogLines((line) => line.includes(RE_PUBLISHED));

    // Judge what reached the consumer.
    const effects = (await consumerStore.listMessages()).filter((m) => m.type === "chaos.effect").map((m) => (m.payload as { id: string }).id);
    let unpublished = 0;
    for (const producerStore of producerStores) unpublished += (await producerStore.listMessages()).filter((m) => m.status !== "processed").length;
    const figures: RelayChaosFigures = {
      enqueued: enqueuedIds.length,
      enqueueSeconds: Math.round(enqueueSeconds * 10) / 10,
      relayStarts: relays.starts,
      kills: relays.kills,
      pauses: relays.pauses,
      brokerRestarts,
      streamMessages,
      consumerApplied: effects.length,
      brokerAbsorbedDuplicates,
      consumerDuplicates: reported.duplicates ?? 0,
      consumers: options.consumers,
      consumerStarts: consumers.starts,
      consumerKills: consumers.kills,
      consumerPauses: consumers.pauses,
      consumerFailed: reported.failed ?? 0,
      consumerTerminated: reported.terminated ?? 0,
      consumerReported: reported,
      seconds: Math.round((performance.now() - started) / 100) / 10,
    };
    const judged = judgeRelayChaos({
      expected: options.messages,
      enqueued: enqueuedIds,
      effects,
      unpublished,
      streamMessages,
      consumerDuplicates: figures.consumerDuplicates,
      brokerAbsorbedDuplicates,
      consumerStarts: figures.consumerStarts,
      consumerKills: figures.consumerKills,
      consumerPauses: figures.consumerPauses,
      consumerTerminated: figures.consumerTerminated,
    });
    const timeline = sharded ? shardTimeline(shardCount, shardOutage, samples) : null;
    const rows = timeline === null ? judged.rows : [...judged.rows, ...judgeShardOutage(timeline)];
    const { onProgress: _progress, keep: _keep, signal: _signal, ...given } = options;
    return {
      passed: rows.every((r) => r.ok) && !timedOut,
      settings: { ...given, store: redactUrl(options.store), timeoutMs },
      rows,
      figures,
      location,
      workDir: options.keep ? workDir : null,
      timedOut,
      examples: judged.examples,
      shards: timeline,
    };
  } finally {
    for (const timer of timers) clearInterval(timer);
    await outage?.catch(() => undefined);
    await brokerFaultDone?.catch(() => undefined);
    await stopPumpsOnExit?.().catch(() => undefined);
    await relays?.stop().catch(() => undefined);
    await consumers?.stop().catch(() => undefined);
    for (const producer of producers) await producer.close().catch(() => undefined);
    await consumerOutbox?.close().catch(() => undefined);
    await broker?.stop().catch(() => undefined);
    await broker?.close().catch(() => undefined);
    if (slot !== undefined && servers.length === 0) {
      // A slot left on a server that stays would hold its log for ever.
      await dropWalFeed({ url: store, slot, ...(producerSchema ? { schema: producerSchema } : {}) }).catch((error: unknown) =>
        progress(
          `could not drop the replication slot ${slot}: ${error instanceof Error ? error.message : String(error)}; drop it by hand (pg_drop_replication_slot)`,
        ),
      );
    }
    if (!options.keep) {
      await producerPlace?.remove().catch(() => undefined);
      await consumerPlace.remove().catch(() => undefined);
      rmSync(workDir, { recursive: true, force: true });
    }
    stopServers();
  }
}

/** The promise's value, or undefined when it has not settled within `ms` or failed (a server that does not answer). */
function answered<T>(promise: Promise<T>, ms: number): Promise<T | undefined> {
  return Promise.race([promise.catch(() => undefined), sleep(ms).then(() => undefined)]);
}

/** Each shard's completions per second of the run, from the samples of its processed count. */
export function shardTimeline(
  shards: number,
  outage: ShardTimeline["outage"],
  samples: readonly { readonly at: number; readonly processed: readonly (number | null)[] }[],
): ShardTimeline {
  const last = samples.at(-1)?.at ?? 0;
  const perSecond: { second: number; completed: (number | null)[] }[] = [];
  /** The last count of `shard` sampled at or before `at` (0 before any). */
  const countAt = (shard: number, at: number) => {
    let count = 0;
    for (const sample of samples) {
      if (sample.at > at) break;
      const seen = sample.processed[shard];
      if (seen !== null && seen !== undefined) count = seen;
    }
    return count;
  };
  for (let second = 1; second <= Math.ceil(last); second += 1) {
    const completed = Array.from({ length: shards }, (_, shard) => {
      const within = samples.filter((sample) => sample.at > second - 1 && sample.at <= second);
      if (within.every((sample) => sample.processed[shard] === null)) return null;
      return countAt(shard, second) - countAt(shard, second - 1);
    });
    perSecond.push({ second, completed });
  }
  return { shards, outage, perSecond };
}

/** The checks of a sharded run: the crashed shard came back, and each other shard completed messages while it was down. */
export function judgeShardOutage(timeline: ShardTimeline): RelayChaosRow[] {
  const { outage } = timeline;
  if (outage === null) return [{ name: "a shard crashed mid-run", observed: 0, expected: "1", ok: false }];
  const rows: RelayChaosRow[] = [
    { name: `shard ${outage.shard} answered again after its crash`, observed: outage.upAt === null ? 0 : 1, expected: "1", ok: outage.upAt !== null },
  ];
  const upAt = outage.upAt ?? Number.POSITIVE_INFINITY;
  for (let shard = 0; shard < timeline.shards; shard += 1) {
    if (shard === outage.shard) continue;
    // The whole seconds inside the outage: what each other shard completed then.
    const seconds = timeline.perSecond.filter((s) => s.second - 1 >= outage.downAt && s.second <= upAt);
    const completed = seconds.reduce((sum, s) => sum + (s.completed[shard] ?? 0), 0);
    rows.push({
      name: `shard ${shard}: messages completed while shard ${outage.shard} was down (${seconds.length} whole seconds)`,
      observed: completed,
      expected: "> 0",
      ok: seconds.length > 0 && completed > 0,
    });
  }
  return rows;
}

/** The shards' completions per second as a table, the crashed shard's downtime marked. */
export function renderShardTimeline(timeline: ShardTimeline): string {
  const { outage } = timeline;
  const header = ["second", ...Array.from({ length: timeline.shards }, (_, shard) => `shard ${shard}`)];
  const rows = timeline.perSecond.map(({ second, completed }) => {
    const down = outage !== null && second > outage.downAt && second - 1 < (outage.upAt ?? Number.POSITIVE_INFINITY);
    return [String(second), ...completed.map((n, shard) => (n === null ? "-" : `${n}${down && shard === outage?.shard ? " (down)" : ""}`))];
  });
  const said =
    outage === null
      ? "no shard was crashed"
      : `shard ${outage.shard} crashed at ${outage.downAt.toFixed(1)} s, answered again at ${outage.upAt === null ? "never" : `${outage.upAt.toFixed(1)} s`}`;
  return `messages completed per second, by shard (${said}; "-": the shard did not answer):\n${textTable(header, rows)}`;
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
  /** Deliveries the consumer's inbox had seen already (as reported). */
  readonly consumerDuplicates: number;
  /** Re-publishes the broker itself dropped (0 where it has no duplicate window). */
  readonly brokerAbsorbedDuplicates?: number;
  /** Consumer processes started (restarts included), SIGKILLed, SIGSTOPped. */
  readonly consumerStarts?: number;
  readonly consumerKills?: number;
  readonly consumerPauses?: number;
  /** Messages a consumer gave up after its attempts (as reported). */
  readonly consumerTerminated?: number;
}

/** Pairs (i < j) with values[i] > values[j], by merge sort: O(n log n) for a key of any length. */
export function countInversions(values: readonly number[]): number {
  let inversions = 0;
  let items = [...values];
  let buffer = new Array<number>(items.length);
  for (let width = 1; width < items.length; width *= 2) {
    for (let left = 0; left < items.length; left += 2 * width) {
      const middle = Math.min(left + width, items.length);
      const right = Math.min(left + 2 * width, items.length);
      let i = left;
      let j = middle;
      let k = left;
      while (i < middle && j < right) {
        const a = items[i] as number;
        const b = items[j] as number;
        if (a <= b) {
          buffer[k++] = a;
          i += 1;
        } else {
          // b comes before every item left in the left half, each of them greater: one pair each.
          inversions += middle - i;
          buffer[k++] = b;
          j += 1;
        }
      }
      while (i < middle) buffer[k++] = items[i++] as number;
      while (j < right) buffer[k++] = items[j++] as number;
    }
    [items, buffer] = [buffer, items];
  }
  return inversions;
}

/**
 * Judges a relay chaos run from what was enqueued and what the consumer committed. A key's order
 * is checked over all its effects: each effect committed after the effect of a message of its key
 * enqueued later counts (not only the first of a key, nor only one per key), and so does each such
 * pair, which says how far apart they were.
 */
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
  // Per key: each effect behind one of a later-enqueued message (its key's highest so far).
  let late = 0;
  const lateKeys = new Set<string>();
  const highest = new Map<string, { at: number; id: string }>();
  const positionsByKey = new Map<string, number[]>();
  for (const id of e.effects) {
    const key = keyOf.get(id);
    const at = position.get(id);
    if (!key || at === undefined) continue;
    const positions = positionsByKey.get(key);
    if (positions) positions.push(at);
    else positionsByKey.set(key, [at]);
    const previous = highest.get(key);
    if (previous !== undefined && previous.at > at) {
      late += 1;
      lateKeys.add(key);
      note(`key ${key}: message ${id} (enqueued #${at + 1}) had its effect after message ${previous.id}'s (enqueued #${previous.at + 1}, later)`);
    }
    if (previous === undefined || at > previous.at) highest.set(key, { at, id });
  }
  let inversions = 0;
  for (const positions of positionsByKey.values()) inversions += countInversions(positions);
  const unknown = [...effectsOf.keys()].filter((id) => !keyOf.has(id)).length;
  const row = (name: string, observed: number, expected: string, ok: boolean): RelayChaosRow => ({ name, observed, expected, ok });
  const info = (name: string, observed: number) => row(name, observed, "info", true);
  return {
    rows: [
      row("messages enqueued", e.enqueued.length, String(e.expected), e.enqueued.length === e.expected),
      row("messages with no effect at the consumer (lost)", lost.length, "0", lost.length === 0),
      row("messages with more than one effect", doubled.length, "0", doubled.length === 0),
      row("effects of messages never enqueued", unknown, "0", unknown === 0),
      row("keys: effects committed out of enqueue order", late, "0", late === 0),
      row("keys: pairs of effects in reverse enqueue order", inversions, "0", inversions === 0),
      info("keys with an effect out of enqueue order", lateKeys.size),
      row("outbox messages not completed by a relay", e.unpublished, "0", e.unpublished === 0),
      ...(e.streamMessages === null
        ? []
        : [info("stream copies beyond one per message (re-publishes past the broker's window)", Math.max(0, e.streamMessages - e.expected))]),
      info("re-publishes the broker dropped (its duplicate window)", e.brokerAbsorbedDuplicates ?? 0),
      info("duplicate deliveries absorbed by the consumer's inbox (reported)", e.consumerDuplicates),
      ...(e.consumerStarts === undefined ? [] : [info("consumer processes started (restarts included)", e.consumerStarts)]),
      ...(e.consumerKills === undefined ? [] : [info("consumer processes SIGKILLed and restarted", e.consumerKills)]),
      ...(e.consumerPauses === undefined ? [] : [info("consumer processes SIGSTOPped past the ack wait", e.consumerPauses)]),
      ...(e.consumerTerminated === undefined ? [] : [info("messages a consumer gave up (reported)", e.consumerTerminated)]),
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

/** The figures as rows of a table: a nested record (the consumers' counters) one row per counter. */
export function relayChaosFigureRows(figures: RelayChaosFigures): [string, string | number | null][] {
  const rows: [string, string | number | null][] = [];
  for (const [name, value] of Object.entries(figures)) {
    if (typeof value === "object" && value !== null) for (const [inner, n] of Object.entries(value)) rows.push([`${name}.${inner}`, n as number]);
    else rows.push([name, value as number | null]);
  }
  return rows;
}
