// The relay to RabbitMQ, on every store, against the real broker (127.0.0.1:5672): persistent,
// mandatory publishes with message-id and headers, completion after the confirm, keyed messages in
// enqueue order, a message no queue takes retried and then dead, and an exchange that does not
// exist likewise (without closing the channel the other messages use). A cluster's node list: a
// node that refuses is passed over, a node that drops the connection is left for the next one (and
// tried last), and a bad list is refused naming the bad node, its password hidden.

import { randomBytes } from "node:crypto";
import { type AddressInfo, connect, createServer, type Server, type Socket } from "node:net";
import amqp, { type Channel, type ChannelModel, type ConsumeMessage } from "amqplib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { InvalidArgumentError } from "../../src/outbox/errors.js";
import { redactUrl } from "../../src/outbox/redact.js";
import type { OutboxStore } from "../../src/outbox/store.js";
import { Inbox } from "../../src/relay/inbox.js";
import { publisherTarget, redactTarget } from "../../src/relay/open-publisher.js";
import { BrokerUnavailableError, type OutgoingMessage } from "../../src/relay/publisher.js";
import { amqpUrls, RabbitMqPublisher } from "../../src/relay/rabbitmq.js";
import { RabbitMqConsumer } from "../../src/relay/rabbitmq-consumer.js";
import type { RelayOptions } from "../../src/relay/relay.js";
import { describeEachStore, enqueueMessage, START, useStoreHarness } from "../conformance/stores.js";
import { TEST_AMQP_URL, rabbitAvailable } from "../support/services.js";
import { stopTests } from "./consumer-stop.js";
import { useRelays, waitForRetry } from "./support.js";
import { until, within } from "../support/wait.js";
import { waitForSleepers, waitForStatus, waitUntil } from "../worker/support.js";

const rabbitUp = await rabbitAvailable();

/** TEST_AMQP_URL (its credentials and vhost) with another port on this machine. */
function nodeUrl(port: number): string {
  const url = new URL(TEST_AMQP_URL);
  url.hostname = "127.0.0.1";
  url.port = String(port);
  return url.href;
}

function listening(server: Server): Promise<number> {
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve((server.address() as AddressInfo).port)));
}

function closing(server: Server): Promise<void> {
  return new Promise((resolve) => server.close(() => resolve()));
}

/** A port the OS just gave and took back: nothing listens on it, so a connection is refused. */
async function closedPort(): Promise<number> {
  const server = createServer();
  const port = await listening(server);
  await closing(server);
  return port;
}

/** A TCP proxy to the broker, on a port of its own: a node whose connections can be cut, as a node going down cuts them. */
async function brokerProxy() {
  const broker = new URL(TEST_AMQP_URL);
  const sockets = new Set<Socket>();
  let accepted = 0;
  const server = createServer((client) => {
    accepted += 1;
    const upstream = connect({ host: broker.hostname, port: Number(broker.port || 5672) });
    for (const [socket, other] of [
      [client, upstream],
      [upstream, client],
    ] as const) {
      sockets.add(socket);
      socket.on("error", () => undefined);
      socket.on("close", () => {
        sockets.delete(socket);
        other.destroy();
      });
      socket.pipe(other);
    }
  });
  const port = await listening(server);
  return {
    url: nodeUrl(port),
    /** Connections it took so far. */
    accepted: () => accepted,
    /** Cuts every connection through it; it still listens. */
    drop(): void {
      for (const socket of sockets) socket.destroy();
    },
    close(): Promise<void> {
      this.drop();
      return closing(server);
    },
  };
}

/** A message as the relay hands it to a publisher. */
function outgoing(destination: string): OutgoingMessage {
  const id = `cluster-${randomBytes(4).toString("hex")}`;
  return { id, messageId: id, type: "t", key: null, keySeq: null, destination, headers: {}, body: JSON.stringify({ id }), createdAt: new Date() };
}

