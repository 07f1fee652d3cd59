// The receiving side for Redis Streams: reads a stream through a consumer group, one entry at a
// time in stream order, applies each through the inbox in the consumer's transaction, and XACKs it
// after the commit; an entry appended again (a re-publish after the window) finds its id in the
// inbox. On start it first takes up the entries it had read but not acknowledged (its own pending
// ones: a restart with the same consumer name resumes them). A handler that keeps failing is
// acknowledged without effect after maxAttempts and reported. See deliver.ts.

import type { RedisClientType } from "redis";
import { InvalidArgumentError } from "../outbox/errors.js";
import { type ConsumerRetry, type ConsumerStats, checkRetry, type DeliveredMessage, type DeliveryHandler, deliver, parseBody } from "./deliver.js";
import type { Inbox } from "./inbox.js";
import { importOptional } from "../outbox/optional.js";

export interface RedisStreamsConsumerOptions<Tx> extends ConsumerRetry {
  readonly url: string;
  readonly stream: string;
  /** The consumer group (created at the stream's start if missing). */
  readonly group: string;
  /** This consumer's name in the group: keep it across restarts to resume its pending entries. */
  readonly consumer: string;
  readonly inbox: Inbox<Tx>;
  readonly handle: DeliveryHandler<Tx>;
}

type Entry = { id: string; message: Record<string, string> };

function delivered(entry: Entry, stream: string, redelivered: boolean): DeliveredMessage {
  const f = entry.message;
  let headers: Record<string, string> = {};
  try {
    headers = JSON.parse(f.headers ?? "{}") as Record<string, string>;
  } catch {
    // not Wassal's headers: none
  }
  return {
    id: f.id || `${stream}:${entry.id}`,
    type: f.type || null,
    key: f.key || null,
    headers,
    body: parseBody(f.body ?? ""),
    source: stream,
    redelivered,
  };
}

export class RedisStreamsConsumer {
  readonly stats: ConsumerStats = { applied: 0, duplicates: 0, failed: 0, terminated: 0 };
  readonly #client: RedisClientType;
  #stopping = false;
  #loop: Promise<void> = Promise.resolve();

  private constructor(client: RedisClientType) {
    this.#client = client;
  }

  static async start<Tx>(options: RedisStreamsConsumerOptions<Tx>): Promise<RedisStreamsConsumer> {
    if (typeof options.handle !== "function") throw new InvalidArgumentError("RedisStreamsConsumer needs handle: (message, tx) => void");
    const retry = checkRetry(options);
    const redis = await importOptional<typeof import("redis")>("redis", "a Redis Streams consumer");
    const client = redis.createClient({ url: options.url }) as RedisClientType;
    client.on("error", () => undefined);
    await client.connect();
    try {
      await client.xGroupCreate(options.stream, options.group, "0", { MKSTREAM: true }).catch((error: unknown) => {
        if (!String(error).includes("BUSYGROUP")) throw error;
      });
    } catch (error) {
      await client.close().catch(() => undefined);
      throw error;
    }
    const consumer = new RedisStreamsConsumer(client);
    consumer.#loop = consumer.#run(options, retry);
    return consumer;
  }

  async #run<Tx>(options: RedisStreamsConsumerOptions<Tx>, retry: { maxAttempts: number; delayMs: number }): Promise<void> {
    let from = "0"; // first our own pending entries, then new ones
    for (let failures = 0; !this.#stopping; ) {
      let entries: (Entry | { id: string; message: null })[];
      try {
        const reply = (await this.#client.xReadGroup(
          options.group,
          options.consumer,
          { key: options.stream, id: from },
          from === "0" ? { COUNT: 1 } : { COUNT: 1, BLOCK: 200 },
        )) as { name: string; messages: (Entry | { id: string; message: null })[] }[] | null;
        entries = reply?.[0]?.messages ?? [];
        failures = 0;
      } catch {
        // The connection went away (a restart): the client reconnects; read our pending entries
        // again from the start, then the new ones.
        if (this.#stopping) return;
        from = "0";
        failures += 1;
        await new Promise((resolve) => setTimeout(resolve, Math.min(50 * 2 ** failures, 2_000)));
        continue;
      }
      if (from === "0" && entries.length === 0) {
        from = ">";
        continue;
      }
      for (const entry of entries) {
        const ack = () => this.#client.xAck(options.stream, options.group, entry.id).then(() => undefined);
        if (entry.message === null) {
          await ack().catch(() => undefined); // an entry deleted from the stream while pending: nothing to apply
          continue;
        }
        const acknowledger = { ack, giveUp: ack, stopping: () => this.#stopping };
        await deliver(delivered(entry, options.stream, from === "0"), acknowledger, options.inbox, options.handle, retry, this.stats, options.onError).catch(
          () => undefined,
        );
      }
    }
  }

  /** Stops reading, lets the entry in hand finish, and closes the connection. */
  async stop(): Promise<void> {
    this.#stopping = true;
    await this.#loop.catch(() => undefined);
    await this.#client.close().catch(() => undefined);
  }
}
