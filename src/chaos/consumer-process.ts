// The consumer of a relay chaos run, as a process of its own, so that the run can SIGKILL and
// SIGSTOP it like a relay: `node dist/chaos/consumer-process.js '<settings as JSON>'`, started by
// the run's process pool with an IPC channel (see relay-chaos.ts). It opens the consumer's database,
// starts the broker's consumer (NATS: the durable consumer every process shares; RabbitMQ: the
// queue; Redis Streams: the group, under its slot's name, so that a restart resumes the entries
// its predecessor read and never acknowledged), and applies each message through the inbox: the
// effect is a "chaos.effect" row enqueued in the inbox's transaction, whose id order is the order
// the effects were committed in.
//
// On the IPC channel it sends "ready" once it consumes, then { stats } (the consumer's counters)
// every `reportEveryMs` and once more on SIGTERM, after a graceful stop. A killed process's last
// counters are what the run has of it; the run counts the effects from the database.

import { realpathSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { openOutbox } from "../stores/open-outbox.js";
import { Inbox } from "../relay/inbox.js";
import type { ConsumerStats, DeliveryHandler } from "../relay/deliver.js";
import { NatsConsumer } from "../relay/nats-consumer.js";
import { RabbitMqConsumer } from "../relay/rabbitmq-consumer.js";
import { RedisStreamsConsumer } from "../relay/redis-consumer.js";

/** What a consumer process consumes. */
export type ChaosConsumerBroker =
  | { readonly kind: "nats"; readonly servers: string | readonly string[]; readonly stream: string; readonly durable: string; readonly ackWaitMs: number }
  | { readonly kind: "rabbitmq"; readonly url: string; readonly queue: string }
  | { readonly kind: "redis"; readonly url: string; readonly stream: string; readonly group: string };

export interface ChaosConsumerSettings {
  readonly broker: ChaosConsumerBroker;
  /** The consumer's database (a SQLite file or a postgres:// URL) and its schema. */
  readonly db: string;
  readonly schema?: string;
  /** The inbox's source: the same in every process, so that they share one record of ids. */
  readonly source: string;
  /** The slot's name, the same across its restarts (Redis Streams: the consumer's name in the group). */
  readonly name: string;
  readonly reportEveryMs: number;
}

/** What a consumer process sends on its IPC channel, besides "ready". */
export interface ChaosConsumerReport {
  readonly stats: Readonly<Record<string, number>>;
}

interface Running {
  readonly stats: ConsumerStats;
  stop(): Promise<void>;
}

function startConsumer(settings: ChaosConsumerSettings, inbox: Inbox<unknown>, handle: DeliveryHandler<unknown>): Promise<Running> {
  // Tried again in place, long: a message's effect never fails on its own here, only the database can.
  const retry = { retryDelayMs: 20, maxAttempts: 1_000 };
  const b = settings.broker;
  if (b.kind === "nats")
    return NatsConsumer.start({ servers: b.servers, stream: b.stream, durable: b.durable, ackWaitMs: b.ackWaitMs, inbox, handle, ...retry });
  if (b.kind === "rabbitmq") return RabbitMqConsumer.start({ url: b.url, queue: b.queue, inbox, handle, ...retry });
  return RedisStreamsConsumer.start({ url: b.url, stream: b.stream, group: b.group, consumer: settings.name, inbox, handle, ...retry });
}

const log = (text: string) => process.stderr.write(`${new Date().toISOString()} consumer ${process.pid}: ${text}\n`);

async function main(): Promise<void> {
  const settings = JSON.parse(process.argv[2] ?? "") as ChaosConsumerSettings;
  let stopping = false;
  let running: Running | undefined;
  let closeOutbox: (() => Promise<void>) | undefined;
  let timer: NodeJS.Timeout | undefined;
  const send = (message: ChaosConsumerReport | "ready") =>
    new Promise<void>((resolve) => {
      if (!process.connected || !process.send) return resolve();
      try {
        process.send(message, undefined, undefined, () => resolve());
      } catch {
        resolve(); // the channel closed meanwhile
      }
    });
  const report = () => send({ stats: { ...(running?.stats ?? {}) } });
  const stop = async (why: string) => {
    if (stopping) return;
    stopping = true;
    log(`stopping (${why})`);
    if (timer) clearInterval(timer);
    try {
      await running?.stop();
      await report();
      await closeOutbox?.();
    } catch (error) {
      log(`error while stopping: ${String(error)}`);
      process.exit(1);
    }
    process.exit(0);
  };
  process.on("SIGTERM", () => void stop("SIGTERM"));
  process.on("SIGINT", () => void stop("SIGINT"));
  process.on("disconnect", () => void stop("the run is gone")); // the parent died: do not outlive it

  const outbox = await openOutbox(settings.db, { ...(settings.schema === undefined ? {} : { schema: settings.schema }) });
  closeOutbox = () => outbox.close();
  const store = outbox.store;
  const inbox = new Inbox<unknown>({ store, source: settings.source });
  const handle: DeliveryHandler<unknown> = async (message, tx) => {
    await store.enqueue(tx, { type: "chaos.effect", payload: { id: message.id, key: message.key ?? "", body: JSON.stringify(message.body) } });
  };
  // The broker may be down (the run restarts it): try again until it answers, or until told to stop.
  for (let failures = 0; running === undefined && !stopping; failures += 1) {
    try {
      const started = await startConsumer(settings, inbox, handle);
      if (stopping) await started.stop();
      else running = started;
    } catch (error) {
      log(`the consumer did not start (${String(error)}); trying again`);
      await new Promise((resolve) => setTimeout(resolve, Math.min(100 * 2 ** failures, 2_000)));
    }
  }
  if (stopping) return;
  log(`consuming from ${settings.broker.kind} as ${settings.name}`);
  await send("ready");
  timer = setInterval(() => void report(), settings.reportEveryMs);
}

// Only as a process of its own: importing this file (for its types) runs nothing.
if (process.argv[1] !== undefined && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().catch((error: unknown) => {
    log(`failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    process.exit(1);
  });
}
