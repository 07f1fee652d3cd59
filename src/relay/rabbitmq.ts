// RabbitMQ: each message is published persistent, mandatory, with the message id as `message-id`,
// on a confirm channel; the relay completes it once the broker confirms it. A message no queue
// takes (returned, being mandatory) is an error, retried and then dead; so is an exchange that does
// not exist. Publishes are pipelined: confirms come back for many outstanding messages at once.
// The connection is re-opened in the background with backoff; while it is down, publishes find the
// broker unreachable (the relay holds those messages).
//
// A destination is "<exchange>/<routing key>"; "/<queue>" publishes through the default exchange
// straight to a queue. The client (amqplib) is an optional peer dependency.

import type { ChannelModel, ConfirmChannel } from "amqplib";
import { InvalidArgumentError } from "../outbox/errors.js";
import { redactUrl, rememberUrlSecrets } from "../outbox/redact.js";
import { importOptional } from "../outbox/optional.js";
import { BrokerUnavailableError, type OutgoingMessage, PermanentPublishError, type PublishReceipt, type Publisher } from "./publisher.js";

export interface RabbitMqOptions {
  /** e.g. amqp://guest:guest@127.0.0.1:5672 */
  readonly url: string;
  /** Called on connection changes ("connect", "disconnect"), for logs. */
  readonly onStatus?: (status: string) => void;
  /**
   * How long to wait for the broker's confirm (default 30 000 ms). A broker under a memory or
   * disk alarm blocks publishers and confirms nothing: after this the message is held as
   * unreachable and published again (a late confirm then makes a duplicate, which a consumer's
   * inbox absorbs).
   */
  readonly confirmTimeoutMs?: number;
}

/** Splits "<exchange>/<routing key>" (the first slash separates them). */
export function amqpDestination(destination: string): { exchange: string; routingKey: string } {
  const at = destination.indexOf("/");
  if (at < 0)
    throw new PermanentPublishError(`destination ${JSON.stringify(destination)} is not "<exchange>/<routing key>" (or "/<queue>" for the default exchange)`);
  return { exchange: destination.slice(0, at), routingKey: destination.slice(at + 1) };
}

/** Broker errors that refuse this message for good. */
const REFUSED = /larger than configured max size|message_size/i;
const MAX_RECONNECT_DELAY_MS = 5_000;

export class RabbitMqPublisher implements Publisher {
  readonly description: string;
  readonly #amqp: typeof import("amqplib");
  readonly #url: string;
  readonly #onStatus: ((status: string) => void) | undefined;
  readonly #confirmTimeoutMs: number;
  #model: ChannelModel | undefined;
  #channel: ConfirmChannel | undefined;
  /** Message ids the broker returned as unroutable; their confirms follow. */
  readonly #returned = new Set<string>();
  /** Exchanges seen to exist (a publish to a missing one would close the channel). */
  readonly #exchanges = new Set<string>([""]);
  #closed = false;
  #connected: Promise<void>;
  #markConnected: () => void = () => undefined;

  private constructor(amqp: typeof import("amqplib"), options: RabbitMqOptions) {
    this.#amqp = amqp;
    this.#url = options.url;
    this.#onStatus = options.onStatus;
    this.#confirmTimeoutMs = options.confirmTimeoutMs ?? 30_000;
    this.description = `RabbitMQ at ${redactUrl(options.url)}`;
    this.#connected = new Promise((resolve) => (this.#markConnected = resolve));
    void this.#connect();
  }

  /** Loads the client and starts connecting; resolves at once (publishes find the broker unreachable until connected). */
  static async open(options: RabbitMqOptions): Promise<RabbitMqPublisher> {
    if (typeof options.url !== "string" || !/^amqps?:\/\//.test(options.url)) {
      throw new InvalidArgumentError(
        `a RabbitMQ URL looks like amqp://USER:PASSWORD@HOST:5672 (got ${typeof options.url === "string" ? redactUrl(options.url) : typeof options.url})`,
      );
    }
    rememberUrlSecrets(options.url);
    const timeout = options.confirmTimeoutMs ?? 30_000;
    if (!Number.isSafeInteger(timeout) || timeout < 1)
      throw new InvalidArgumentError(`confirmTimeoutMs must be a whole number of milliseconds >= 1 (got ${String(timeout)})`);
    const amqp = await importOptional<typeof import("amqplib")>("amqplib", "a RabbitMQ relay");
    return new RabbitMqPublisher(amqp, options);
  }

  /** Resolves once connected (for the first time). */
  connected(): Promise<void> {
    return this.#connected;
  }

