// RabbitMQ: each message is published persistent, mandatory, with the message id as `message-id`,
// on a confirm channel; the relay completes it once the broker confirms it. A message no queue
// takes (returned, being mandatory) is an error, retried and then dead; so is an exchange that does
// not exist. A message the broker nacks (a quorum queue electing its leader, a full queue that
// rejects publishes) is held as "broker unavailable" and published again, no attempt spent.
// Publishes are pipelined: confirms come back for many outstanding messages at once.
// The connection is re-opened in the background; while it is down, publishes find the broker
// unreachable (the relay holds those messages).
//
// A cluster is given as its nodes' URLs (separated by commas, or an array). Each (re)connection
// tries them in turn, starting with the one after the node last connected to: a node that dropped
// the connection (going down, or being drained) is tried last, so the relay moves to another node at
// once, and the backoff applies only after a whole round of nodes failed.
//
// A destination is "<exchange>/<routing key>"; "/<queue>" publishes through the default exchange
// straight to a queue. The client (amqplib) is an optional peer dependency.

import type { ChannelModel, ConfirmChannel } from "amqplib";
import { InvalidArgumentError } from "../outbox/errors.js";
import { redactSecrets, redactUrl, rememberUrlSecrets } from "../outbox/redact.js";
import { importOptional } from "../outbox/optional.js";
import { sleep } from "./deliver.js";
import { BrokerUnavailableError, type OutgoingMessage, PermanentPublishError, type PublishReceipt, type Publisher } from "./publisher.js";

export interface RabbitMqOptions {
  /**
   * e.g. amqp://guest:guest@127.0.0.1:5672; or a cluster's nodes, separated by commas
   * (amqp://guest:guest@h1:5672,amqp://guest:guest@h2:5672) or as an array: each a full amqp:// or
   * amqps:// URL.
   */
  readonly url: string | readonly string[];
  /**
   * Called on connection changes, for logs: "connect" and "disconnect" (with the node, its URL
   * redacted), and "connect failed: <each node's reason>" after every node of a round failed.
   */
  readonly onStatus?: (status: string, node?: string) => void;
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
/** How long the first publishes wait for the first connection before the broker counts as unavailable. */
const FIRST_CONNECTION_WAIT_MS = 5_000;
/**
 * How long one node may take to accept the connection and finish the AMQP handshake before the
 * next is tried. Without it, a node cut off by a partition (packets dropped, nothing refused) would
 * hold the failover for the system's TCP connect timeout, minutes on Linux.
 */
export const AMQP_CONNECT_TIMEOUT_MS = 10_000;

// No credentials in the examples: printed text has every URL's password redacted, examples too.
const VALID_AMQP =
  "give amqp://HOST:5672 or amqps://HOST:5671 (user and password before the host), or a cluster's nodes separated by commas (amqp://h1:5672,amqp://h2:5672)";

/**
 * The items of a comma-separated list of URLs, trimmed: split only where the next one starts with
 * a scheme (`scheme`, a regular expression's text: any scheme by default) and "://", so a comma
 * inside a password stays in it. A trailing comma (or comma and spaces) ends the list; it is no
 * empty item.
 */
export function listedUrls(text: string, scheme = "[a-z][a-z0-9+.-]*"): string[] {
  return text
    .replace(/[\s,]+$/, "")
    .split(new RegExp(`,(?=\\s*${scheme}:\\/\\/)`, "i"))
    .map((item) => item.trim());
}

/**
 * The nodes of a RabbitMQ URL option (one URL, several separated by commas, or an array), each
 * checked to be a full amqp:// or amqps:// URL and its secrets remembered for redaction. Throws
 * InvalidArgumentError naming the bad node (redacted) and what is valid; `label` (e.g. "--to")
 * starts the message.
 */
export function amqpUrls(url: unknown, label = "RabbitMQ url"): string[] {
  const valid = label === "--to" ? VALID_AMQP : `${VALID_AMQP}, or an array of such URLs`;
  if (typeof url === "string") rememberUrlSecrets(url);
  const given: readonly unknown[] | undefined = typeof url === "string" ? listedUrls(url) : Array.isArray(url) ? url : undefined;
  if (given === undefined) throw new InvalidArgumentError(`${label}: expected a string or an array of strings (got ${typeof url}); ${valid}`);
  if (given.length === 0) throw new InvalidArgumentError(`${label}: the list of RabbitMQ nodes is empty; ${valid}`);
  for (const node of given) if (typeof node === "string") rememberUrlSecrets(node.trim()); // before any message shows one
  return given.map((node, index) => {
    const where = given.length > 1 ? ` (node ${index + 1} of ${given.length})` : "";
    if (typeof node !== "string")
      throw new InvalidArgumentError(
        `${label}: ${given.length > 1 ? `node ${index + 1} of ${given.length}` : "the URL"} is a ${typeof node}, not a URL; ${valid}`,
      );
    const text = node.trim();
    let parsed: URL | undefined;
    try {
      parsed = new URL(text);
    } catch {
      parsed = undefined;
    }
    if (parsed === undefined || (parsed.protocol !== "amqp:" && parsed.protocol !== "amqps:") || parsed.hostname === "") {
      throw new InvalidArgumentError(`${label}: ${JSON.stringify(redactUrl(text))}${where} is not an amqp:// or amqps:// URL naming a host; ${valid}`);
    }
    // "amqp://h1,h2" parses, with "h1,h2" as the host: a list whose later nodes lack their scheme.
    if (parsed.hostname.includes(",")) {
      throw new InvalidArgumentError(
        `${label}: ${JSON.stringify(redactUrl(text))}${where} has a comma in its host: each node of a list needs its own amqp:// (or amqps://); ${valid}`,
      );
    }
    return text;
  });
}

/** The order nodes are tried in: starting after the one last connected to (-1: none yet), which comes last. */
export function nodeRound(last: number, count: number): number[] {
  return Array.from({ length: count }, (_, step) => (last + 1 + step) % count);
}

/** An error's message, for a status line or a combined error: free of secrets. */
export function failureText(error: unknown): string {
  return redactSecrets(error instanceof Error ? error.message : String(error));
}

export class RabbitMqPublisher implements Publisher {
  readonly description: string;
  readonly #amqp: typeof import("amqplib");
  readonly #urls: readonly string[];
  /** The nodes as logs show them (redacted), in the order of #urls. */
  readonly #nodes: readonly string[];
  readonly #onStatus: ((status: string, node?: string) => void) | undefined;
  readonly #confirmTimeoutMs: number;
  /** The index of the node last connected to (-1: none yet): the next round starts after it. */
  #last = -1;
  #model: ChannelModel | undefined;
  #channel: ConfirmChannel | undefined;
  /** Message ids the broker returned as unroutable; their confirms follow. */
  readonly #returned = new Set<string>();
  /** Exchanges seen to exist (a publish to a missing one would close the channel). */
  readonly #exchanges = new Set<string>([""]);
  #closed = false;
  #connected: Promise<void>;
  #markConnected: () => void = () => undefined;
  #everConnected = false;

