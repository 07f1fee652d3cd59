// The receiving side for RabbitMQ: consumes a queue one message at a time (prefetch 1, so the
// queue's order holds), applies each through the inbox in the consumer's transaction, and acks it
// after the commit; a redelivered or re-published message finds its message-id in the inbox and is
// acked without running the handler. A handler that keeps failing is rejected without requeue
// (to the queue's dead-letter exchange, if it has one) after maxAttempts. A lost connection is
// opened again with backoff, and consuming goes on. See deliver.ts.
//
// Stopping (`stop()`): it cancels its consumption at once; a message between two tries of a failing
// handler (or not yet started) is rejected with requeue, back in its place for the next consumer,
// unapplied: no handler call starts after stop. It waits for a handler already running up to the
// grace (`shutdownGraceMs`, or `stop({ graceMs })`), then closes the connection, which puts any
// message still unacknowledged back in the queue.

import type { Channel, ChannelModel, ConsumeMessage } from "amqplib";
import { InvalidArgumentError } from "../outbox/errors.js";
import {
  type ConsumerRetry,
  type ConsumerShutdown,
  type ConsumerStats,
  checkGrace,
  checkRetry,
  type DeliveredMessage,
  type DeliveryHandler,
  deliver,
  keySeqOf,
  newConsumerStats,
  parseBody,
  settlesWithin,
  sleep,
} from "./deliver.js";
import type { Inbox } from "./inbox.js";
import { importOptional } from "../outbox/optional.js";

export interface RabbitMqConsumerOptions<Tx> extends ConsumerRetry, ConsumerShutdown {
  readonly url: string;
  /** The queue to consume (it must exist). */
  readonly queue: string;
  readonly inbox: Inbox<Tx>;
  readonly handle: DeliveryHandler<Tx>;
}

const OWN_HEADERS = new Set(["wassal-type", "wassal-key", "wassal-key-seq", "wassal-message-id"]);

function delivered(m: ConsumeMessage, queue: string): DeliveredMessage {
  const raw = (m.properties.headers ?? {}) as Record<string, unknown>;
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(raw)) if (!OWN_HEADERS.has(name) && value !== undefined && value !== null) headers[name] = String(value);
  const text = (value: unknown) => (typeof value === "string" && value !== "" ? value : null);
  return {
    id: text(m.properties.messageId) ?? "",
    type: text(raw["wassal-type"]) ?? text(m.properties.type),
    key: text(raw["wassal-key"]),
    keySeq: keySeqOf(text(raw["wassal-key-seq"])),
    headers,
    body: parseBody(m.content.toString("utf8")),
    source: queue,
    redelivered: m.fields.redelivered,
  };
}

export class RabbitMqConsumer {
  readonly stats: ConsumerStats = newConsumerStats();
  /** How long `stop()` waits for a handler already running, unless told otherwise. */
  readonly shutdownGraceMs: number;
  readonly #amqp: typeof import("amqplib");
  readonly #options: RabbitMqConsumerOptions<unknown>;
  readonly #retry: { maxAttempts: number; delayMs: number };
  #model: ChannelModel | undefined;
  #channel: Channel | undefined;
  #tag = "";
  #current: Promise<void> = Promise.resolve();
  #stopping = false;
  readonly #stopSignal = new AbortController();
  #stopped: Promise<void> | undefined;
  #loop: Promise<void> = Promise.resolve();

  private constructor(
    amqp: typeof import("amqplib"),
    options: RabbitMqConsumerOptions<unknown>,
    retry: { maxAttempts: number; delayMs: number },
    graceMs: number,
  ) {
    this.#amqp = amqp;
    this.shutdownGraceMs = graceMs;
    this.#options = options;
    this.#retry = retry;
  }

