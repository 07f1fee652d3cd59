// N outbox stores behind one enqueue. A message lives on the shard its ordering key hashes to, so
// all of a key's messages are on one database and FIFO per key holds as it does on one store. A
// message without an ordering key goes by its dedupe key the same way (so the dedupe key stays
// unique across shards), and one with neither goes round-robin, unless the caller names a shard.
//
// The business write and its message must commit in one transaction, so the app's row must live on
// the shard's database too: `transaction(route, work)` opens the transaction on the routed shard,
// and the `enqueue` it hands to `work` refuses a message that belongs on another shard.

import { InvalidArgumentError, WrongShardError } from "../outbox/errors.js";
import { checkDedupeKey, checkObject, checkOrderingKey } from "../outbox/validate.js";
import type { OutboxStore } from "../outbox/store.js";
import { MESSAGE_STATUSES, type JsonValue, type NewMessage, type OutboxMessage, type OutboxStats, type OwnerLeases } from "../outbox/types.js";
import { shardOfKey } from "./key-hash.js";

/** What a message is routed by. */
export interface ShardRoute {
  /** The ordering key: the message goes to the shard this key hashes to. */
  readonly key?: string;
  /** Used when there is no ordering key: the shard this dedupe key hashes to. */
  readonly dedupeKey?: string;
  /** Used when there is neither: the shard this singleton key hashes to, so that its messages meet on one shard. */
  readonly singletonKey?: string;
  /** A shard named by the caller (0 to shards − 1), for a message with neither key. */
  readonly shard?: number;
}

/** The routed shard, inside its open transaction. */
export interface ShardTransaction<Tx> {
  /** The shard's number, from 0. */
  readonly shard: number;
  /** The shard's store: its own enqueue takes this transaction (`tx`) too. */
  readonly store: OutboxStore<Tx>;
  /** The transaction on the shard's database, for the business writes. */
  readonly tx: Tx;
  /**
   * Enqueues on this shard, in this transaction. Throws WrongShardError, writing nothing, when the
   * message's ordering key (or dedupe key) belongs on another shard.
   */
  enqueue<P extends JsonValue>(message: NewMessage<P>): Promise<OutboxMessage<P>>;
}

/** The stats of every shard and their sum. */
export interface ShardedStats {
  /** The sum over the shards (counts and expired leases added up, leases per owner merged, the oldest pending of all). */
  readonly total: Omit<OutboxStats, "now">;
  /** Each shard's own stats, in shard order. */
  readonly shards: readonly (OutboxStats & { readonly shard: number })[];
}

/** N outbox stores behind one enqueue, routed by a stable hash of the ordering key. */
export class ShardedOutbox<Tx> {
  /** The shards, in order. The order is part of the routing: never reorder them, only add at the end. */
  readonly shards: readonly OutboxStore<Tx>[];
  #nextRoundRobin = 0;

  constructor(shards: readonly OutboxStore<Tx>[]) {
    if (!Array.isArray(shards) || shards.length === 0) {
      throw new InvalidArgumentError("shards must be a list of one or more outbox stores, in a fixed order (got none)");
    }
    if (new Set(shards).size !== shards.length) {
      throw new InvalidArgumentError("shards must be distinct stores: the same store is listed twice");
    }
    this.shards = [...shards];
  }

  /**
   * The shard a message goes to: its ordering key's, else its dedupe key's, else the named shard,
   * else the next one round-robin. Throws InvalidArgumentError for a named shard out of range.
   */
  shardIndex(route: ShardRoute): number {
    checkObject(route, "a shard route ({ key, dedupeKey, shard })");
    if (route.key !== undefined) checkOrderingKey(route.key);
    if (route.dedupeKey !== undefined) checkDedupeKey(route.dedupeKey);
    if (route.shard !== undefined && (route.key !== undefined || route.dedupeKey !== undefined)) {
      throw new InvalidArgumentError(
        "shard names the shard of a message with neither an ordering key nor a dedupe key; a keyed message goes to its key's shard (give one or the other)",
      );
    }
    const routed = this.#routedShard(route);
    if (routed !== null) return routed;
    if (route.shard !== undefined) return this.#checkedShard(route.shard);
    const shard = this.#nextRoundRobin;
    this.#nextRoundRobin = (shard + 1) % this.shards.length;
    return shard;
  }