describe("a RabbitMQ cluster's node list: bad input", () => {
  const VALID = /give amqp:\/\/HOST:5672 .*or a cluster's nodes separated by commas \(amqp:\/\/h1:5672,amqp:\/\/h2:5672\), or an array/;

  async function refused(url: string | readonly string[]): Promise<string> {
    const publisher = await RabbitMqPublisher.open({ url }).catch((error: unknown) => error);
    expect(publisher).toBeInstanceOf(InvalidArgumentError);
    // The consumer checks the same way, before it loads the client or connects.
    const { SqliteOutboxStore } = await import("../../src/stores/sqlite/sqlite-outbox-store.js");
    const store = new SqliteOutboxStore({ path: ":memory:" });
    try {
      const consumer = await RabbitMqConsumer.start({ url, queue: "never", inbox: new Inbox({ store }), handle: () => undefined }).catch(
        (error: unknown) => error,
      );
      expect(consumer).toBeInstanceOf(InvalidArgumentError);
      expect((consumer as Error).message).toBe((publisher as Error).message);
    } finally {
      await store.close();
    }
    const { message } = publisher as Error;
    expect(message).toMatch(VALID);
    return message;
  }

  it("a node that is not an amqp:// URL is named; an empty string or list is refused", async () => {
    expect(await refused("amqp://a:5672,http://b")).toContain('"http://b" (node 2 of 2) is not an amqp:// or amqps:// URL');
    expect(await refused(["amqp://a:5672", "http://b"])).toContain('"http://b" (node 2 of 2) is not an amqp:// or amqps:// URL');
    expect(await refused("")).toContain('"" is not an amqp:// or amqps:// URL');
    expect(await refused([])).toContain("the list of RabbitMQ nodes is empty");
    // A list whose later nodes lack their scheme parses as one URL with a comma in its host.
    expect(await refused("amqp://h1:5672,h2:5672")).toContain('"amqp://h1:5672,h2:5672" is not an amqp:// or amqps:// URL');
    expect(await refused("amqp://h1,h2")).toContain("each node of a list needs its own amqp://");
    // A trailing comma (and spaces) ends the list; it is no empty node.
    expect(amqpUrls("amqp://a:5672, amqp://b:5672, ")).toEqual(["amqp://a:5672", "amqp://b:5672"]);
    expect(amqpUrls("amqp://a:5672,")).toEqual(["amqp://a:5672"]);
  });

  it("a bad node's password is never shown, nor any other node's", async () => {
    const message = await refused("amqp://u:first-hunter2@a:5672,http://u:second-hunter2@b");
    expect(message).toContain('"http://u:***@b"');
    expect(message).not.toContain("hunter2");
    const inArray = await refused(["amqp://u:third-hunter2@a:5672", "amqps://u:fourth-hunter2@"]);
    expect(inArray).toContain('"amqps://u:***@" (node 2 of 2)');
    expect(inArray).not.toContain("hunter2");
  });

  it("--to takes a RabbitMQ list, each node redacted in logs; mixed schemes are refused", async () => {
    const list = "amqp://u:first-hunter2@127.0.0.1:5672, amqp://u:second-hunter2@127.0.0.1:5673";
    expect(publisherTarget(list).scheme).toBe("amqp:");
    expect(redactTarget(list)).toBe("amqp://u:***@127.0.0.1:5672,amqp://u:***@127.0.0.1:5673");
    for (const mixed of ["amqp://u:pw-hunter2@a:5672,nats://b:4222", "nats://a:4222,amqp://u:pw-hunter2@b:5672"]) {
      const error = (() => {
        try {
          publisherTarget(mixed);
        } catch (caught) {
          return caught;
        }
      })();
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect((error as Error).message).toMatch(/mixes brokers: nats:\/\/\S+:4222 is not amqp:\/\/ or amqps:\/\//);
      expect((error as Error).message).not.toContain("hunter2");
    }
    expect(() => publisherTarget("amqp://a:5672,http://u:pw-hunter2@b")).toThrow(/mixes brokers: http:\/\/u:\*\*\*@b is not amqp/);
    expect(() => publisherTarget("amqp://h1,h2")).toThrow(/--to: "amqp:\/\/h1,h2" has a comma in its host/);
  });
});

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

  it("a publish made just after open waits for the first connection instead of finding the broker unavailable", async () => {
    const name = `wassal-test-${randomBytes(4).toString("hex")}`;
    await admin.assertExchange(name, "direct", { durable: false, autoDelete: true });
    const { queue } = await admin.assertQueue(`${name}-q`, { durable: false, exclusive: true });
    await admin.bindQueue(queue, name, "events");
    const publisher = await RabbitMqPublisher.open({ url: TEST_AMQP_URL });
    try {
      await expect(publisher.publish(outgoing(`${name}/events`), new AbortController().signal)).resolves.toEqual({ duplicate: false });
    } finally {
      await publisher.close();
    }
  });

  it("a message the broker nacks (a full queue that rejects publishes) is 'broker unavailable': held and published again, no attempt spent", async () => {
    const name = `wassal-test-${randomBytes(4).toString("hex")}`;
    await admin.assertExchange(name, "direct", { durable: false, autoDelete: true });
    const { queue } = await admin.assertQueue(`${name}-full`, {
      durable: false,
      exclusive: true,
      arguments: { "x-max-length": 1, "x-overflow": "reject-publish" },
    });
    await admin.bindQueue(queue, name, "events");
    const publisher = await RabbitMqPublisher.open({ url: TEST_AMQP_URL });
    try {
      await publisher.connected();
      const signal = new AbortController().signal;
      const [first, second] = [outgoing(`${name}/events`), outgoing(`${name}/events`)];
      await expect(publisher.publish(first, signal)).resolves.toEqual({ duplicate: false });
      const refused = publisher.publish(second, signal);
      await expect(refused).rejects.toBeInstanceOf(BrokerUnavailableError);
      await expect(refused).rejects.toThrow(/did not take the message \(message nacked\); it is published again/);
      // Room again: the same message is taken.
      await admin.purgeQueue(queue);
      await expect(publisher.publish(second, signal)).resolves.toEqual({ duplicate: false });
    } finally {
      await publisher.close();
    }
  });

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

  describe("a cluster's node list", () => {
    /** A queue (not exclusive: a consumer on a connection of its own takes it), removed after the test. */
    async function queue(): Promise<string> {
      const { queue } = await admin.assertQueue(`wassal-test-${randomBytes(4).toString("hex")}-cluster`, { durable: false });
      return queue;
    }

    async function memoryInbox() {
      const { SqliteOutboxStore } = await import("../../src/stores/sqlite/sqlite-outbox-store.js");
      const store = new SqliteOutboxStore({ path: ":memory:" });
      await store.migrate();
      return { store, inbox: new Inbox({ store }) };
    }

    it("the publisher (from --to) passes over a node that refuses and publishes through the next, confirmed", async () => {
      const refusing = nodeUrl(await closedPort());
      const statuses: { status: string; node: string | undefined }[] = [];
      const target = publisherTarget(`${refusing},${TEST_AMQP_URL}`, { onStatus: (status, node) => void statuses.push({ status, node }) });
      const publisher = await target.open();
      try {
        expect(publisher).toBeInstanceOf(RabbitMqPublisher);
        expect(publisher.description).toBe(`RabbitMQ at ${redactUrl(refusing)}, ${redactUrl(TEST_AMQP_URL)}`);
        // Within the first round: no backoff, and no "connect failed", for a node passed over.
        await within("the connection", (publisher as RabbitMqPublisher).connected(), 10_000);
        expect(statuses).toEqual([{ status: "connect", node: redactUrl(TEST_AMQP_URL) }]);
        const { exchange, received } = await route();
        const message = outgoing(`${exchange}/events.t`);
        expect(await publisher.publish(message, new AbortController().signal)).toEqual({ duplicate: false });
        await waitUntil("the delivery", () => received.some((m) => m.properties.messageId === message.id));
      } finally {
        await publisher.close();
      }
    });

    it("a round in which every node refuses is said once, naming each node, and the publisher keeps trying", async () => {
      const nodes = [nodeUrl(await closedPort()), nodeUrl(await closedPort())];
      const statuses: string[] = [];
      const publisher = await RabbitMqPublisher.open({ url: nodes, onStatus: (status) => void statuses.push(status) });
      try {
        await until("two failed rounds", () => statuses.length >= 2, { last: () => statuses });
        for (const status of statuses.slice(0, 2)) {
          expect(status).toBe(
            `connect failed: ${redactUrl(nodes[0]!)}: connect ECONNREFUSED ${new URL(nodes[0]!).host}; ${redactUrl(nodes[1]!)}: connect ECONNREFUSED ${new URL(nodes[1]!).host}`,
          );
        }
        await expect(publisher.publish(outgoing("/nowhere"), new AbortController().signal)).rejects.toThrow(
          /the broker cannot be reached: RabbitMQ at .*: not connected/,
        );
      } finally {
        await publisher.close();
      }
    });

    it("the consumer passes over a node that refuses and consumes through the next; none working is an error at start", async () => {
      const refusing = nodeUrl(await closedPort());
      const name = await queue();
      const { store, inbox } = await memoryInbox();
      const applied: string[] = [];
      const consumer = await RabbitMqConsumer.start({ url: [refusing, TEST_AMQP_URL], queue: name, inbox, handle: (m) => void applied.push(m.id) });
      try {
        admin.sendToQueue(name, Buffer.from("{}"), { messageId: "through-the-second" });
        await waitUntil("the message applied", () => applied.includes("through-the-second"));
        // At start every node is tried once, and none working is an error then, saying what each answered.
        const refusingToo = nodeUrl(await closedPort());
        const failed = await RabbitMqConsumer.start({ url: `${refusing},${refusingToo}`, queue: name, inbox, handle: () => undefined }).catch(
          (error: unknown) => error,
        );
        expect(failed).toBeInstanceOf(AggregateError);
        expect((failed as Error).message).toMatch(
          /^no RabbitMQ node could consume queue "[^"]+": amqp:\S+: connect ECONNREFUSED \S+; amqp:\S+: connect ECONNREFUSED/,
        );
        const missing = await RabbitMqConsumer.start({ url: [refusing, TEST_AMQP_URL], queue: `${name}-missing`, inbox, handle: () => undefined }).catch(
          (error: unknown) => error,
        );
        expect((missing as Error).message).toContain(`${redactUrl(TEST_AMQP_URL)}: `);
        expect((missing as Error).message).toMatch(/NOT_FOUND/);
        expect(consumer.stats.applied).toBe(1);
      } finally {
        await consumer.stop();
        await store.close();
        await admin.deleteQueue(name);
      }
    });

    it("a node that drops the publisher's connection is tried last: it reconnects to the next node at once, and publishes go on", async () => {
      const proxy = await brokerProxy();
      const statuses: { status: string; node: string | undefined }[] = [];
      const publisher = await RabbitMqPublisher.open({ url: [proxy.url, TEST_AMQP_URL], onStatus: (status, node) => void statuses.push({ status, node }) });
      try {
        await within("the connection", publisher.connected(), 10_000);
        expect(statuses).toEqual([{ status: "connect", node: redactUrl(proxy.url) }]);
        expect(proxy.accepted()).toBe(1);
        const { exchange, received } = await route();
        const before = outgoing(`${exchange}/events.t`);
        expect(await publisher.publish(before, new AbortController().signal)).toEqual({ duplicate: false });
        // The node goes down, taking its connections with it, though it still listens: the next round starts at the other node.
        proxy.drop();
        await until("the reconnection", () => statuses.length >= 3, { last: () => statuses });
        expect(statuses.slice(1)).toEqual([
          { status: "disconnect", node: redactUrl(proxy.url) },
          { status: "connect", node: redactUrl(TEST_AMQP_URL) },
        ]);
        expect(proxy.accepted()).toBe(1);
        await proxy.close();
        const after = outgoing(`${exchange}/events.t`);
        expect(await publisher.publish(after, new AbortController().signal)).toEqual({ duplicate: false });
        await waitUntil("both deliveries", () => [before.id, after.id].every((id) => received.some((m) => m.properties.messageId === id)));
      } finally {
        await publisher.close();
        await proxy.close();
      }
    });

    it("a node that drops the consumer's connection is tried last: it consumes through the next node at once", async () => {
      const proxy = await brokerProxy();
      const name = await queue();
      const { store, inbox } = await memoryInbox();
      const applied: string[] = [];
      const consumer = await RabbitMqConsumer.start({ url: `${proxy.url},${TEST_AMQP_URL}`, queue: name, inbox, handle: (m) => void applied.push(m.id) });
      try {
        expect(proxy.accepted()).toBe(1);
        admin.sendToQueue(name, Buffer.from("{}"), { messageId: "before-the-drop" });
        await waitUntil("the first message applied", () => applied.includes("before-the-drop"));
        proxy.drop();
        admin.sendToQueue(name, Buffer.from("{}"), { messageId: "after-the-drop" });
        await waitUntil("the message sent after the drop applied", () => applied.includes("after-the-drop"));
        // Through the other node: the one that dropped the connection, still listening, was not tried first.
        expect(proxy.accepted()).toBe(1);
        await proxy.close();
        admin.sendToQueue(name, Buffer.from("{}"), { messageId: "after-the-close" });
        await waitUntil("the message sent after the node closed applied", () => applied.includes("after-the-close"));
        expect(applied.filter((id) => id === "before-the-drop")).toHaveLength(1);
      } finally {
        await consumer.stop();
        await store.close();
        await proxy.close();
        await admin.deleteQueue(name);
      }
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
