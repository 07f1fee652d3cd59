// The receiving side for NATS JetStream: a durable pull consumer that hands each message, in stream
// order and one at a time, to the app's handler inside the consumer's own database transaction,
// through the inbox; the message is acknowledged only after that transaction committed. A message
// that comes again (redelivered after a crash between the commit and the ack, or re-published
// after the broker's duplicate window) finds its id in the inbox and is acknowledged without
// running the handler. A handler that throws rolls back and is tried again in place, before any
// later message; after maxAttempts the message is terminated (never redelivered) and reported,
// and the consumer goes on.
//
// Each key's order holds through crashes and competing consumers: a message whose key waits for an
// earlier number (held unacknowledged by a consumer that died, it comes back only after the ack
// wait; or in another consumer's queue) is parked in this consumer's hands, still unacknowledged and
// kept alive, tried again soon and at once when this consumer applies a message of its key, while
// the messages behind it go on (parking.ts). One parked for long (a gap) is handed back to the
// server with a delay, and parked again when it comes back.
//
// Ack deadlines follow the work: every message this consumer holds, whether it waits in its queue or
// runs, is kept alive with `working()` a few times per ack wait, and the durable consumer it
// creates lets at most `maxAckPending` messages be outstanding, so nothing it holds is redelivered
// while it is alive and well.
//
// Stopping (`stop()`): it stops taking messages at once (the pull ends; a message the client still
// delivers is handed back), hands back every message it holds that no handler runs for (queued,
// parked, and one between two tries of a failing handler: no try starts after stop), each with a nak,
// so that the next consumer gets it at once, unapplied; waits for a handler already running up to
// the grace (`shutdownGraceMs`, or `stop({ graceMs })`), and closes the connection. A run still
// going past the grace is left: its message, unacknowledged, comes again after the ack wait.

import type { JsMsg } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { InvalidArgumentError } from "../outbox/errors.js";
import { importOptional } from "../outbox/optional.js";
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
} from "./deliver.js";
import type { Inbox } from "./inbox.js";
import { Parking } from "./parking.js";

export interface NatsConsumerOptions<Tx> extends ConsumerRetry, ConsumerShutdown {
  readonly servers: string | readonly string[];
  readonly stream: string;
  /** The durable consumer's name; created (explicit acks) if it does not exist. */
  readonly durable: string;
  readonly inbox: Inbox<Tx>;
  readonly handle: DeliveryHandler<Tx>;
  /**
   * How long the server waits for an ack before redelivering (default 30 000 ms), for a durable
   * consumer this creates; one that exists keeps its own, which is read and followed. Messages
   * held are kept alive meanwhile, so it bounds how soon a crashed consumer's messages come back.
   */
  readonly ackWaitMs?: number;
  /** Messages outstanding (delivered, not yet acknowledged) at most, for a durable consumer this creates (default 256). */
  readonly maxAckPending?: number;
}

const OWN_HEADERS = new Set(["nats-msg-id", "wassal-id", "wassal-type", "wassal-key", "wassal-key-seq", "wassal-message-id"]);
/** Messages taken from the client into this consumer's queue at most, when the durable consumer puts no bound on them. */
/**
 * How long each pull request lives (its idle heartbeat is half of it). When a cluster moves the
 * durable consumer's leader (its node killed), a pull sent to the old leader is answered by no one;
 * the client notices only when heartbeats go missing and pulls again. With nats.js's default of
 * 30 s, a consumer stood still for about 20 s after a node kill in the cluster chaos run; a pull
 * every 5 s when idle costs next to nothing.
 */
const PULL_EXPIRES_MS = 5_000;

const QUEUE_LIMIT = 1_000;

function delivered(m: JsMsg, stream: string): DeliveredMessage {
  const headers: Record<string, string> = {};
  for (const [name, values] of m.headers ?? []) if (!OWN_HEADERS.has(name.toLowerCase())) headers[name] = values.join(", ");
  const body = parseBody(new TextDecoder().decode(m.data));
  return {
    // Wassal-Id: a keyed message's Nats-Msg-Id also carries its number (duplicateId); a relay before it set none.
    id: m.headers?.get("Wassal-Id") || m.headers?.get("Nats-Msg-Id") || `${stream}:${m.seq}`,
    type: m.headers?.get("Wassal-Type") || null,
    key: m.headers?.get("Wassal-Key") || null,
    keySeq: keySeqOf(m.headers?.get("Wassal-Key-Seq")),
    headers,
    body,
    source: m.subject,
    redelivered: m.redelivered,
  };
}