  /** The store a message goes to (see shardIndex). */
  shardFor(route: ShardRoute): OutboxStore<Tx> {
    return this.shards[this.shardIndex(route)] as OutboxStore<Tx>;
  }

  /**
   * Runs `work` in one transaction on the routed shard and commits it, or rolls it all back if it
   * throws: the business writes and the enqueues go in it, as with one store's `transaction`.
   */
  async transaction<T>(route: ShardRoute, work: (shard: ShardTransaction<Tx>) => T | Promise<T>): Promise<T> {
    const shard = this.shardIndex(route);
    const store = this.shards[shard] as OutboxStore<Tx>;
    return store.transaction((tx) =>
      work({
        shard,
        store,
        tx,
        enqueue: <P extends JsonValue>(message: NewMessage<P>) => {
          this.#checkBelongs(message, shard);
          return store.enqueue(tx, message);
        },
      }),
    );
  }

  /** Enqueues one message in a transaction of its own, on the shard its keys route it to. */
  async enqueue<P extends JsonValue>(message: NewMessage<P>, options: { readonly shard?: number } = {}): Promise<OutboxMessage<P>> {
    // Routed by the message itself, so it belongs where it goes: no second hash to check it.
    const store = this.shards[this.shardIndex(routeOf(message, options.shard))] as OutboxStore<Tx>;
    return store.transaction((tx) => store.enqueue(tx, message));
  }

  /** Creates or upgrades the schema on every shard. */
  async migrate(): Promise<void> {
    for (const store of this.shards) await store.migrate();
  }

  /** Every shard's stats (read from all of them at once) and their sum. */
  async stats(): Promise<ShardedStats> {
    const shards = await Promise.all(this.shards.map(async (store, shard) => ({ ...(await store.stats()), shard })));
    return { total: sumStats(shards), shards };
  }

  /** Closes every shard's store. */
  async close(): Promise<void> {
    await Promise.all(this.shards.map((store) => store.close()));
  }

  #routedShard(route: ShardRoute): number | null {
    const by = route.key ?? route.dedupeKey ?? route.singletonKey;
    return by === undefined ? null : shardOfKey(by, this.shards.length);
  }

  #checkedShard(shard: number): number {
    if (!Number.isInteger(shard) || shard < 0 || shard >= this.shards.length) {
      throw new InvalidArgumentError(`shard must be a whole number from 0 to ${this.shards.length - 1} (got ${String(shard)})`);
    }
    return shard;
  }

  #checkBelongs(message: NewMessage<JsonValue>, shard: number): void {
    const belongs = this.#routedShard(routeOf(message));
    if (belongs !== null && belongs !== shard) {
      const by =
        message.key !== undefined
          ? `ordering key "${message.key}"`
          : message.dedupeKey !== undefined
            ? `dedupe key "${message.dedupeKey}"`
            : `singleton key "${String(message.singletonKey)}"`;
      throw new WrongShardError(by, belongs, shard);
    }
  }
}

function routeOf(message: NewMessage<JsonValue>, shard?: number): ShardRoute {
  return {
    ...(message.key !== undefined ? { key: message.key } : {}),
    ...(message.dedupeKey !== undefined ? { dedupeKey: message.dedupeKey } : {}),
    ...(message.singletonKey !== undefined ? { singletonKey: message.singletonKey } : {}),
    ...(shard !== undefined ? { shard } : {}),
  };
}

function sumStats(shards: readonly OutboxStats[]): Omit<OutboxStats, "now"> {
  const counts = { pending: 0, processing: 0, processed: 0, dead: 0, cancelled: 0 };
  const owners = new Map<string, { held: number; expired: number }>();
  let oldest: Date | null = null;
  let expiredLeases = 0;
  for (const stats of shards) {
    for (const status of MESSAGE_STATUSES) counts[status] += stats.counts[status];
    expiredLeases += stats.expiredLeases;
    const pending = stats.oldestPendingCreatedAt;
    if (pending !== null && (oldest === null || pending < oldest)) oldest = pending;
    for (const { owner, held, expired } of stats.leasesByOwner) {
      const sum = owners.get(owner) ?? { held: 0, expired: 0 };
      owners.set(owner, { held: sum.held + held, expired: sum.expired + expired });
    }
  }
  const leasesByOwner: OwnerLeases[] = [...owners].map(([owner, sum]) => ({ owner, ...sum }));
  return { counts, oldestPendingCreatedAt: oldest, leasesByOwner, expiredLeases };
}