  /** Waits for the first connection, FIRST_CONNECTION_WAIT_MS at most, or until `signal` aborts. */
  async #firstConnection(signal: AbortSignal): Promise<void> {
    const connected = new AbortController();
    void this.#connected.then(() => connected.abort());
    await sleep(FIRST_CONNECTION_WAIT_MS, AbortSignal.any([signal, connected.signal]));
  }

  private constructor(amqp: typeof import("amqplib"), urls: readonly string[], options: RabbitMqOptions) {
    this.#amqp = amqp;
    this.#urls = urls;
    this.#nodes = urls.map(redactUrl);
    this.#onStatus = options.onStatus;
    this.#confirmTimeoutMs = options.confirmTimeoutMs ?? 30_000;
    this.description = `RabbitMQ at ${this.#nodes.join(", ")}`;
    this.#connected = new Promise((resolve) => (this.#markConnected = resolve));
    void this.#connect();
  }

  /** Loads the client and starts connecting; resolves at once (publishes find the broker unreachable until connected). */
  static async open(options: RabbitMqOptions): Promise<RabbitMqPublisher> {
    const urls = amqpUrls(options.url);
    const timeout = options.confirmTimeoutMs ?? 30_000;
    if (!Number.isSafeInteger(timeout) || timeout < 1)
      throw new InvalidArgumentError(`confirmTimeoutMs must be a whole number of milliseconds >= 1 (got ${String(timeout)})`);
    const amqp = await importOptional<typeof import("amqplib")>("amqplib", "a RabbitMQ relay");
    return new RabbitMqPublisher(amqp, urls, options);
  }

  /** Resolves once connected (for the first time). */
  connected(): Promise<void> {
    return this.#connected;
  }

  /** Connects to a node, trying each in turn; the backoff comes only after a whole round failed. */
  async #connect(): Promise<void> {
    for (let delay = 250; !this.#closed; delay = Math.min(delay * 2, MAX_RECONNECT_DELAY_MS)) {
      const failures: string[] = [];
      for (const index of nodeRound(this.#last, this.#urls.length)) {
        if (this.#closed) return;
        try {
          await this.#open(index);
          return;
        } catch (error) {
          failures.push(`${this.#nodes[index]}: ${failureText(error)}`);
        }
      }
      if (this.#closed) return;
      this.#onStatus?.(`connect failed: ${failures.join("; ")}`);
      await new Promise((resolve) => setTimeout(resolve, delay).unref());
    }
  }

  /** Connects to one node and opens the confirm channel; throws (leaking nothing) if either fails. */
  async #open(index: number): Promise<void> {
    const url = this.#urls[index] as string;
    const opened = await this.#amqp.connect(url, { timeout: AMQP_CONNECT_TIMEOUT_MS });
    // At once: a node going down while the channel opens emits "error", fatal without a listener.
    opened.on("error", () => undefined); // followed by "close"
    if (this.#closed) return void (await opened.close().catch(() => undefined));
    let channel: ConfirmChannel;
    try {
      channel = await opened.createConfirmChannel();
    } catch (error) {
      await opened.close().catch(() => undefined); // the channel failed: do not leak the connection
      throw error;
    }
    opened.on("close", () => this.#lost(opened));
    channel.on("error", () => undefined); // followed by "close"
    channel.on("close", () => this.#lost(opened));
    channel.on("return", (message) => {
      const id: unknown = message.properties.messageId;
      if (typeof id === "string") this.#returned.add(id);
    });
    this.#model = opened;
    this.#channel = channel;
    this.#last = index;
    this.#everConnected = true;
    this.#markConnected();
    this.#onStatus?.("connect", this.#nodes[index]);
    if (this.#closed) await this.close(); // closed while connecting
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
    this.#onStatus?.("disconnect", this.#nodes[this.#last]);
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
    // Just opened: the first connection is usually a moment away, so the first publishes wait for
    // it (a few seconds at most) instead of each being held as "broker unavailable".
    if (this.#channel === undefined && !this.#everConnected) await this.#firstConnection(signal);
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
              // A nack: the broker could not take the message now, not a fault of the message (a
              // quorum queue without a leader while its nodes elect one; a full queue with
              // x-overflow reject-publish). Held and published again, no attempt spent.
              return reject(new BrokerUnavailableError(`${this.description} did not take the message (${text}); it is published again`, { cause: error }));
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
