// The WAL relay: a relay told of each new message by the database's change stream (an InsertFeed,
// such as wassal/postgres's openWalFeed on a logical replication slot) instead of by polling.
//
// For each message the feed reports, it claims that message by id under a lease (the same claim a
// polling relay makes, so two relays never publish one message twice), publishes it and completes
// it through the Relay's own worker: the same publish, the same broker message ids for its dedupe,
// the same group commit, the same completion (or deletion, in the delete-on-complete mode). A
// key's messages are taken one after another, in the order they committed. The feed's position
// is confirmed only once every message before it is dealt with: published and completed, or back
// in the outbox's hands (a retry, or left pending for a claim).
//
// The rows stay the truth. The relay's worker still claims (every `pollIntervalMs`, default 1 s,
// instead of at each NOTIFY) and at once when the feed had to make its slot again: so a retry coming due, a
// message the feed never delivered (a lost slot, a gap) and a key's next message after a failure
// are all published, without waiting on the stream.

import { InvalidArgumentError } from "../outbox/errors.js";
import type { InsertedBatch, InsertedMessage, InsertFeed, InsertFeedEvent } from "../outbox/insert-feed.js";
import { Relay, type RelayOptions, type RelayStats } from "./relay.js";

export interface WalRelayOptions<Tx> extends RelayOptions<Tx> {
  /** Where the relay hears of new messages (wassal/postgres: openWalFeed). The relay starts and stops it. */
  readonly feed: InsertFeed;
  /** What the feed and the relay's reading of it went through: for logs. */
  readonly onFeedEvent?: (event: WalRelayFeedEvent) => void;
}

export type WalRelayFeedEvent =
  | InsertFeedEvent
  /** A message from the feed could not be claimed now (another relay holds it, it is done, or it waits behind its key): a claim takes it later if it needs one. */
  | { readonly type: "left-to-claim"; readonly messageId: string; readonly reason: string }
  /** Claiming a message from the feed failed (the database is unreachable): it stays pending for a claim. */
  | { readonly type: "claim-failed"; readonly messageId: string; readonly error: string };

export interface WalRelayStats extends RelayStats {
  /** Committed transactions the feed delivered. */
  batches: number;
  /** Messages claimed by id as the feed reported them. */
  fromFeed: number;
  /** Messages from the feed left to a claim (held by another relay, already done, waiting behind their key, or a claim that failed). */
  leftToClaim: number;
}

export class WalRelay<Tx> {
  readonly relay: Relay<Tx>;
  readonly feed: InsertFeed;
  readonly #leaseMs: number;
  readonly #maxInFlight: number;
  readonly #types: ReadonlySet<string> | null;
  readonly #onFeedEvent: (event: WalRelayFeedEvent) => void;
  readonly #stats = { batches: 0, fromFeed: 0, leftToClaim: 0 };
  /** The last message taken of each key: the next one of that key waits for it. */
  readonly #keyTails = new Map<string, Promise<void>>();
  #inFlight = 0;
  /** Batches waiting for a free place (at most maxInFlight messages from the feed at once). */
  readonly #waitingForRoom: (() => void)[] = [];
  /** Claims by id under way: a stop waits for them before it stops the worker. */
  readonly #claiming = new Set<Promise<unknown>>();
  /** Positions are confirmed in the feed's order, each once everything before it is dealt with. */
  #confirmed: Promise<void> = Promise.resolve();
  #started = false;
  #stopping = false;
  #stopped: Promise<void> | undefined;

  constructor(options: WalRelayOptions<Tx>) {
    if (typeof options !== "object" || options === null) throw new InvalidArgumentError("WalRelay needs options: { store, publisher, feed, routes?, … }");
    const { feed } = options;
    if (typeof feed?.start !== "function" || typeof feed.confirm !== "function") {
      throw new InvalidArgumentError("WalRelay needs a feed of the outbox's inserts (wassal/postgres: openWalFeed({ url, slot }))");
    }
    this.feed = feed;
    this.relay = new Relay<Tx>({ ...options, wakeOnNewMessages: false });
    this.#leaseMs = this.relay.worker.leaseMs;
    this.#maxInFlight = this.relay.worker.concurrency;
    const types = this.relay.types;
    this.#types = types === null ? null : new Set(types);
    const listener = options.onFeedEvent;
    this.#onFeedEvent = (event) => {
      try {
        listener?.(event);
      } catch {
        // a listener's fault must not stall the feed or its confirmations
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
    try {
      await this.feed.start({
        batch: async (batch) => {
          await relayStarted;
          await this.#take(batch);
        },
        event: (event) => {
          // Messages inserted before the slot was made are not in its stream: claim them now.
          if (event.type === "slot-created") this.relay.worker.wake();
          this.#onFeedEvent(event);
        },
      });
      if (!this.#stopping) await this.relay.start();
    } catch (error) {
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
      // A claim that lands now is run by the worker, or released by it once it stops.
      await Promise.allSettled([...this.#claiming]);
      await this.relay.stop(options);
    })();
    return this.#stopped;
  }

  async #take({ messages, position }: InsertedBatch): Promise<void> {
    this.#stats.batches += 1;
    const tasks: Promise<void>[] = [];
    for (const message of messages) {
      if (this.#stopping) break;
      if (this.#types !== null && !this.#types.has(message.type)) continue; // another relay's type
      while (this.#inFlight >= this.#maxInFlight && !this.#stopping) {
        await new Promise<void>((resolve) => {
          this.#waitingForRoom.push(resolve);
        });
      }
      tasks.push(this.#publish(message));
    }
    const dealtWith = Promise.all(tasks);
    this.#confirmed = this.#confirmed
      .then(() => dealtWith)
      .then(() => {
        if (!this.#stopping) this.feed.confirm(position);
      });
  }

  /** Claims one message by id and publishes it through the relay's worker, after the previous message of its key. Never rejects. */
  #publish(message: InsertedMessage): Promise<void> {
    const { key } = message;
    const before = key === null ? undefined : this.#keyTails.get(key);
    this.#inFlight += 1;
    const task = (before ?? Promise.resolve()).then(() => this.#claimAndRun(message.id));
    const done = task.finally(() => {
      this.#inFlight -= 1;
      if (key !== null && this.#keyTails.get(key) === done) this.#keyTails.delete(key);
      this.#waitingForRoom.shift()?.();
    });
    if (key !== null) this.#keyTails.set(key, done);
    return done;
  }

  async #claimAndRun(messageId: string): Promise<void> {
    if (this.#stopping) return;
    const { worker } = this.relay;
    try {
      const claiming = worker.store.claimMessage(worker.name, messageId, { leaseMs: this.#leaseMs });
      this.#claiming.add(claiming);
      const result = await claiming.finally(() => this.#claiming.delete(claiming));
      if (result.outcome === "claimed") {
        this.#stats.fromFeed += 1;
        await worker.adopt(result.lease);
        return;
      }
      this.#stats.leftToClaim += 1;
      const reason = result.outcome === "blocked" ? `held by ${result.heldBy ?? "another owner"}` : result.status;
      this.#onFeedEvent({ type: "left-to-claim", messageId, reason });
    } catch (error) {
      this.#stats.leftToClaim += 1;
      this.#onFeedEvent({ type: "claim-failed", messageId, error: error instanceof Error ? error.message : String(error) });
    }
  }
}
