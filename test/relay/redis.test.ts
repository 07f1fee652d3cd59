// The relay to Redis Streams, on every store, against the real server (127.0.0.1:6379; a private
// one on its own port for the restart): XADD with id, type, key, headers and body, completion once
// appended, each key in enqueue order, a re-publish within the window appended once and counted
// as a duplicate, and a server that goes away mid-run: the messages are held and delivered once
// it is back.

import { randomBytes } from "node:crypto";
import { createClient } from "redis";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { OutboxStore } from "../../src/outbox/store.js";
import { Inbox } from "../../src/relay/inbox.js";
import { RedisStreamsPublisher } from "../../src/relay/redis.js";
import { RedisStreamsConsumer } from "../../src/relay/redis-consumer.js";
import { Relay, type RelayOptions } from "../../src/relay/relay.js";
import { describeEachStore, enqueueMessage, useStoreHarness } from "../conformance/stores.js";
import { PrivateServer } from "../support/private-server.js";
import { TEST_REDIS_URL, redisAvailable } from "../support/services.js";
import { stopTests } from "./consumer-stop.js";
import { advanceUntil, useRelays } from "./support.js";
import { waitForStatus, waitUntil } from "../worker/support.js";

const redisUp = await redisAvailable();

type Entry = { id: string; message: Record<string, string> };