  async #connect(): Promise<void> {
    for (let delay = 250; !this.#closed; delay = Math.min(delay * 2, MAX_RECONNECT_DELAY_MS)) {
      let model: ChannelModel | undefined;
      try {
        model = await this.#amqp.connect(this.#url);
        const opened = model;
        if (this.#closed) return void (await opened.close().catch(() => undefined));
        const channel = await opened.createConfirmChannel();
        opened.on("error", () => undefined); // followed by "close"
        opened.on("close", () => this.#lost(opened));
        channel.on("error", () => undefined); // followed by "close"
        channel.on("close", () => this.#lost(opened));
        channel.on("return", (message) => {
          const id: unknown = message.properties.messageId;
          if (typeof id === "string") this.#returned.add(id);
        });
        this.#model = opened;
        this.#channel = channel;
        this.#markConnected();
        this.#onStatus?.("connect");
        if (this.#closed) await this.close(); // closed while connecting
        return;
      } catch {
        await model?.close().catch(() => undefined); // the channel failed: do not leak the connection
        await new Promise((resolve) => setTimeout(resolve, delay).unref());
      }
    }
  }

  /** The connection or channel closed: drop both and connect again. */
  #lost(model: ChannelModel): void {
    if (this.#model !== model) return;
    this.#model = undefined;
    this.#channel = undefined;
    // An exchange deleted meanwhile would close the next channel too: check each one again.
    this.#exchanges.clear();
    this.#exchanges.add("");
    void model.close().catch(() => undefined);
    if (this.#closed) return;
    this.#onStatus?.("disconnect");
    void this.#connect();
  }

  /** Checks on a channel of its own that the exchange exists (a publish to a missing one closes the channel). */
  async #exchangeExists(exchange: string): Promise<void> {
    if (this.#exchanges.has(exchange)) return;
    const model = this.#model;
    if (model === undefined) throw new BrokerUnavailableError(`${this.description}: not connected`);
    let probe: Awaited<ReturnType<ChannelModel["createChannel"]>>;
    try {
      probe = await model.createChannel();
    } catch (error) {
      throw new BrokerUnavailableError(`${this.description}: ${error instanceof Error ? error.message : String(error)}`, { cause: error });
    }
    probe.on("error", () => undefined);
    try {
      await probe.checkExchange(exchange);
      this.#exchanges.add(exchange);
    } catch (error) {
      const text = error instanceof Error ? error.message : String(error);
      if (!/NOT_FOUND|404/.test(text)) throw new BrokerUnavailableError(`${this.description}: ${text}`, { cause: error });
      throw new Error(
        `exchange ${JSON.stringify(exchange)} does not exist on ${this.description}: declare it (and bind a queue), then the message is published`,
        {
          cause: error,
        },
      );
    } finally {
      await probe.close().catch(() => undefined);
    }
  }

  async publish(message: OutgoingMessage, signal: AbortSignal): Promise<PublishReceipt> {
    const { exchange, routingKey } = amqpDestination(message.destination);
    if (this.#channel === undefined) throw new BrokerUnavailableError(`${this.description}: not connected`);
    await this.#exchangeExists(exchange);
    const channel = this.#channel;
    if (channel === undefined || signal.aborted) throw new BrokerUnavailableError(`${this.description}: not connected`);
    const headers: Record<string, string> = { ...message.headers, "wassal-message-id": message.messageId, "wassal-type": message.type };
    if (message.key !== null) headers["wassal-key"] = message.key;
    if (message.keySeq !== null) headers["wassal-key-seq"] = String(message.keySeq);
    const timeoutMs = this.#confirmTimeoutMs;
    return new Promise<PublishReceipt>((promiseResolve, promiseReject) => {
      const timer = setTimeout(
        () =>
          promiseReject(
            new BrokerUnavailableError(`${this.description}: no confirm within ${timeoutMs} ms (is the broker blocked by a memory or disk alarm?)`),
          ),
        timeoutMs,
      );
      const resolve = (receipt: PublishReceipt) => {
        clearTimeout(timer);
        promiseResolve(receipt);
      };
      const reject = (error: unknown) => {
        clearTimeout(timer);
        promiseReject(error);
      };
      try {
        channel.publish(
          exchange,
          routingKey,
          Buffer.from(message.body),
          {
            persistent: true,
            mandatory: true,
            messageId: message.id,
            type: message.type,
            contentType: "application/json",
            timestamp: Math.floor(message.createdAt.getTime() / 1000),
            headers,
          },
          (error: unknown) => {
            const returned = this.#returned.delete(message.id);
            if (error !== null && error !== undefined) {
              const text = error instanceof Error ? error.message : String(error);
              if (REFUSED.test(text)) return reject(new PermanentPublishError(`${message.destination}: ${text}`, { cause: error }));
              // amqplib fails outstanding confirms ("channel closed") before our close handler runs.
              if (this.#channel !== channel || /closed|ended|ECONNRESET/i.test(text)) {
                return reject(new BrokerUnavailableError(`${this.description}: ${text}`, { cause: error }));
              }
              return reject(new Error(`${this.description} did not confirm the message: ${text}`, { cause: error }));
            }
            if (returned)
              return reject(
                new Error(
                  `no queue is bound to exchange ${JSON.stringify(exchange)} for routing key ${JSON.stringify(routingKey)}: the broker returned the message`,
                ),
              );
            resolve({ duplicate: false });
          },
        );
      } catch (error) {
        // The channel closed between the check and the publish.
        reject(new BrokerUnavailableError(`${this.description}: ${error instanceof Error ? error.message : String(error)}`, { cause: error }));
      }
    });
  }

  async close(): Promise<void> {
    this.#closed = true;
    const model = this.#model;
    this.#model = undefined;
    this.#channel = undefined;
    await model?.close().catch(() => undefined);
  }
}