/** Parked this many times (about 15 s), an early message goes back to the server for HAND_BACK_MS, and is parked again when it comes back. */
const PARK_TRIES = 20;
const HAND_BACK_MS = 5_000;

export class NatsConsumer<Tx> {
  readonly stats: ConsumerStats = newConsumerStats();
  /** The durable consumer's ack wait, as the server has it. */
  readonly ackWaitMs: number;
  /** How long `stop()` waits for a handler already running, unless told otherwise. */
  readonly shutdownGraceMs: number;
  readonly #nc: NatsConnection;
  readonly #messages: { stop(): void; close(): Promise<unknown> };
  /** Received, not yet handled: kept alive with working() until their turn. */
  readonly #queue: JsMsg[] = [];
  /** Held back while their key waits for an earlier number: kept alive too. */
  readonly #parking = new Parking<JsMsg>();
  /** Parked messages taken out to be tried again, not yet handled: kept alive too. */
  #retrying: JsMsg[] = [];
  #inHand: JsMsg | undefined;
  #wake: (() => void) | undefined;
  #room: (() => void) | undefined;
  #stopping = false;
  readonly #stopSignal = new AbortController();
  #stopped: Promise<void> | undefined;
  #reading = true;
  readonly #heartbeat: NodeJS.Timeout;
  readonly #loop: Promise<void>;

  private constructor(
    nc: NatsConnection,
    messages: AsyncIterable<JsMsg> & { stop(): void; close(): Promise<unknown> },
    options: NatsConsumerOptions<Tx>,
    retry: { maxAttempts: number; delayMs: number },
    ackWaitMs: number,
    queueLimit: number,
    graceMs: number,
  ) {
    this.#nc = nc;
    this.shutdownGraceMs = graceMs;
    this.#messages = messages;
    this.ackWaitMs = ackWaitMs;
    // Three heartbeats per ack wait: one lost or late still leaves two.
    this.#heartbeat = setInterval(() => this.#keepAlive(), Math.max(Math.floor(ackWaitMs / 3), 50));
    this.#heartbeat.unref();
    void (async () => {
      try {
        for await (const m of messages) {
          if (this.#stopping) {
            m.nak(); // taken after stop: back at once, for another consumer
            continue;
          }
          this.#queue.push(m);
          this.#wake?.();
          while (this.#queue.length >= queueLimit && !this.#stopping) await new Promise<void>((resolve) => (this.#room = resolve));
        }
      } finally {
        this.#reading = false;
        this.#wake?.();
      }
    })();
    this.#loop = (async () => {
      const reports = {
        ...(options.onError ? { onError: options.onError } : {}),
        ...(options.onEarly ? { onEarly: options.onEarly } : {}),
        ...(options.onLate ? { onLate: options.onLate } : {}),
      };
      const handle = async (m: JsMsg, tries: number) => {
        this.#inHand = m;
        const message = delivered(m, options.stream);
        const applied = this.stats.applied;
        const acknowledger = {
          ack: () => m.ackAck().then(() => undefined),
          giveUp: (reason: string) => m.term(reason),
          working: () => m.working(),
          stopping: () => this.#stopping,
          signal: this.#stopSignal.signal,
          giveBack: () => m.nak(), // stopping before it was applied: to the next consumer at once
          heldBefore: tries > 0,
          defer: () => {
            if (message.key === null || message.keySeq === null || tries >= PARK_TRIES) m.nak(HAND_BACK_MS);
            else this.#parking.park(m, message.key, message.keySeq, tries);
          },
        };
        await deliver(message, acknowledger, options.inbox, options.handle, retry, this.stats, reports).catch(() => undefined);
        if (this.stats.applied > applied && message.key !== null) this.#parking.applied(message.key);
        this.#inHand = undefined;
      };
      for (;;) {
        const due = this.#stopping ? [] : this.#parking.takeDue();
        if (due.length > 0) {
          this.#retrying = due.map((p) => p.item);
          for (const p of due) {
            if (this.#stopping) break; // the rest is handed back by stop()
            this.#retrying.shift();
            await handle(p.item, p.tries);
          }
          continue;
        }
        const m = this.#queue.shift();
        if (m === undefined) {
          if (this.#stopping || (!this.#reading && this.#parking.size === 0)) return;
          const wait = this.#parking.nextDueIn();
          await new Promise<void>((resolve) => {
            const timer = Number.isFinite(wait) ? setTimeout(resolve, wait) : undefined;
            this.#wake = () => {
              clearTimeout(timer);
              resolve();
            };
          });
          continue;
        }
        this.#room?.();
        await handle(m, 0);
      }
    })();
  }

