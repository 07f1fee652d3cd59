// Where a key lives: a stable hash of the key, then a jump consistent hash onto the shards.
//
// Both halves are fixed for good, since a key's shard must not change between versions, processes
// or machines: the hash is the first 8 bytes of the SHA-256 of the key's UTF-8 bytes, read
// big-endian, and the shard is Lamping and Veach's jump consistent hash of it ("A Fast, Minimal
// Memory, Consistent Hash Algorithm", 2014). Jump hash moves the fewest keys when a shard is added
// at the end: going from N to N + 1 shards, about 1 / (N + 1) of the keys move, every one of them
// to the new shard, and no key moves between the old ones.

import { createHash } from "node:crypto";
import { InvalidArgumentError } from "../outbox/errors.js";

const MASK_64 = (1n << 64n) - 1n;
const JUMP_MULTIPLIER = 2862933555777941757n;

/** The 64-bit hash a key is routed by: the first 8 bytes of SHA-256 of its UTF-8, big-endian. */
export function keyHash(key: string): bigint {
  if (typeof key !== "string") throw new InvalidArgumentError(`a key to route must be a string (got ${typeof key})`);
  return createHash("sha256").update(key, "utf8").digest().readBigUInt64BE(0);
}

/** The shard, from 0 to `shards` − 1, of a 64-bit hash (jump consistent hash). */
export function jumpShard(hash: bigint, shards: number): number {
  if (typeof hash !== "bigint") throw new InvalidArgumentError(`hash must be a bigint (got ${typeof hash})`);
  if (!Number.isInteger(shards) || shards < 1 || shards > 2 ** 31 - 1) {
    throw new InvalidArgumentError(`shards must be a whole number from 1 to ${2 ** 31 - 1} (got ${String(shards)})`);
  }
  let state = hash & MASK_64;
  let bucket = -1;
  let next = 0;
  while (next < shards) {
    bucket = next;
    state = (state * JUMP_MULTIPLIER + 1n) & MASK_64;
    next = Math.floor((bucket + 1) * (2 ** 31 / (Number(state >> 33n) + 1)));
  }
  return bucket;
}

/** The shard of a key among `shards` shards. */
export function shardOfKey(key: string, shards: number): number {
  return jumpShard(keyHash(key), shards);
}

/**
 * The prefix of shard `shard`'s message ids at a broker that several shards publish to: "shard<n>-",
 * after the relays' own prefix. Each shard numbers its messages on its own, so without it two
 * shards' message 7 would share one id, and the broker's duplicate window (and a consumer's inbox)
 * would drop the second as a repeat: a lost message.
 */
export function shardIdPrefix(shard: number, idPrefix = ""): string {
  return `${idPrefix}shard${shard}-`;
}
