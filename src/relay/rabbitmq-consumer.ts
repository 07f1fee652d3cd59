// The receiving side for RabbitMQ: consumes a queue one message at a time (prefetch 1, so the
// queue's order holds), applies each through the inbox in the consumer's transaction, and acks it
// after the commit; a redelivered or re-published message finds its message-id in the inbox and is
// acked without running the handler. A handler that keeps failing is rejected without requeue
// (to the queue's dead-letter exchange, if it has one) after maxAttempts. A lost connection is
// opened again, and consuming goes on. See deliver.ts.
//
// A cluster is given as its nodes' URLs (separated by commas, or an array), as for the publisher
// (rabbitmq.ts): at start each node is tried once, in order, and none working is an error then; on
// every reconnection the nodes are tried in turn from the one after the node that dropped the
// connection (tried last), and the backoff applies only after a whole round failed.
//
// Stopping (`stop()`): it cancels its consumption at once; a message between two tries of a failing
// handler (or not yet started) is rejected with requeue, back in its place for the next consumer,
// unapplied: no handler call starts after stop. It waits for a handler already running up to the
// grace (`shutdownGraceMs`, or `stop({ graceMs })`), then closes the connection, which puts any
// message still unacknowledged back in the queue.

import type { Channel, ChannelModel, ConsumeMessage } from "amqplib";
import { InvalidArgumentError } from "../outbox/errors.js";
import { redactUrl } from "../outbox/redact.js";
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
import { AMQP_CONNECT_TIMEOUT_MS, amqpUrls, failureText, nodeRound } from "./rabbitmq.js";

export interface RabbitMqConsumerOptions<Tx> extends ConsumerRetry, ConsumerShutdown {
  /**
   * e.g. amqp://guest:guest@127.0.0.1:5672; or a cluster's nodes, separated by commas
   * (amqp://guest:guest@h1:5672,amqp://guest:guest@h2:5672) or as an array: each a full amqp:// or
   * amqps:// URL.
   */
  readonly url: string | readonly string[];
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
  readonly #urls: readonly string[];
  /** The nodes as errors show them (redacted), in the order of #urls. */
  readonly #nodes: readonly string[];
  /** The index of the node last connected to (-1: none yet): the next round starts after it. */
  #last = -1;
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
    urls: readonly string[],
    options: RabbitMqConsumerOptions<unknown>,
    retry: { maxAttempts: number; delayMs: number },
    graceMs: number,
  ) {
    this.#amqp = amqp;
    this.#urls = urls;
    this.#nodes = urls.map(redactUrl);
    this.shutdownGraceMs = graceMs;
    this.#options = options;
    this.#retry = retry;
  }

  /** Connects and starts consuming; reconnects (to the next node, with backoff once every node failed) whenever the connection is lost. */
  static async start<Tx>(options: RabbitMqConsumerOptions<Tx>): Promise<RabbitMqConsumer> {
    if (typeof options.handle !== "function") throw new InvalidArgumentError("RabbitMqConsumer needs handle: (message, tx) => void");
    const urls = amqpUrls(options.url);
    const retry = checkRetry(options);
    const graceMs = checkGrace(options.shutdownGraceMs);
    const amqp = await importOptional<typeof import("amqplib")>("amqplib", "a RabbitMQ consumer");
    const consumer = new RabbitMqConsumer(amqp, urls, options as RabbitMqConsumerOptions<unknown>, retry, graceMs);
    const { closed } = await consumer.#connectFirst(); // the first connection must work: a bad URL or queue is an error now
    consumer.#loop = consumer.#reconnecting(closed);
    return consumer;
  }

  /**
   * The first connection: each node once, in order. Throws if none works: with one node, its error
   * as it was; with several, an AggregateError saying what each node answered.
   */
  async #connectFirst(): Promise<{ readonly closed: Promise<void> }> {
    const errors: unknown[] = [];
    for (const index of nodeRound(this.#last, this.#urls.length)) {
      try {
        return await this.#connect(index);
      } catch (error) {
        errors.push(error);
      }
    }
    if (errors.length === 1) throw errors[0];
    const answers = errors.map((error, index) => `${this.#nodes[index]}: ${failureText(error)}`).join("; ");
    throw new AggregateError(errors, `no RabbitMQ node could consume queue ${JSON.stringify(this.#options.queue)}: ${answers}`);
  }

  /** Opens a connection to one node and consumes; resolves with a promise that settles when it closes. */
  async #connect(index: number): Promise<{ readonly closed: Promise<void> }> {
    const options = this.#options;
    const model = await this.#amqp.connect(this.#urls[index] as string, { timeout: AMQP_CONNECT_TIMEOUT_MS });
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
      this.#last = index;
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
    for (let current: { readonly closed: Promise<void> } | undefined = { closed }; current !== undefined; ) {
      await current.closed;
      if (this.#stopping) return;
      current = await this.#reconnect();
    }
  }

  /**
   * Connects again, to each node in turn from the one after the node that dropped the connection
   * (so it moves to another node at once); the backoff comes only after a whole round failed.
   * Resolves with the new connection's `closed` (wrapped: a promise returned bare would be awaited
   * too), or undefined once stopping.
   */
  async #reconnect(): Promise<{ readonly closed: Promise<void> } | undefined> {
    for (let delay = 250; !this.#stopping; delay = Math.min(delay * 2, 5_000)) {
      for (const index of nodeRound(this.#last, this.#urls.length)) {
        if (this.#stopping) return undefined;
        try {
          const connected = await this.#connect(index);
          if (!this.#stopping) return connected;
          await this.#model?.close().catch(() => undefined); // stopped while connecting
          return undefined;
        } catch {
          // the next node
        }
      }
      await sleep(delay, this.#stopSignal.signal);
    }
    return undefined;
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
