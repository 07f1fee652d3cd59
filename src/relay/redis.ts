// Redis Streams: each message is appended to its stream (the destination is the stream's key) with
// XADD, as the fields id, type, key, headers (JSON) and body. Redis has no duplicate window of its
// own, so the append runs in one script with a marker (SET NX with an expiry): a re-publish of an
// id (and a keyed message's number: duplicateId) within the window appends nothing and is
// acknowledged as a duplicate. The client (redis) is
// an optional peer dependency; it reconnects by itself, and while it is down publishes find the
// broker unreachable (the relay holds those messages).

import type { RedisClientType } from "redis";
import { InvalidArgumentError } from "../outbox/errors.js";
import { redactUrl, rememberUrlSecrets } from "../outbox/redact.js";
import { importOptional } from "../outbox/optional.js";
import { BrokerUnavailableError, duplicateId, type OutgoingMessage, PermanentPublishError, type PublishReceipt, type Publisher } from "./publisher.js";

export interface RedisStreamsOptions {
  /** e.g. redis://127.0.0.1:6379 */
  readonly url: string;
  /** How long an id is remembered against re-publishes (default 120 000 ms, as NATS's default window). */
  readonly duplicateWindowMs?: number;
  /** Called on connection changes ("connect", "disconnect"), for logs. */
  readonly onStatus?: (status: string) => void;
}

/**
 * Appends unless the id was appended within the window; returns the entry id, or nil for a
 * duplicate. The marker is set only after XADD succeeded: Redis does not roll a script back, so a
 * failed append must leave no marker that would pass a later re-publish off as a duplicate.
 */
const APPEND = `if redis.call('EXISTS', KEYS[2]) == 1 then
  return false
end
local entry = redis.call('XADD', KEYS[1], '*', unpack(ARGV, 2))
redis.call('SET', KEYS[2], '1', 'PX', ARGV[1])
return entry`;

/** Refused for good: the key holds another type, or the entry is too large for the protocol. */
const REFUSED = /WRONGTYPE|proto-max-bulk-len|invalid bulk length|too large/i;
/** Passing states of the server (out of memory, loading, a replica, busy): held, not failed. */
const PASSING = /^(OOM|LOADING|READONLY|MASTERDOWN|BUSY|TRYAGAIN|CLUSTERDOWN)\b/;

export class RedisStreamsPublisher implements Publisher {
  readonly description: string;
  readonly #client: RedisClientType;
  readonly #windowMs: number;

  private constructor(client: RedisClientType, options: RedisStreamsOptions, windowMs: number) {
    this.#client = client;
    this.#windowMs = windowMs;
    this.description = `Redis Streams at ${redactUrl(options.url)}`;
  }

  /** Loads the client and starts connecting; resolves at once (publishes find the broker unreachable until connected). */
  static async open(options: RedisStreamsOptions): Promise<RedisStreamsPublisher> {
    if (typeof options.url !== "string" || !/^rediss?:\/\//.test(options.url)) {
      throw new InvalidArgumentError(
        `a Redis URL looks like redis://host:6379 (got ${typeof options.url === "string" ? redactUrl(options.url) : typeof options.url})`,
      );
    }
    rememberUrlSecrets(options.url);
    const windowMs = options.duplicateWindowMs ?? 120_000;
    if (!Number.isSafeInteger(windowMs) || windowMs < 1)
      throw new InvalidArgumentError(`duplicateWindowMs must be a whole number of milliseconds >= 1 (got ${String(windowMs)})`);
    const redis = await importOptional<typeof import("redis")>("redis", "a Redis Streams relay");
    const client = redis.createClient({
      url: options.url,
      disableOfflineQueue: true, // fail at once while reconnecting: the relay holds the message
      socket: { reconnectStrategy: (retries: number) => Math.min(250 * 2 ** retries, 5_000) },
    }) as RedisClientType;
    client.on("error", () => undefined); // reconnection is the client's; publishes report the outage
    client.on("ready", () => options.onStatus?.("connect"));
    client.on("end", () => options.onStatus?.("disconnect"));
    client.on("reconnecting", () => options.onStatus?.("disconnect"));
    client.connect().catch(() => undefined);
    return new RedisStreamsPublisher(client, options, windowMs);
  }

  /** Resolves once connected. */
  async connected(): Promise<void> {
    if (this.#client.isReady) return;
    await new Promise<void>((resolve) => this.#client.once("ready", () => resolve()));
  }

  async publish(message: OutgoingMessage, signal: AbortSignal): Promise<PublishReceipt> {
    if (!this.#client.isReady) throw new BrokerUnavailableError(`${this.description}: not connected`);
    const stream = message.destination;
    const marker = `wassal-sent:${stream}:${duplicateId(message)}`;
    const fields = [
      "id",
      message.id,
      "type",
      message.type,
      ...(message.key === null ? [] : ["key", message.key]),
      ...(message.keySeq === null ? [] : ["seq", String(message.keySeq)]),
      "headers",
      JSON.stringify(message.headers),
      "body",
      message.body,
    ];
    try {
      const entry = await this.#client.sendCommand(["EVAL", APPEND, "2", stream, marker, String(this.#windowMs), ...fields]);
      return { duplicate: entry === null };
    } catch (error) {
      const text = error instanceof Error ? error.message : String(error);
      if (REFUSED.test(text)) throw new PermanentPublishError(`${stream}: ${text}`, { cause: error });
      if (!this.#client.isReady || signal.aborted || PASSING.test(text)) throw new BrokerUnavailableError(`${this.description}: ${text}`, { cause: error });
      throw new Error(`XADD to ${stream}: ${text}`, { cause: error });
    }
  }

  async close(): Promise<void> {
    if (this.#client.isOpen) await this.#client.close().catch(() => undefined);
    else this.#client.destroy();
  }
}
