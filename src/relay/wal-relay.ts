// The WAL relay: a relay told of each new message by the database's change stream (an InsertFeed,
// such as wassal/postgres's openWalFeed on a logical replication slot) instead of by polling.
//
// Each committed batch the feed delivers wakes the Relay's worker, which claims (up to its free
// places in one statement, under leases, so two relays never publish one message twice), publishes
// and completes, as the polling relay does: the same publish, the same broker message ids for its
// dedupe, the same group commit, the same completion (or deletion, in the delete-on-complete
// mode), each key's messages in their order (the claim's own rule). The relay remembers the ids of
// each batch, and confirms the batch's position once each of them is dealt with: completed, dead,
// scheduled for a retry or released (the store's events say so), or found by two claims in a row,
// nothing of the relay's running, not to be claimable (held by another relay, or waiting behind
// its key). The positions are confirmed in the feed's order.
//
// (A first version claimed each message by id as the feed reported it: one write transaction per
// message, 727 against the polling relay's 6,529 messages/s on a backlog of 20,000; bench section
// wal, docs/performance-history.md.)
//
// The rows stay the truth. The worker also claims every `pollIntervalMs` (default 1 s; it listens
// for no NOTIFY) and at once when the feed had to make its slot again, so a retry coming due and a
// message the feed never delivered (a lost slot, a gap) are published without the stream.

import type { OutboxEvent } from "../outbox/events.js";
import { InvalidArgumentError } from "../outbox/errors.js";
import type { InsertedBatch, InsertFeed, InsertFeedEvent } from "../outbox/insert-feed.js";
import { Relay, type RelayOptions, type RelayStats } from "./relay.js";

export interface WalRelayOptions<Tx> extends RelayOptions<Tx> {
  /** Where the relay hears of new messages (wassal/postgres: openWalFeed). The relay starts and stops it. */
  readonly feed: InsertFeed;
  /** What the feed went through (taking its slot, waiting for it, making it, reconnecting): for logs. */
  readonly onFeedEvent?: (event: WalRelayFeedEvent) => void;
  /**
   * Messages from the feed not yet dealt with, at most (default 10 000): past it, the feed waits
   * (the server keeps the rest in its log), so a backlog does not fill the relay's memory.
   */
  readonly maxUnsettled?: number;
}

export type WalRelayFeedEvent = InsertFeedEvent;

export interface WalRelayStats extends RelayStats {
  /** Committed transactions the feed delivered. */
  batches: number;
  /** Messages the feed reported (of the types the relay takes). */
  messages: number;
  /** Positions confirmed to the feed. */
  confirmed: number;
}

/** One delivered batch: its position, and the ids of its messages not yet dealt with. */
interface Unsettled {
  readonly position: string;
  readonly ids: Set<string>;
  /** Claims of the relay that found nothing while nothing of its own ran, since the batch came. */
  quietClaims: number;
}

/** The store events that say a message is back in the outbox's hands or done with. */
const SETTLING: ReadonlySet<OutboxEvent["type"]> = new Set(["completed", "dead", "retry-scheduled", "released"]);

export class WalRelay<Tx> {
  readonly relay: Relay<Tx>;
  readonly feed: InsertFeed;
  readonly #types: ReadonlySet<string> | null;
  readonly #onFeedEvent: (event: WalRelayFeedEvent) => void;
  readonly #maxUnsettled: number;
  readonly #stats = { batches: 0, messages: 0, confirmed: 0 };
  /** Delivered batches in the feed's order, the oldest first. */
  readonly #unsettled: Unsettled[] = [];
  readonly #batchOf = new Map<string, Unsettled>();
  /** The feed waits here while too many messages are unsettled. */
  readonly #waitingForRoom: (() => void)[] = [];
  #unsubscribe: (() => void) | undefined;
  #started = false;
  #stopping = false;
  #stopped: Promise<void> | undefined;

