// The relay to NATS JetStream, on every store, against the real server (127.0.0.1:4222; a private
// one on its own port for the restart): Nats-Msg-Id and headers on the stored message, completion
// after the PubAck, a re-publish absorbed by the stream's duplicate window, a message the stream
// refuses for good dead with the server's reason, and a broker that goes away mid-run: the relay
// holds its messages, spends no attempt, and delivers them once the server is back.

import { connect, headers, type NatsConnection } from "@nats-io/transport-node";
import { AckPolicy, jetstream, jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { OutboxStore } from "../../src/outbox/store.js";
import { Inbox } from "../../src/relay/inbox.js";
import { NatsPublisher } from "../../src/relay/nats.js";
import { NatsConsumer } from "../../src/relay/nats-consumer.js";
import { PermanentPublishError } from "../../src/relay/publisher.js";
import { outgoing, Relay, type RelayOptions } from "../../src/relay/relay.js";
import { describeEachStore, enqueueMessage, useStoreHarness } from "../conformance/stores.js";
import { PrivateServer } from "../support/private-server.js";
import { stopTests } from "./consumer-stop.js";
import { TEST_NATS_URL, natsAvailable } from "../support/services.js";
import { advanceUntil, useRelays } from "./support.js";
import { settlesWithin, waitForStatus, waitUntil } from "../worker/support.js";

const natsUp = await natsAvailable();

let streamNumber = 0;

/** A stream of its own for each test: subjects "<name>.>", with a duplicate window. */
async function freshStream(jsm: JetStreamManager, options: { maxMsgSize?: number; duplicateWindowMs?: number } = {}): Promise<string> {
  streamNumber += 1;
  const name = `WASSAL_TEST_${process.pid}_${streamNumber}`;
  await jsm.streams.add({
    name,
    subjects: [`${name}.>`],
    duplicate_window: (options.duplicateWindowMs ?? 60_000) * 1_000_000,
    ...(options.maxMsgSize ? { max_msg_size: options.maxMsgSize } : {}),
  });
  return name;
}

describe.skipIf(!natsUp)("NATS JetStream", () => {
  let nc: NatsConnection;
  let jsm: JetStreamManager;
  const streams: string[] = [];

  beforeAll(async () => {
    nc = await connect({ servers: TEST_NATS_URL });
    jsm = await jetstreamManager(nc);
  });
  afterAll(async () => {
    for (const name of streams) await jsm.streams.delete(name).catch(() => undefined);
    await nc.close();
  });

  describeEachStore("the relay to NATS JetStream", (factory) => {
    const ctx = useStoreHarness(factory);
    const relays = useRelays(() => ctx().clock);

    async function startRelay(store: OutboxStore<unknown>, stream: string, options: Partial<RelayOptions<unknown>> = {}) {
      const publisher = await NatsPublisher.open({ servers: TEST_NATS_URL, ackTimeoutMs: 2_000 });
      await publisher.connected();
      return relays.start(store, publisher, { routes: { default: `${stream}.{type}` }, ...options });
    }

    async function newStream(options: { maxMsgSize?: number } = {}): Promise<string> {
      const name = await freshStream(jsm, options);
      streams.push(name);
      return name;
    }

    it("publishes with Nats-Msg-Id, Wassal-Id and headers, and completes each message once the PubAck is in", async () => {
      const { store } = ctx();
      const stream = await newStream();
      const a = await enqueueMessage(store, { type: "order.created", key: "order-1", headers: { "x-trace": "t-1" }, payload: { order: 1 } });
      const b = await enqueueMessage(store, { type: "order.paid", key: "order-1", payload: { order: 1, paid: true } });
      const relay = await startRelay(store, stream, { idPrefix: "shop:" });
      await waitForStatus(store, a.id, "processed");
      await waitForStatus(store, b.id, "processed");

      const info = await jsm.streams.info(stream);
      expect(info.state.messages).toBe(2);
      const first = await jsm.streams.getMessage(stream, { seq: 1 });
      const second = await jsm.streams.getMessage(stream, { seq: 2 });
      expect(first?.subject).toBe(`${stream}.order.created`);
      expect(second?.subject).toBe(`${stream}.order.paid`);
      expect(first?.json()).toEqual({ order: 1 });
      // Its number in the duplicate id (duplicateId); the inbox's id alone as Wassal-Id.
      expect(first?.header.get("Nats-Msg-Id")).toBe(`shop:${a.id}:1`);
      expect(first?.header.get("Wassal-Id")).toBe(`shop:${a.id}`);
      expect(first?.header.get("Wassal-Message-Id")).toBe(a.id);
      expect(first?.header.get("Wassal-Type")).toBe("order.created");
      expect(first?.header.get("Wassal-Key")).toBe("order-1");
      expect(first?.header.get("Wassal-Key-Seq")).toBe("1");
      expect(first?.header.get("x-trace")).toBe("t-1");
      expect(relay.stats).toMatchObject({ published: 2, duplicates: 0 });
    });

    it("a re-publish of an id the stream has seen is absorbed by its duplicate window (counted, completed, stored once)", async () => {
      const { store } = ctx();
      const stream = await newStream();
      const message = await enqueueMessage(store, { type: "t", payload: { n: 1 } });
      // As if a relay had published it and crashed before completing it.
      await jetstream(nc).publish(`${stream}.t`, JSON.stringify({ n: 1 }), { msgID: message.id });
      const relay = await startRelay(store, stream);
      await waitForStatus(store, message.id, "processed");
      expect(relay.stats).toMatchObject({ published: 1, duplicates: 1 });
      expect((await jsm.streams.info(stream)).state.messages).toBe(1);
    });

    it("a message the stream refuses for good (too large) goes dead with the server's reason; the next goes on", async () => {
      const { store } = ctx();
      const stream = await newStream({ maxMsgSize: 200 });
      const big = await enqueueMessage(store, { type: "t", payload: { blob: "x".repeat(500) } });
      const small = await enqueueMessage(store, { type: "t", payload: { n: 1 } });
      await startRelay(store, stream);
      const dead = await waitForStatus(store, big.id, "dead");
      expect(dead.lastError).toContain(PermanentPublishError.name);
      expect(dead.lastError).toMatch(/message size exceeds maximum allowed/i);
      expect(dead.attempts).toBe(1);
      await waitForStatus(store, small.id, "processed");
    });
  });

  describeEachStore("from the outbox through NATS JetStream to a consumer's inbox", (factory) => {
    const ctx = useStoreHarness(factory);
    const stops: (() => Promise<void>)[] = [];
    afterEach(async () => {
      for (const stop of stops.splice(0).reverse()) await stop();
    });

    it("each message has exactly one effect, in each key's order; a re-publish after the window and a failed handler change nothing", async () => {
      const { store, harness } = ctx();
      const stream = await freshStream(jsm, { duplicateWindowMs: 100 });
      streams.push(stream);
      const consumerStore = await harness.connect();
      const applied: { id: string; key: string | null; n: number }[] = [];
      let failOnce = true;
      const consumer = await NatsConsumer.start({
        servers: TEST_NATS_URL,
        stream,
        durable: "statement",
        ackWaitMs: 1_000,
        retryDelayMs: 10,
        inbox: new Inbox({ store: consumerStore, source: stream }),
        handle: async (message, tx) => {
          const { n } = message.body as { n: number };
          await harness.businessWrite(tx, `effect-${n}`);
          if (n === 3 && failOnce) {
            failOnce = false;
            throw new Error("the consumer's own failure, once");
          }
          applied.push({ id: message.id, key: message.key, n });
        },
      });
      stops.push(() => consumer.stop());

      const ids: string[] = [];
      for (let n = 0; n < 9; n += 1) ids.push((await enqueueMessage(store, { type: "t", key: `k${n % 3}`, payload: { n } })).id);
      const publisher = await NatsPublisher.open({ servers: TEST_NATS_URL });
      await publisher.connected();
      const relay = new Relay({ store, publisher, routes: { default: `${stream}.{type}` }, clock: ctx().clock, pollIntervalMs: 60_000 });
      stops.push(async () => {
        await relay.stop({ graceMs: 0 });
        await publisher.close();
      });
      await relay.start();
      await waitUntil("9 applied", () => applied.length === 9);

      // A relay that crashed after publishing, and published again once the window had passed:
      // the stream holds the message twice; the consumer's inbox absorbs the second.
      const js = jetstream(nc);
      for (;;) {
        const ack = await js.publish(`${stream}.t`, JSON.stringify({ n: 0 }), { msgID: ids[0]! });
        if (!ack.duplicate) break;
        await new Promise((resolve) => setTimeout(resolve, 20)); // the window runs on the broker's clock
      }
      await waitUntil("the re-publish absorbed", () => consumer.stats.duplicates === 1);

      for (let n = 0; n < 9; n += 1) expect(await harness.countBusinessRows(`effect-${n}`), `effect of ${n}`).toBe(1);
      expect(applied).toHaveLength(9);
      for (const key of ["k0", "k1", "k2"]) {
        const ns = applied.filter((a) => a.key === key).map((a) => a.n);
        expect(ns).toEqual([...ns].sort((a, b) => a - b));
      }
      expect(consumer.stats).toEqual({ applied: 9, duplicates: 1, failed: 1, terminated: 0, early: 0, late: 0 });
      expect(applied.map((a) => a.id).sort()).toEqual([...ids].sort());
    });
  });

  describeEachStore("a message redriven after its key skipped it, its first publish kept by the stream", (factory) => {
    const ctx = useStoreHarness(factory);
    const stops: (() => Promise<void>)[] = [];
    afterEach(async () => {
      for (const stop of stops.splice(0).reverse()) await stop();
    });

    // What the relay's model found (model/relay.pml, RELAY_REDRIVE_BROKER_DEDUPE): message x of key
    // k reaches the stream as number 1 but its relay never learns it (a publish timed out), x goes
    // dead and is skipped, so y takes number 1; x, redriven, takes number 2. Published under the
    // same Nats-Msg-Id, number 2 was dropped as a duplicate and never reached the consumer, whose
    // key k then waited for it for ever, holding z (number 3) back.
    it("reaches the consumer under its new number: every effect once, and the key goes on", async () => {
      const { store, harness } = ctx();
      const stream = await freshStream(jsm);
      streams.push(stream);
      const consumerStore = await harness.connect();
      const applied: number[] = [];
      const consumer = await NatsConsumer.start({
        servers: TEST_NATS_URL,
        stream,
        durable: "statement",
        inbox: new Inbox({ store: consumerStore, source: stream }),
        handle: async (message, tx) => {
          const { n } = message.body as { n: number };
          await harness.businessWrite(tx, `effect-${n}`);
          applied.push(n);
        },
      });
      stops.push(() => consumer.stop());
      const publisher = await NatsPublisher.open({ servers: TEST_NATS_URL });
      await publisher.connected();
      stops.push(() => publisher.close());

      const x = await enqueueMessage(store, { type: "t", key: "k", payload: { n: 0 } });
      const y = await enqueueMessage(store, { type: "t", key: "k", payload: { n: 1 } });
      // x's first publish, as a relay whose publish timed out left it: in the stream, x still pending.
      const first = (await store.getMessage(x.id)) as NonNullable<Awaited<ReturnType<typeof store.getMessage>>>;
      expect(first.keySeq).toBe(1);
      await publisher.publish(outgoing(first, `${stream}.t`, ""), new AbortController().signal);
      const [lease] = await store.claim("relay-1", { limit: 1, leaseMs: 60_000 });
      expect(lease?.messageId).toBe(x.id);
      await store.fail(lease!, new Error("publish timed out"), "dead");
      await store.unblockKey("k", "skip");
      expect((await store.getMessage(y.id))?.keySeq).toBe(1); // x's number, which the relay thought unused

      const relay = new Relay({ store, publisher, routes: { default: `${stream}.{type}` }, clock: ctx().clock, pollIntervalMs: 20 });
      stops.push(() => relay.stop({ graceMs: 0 }));
      await relay.start();
      await waitForStatus(store, y.id, "processed");
      await store.redrive({ messageIds: [x.id] });
      // A redrive wakes no relay on PostgreSQL (no notification): its next poll, on the test's clock.
      await advanceUntil(ctx().clock, waitForStatus(store, x.id, "processed"));
      expect((await store.getMessage(x.id))?.keySeq).toBe(2);
      const z = await enqueueMessage(store, { type: "t", key: "k", payload: { n: 2 } });
      await advanceUntil(ctx().clock, waitForStatus(store, z.id, "processed"));

      await waitUntil("z applied", () => applied.includes(2));
      for (let n = 0; n < 3; n += 1) expect(await harness.countBusinessRows(`effect-${n}`), `effect of ${n}`).toBe(1);
      expect(await new Inbox({ store: consumerStore, source: stream }).blockedKeys()).toEqual([]);
      // x's renumbered copy reached the consumer, which knew it by its id and moved the key on.
      expect(consumer.stats).toMatchObject({ applied: 3, duplicates: 1, late: 1 });
    });
  });

  describe("the consumer's own failures", () => {
    it("a message whose handler keeps failing is tried maxAttempts times in place, then terminated and reported; the next ones go on", async () => {
      const stream = await freshStream(jsm);
      streams.push(stream);
      const { SqliteOutboxStore } = await import("../../src/stores/sqlite/sqlite-outbox-store.js");
      const store = new SqliteOutboxStore({ path: ":memory:" });
      await store.migrate();
      const js = jetstream(nc);
      for (const n of [1, 2, 3]) await js.publish(`${stream}.t`, JSON.stringify({ n }), { msgID: `m-${n}` });
      const order: number[] = [];
      const errors: { n: number; final: boolean }[] = [];
      const consumer = await NatsConsumer.start({
        servers: TEST_NATS_URL,
        stream,
        durable: "poison",
        maxAttempts: 3,
        retryDelayMs: 1,
        inbox: new Inbox({ store }),
        handle: (message) => {
          const { n } = message.body as { n: number };
          if (n === 2) throw new Error("poison");
          order.push(n);
        },
        onError: (_error, message, final) => errors.push({ n: (message.body as { n: number }).n, final }),
      });
      try {
        await waitUntil("1 and 3 applied", () => order.length === 2);
        expect(order).toEqual([1, 3]);
        expect(errors).toEqual([
          { n: 2, final: false },
          { n: 2, final: false },
          { n: 2, final: true },
        ]);
        expect(consumer.stats).toEqual({ applied: 2, duplicates: 0, failed: 3, terminated: 1, early: 0, late: 0 });
      } finally {
        await consumer.stop();
        await store.close();
      }
    });
  });

  describe("the consumer: each key's order through a crash, and ack deadlines kept alive", () => {
    async function memoryInbox() {
      const { SqliteOutboxStore } = await import("../../src/stores/sqlite/sqlite-outbox-store.js");
      const store = new SqliteOutboxStore({ path: ":memory:" });
      await store.migrate();
      return store;
    }

    it("messages a dead consumer held come back after the ack wait; the later ones of their key, delivered first, are handed back and applied after them", async () => {
      const stream = await freshStream(jsm);
      streams.push(stream);
      const js = jetstream(nc);
      for (let n = 1; n <= 6; n += 1) {
        const h = headers();
        h.set("Wassal-Key", "acct-1");
        h.set("Wassal-Key-Seq", String(n));
        await js.publish(`${stream}.t`, JSON.stringify({ n }), { msgID: `m-${n}`, headers: h });
      }
      await jsm.consumers.add(stream, { durable_name: "crash", ack_policy: AckPolicy.Explicit, ack_wait: 1_000 * 1_000_000 });
      // A consumer takes numbers 1 and 2 and dies before acknowledging them.
      const dying = await connect({ servers: TEST_NATS_URL });
      const taken: number[] = [];
      for await (const m of await jetstream(dying)
        .consumers.get(stream, "crash")
        .then((c) => c.fetch({ max_messages: 2, expires: 2_000 }))) {
        taken.push((m.json() as { n: number }).n);
        if (taken.length === 2) break;
      }
      await dying.close();
      expect(taken).toEqual([1, 2]);

      const store = await memoryInbox();
      const inbox = new Inbox({ store, source: stream });
      const order: number[] = [];
      const early: number[] = [];
      const consumer = await NatsConsumer.start({
        servers: TEST_NATS_URL,
        stream,
        durable: "crash",
        inbox,
        handle: (message) => void order.push((message.body as { n: number }).n),
        onEarly: (_message, waitingFor) => void early.push(waitingFor),
      });
      try {
        await waitUntil("all six applied", () => order.length === 6, 20_000);
        expect(order).toEqual([1, 2, 3, 4, 5, 6]);
        expect(early.length).toBeGreaterThanOrEqual(4); // 3 to 6 came first, each waiting for 1
        expect(early.every((n) => n === 1 || n === 2 || n === 3 || n === 4 || n === 5)).toBe(true);
        expect(consumer.stats).toMatchObject({ applied: 6, terminated: 0 });
        expect(await inbox.blockedKeys()).toEqual([]);
      } finally {
        await consumer.stop();
        await store.close();
      }
    });

    it("with a 1 s ack wait and 3 s of work queued, no message is redelivered: every message held is kept alive", async () => {
      const stream = await freshStream(jsm);
      streams.push(stream);
      const js = jetstream(nc);
      for (let n = 1; n <= 60; n += 1) await js.publish(`${stream}.t`, JSON.stringify({ n }), { msgID: `w-${n}` });
      const store = await memoryInbox();
      let redelivered = 0;
      let handled = 0;
      const consumer = await NatsConsumer.start({
        servers: TEST_NATS_URL,
        stream,
        durable: "slow",
        ackWaitMs: 1_000,
        inbox: new Inbox({ store }),
        handle: async (message) => {
          if (message.redelivered) redelivered += 1;
          await new Promise((resolve) => setTimeout(resolve, 50));
          handled += 1;
        },
      });
      try {
        expect(consumer.ackWaitMs).toBe(1_000);
        await waitUntil("60 handled", () => handled === 60, 20_000);
        await new Promise((resolve) => setTimeout(resolve, 1_500)); // past one more ack wait: nothing comes again
        expect(redelivered).toBe(0);
        expect(consumer.stats).toMatchObject({ applied: 60, duplicates: 0 });
        const info = await jsm.consumers.info(stream, "slow");
        expect(info.config.max_ack_pending).toBe(256);
        expect(info.num_redelivered).toBe(0);
      } finally {
        await consumer.stop();
        await store.close();
      }
    });
  });

  describe("stopping the consumer", () => {
    stopTests({
      async fresh() {
        const stream = await freshStream(jsm);
        streams.push(stream);
        // The durable, made here with a 1 s ack wait: a message left unacknowledged comes back soon.
        await jsm.consumers.add(stream, { durable_name: "stopping", ack_policy: AckPolicy.Explicit, ack_wait: 1_000 * 1_000_000 });
        return stream;
      },
      async publish(stream, count) {
        const js = jetstream(nc);
        for (let n = 1; n <= count; n += 1) await js.publish(`${stream}.t`, JSON.stringify({ n }), { msgID: `${stream}-${n}` });
      },
      start: (stream, options) => NatsConsumer.start({ servers: TEST_NATS_URL, stream, durable: "stopping", maxAttempts: 5, ...options }),
      holds: async (stream, count) => (await jsm.consumers.info(stream, "stopping")).num_ack_pending === count,
      redeliveryMs: 1_000,
    });
  });

  describeEachStore("the relay while its NATS server is away", (factory) => {
    const ctx = useStoreHarness(factory);
    let server: PrivateServer | undefined;

    afterEach(async () => {
      await server?.stop();
      server = undefined;
    });

    const relays = useRelays(() => ctx().clock);

    /** A private server with a fresh stream, and a started relay to it; `down` stops the server first. */
    async function relayToPrivateServer(down: boolean, options: Partial<RelayOptions<unknown>> = {}) {
      server = await PrivateServer.nats();
      const own = await connect({ servers: server.url });
      const stream = await freshStream(await jetstreamManager(own));
      await own.close();
      if (down) await server.pause();
      const publisher = await NatsPublisher.open({ servers: server.url, ackTimeoutMs: 1_000 });
      if (!down) await publisher.connected();
      const relay = await relays.start(ctx().store, publisher, { routes: { default: `${stream}.{type}` }, ...options });
      return { relay, stream, server };
    }

    it("holds its messages under lease, spends no attempt, and delivers them once the server is back", async () => {
      const { store, clock } = ctx();
      const { relay, stream, server } = await relayToPrivateServer(false, { leaseMs: 30_000 });
      const first = await enqueueMessage(store, { type: "t", payload: { n: 1 } });
      await waitForStatus(store, first.id, "processed");

      await server.pause();
      const second = await enqueueMessage(store, { type: "t", payload: { n: 2 } });
      await waitUntil("the relay to find the server unreachable", () => relay.stats.unavailableRetries > 0);
      const held = await store.getMessage(second.id);
      expect(held).toMatchObject({ status: "processing", attempts: 1, lastError: null });

      await server.resume();
      // The relay waits on the manual clock between tries: move it until the message is through.
      const processed = await advanceUntil(clock, waitForStatus(store, second.id, "processed"));
      expect(processed.attempts).toBe(1);
      const check = await connect({ servers: server.url });
      expect((await (await jetstreamManager(check)).streams.info(stream)).state.messages).toBe(2);
      await check.close();
    });

    it("started before its server is up, it holds the messages and delivers them once the server comes", async () => {
      const { store, clock } = ctx();
      const { relay, server } = await relayToPrivateServer(true);
      const message = await enqueueMessage(store, { type: "t", payload: { n: 1 } });
      await waitUntil("the relay to find the server unreachable", () => relay.stats.unavailableRetries > 0);
      expect(await store.getMessage(message.id)).toMatchObject({ status: "processing", attempts: 1 });
      await server.resume();
      const processed = await advanceUntil(clock, waitForStatus(store, message.id, "processed"));
      expect(processed.attempts).toBe(1);
    });

    it("stopped while its server is down, it releases the held message at once (no grace to wait out), the attempt given back", async () => {
      const { store } = ctx();
      const { relay } = await relayToPrivateServer(true, { shutdownGraceMs: 60_000 });
      const message = await enqueueMessage(store, { type: "t", payload: { n: 1 } });
      await waitUntil("the relay to find the server unreachable", () => relay.stats.unavailableRetries > 0);
      // The grace is a minute of the manual clock, which this test never moves: only an
      // immediate release lets stop() return.
      expect(await settlesWithin(relay.stop(), 5_000)).toBe(true);
      expect(await store.getMessage(message.id)).toMatchObject({ status: "pending", attempts: 0 });
    });
  });
});