  /** Connects and starts consuming; reconnects (with backoff) whenever the connection is lost. */
  static async start<Tx>(options: RabbitMqConsumerOptions<Tx>): Promise<RabbitMqConsumer> {
    if (typeof options.handle !== "function") throw new InvalidArgumentError("RabbitMqConsumer needs handle: (message, tx) => void");
    const retry = checkRetry(options);
    const graceMs = checkGrace(options.shutdownGraceMs);
    const amqp = await importOptional<typeof import("amqplib")>("amqplib", "a RabbitMQ consumer");
    const consumer = new RabbitMqConsumer(amqp, options as RabbitMqConsumerOptions<unknown>, retry, graceMs);
    const { closed } = await consumer.#connect(); // the first connection must work: a bad URL or queue is an error now
    consumer.#loop = consumer.#reconnecting(closed);
    return consumer;
  }

  /** Opens a connection and consumes; resolves with a promise that settles when it closes. */
  async #connect(): Promise<{ readonly closed: Promise<void> }> {
    const options = this.#options;
    const model = await this.#amqp.connect(options.url);
    try {
      const closed = new Promise<void>((resolve) => {
        model.on("close", () => resolve());
        model.on("error", () => undefined); // followed by "close"
      });
      const channel = await model.createChannel();
      channel.on("error", () => undefined);
      await channel.prefetch(1);
      const { consumerTag } = await channel.consume(options.queue, (m) => {
        if (m === null) return;
        this.#current = this.#current.then(() => this.#deliver(channel, m)).catch(() => undefined);
      });
      this.#model = model;
      this.#channel = channel;
      this.#tag = consumerTag;
      return { closed };
    } catch (error) {
      await model.close().catch(() => undefined);
      throw error;
    }
  }

  async #deliver(channel: Channel, m: ConsumeMessage): Promise<void> {
    const options = this.#options;
    const message = delivered(m, options.queue);
    if (message.id === "") {
      this.stats.terminated += 1;
      try {
        options.onError?.(new Error("the message has no message-id, so it cannot be applied exactly once"), message, true);
        channel.nack(m, false, false);
      } catch {
        // a closed channel: the broker delivers it again
      }
      return;
    }
    const acknowledger = {
      ack: () => channel.ack(m),
      giveUp: () => channel.nack(m, false, false),
      stopping: () => this.#stopping,
      signal: this.#stopSignal.signal,
      // An early message (its key waits for an earlier one) held in place too long goes back to
      // its place in the queue, ahead of what came after it; so does one the consumer stops before
      // it could apply it.
      giveBack: () => channel.nack(m, false, true),
    };
    await deliver(message, acknowledger, options.inbox, options.handle, this.#retry, this.stats, options);
  }

  async #reconnecting(closed: Promise<void>): Promise<void> {
    for (let current = closed; ; ) {
      await current;
      if (this.#stopping) return;
      for (let delay = 250; !this.#stopping; delay = Math.min(delay * 2, 5_000)) {
        try {
          current = (await this.#connect()).closed;
          if (this.#stopping) await this.#model?.close().catch(() => undefined); // stopped while connecting
          break;
        } catch {
          await sleep(delay, this.#stopSignal.signal);
        }
      }
      if (this.#stopping) return;
    }
  }

  /**
   * Stops consuming at once: no handler call starts after this (a message between two tries of a
   * failing handler goes back to its place in the queue, unapplied). Waits for a handler already
   * running up to `graceMs` (default `shutdownGraceMs`), then closes the connection: a message
   * still unacknowledged goes back to the queue. Safe to call more than once.
   */
  stop(options: { readonly graceMs?: number } = {}): Promise<void> {
    this.#stopped ??= this.#shutdown(checkGrace(options.graceMs ?? this.shutdownGraceMs, "graceMs"));
    return this.#stopped;
  }

  async #shutdown(graceMs: number): Promise<void> {
    this.#stopping = true;
    this.#stopSignal.abort();
    const finished = this.#channel
      ?.cancel(this.#tag)
      .catch(() => undefined)
      .then(() => this.#current);
    await settlesWithin(finished ?? this.#current, graceMs);
    await this.#model?.close().catch(() => undefined);
    await this.#loop;
  }
}
