// The relay to RabbitMQ, on every store, against the real broker (127.0.0.1:5672): persistent,
// mandatory publishes with message-id and headers, completion after the confirm, keyed messages in
// enqueue order, a message no queue takes retried and then dead, and an exchange that does not
// exist likewise (without closing the channel the other messages use).

import { randomBytes } from "node:crypto";
import amqp, { type Channel, type ChannelModel, type ConsumeMessage } from "amqplib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { OutboxStore } from "../../src/outbox/store.js";
import { Inbox } from "../../src/relay/inbox.js";
import { RabbitMqPublisher } from "../../src/relay/rabbitmq.js";
import { RabbitMqConsumer } from "../../src/relay/rabbitmq-consumer.js";
import type { RelayOptions } from "../../src/relay/relay.js";
import { describeEachStore, enqueueMessage, START, useStoreHarness } from "../conformance/stores.js";
import { TEST_AMQP_URL, rabbitAvailable } from "../support/services.js";
import { stopTests } from "./consumer-stop.js";
import { useRelays, waitForRetry } from "./support.js";
import { waitForSleepers, waitForStatus, waitUntil } from "../worker/support.js";

const rabbitUp = await rabbitAvailable();

describe.skipIf(!rabbitUp)("RabbitMQ", () => {
  let model: ChannelModel;
  let admin: Channel;

  beforeAll(async () => {
    model = await amqp.connect(TEST_AMQP_URL);
    admin = await model.createChannel();
  });
  afterAll(async () => {
    await model.close();
  });

  /** A topic exchange and a queue bound to it with "#", both removed after the run. */
  async function route(): Promise<{ exchange: string; queue: string; received: ConsumeMessage[] }> {
    const name = `wassal-test-${randomBytes(4).toString("hex")}`;
    await admin.assertExchange(name, "topic", { durable: false, autoDelete: true });
    const { queue } = await admin.assertQueue(`${name}-q`, { durable: false, exclusive: true });
    await admin.bindQueue(queue, name, "#");
    const received: ConsumeMessage[] = [];
    await admin.consume(
      queue,
      (message) => {
        if (message) received.push(message);
      },
      { noAck: true },
    );
    return { exchange: name, queue, received };
  }

  describeEachStore("the relay to RabbitMQ", (factory) => {
    const ctx = useStoreHarness(factory);
    const relays = useRelays(() => ctx().clock);

    async function startRelay(store: OutboxStore<unknown>, exchange: string, options: Partial<RelayOptions<unknown>> = {}) {
      const publisher = await RabbitMqPublisher.open({ url: TEST_AMQP_URL });
      await publisher.connected();
      return relays.start(store, publisher, {
        routes: { default: `${exchange}/events.{type}` },
        retry: { maxAttempts: 2, baseDelayMs: 1_000, jitter: 0 },
        ...options,
      });
    }

    it("publishes persistent messages with message-id and headers, completed once confirmed, each key in order", async () => {
      const { store } = ctx();
      const { exchange, received } = await route();
      const sent: string[] = [];
      for (let n = 0; n < 12; n += 1) {
        const m = await enqueueMessage(store, { type: "order.paid", key: `order-${n % 3}`, headers: { "x-trace": `t-${n}` }, payload: { n } });
        sent.push(m.id);
      }
      const relay = await startRelay(store, exchange, { idPrefix: "shop:" });
      await waitUntil("12 processed", async () => (await store.countByStatus()).processed === 12);
      await waitUntil("12 received", () => received.length === 12);
      const first = received.find((m) => m.properties.messageId === `shop:${sent[0]}`);
      expect(first?.fields.routingKey).toBe("events.order.paid");
      expect(first?.properties.deliveryMode).toBe(2);
      expect(first?.properties.contentType).toBe("application/json");
      expect(first?.properties.type).toBe("order.paid");
      expect(first?.properties.timestamp).toBe(START.getTime() / 1000);
      expect(first?.properties.headers).toMatchObject({
        "wassal-key": "order-0",
        "wassal-key-seq": "1",
        "wassal-type": "order.paid",
        "wassal-message-id": sent[0],
        "x-trace": "t-0",
      });
      expect(JSON.parse(first!.content.toString())).toEqual({ n: 0 });
      for (const key of ["order-0", "order-1", "order-2"]) {
        const ns = received.filter((m) => m.properties.headers?.["wassal-key"] === key).map((m) => (JSON.parse(m.content.toString()) as { n: number }).n);
        expect(ns).toEqual([...ns].sort((a, b) => a - b));
        expect(ns).toHaveLength(4);
      }
      expect(relay.stats).toMatchObject({ published: 12, duplicates: 0, unavailableRetries: 0 });
    });

    it("through RabbitMQ to a consumer's inbox: one effect per message, each key in order; a re-published one absorbed", async () => {
      const { store, harness } = ctx();
      const name = `wassal-test-${randomBytes(4).toString("hex")}`;
      await admin.assertExchange(name, "topic", { durable: false, autoDelete: true });
      await admin.assertQueue(`${name}-in`, { durable: false, autoDelete: true });
      await admin.bindQueue(`${name}-in`, name, "#");
      const consumerStore = await harness.connect();
      const applied: { key: string | null; n: number }[] = [];
      const consumer = await RabbitMqConsumer.start({
        url: TEST_AMQP_URL,
        queue: `${name}-in`,
        retryDelayMs: 1,
        inbox: new Inbox({ store: consumerStore, source: name }),
        handle: async (message, tx) => {
          const { n } = message.body as { n: number };
          await harness.businessWrite(tx, `effect-${n}`);
          applied.push({ key: message.key, n });
        },
      });
      try {
        const ids: string[] = [];
        for (let n = 0; n < 9; n += 1) ids.push((await enqueueMessage(store, { type: "t", key: `k${n % 3}`, payload: { n } })).id);
        await startRelay(store, name);
        await waitUntil("9 applied", () => applied.length === 9);
        // A relay that crashed after the confirm publishes the same message again.
        admin.publish(name, "events.t", Buffer.from(JSON.stringify({ n: 0 })), { messageId: ids[0]!, persistent: true });
        await waitUntil("the re-publish absorbed", () => consumer.stats.duplicates === 1);
        for (let n = 0; n < 9; n += 1) expect(await harness.countBusinessRows(`effect-${n}`)).toBe(1);
        for (const key of ["k0", "k1", "k2"]) {
          const ns = applied.filter((a) => a.key === key).map((a) => a.n);
          expect(ns).toEqual([...ns].sort((a, b) => a - b));
        }
        expect(consumer.stats).toEqual({ applied: 9, duplicates: 1, failed: 0, terminated: 0, early: 0, late: 0 });
      } finally {
        await consumer.stop();
      }
    });

    it("a message no queue takes is returned: retried, then dead with the reason; a routable one goes on", async () => {
      const { store, clock } = ctx();
      const { exchange, received } = await route();
      await admin.assertExchange(`${exchange}-empty`, "topic", { durable: false, autoDelete: false });
      try {
        const lost = await enqueueMessage(store, { type: "t", destination: `${exchange}-empty/nowhere` });
        const fine = await enqueueMessage(store, { type: "t" });
        await startRelay(store, exchange, { wakeOnNewMessages: false });
        await waitForStatus(store, fine.id, "processed");
        const retrying = await waitForRetry(store, lost.id);
        expect(retrying.lastError).toContain(`no queue is bound to exchange "${exchange}-empty" for routing key "nowhere"`);
        await waitForSleepers(clock, 2);
        clock.advance(1_000);
        const dead = await waitForStatus(store, lost.id, "dead");
        expect(dead.attempts).toBe(2);
        await waitUntil("the delivery", () => received.length > 0);
        expect(received.map((m) => m.properties.messageId)).toEqual([fine.id]);
      } finally {
        await admin.deleteExchange(`${exchange}-empty`);
      }
    });

    it("an exchange that does not exist: retried, then dead, and the channel the others use stays open", async () => {
      const { store, clock } = ctx();
      const { exchange, received } = await route();
      const missing = await enqueueMessage(store, { type: "t", destination: "wassal-no-such-exchange/x" });
      await startRelay(store, exchange, { wakeOnNewMessages: false });
      const retrying = await waitForRetry(store, missing.id);
      expect(retrying.lastError).toContain('exchange "wassal-no-such-exchange" does not exist');
      const after = await enqueueMessage(store, { type: "t" });
      await waitForSleepers(clock, 2);
      clock.advance(1_000); // the retry is due; the poll finds the new message too
      await waitForStatus(store, missing.id, "dead");
      await waitForStatus(store, after.id, "processed");
      // A confirm can come before the delivery to the queue's consumer.
      await waitUntil("the delivery", () => received.length > 0);
      expect(received.map((m) => m.properties.messageId)).toEqual([after.id]);
    });
  });

  describe("stopping the consumer", () => {
    const queues: string[] = [];
    afterAll(async () => {
      for (const queue of queues) await admin.deleteQueue(queue).catch(() => undefined);
    });
    stopTests({
      async fresh() {
        // Not exclusive, not auto-deleted: it outlives the consumer stopped, for the next one.
        const { queue } = await admin.assertQueue(`wassal-test-${randomBytes(4).toString("hex")}-stop`, { durable: false });
        queues.push(queue);
        return queue;
      },
      async publish(queue, count) {
        for (let n = 1; n <= count; n += 1) admin.sendToQueue(queue, Buffer.from(JSON.stringify({ n })), { messageId: `${queue}-${n}` });
        await waitUntil("the queue holds them", async () => (await admin.checkQueue(queue)).messageCount === count);
      },
      start: (queue, options) => RabbitMqConsumer.start({ url: TEST_AMQP_URL, queue, maxAttempts: 5, ...options }),
    });
  });

  it("the consumer holding a later message of a key, while a dead consumer's earlier one goes back to its place, hands it back and applies both in order", async () => {
    const queue = `wassal-test-${randomBytes(4).toString("hex")}`;
    await admin.assertQueue(queue, { durable: false });
    try {
      for (const n of [1, 2, 3]) {
        admin.sendToQueue(queue, Buffer.from(JSON.stringify({ n })), { messageId: `m-${n}`, headers: { "wassal-key": "k", "wassal-key-seq": String(n) } });
      }
      // A consumer takes number 1 and dies without acknowledging it.
      const dying = await amqp.connect(TEST_AMQP_URL);
      const channel = await dying.createChannel();
      const taken = await channel.get(queue, { noAck: false });
      expect(taken && JSON.parse(taken.content.toString())).toEqual({ n: 1 });
      const { SqliteOutboxStore } = await import("../../src/stores/sqlite/sqlite-outbox-store.js");
      const store = new SqliteOutboxStore({ path: ":memory:" });
      await store.migrate();
      const order: number[] = [];
      const consumer = await RabbitMqConsumer.start({
        url: TEST_AMQP_URL,
        queue,
        inbox: new Inbox({ store }),
        handle: (message) => void order.push((message.body as { n: number }).n),
      });
      try {
        await waitUntil("number 2 held back", () => consumer.stats.early === 1);
        await dying.close(); // number 1 goes back to the head of the queue
        await waitUntil("all three applied", () => order.length === 3, 20_000);
        expect(order).toEqual([1, 2, 3]);
        expect(consumer.stats).toMatchObject({ applied: 3, duplicates: 0, terminated: 0 });
      } finally {
        await consumer.stop();
        await store.close();
      }
    } finally {
      await admin.deleteQueue(queue);
    }
  });
});