describe.skipIf(!redisUp)("Redis Streams", () => {
  const client = createClient({ url: TEST_REDIS_URL });
  const streams: string[] = [];

  beforeAll(async () => {
    await client.connect();
  });
  afterAll(async () => {
    for (const stream of streams) await client.del(stream);
    await client.close();
  });

  const newStream = () => {
    const name = `wassal-test-${randomBytes(4).toString("hex")}`;
    streams.push(name);
    return name;
  };
  const entries = async (stream: string) => (await client.xRange(stream, "-", "+")) as Entry[];

  describeEachStore("the relay to Redis Streams", (factory) => {
    const ctx = useStoreHarness(factory);
    const relays = useRelays(() => ctx().clock);

    async function startRelay(store: OutboxStore<unknown>, stream: string, options: Partial<RelayOptions<unknown>> = {}) {
      const publisher = await RedisStreamsPublisher.open({ url: TEST_REDIS_URL });
      await publisher.connected();
      return relays.start(store, publisher, { routes: { default: stream }, ...options });
    }

    it("appends each message with its id, type, key, headers and body, each key in enqueue order", async () => {
      const { store } = ctx();
      const stream = newStream();
      const ids: string[] = [];
      for (let n = 0; n < 9; n += 1)
        ids.push((await enqueueMessage(store, { type: "order.paid", key: `order-${n % 3}`, headers: { "x-trace": `t-${n}` }, payload: { n } })).id);
      const relay = await startRelay(store, stream, { idPrefix: "shop:" });
      await waitUntil("9 processed", async () => (await store.countByStatus()).processed === 9);
      const got = await entries(stream);
      expect(got).toHaveLength(9);
      expect(got.find((e) => e.message.id === `shop:${ids[0]}`)?.message).toEqual({
        id: `shop:${ids[0]}`,
        type: "order.paid",
        key: "order-0",
        seq: "1",
        headers: JSON.stringify({ "x-trace": "t-0" }),
        body: JSON.stringify({ n: 0 }),
      });
      for (const key of ["order-0", "order-1", "order-2"]) {
        const ofKey = got.filter((e) => e.message.key === key);
        const ns = ofKey.map((e) => (JSON.parse(e.message.body ?? "{}") as { n: number }).n);
        expect(ns).toEqual([...ns].sort((a, b) => a - b));
        // Each key's entries carry its numbers 1, 2, 3 in order.
        expect(ofKey.map((e) => e.message.seq)).toEqual(["1", "2", "3"]);
      }
      expect(relay.stats).toMatchObject({ published: 9, duplicates: 0 });
    });

    it("an append the server refuses leaves no marker: once the cause is fixed, the redriven message is appended, not taken for a duplicate", async () => {
      const { store } = ctx();
      const stream = newStream();
      await client.set(stream, "not a stream"); // XADD on this key fails with WRONGTYPE
      const message = await enqueueMessage(store, { type: "t", payload: { n: 1 } });
      const relay = await startRelay(store, stream);
      const dead = await waitForStatus(store, message.id, "dead");
      expect(dead.lastError).toContain("WRONGTYPE");
      await client.del(stream);
      expect((await store.redrive({ messageIds: [message.id] })).moved).toBe(1);
      relay.worker.wake();
      await waitForStatus(store, message.id, "processed");
      expect(relay.stats).toMatchObject({ published: 1, duplicates: 0 });
      expect(await entries(stream)).toHaveLength(1);
    });

    it("a re-publish of an id within the window appends nothing and counts as a duplicate", async () => {
      const { store } = ctx();
      const stream = newStream();
      const message = await enqueueMessage(store, { type: "t", payload: { n: 1 } });
      // As if a relay had appended it and crashed before completing it.
      const early = await RedisStreamsPublisher.open({ url: TEST_REDIS_URL });
      await early.connected();
      await early.publish(
        { id: message.id, messageId: message.id, type: "t", key: null, keySeq: null, destination: stream, headers: {}, body: "{}", createdAt: new Date() },
        new AbortController().signal,
      );
      await early.close();
      const relay = await startRelay(store, stream);
      await waitForStatus(store, message.id, "processed");
      expect(relay.stats).toMatchObject({ published: 1, duplicates: 1 });
      expect(await entries(stream)).toHaveLength(1);
    });
  });

  it("a keyed message appended again under a new number (redriven after its key skipped it) is appended, with the same id field; under the same number it is a duplicate", async () => {
    const stream = newStream();
    const publisher = await RedisStreamsPublisher.open({ url: TEST_REDIS_URL });
    await publisher.connected();
    try {
      const copy = (keySeq: number) => ({
        id: "shop:7",
        messageId: "7",
        type: "t",
        key: "k",
        keySeq,
        destination: stream,
        headers: {},
        body: "{}",
        createdAt: new Date(),
      });
      const signal = new AbortController().signal;
      expect(await publisher.publish(copy(1), signal)).toEqual({ duplicate: false });
      expect(await publisher.publish(copy(1), signal)).toEqual({ duplicate: true });
      // Dropped, number 2 would never reach the consumer, whose key would wait for it for ever.
      expect(await publisher.publish(copy(2), signal)).toEqual({ duplicate: false });
      expect((await entries(stream)).map((e) => [e.message.id, e.message.seq])).toEqual([
        ["shop:7", "1"],
        ["shop:7", "2"],
      ]);
    } finally {
      await publisher.close();
    }
  });

  describeEachStore("from the outbox through Redis Streams to a consumer's inbox", (factory) => {
    const ctx = useStoreHarness(factory);

    it("one effect per entry, each key in order; an entry appended again after the window absorbed", async () => {
      const { store, harness } = ctx();
      const stream = newStream();
      const consumerStore = await harness.connect();
      const applied: { key: string | null; n: number }[] = [];
      const consumer = await RedisStreamsConsumer.start({
        url: TEST_REDIS_URL,
        stream,
        group: "statement",
        consumer: "c1",
        retryDelayMs: 1,
        inbox: new Inbox({ store: consumerStore, source: stream }),
        handle: async (message, tx) => {
          const { n } = message.body as { n: number };
          await harness.businessWrite(tx, `effect-${n}`);
          applied.push({ key: message.key, n });
        },
      });
      const publisher = await RedisStreamsPublisher.open({ url: TEST_REDIS_URL, duplicateWindowMs: 1 });
      await publisher.connected();
      const relay = new Relay({ store, publisher, routes: { default: stream }, clock: ctx().clock, pollIntervalMs: 60_000 });
      try {
        const ids: string[] = [];
        for (let n = 0; n < 9; n += 1) ids.push((await enqueueMessage(store, { type: "t", key: `k${n % 3}`, payload: { n } })).id);
        await relay.start();
        await waitUntil("9 applied", () => applied.length === 9);
        // The 1 ms window has passed: the same message appended again reaches the consumer.
        let receipt = { duplicate: true };
        while (receipt.duplicate) {
          receipt = await publisher.publish(
            {
              id: ids[0]!,
              messageId: ids[0]!,
              type: "t",
              key: "k0",
              keySeq: 1,
              destination: stream,
              headers: {},
              body: JSON.stringify({ n: 0 }),
              createdAt: new Date(),
            },
            new AbortController().signal,
          );
        }
        await waitUntil("the re-publish absorbed", () => consumer.stats.duplicates === 1);
        for (let n = 0; n < 9; n += 1) expect(await harness.countBusinessRows(`effect-${n}`)).toBe(1);
        for (const key of ["k0", "k1", "k2"]) {
          const ns = applied.filter((a) => a.key === key).map((a) => a.n);
          expect(ns).toEqual([...ns].sort((a, b) => a - b));
        }
        expect(consumer.stats).toEqual({ applied: 9, duplicates: 1, failed: 0, terminated: 0, early: 0, late: 0 });
      } finally {
        await relay.stop({ graceMs: 0 });
        await publisher.close();
        await consumer.stop();
      }
    });
  });

  it("the consumer puts an entry aside while its key waits for an earlier number, goes on with the others, and applies it in its turn", async () => {
    const stream = newStream();
    for (const [n, key, seq] of [
      [2, "k", "2"],
      [10, "other", "1"],
      [1, "k", "1"],
    ] as const) {
      await client.xAdd(stream, "*", { id: `m-${n}`, type: "t", key, seq, headers: "{}", body: JSON.stringify({ n }) });
    }
    const { SqliteOutboxStore } = await import("../../src/stores/sqlite/sqlite-outbox-store.js");
    const store = new SqliteOutboxStore({ path: ":memory:" });
    await store.migrate();
    const order: number[] = [];
    const consumer = await RedisStreamsConsumer.start({
      url: TEST_REDIS_URL,
      stream,
      group: "g",
      consumer: "c1",
      inbox: new Inbox({ store }),
      handle: (message) => void order.push((message.body as { n: number }).n),
    });
    try {
      await waitUntil("three applied", () => order.length === 3);
      expect(order).toEqual([10, 1, 2]);
      expect(consumer.stats).toMatchObject({ applied: 3, early: 1, late: 0 });
      expect(await client.xPending(stream, "g")).toMatchObject({ pending: 0 });
    } finally {
      await consumer.stop();
      await store.close();
    }
  });

  describe("stopping the consumer", () => {
    stopTests({
      fresh: async () => newStream(),
      async publish(stream, count) {
        for (let n = 1; n <= count; n += 1) await client.xAdd(stream, "*", { id: `${stream}-${n}`, type: "t", headers: "{}", body: JSON.stringify({ n }) });
      },
      // The same group and consumer name: the next one resumes the entries this one left pending.
      start: (stream, options) => RedisStreamsConsumer.start({ url: TEST_REDIS_URL, stream, group: "g", consumer: "c1", maxAttempts: 5, ...options }),
    });
  });

  describeEachStore("the relay while its Redis server is away", (factory) => {
    const ctx = useStoreHarness(factory);
    let server: PrivateServer | undefined;

    afterEach(async () => {
      await server?.stop();
      server = undefined;
    });

    const relays = useRelays(() => ctx().clock);

    it("holds its messages under lease, spends no attempt, and delivers them once the server is back", async () => {
      const { store, clock } = ctx();
      server = await PrivateServer.redis();
      const publisher = await RedisStreamsPublisher.open({ url: server.url });
      await publisher.connected();
      const relay = await relays.start(store, publisher, { routes: { default: "events" } });
      const first = await enqueueMessage(store, { type: "t", payload: { n: 1 } });
      await waitForStatus(store, first.id, "processed");
      await server.pause();
      const second = await enqueueMessage(store, { type: "t", payload: { n: 2 } });
      await waitUntil("the relay to find the server unreachable", () => relay.stats.unavailableRetries > 0);
      expect(await store.getMessage(second.id)).toMatchObject({ status: "processing", attempts: 1, lastError: null });
      await server.resume();
      expect((await advanceUntil(clock, waitForStatus(store, second.id, "processed"))).attempts).toBe(1);
    });
  });
});
