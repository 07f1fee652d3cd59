// The routing of a key to its shard: fixed for good (a key's shard must never change between
// versions or machines), even, and minimal when a shard is added at the end.

import { describe, expect, it } from "vitest";
import { jumpShard, keyHash, shardOfKey } from "../../src/shards/key-hash.js";

const KEYS = Array.from({ length: 20_000 }, (_, n) => `account-${n}`);

describe("a key's shard", () => {
  it("is the first 8 bytes of the key's SHA-256, then jump consistent hash: pinned values that must never change", () => {
    // SHA-256("") starts e3b0c44298fc1c14.
    expect(keyHash("")).toBe(0xe3b0c44298fc1c14n);
    expect(keyHash("abc")).toBe(0xba7816bf8f01cfean); // SHA-256("abc") starts ba7816bf8f01cfea
    expect(() => jumpShard(1n, 0)).toThrow(/shards must be a whole number from 1/);
    expect(() => shardOfKey(42 as unknown as string, 2)).toThrow(/a key to route must be a string \(got number\)/);
    // Jump hash's test vectors, as every published implementation checks them.
    expect([jumpShard(1n, 1), jumpShard(42n, 57), jumpShard(0xdead10ccn, 1), jumpShard(0xdead10ccn, 666), jumpShard(256n, 1024)]).toEqual([0, 43, 0, 361, 520]);
    expect(jumpShard(2n ** 64n - 1n, 128)).toBe(92);
    expect(jumpShard(0n, 1000)).toBe(0);
    // Pinned: a change to either half of the routing moves keys between a deployment's shards.
    expect(["order-1", "order-2", "account-42", "ü-key", "x"].map((key) => shardOfKey(key, 8))).toEqual(PINNED_8);
  });

  it("spreads keys evenly: each of 4 shards gets 25 % ± 2 % of 20,000 keys", () => {
    const counts = [0, 0, 0, 0];
    for (const key of KEYS) counts[shardOfKey(key, 4)] = (counts[shardOfKey(key, 4)] ?? 0) + 1;
    for (const count of counts) expect(Math.abs(count / KEYS.length - 0.25)).toBeLessThan(0.02);
  });

  it("adding a shard at the end moves about 1 / (N + 1) of the keys, every one of them to the new shard", () => {
    for (const shards of [1, 2, 3, 7]) {
      let moved = 0;
      for (const key of KEYS) {
        const before = shardOfKey(key, shards);
        const after = shardOfKey(key, shards + 1);
        if (after !== before) {
          moved += 1;
          expect(after).toBe(shards);
        }
      }
      expect(Math.abs(moved / KEYS.length - 1 / (shards + 1))).toBeLessThan(0.02);
    }
  });
});

const PINNED_8 = [5, 6, 3, 1, 1];