  constructor(options: WalRelayOptions<Tx>) {
    if (typeof options !== "object" || options === null) throw new InvalidArgumentError("WalRelay needs options: { store, publisher, feed, routes?, … }");
    const { feed } = options;
    if (typeof feed?.start !== "function" || typeof feed.confirm !== "function") {
      throw new InvalidArgumentError("WalRelay needs a feed of the outbox's inserts (wassal/postgres: openWalFeed({ url, slot }))");
    }
    const maxUnsettled = options.maxUnsettled ?? 10_000;
    if (!Number.isSafeInteger(maxUnsettled) || maxUnsettled < 1) {
      throw new InvalidArgumentError(`maxUnsettled must be a whole number >= 1 (got ${String(maxUnsettled)})`);
    }
    this.#maxUnsettled = maxUnsettled;
    this.feed = feed;
    this.relay = new Relay<Tx>({ ...options, wakeOnNewMessages: false });
    const types = this.relay.types;
    this.#types = types === null ? null : new Set(types);
    const listener = options.onFeedEvent;
    this.#onFeedEvent = (event) => {
      try {
        listener?.(event);
      } catch {
        // a listener's fault must not stall the feed
      }
    };
  }

  get name(): string {
    return this.relay.name;
  }

  /** The relay's figures, with the feed's. */
  get stats(): WalRelayStats {
    return { ...this.relay.stats, ...this.#stats };
  }

  /**
   * Takes the feed's slot (waiting while another relay holds it: a second relay on one slot is a
   * standby, and publishes nothing until it has the slot), then starts publishing. Resolves once
   * both run.
   */
  async start(): Promise<void> {
    if (this.#started) throw new InvalidArgumentError(`WAL relay ${this.name} is already started; a relay runs once`);
    this.#started = true;
    let ready!: () => void;
    const relayStarted = new Promise<void>((resolve) => {
      ready = resolve;
    });
    const { worker } = this.relay;
    this.#unsubscribe = worker.store.events.subscribe((event) => this.#observe(event));
    try {
      await this.feed.start({
        batch: async (batch) => {
          await relayStarted;
          await this.#take(batch);
        },
        event: (event) => {
          // Messages inserted before the slot was made are not in its stream: claim them now.
          if (event.type === "slot-created") worker.wake();
          this.#onFeedEvent(event);
        },
      });
      if (!this.#stopping) await this.relay.start();
    } catch (error) {
      this.#unsubscribe?.();
      await this.feed.stop();
      throw error;
    } finally {
      ready(); // a batch that waited for the start goes on (and ends at once when stopping)
    }
  }

  /** Stops reading the feed, then stops the relay as Relay.stop does. Does not close the publisher. */
  stop(options: { readonly graceMs?: number } = {}): Promise<void> {
    this.#stopped ??= (async () => {
      this.#stopping = true;
      for (const wake of this.#waitingForRoom.splice(0)) wake();
      await this.feed.stop();
      await this.relay.stop(options);
      this.#unsubscribe?.();
    })();
    return this.#stopped;
  }

  async #take({ messages, position }: InsertedBatch): Promise<void> {
    this.#stats.batches += 1;
    while (this.#batchOf.size >= this.#maxUnsettled && !this.#stopping) {
      await new Promise<void>((resolve) => this.#waitingForRoom.push(resolve));
    }
    if (this.#stopping) return;
    const batch: Unsettled = { position, ids: new Set(), quietClaims: 0 };
    for (const message of messages) {
      if (this.#types !== null && !this.#types.has(message.type)) continue; // another relay's type
      this.#stats.messages += 1;
      batch.ids.add(message.id);
      this.#batchOf.set(message.id, batch);
    }
    this.#unsettled.push(batch);
    if (batch.ids.size > 0) this.relay.worker.wake();
    else this.#confirmSettled();
  }

  #observe(event: OutboxEvent): void {
    if (SETTLING.has(event.type) && "messageId" in event) {
      const batch = this.#batchOf.get(event.messageId);
      if (batch === undefined) return;
      this.#batchOf.delete(event.messageId);
      batch.ids.delete(event.messageId);
      if (batch.ids.size === 0) this.#confirmSettled();
    } else if (event.type === "claim-empty" && event.owner === this.name && this.relay.worker.inFlight === 0) {
      // Two such claims in a row since a batch came: the second began after the batch committed
      // and was delivered, so its messages left are not for this relay to run now (another relay
      // holds them, or they wait behind their key or for a retry): the outbox has them.
      for (const batch of this.#unsettled) {
        batch.quietClaims += 1;
        if (batch.quietClaims < 2) continue;
        for (const id of batch.ids) this.#batchOf.delete(id);
        batch.ids.clear();
      }
      this.#confirmSettled();
    }
  }

  /** Confirms the positions of the oldest batches whose messages are all dealt with. */
  #confirmSettled(): void {
    let last: string | undefined;
    while (this.#unsettled.length > 0 && this.#unsettled[0]?.ids.size === 0) last = this.#unsettled.shift()?.position;
    if (last !== undefined && !this.#stopping) {
      this.#stats.confirmed += 1;
      this.feed.confirm(last);
    }
    while (this.#waitingForRoom.length > 0 && this.#batchOf.size < this.#maxUnsettled) this.#waitingForRoom.shift()?.();
  }
}
