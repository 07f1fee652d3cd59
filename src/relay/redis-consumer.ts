// The receiving side for Redis Streams: reads a stream through a consumer group, one entry at a
// time in stream order, applies each through the inbox in the consumer's transaction, and XACKs it
// after the commit; an entry appended again (a re-publish after the window) finds its id in the
// inbox. On start it first takes up the entries it had read but not acknowledged (its own pending
// ones: a restart with the same consumer name resumes them). A handler that keeps failing is
// acknowledged without effect after maxAttempts and reported. An entry whose key waits for an
// earlier number is parked (still pending, so a restart resumes it in order), tried again soon and
// at once when a message of its key is applied, while the entries behind it go on (parking.ts).
// See deliver.ts.
//
// Stopping (`stop()`): it reads nothing more, and no handler call starts after it (not another try
// of a failing one: a wait between tries ends at once); what it had read and not applied stays
// pending in the group, resumed by the next start with the same consumer name. It waits for a
// handler already running up to the grace (`shutdownGraceMs`, or `stop({ graceMs })`), then closes
// the connection.

import type { RedisClientType } from "redis";
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
import { Parking } from "./parking.js";
import { importOptional } from "../outbox/optional.js";

export interface RedisStreamsConsumerOptions<Tx> extends ConsumerRetry, ConsumerShutdown {
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
    keySeq: keySeqOf(f.seq),
    headers,
    body: parseBody(f.body ?? ""),
    source: stream,
    redelivered,
  };
}

export class RedisStreamsConsumer {
  readonly stats: ConsumerStats = newConsumerStats();
  /** Entries held back because their key waited for an earlier number: tried again when due (they stay pending meanwhile). */
  readonly #parking = new Parking<Entry>();
  readonly #client: RedisClientType;
  /** How long `stop()` waits for a handler already running, unless told otherwise. */
  readonly shutdownGraceMs: number;
  #stopping = false;
  readonly #stopSignal = new AbortController();
  #stopped: Promise<void> | undefined;
  #loop: Promise<void> = Promise.resolve();

  private constructor(client: RedisClientType, graceMs: number) {
    this.#client = client;
    this.shutdownGraceMs = graceMs;
  }

  static async start<Tx>(options: RedisStreamsConsumerOptions<Tx>): Promise<RedisStreamsConsumer> {
    if (typeof options.handle !== "function") throw new InvalidArgumentError("RedisStreamsConsumer needs handle: (message, tx) => void");
    const retry = checkRetry(options);
    const graceMs = checkGrace(options.shutdownGraceMs);
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
    const consumer = new RedisStreamsConsumer(client, graceMs);
    consumer.#loop = consumer.#run(options, retry);
    return consumer;
  }

  async #run<Tx>(options: RedisStreamsConsumerOptions<Tx>, retry: { maxAttempts: number; delayMs: number }): Promise<void> {
    const apply = async (entry: Entry, redelivered: boolean, tries: number) => {
      const ack = () => this.#client.xAck(options.stream, options.group, entry.id).then(() => undefined);
      const message = delivered(entry, options.stream, redelivered);
      const applied = this.stats.applied;
      const acknowledger = {
        ack,
        giveUp: ack,
        stopping: () => this.#stopping,
        signal: this.#stopSignal.signal,
        heldBefore: tries > 0,
        // Its key waits for an earlier number: parked, still pending.
        defer: () => {
          if (message.key !== null && message.keySeq !== null) this.#parking.park(entry, message.key, message.keySeq, tries);
        },
      };
      await deliver(message, acknowledger, options.inbox, options.handle, retry, this.stats, options).catch(() => undefined);
      if (this.stats.applied > applied && message.key !== null) this.#parking.applied(message.key);
    };
    let from = "0"; // first our own pending entries (from the start, then after the last one read), then new ones
    for (let failures = 0; !this.#stopping; ) {
      // Entries parked whose time has come, each key's in order.
      const due = this.#parking.takeDue();
      if (due.length > 0) {
        for (const p of due) if (!this.#stopping) await apply(p.item, true, p.tries);
        continue;
      }
      const pending = from !== ">";
      let entries: (Entry | { id: string; message: null })[];
      try {
        const reply = (await this.#client.xReadGroup(
          options.group,
          options.consumer,
          { key: options.stream, id: from },
          pending ? { COUNT: 1 } : { COUNT: 1, BLOCK: Math.max(1, Math.min(200, Math.ceil(this.#parking.nextDueIn()))) },
        )) as { name: string; messages: (Entry | { id: string; message: null })[] }[] | null;
        entries = reply?.[0]?.messages ?? [];
        failures = 0;
      } catch {
        // The connection went away (a restart): the client reconnects; read our pending entries
        // again from the start (those put aside among them), then the new ones.
        if (this.#stopping) return;
        from = "0";
        this.#parking.clear();
        failures += 1;
        await sleep(Math.min(50 * 2 ** failures, 2_000), this.#stopSignal.signal);
        continue;
      }
      if (pending && entries.length === 0) {
        from = ">";
        continue;
      }
      for (const entry of entries) {
        if (pending) from = entry.id; // the next pending read starts after it, acknowledged or put aside
        if (entry.message === null) {
          // an entry deleted from the stream while pending: nothing to apply
          await this.#client.xAck(options.stream, options.group, entry.id).catch(() => undefined);
          continue;
        }
        await apply(entry, pending, 0);
      }
    }
  }

  /**
   * Stops reading at once: no handler call starts after this (an entry between two tries of a
   * failing handler stays pending, unapplied, for the next start with this consumer name). Waits
   * for a handler already running up to `graceMs` (default `shutdownGraceMs`), then closes the
   * connection. Safe to call more than once.
   */
  stop(options: { readonly graceMs?: number } = {}): Promise<void> {
    this.#stopped ??= this.#shutdown(checkGrace(options.graceMs ?? this.shutdownGraceMs, "graceMs"));
    return this.#stopped;
  }

  async #shutdown(graceMs: number): Promise<void> {
    this.#stopping = true;
    this.#stopSignal.abort();
    await settlesWithin(this.#loop, graceMs);
    await this.#client.close().catch(() => undefined);
  }
}