  /** Every message held, waiting or running, tells the server it is still being worked on. */
  #keepAlive(): void {
    const held = [...(this.#inHand === undefined ? [] : [this.#inHand]), ...this.#retrying, ...this.#queue, ...this.#parking.items()];
    for (const m of held) {
      try {
        m.working();
      } catch {
        // the connection is down: the messages come back after the ack wait, and the inbox absorbs them
      }
    }
  }

  /** Connects, creates the durable consumer if needed, and starts handing messages to `handle`. */
  static async start<Tx>(options: NatsConsumerOptions<Tx>): Promise<NatsConsumer<Tx>> {
    const ackWaitMs = options.ackWaitMs ?? 30_000;
    if (!Number.isSafeInteger(ackWaitMs) || ackWaitMs < 100)
      throw new InvalidArgumentError(`ackWaitMs must be a whole number of milliseconds >= 100 (got ${String(ackWaitMs)})`);
    const maxAckPending = options.maxAckPending ?? 256;
    if (!Number.isSafeInteger(maxAckPending) || maxAckPending < 1)
      throw new InvalidArgumentError(`maxAckPending must be a whole number >= 1 (got ${String(maxAckPending)})`);
    const retry = checkRetry(options);
    const graceMs = checkGrace(options.shutdownGraceMs);
    if (typeof options.handle !== "function") throw new InvalidArgumentError("NatsConsumer needs handle: (message, tx) => void");
    const transport = await importOptional<typeof import("@nats-io/transport-node")>("@nats-io/transport-node", "a NATS consumer");
    const jetstream = await importOptional<typeof import("@nats-io/jetstream")>("@nats-io/jetstream", "a NATS consumer");
    const nc = await transport.connect({ servers: [options.servers].flat(), maxReconnectAttempts: -1, reconnectTimeWait: 250 });
    try {
      const jsm = await jetstream.jetstreamManager(nc);
      let info = await jsm.consumers.info(options.stream, options.durable).catch(() => undefined);
      if (info === undefined) {
        info = await jsm.consumers.add(options.stream, {
          durable_name: options.durable,
          ack_policy: jetstream.AckPolicy.Explicit,
          ack_wait: ackWaitMs * 1_000_000,
          max_ack_pending: maxAckPending,
        });
      }
      const serverAckWaitMs = Math.max(Math.floor((info.config.ack_wait ?? ackWaitMs * 1_000_000) / 1_000_000), 1);
      const pending = info.config.max_ack_pending ?? -1;
      const queueLimit = pending > 0 ? Math.min(pending + 1, QUEUE_LIMIT) : QUEUE_LIMIT;
      const consumer = await jetstream.jetstream(nc).consumers.get(options.stream, options.durable);
      const messages = await consumer.consume({ max_messages: Math.min(100, queueLimit), expires: PULL_EXPIRES_MS });
      return new NatsConsumer(nc, messages, options, retry, serverAckWaitMs, queueLimit, graceMs);
    } catch (error) {
      await nc.close();
      throw error;
    }
  }

  /**
   * Stops taking messages at once and hands back (nak: to the next consumer at once, unapplied)
   * every message held that no handler runs for, a failing one between two tries included: no
   * handler call starts after this. Waits for a handler already running up to `graceMs` (default
   * `shutdownGraceMs`); past it, returns anyway, leaving that message unacknowledged (it comes
   * again after the ack wait). Closes the connection. Safe to call more than once.
   */
  stop(options: { readonly graceMs?: number } = {}): Promise<void> {
    this.#stopped ??= this.#shutdown(checkGrace(options.graceMs ?? this.shutdownGraceMs, "graceMs"));
    return this.#stopped;
  }

  async #shutdown(graceMs: number): Promise<void> {
    this.#stopping = true;
    this.#stopSignal.abort();
    this.#messages.stop();
    this.#room?.();
    this.#wake?.();
    const handBack = (held: JsMsg[]) => {
      for (const m of held) {
        try {
          m.nak();
        } catch {
          // the connection is down: redelivered after the ack wait
        }
      }
    };
    handBack([...this.#queue.splice(0), ...this.#retrying.splice(0), ...this.#parking.clear()]);
    await settlesWithin(this.#loop, graceMs);
    // A parked message being tried as the loop ended may have been parked again: back at once too.
    handBack([...this.#queue.splice(0), ...this.#retrying.splice(0), ...this.#parking.clear()]);
    clearInterval(this.#heartbeat);
    await this.#nc.close();
  }
}
