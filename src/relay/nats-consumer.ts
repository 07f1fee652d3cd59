// The receiving side for NATS JetStream: a durable pull consumer that hands each message, in stream
// order and one at a time, to the app's handler inside the consumer's own database transaction,
// through the inbox; the message is acknowledged only after that transaction committed. A message
// that comes again (redelivered after a crash between the commit and the ack, or re-published
// after the broker's duplicate window) finds its id in the inbox and is acknowledged without
// running the handler. A handler that throws rolls back and is tried again in place, before any
// later message, so the stream's order (and each key's) holds; after maxAttempts the message is
// terminated (never redelivered) and reported, and the consumer goes on.

import type { JsMsg } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { InvalidArgumentError } from "../outbox/errors.js";
import { type ConsumerRetry, type ConsumerStats, checkRetry, type DeliveredMessage, type DeliveryHandler, deliver, parseBody } from "./deliver.js";
import type { Inbox } from "./inbox.js";
import { importOptional } from "../outbox/optional.js";

export interface NatsConsumerOptions<Tx> extends ConsumerRetry {
  readonly servers: string | readonly string[];
  readonly stream: string;
  /** The durable consumer's name; created (explicit acks) if it does not exist. */
  readonly durable: string;
  readonly inbox: Inbox<Tx>;
  readonly handle: DeliveryHandler<Tx>;
  /** How long the server waits for an ack before redelivering (default 30 000 ms); kept alive while a message is retried. */
  readonly ackWaitMs?: number;
}

const OWN_HEADERS = new Set(["nats-msg-id", "wassal-type", "wassal-key", "wassal-message-id"]);

function delivered(m: JsMsg, stream: string): DeliveredMessage {
  const headers: Record<string, string> = {};
  for (const [name, values] of m.headers ?? []) if (!OWN_HEADERS.has(name.toLowerCase())) headers[name] = values.join(", ");
  const body = parseBody(new TextDecoder().decode(m.data));
  return {
    id: m.headers?.get("Nats-Msg-Id") || `${stream}:${m.seq}`,
    type: m.headers?.get("Wassal-Type") || null,
    key: m.headers?.get("Wassal-Key") || null,
    headers,
    body,
    source: m.subject,
    redelivered: m.redelivered,
  };
}

export class NatsConsumer<Tx> {
  readonly stats: ConsumerStats = { applied: 0, duplicates: 0, failed: 0, terminated: 0 };
  readonly #nc: NatsConnection;
  readonly #messages: { stop(): void; close(): Promise<unknown> };
  #stopping = false;
  readonly #loop: Promise<void>;

  private constructor(
    nc: NatsConnection,
    messages: AsyncIterable<JsMsg> & { stop(): void; close(): Promise<unknown> },
    options: NatsConsumerOptions<Tx>,
    retry: { maxAttempts: number; delayMs: number },
  ) {
    this.#nc = nc;
    this.#messages = messages;
    this.#loop = (async () => {
      for await (const m of messages) {
        const acknowledger = {
          ack: () => m.ackAck().then(() => undefined),
          giveUp: (reason: string) => m.term(reason),
          working: () => m.working(),
          stopping: () => this.#stopping,
        };
        await deliver(delivered(m, options.stream), acknowledger, options.inbox, options.handle, retry, this.stats, options.onError).catch(() => undefined);
      }
    })();
  }

  /** Connects, creates the durable consumer if needed, and starts handing messages to `handle`. */
  static async start<Tx>(options: NatsConsumerOptions<Tx>): Promise<NatsConsumer<Tx>> {
    const ackWaitMs = options.ackWaitMs ?? 30_000;
    if (!Number.isSafeInteger(ackWaitMs) || ackWaitMs < 100)
      throw new InvalidArgumentError(`ackWaitMs must be a whole number of milliseconds >= 100 (got ${String(ackWaitMs)})`);
    const retry = checkRetry(options);
    if (typeof options.handle !== "function") throw new InvalidArgumentError("NatsConsumer needs handle: (message, tx) => void");
    const transport = await importOptional<typeof import("@nats-io/transport-node")>("@nats-io/transport-node", "a NATS consumer");
    const jetstream = await importOptional<typeof import("@nats-io/jetstream")>("@nats-io/jetstream", "a NATS consumer");
    const nc = await transport.connect({ servers: [options.servers].flat(), maxReconnectAttempts: -1, reconnectTimeWait: 250 });
    try {
      const jsm = await jetstream.jetstreamManager(nc);
      const exists = await jsm.consumers.info(options.stream, options.durable).then(
        () => true,
        () => false,
      );
      if (!exists) {
        await jsm.consumers.add(options.stream, { durable_name: options.durable, ack_policy: jetstream.AckPolicy.Explicit, ack_wait: ackWaitMs * 1_000_000 });
      }
      const consumer = await jetstream.jetstream(nc).consumers.get(options.stream, options.durable);
      const messages = await consumer.consume({ max_messages: 100 });
      return new NatsConsumer(nc, messages, options, retry);
    } catch (error) {
      await nc.close();
      throw error;
    }
  }

  /** Stops taking messages, lets the one in hand finish, and closes the connection. */
  async stop(): Promise<void> {
    this.#stopping = true;
    this.#messages.stop();
    await this.#loop.catch(() => undefined);
    await this.#nc.close();
  }
}
