// The relay to webhooks, on every store, against a local HTTP server: Standard Webhooks signatures,
// headers and keys on the wire, completion only after a 2xx, a 4xx dead with its status, a 5xx or
// a 429 retried on the backoff schedule (manual clock), keyed messages delivered in enqueue order
// while publishes overlap, a message without a route dead, and secrets checked up front.

import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { InvalidArgumentError } from "../../src/outbox/errors.js";
import type { OutboxStore } from "../../src/outbox/store.js";
import { NoRouteError, PermanentPublishError } from "../../src/relay/publisher.js";
import { Relay, type RelayOptions } from "../../src/relay/relay.js";
import { Inbox } from "../../src/relay/inbox.js";
import { WebhookPublisher, webhookKey, webhookSignature } from "../../src/relay/webhook.js";
import { webhookReceiver } from "../../src/relay/webhook-receiver.js";
import { describeEachStore, enqueueMessage, START, useStoreHarness } from "../conformance/stores.js";
import { Gate, waitForSleepers, waitForStatus, waitUntil } from "../worker/support.js";
import { waitForRetry } from "./support.js";

const SECRET = `whsec_${Buffer.alloc(32, 7).toString("base64")}`;
const KEY = webhookKey(SECRET);

interface Delivery {
  readonly path: string;
  readonly headers: IncomingMessage["headers"];
  readonly body: string;
}

/** A local endpoint: records each POST and answers with what `answer` says (default 204). */
class Endpoint {
  readonly deliveries: Delivery[] = [];
  answer: (delivery: Delivery) => number | Promise<number> = () => 204;
  readonly #server: Server;

  constructor() {
    this.#server = createServer((request, response) => {
      let body = "";
      request.setEncoding("utf8");
      request.on("data", (chunk: string) => {
        body += chunk;
      });
      request.on("end", () => {
        const delivery = { path: request.url ?? "", headers: request.headers, body };
        this.deliveries.push(delivery);
        void Promise.resolve(this.answer(delivery)).then((status) => {
          response.statusCode = status;
          response.end(status >= 400 ? `status ${status} on purpose` : "");
        });
      });
    });
  }

  async listen(): Promise<void> {
    await new Promise<void>((resolve) => this.#server.listen(0, "127.0.0.1", resolve));
  }

  url(path: string): string {
    return `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}${path}`;
  }

  close(): Promise<void> {
    this.#server.closeAllConnections();
    return new Promise((resolve) => this.#server.close(() => resolve()));
  }
}

describe("webhook secrets", () => {
  it.each([
    ["missing", "", "a webhook secret is required"],
    ["without whsec_", Buffer.alloc(32).toString("base64"), 'must start with "whsec_"'],
    ["not base64", "whsec_not base64!", "not valid base64"],
    ["too short (16 bytes)", `whsec_${Buffer.alloc(16).toString("base64")}`, "holds 16 bytes; it must hold 24 to 64"],
  ])("refuses a secret that is %s, saying what a valid one looks like", (_name, secret, text) => {
    expect(() => new WebhookPublisher({ secret })).toThrow(InvalidArgumentError);
    expect(() => new WebhookPublisher({ secret })).toThrow(text);
    expect(() => new WebhookPublisher({ secret })).toThrow("openssl rand -base64 32");
  });

  it("signs as Standard Webhooks does: v1, base64 HMAC-SHA256 of id.timestamp.body", () => {
    // The example of the Standard Webhooks specification (its test vector).
    const key = webhookKey("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
    expect(webhookSignature(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, '{"test": 2432232314}')).toBe("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
  });
});

describeEachStore("the relay to webhooks", (factory) => {
  const ctx = useStoreHarness(factory);
  const endpoint = new Endpoint();
  const relays: Relay<unknown>[] = [];

  beforeAll(() => endpoint.listen());
  afterAll(() => endpoint.close());
  afterEach(async () => {
    await Promise.all(relays.splice(0).map((relay) => relay.stop({ graceMs: 0 })));
    endpoint.deliveries.length = 0;
    endpoint.answer = () => 204;
  });

  async function startRelay(store: OutboxStore<unknown>, options: Partial<RelayOptions<unknown>> = {}): Promise<Relay<unknown>> {
    const { clock } = ctx();
    const relay = new Relay({
      store,
      publisher: new WebhookPublisher({ secret: SECRET, clock }),
      routes: { default: endpoint.url("/hooks/{type}") },
      clock,
      pollIntervalMs: 60_000,
      retry: { maxAttempts: 3, baseDelayMs: 1_000, jitter: 0 },
      ...options,
    });
    relays.push(relay);
    await relay.start();
    return relay;
  }

  it("POSTs each message, signed, with its headers and key, and completes it only after the 2xx", async () => {
    const { store } = ctx();
    const gate = new Gate<number>();
    endpoint.answer = () => gate.promise;
    const message = await enqueueMessage(store, {
      type: "order.paid",
      key: "order-7",
      headers: { "x-correlation-id": "abc-123" },
      payload: { order: 7, total: 1250 },
    });
    const relay = await startRelay(store, { idPrefix: "shop-" });
    await waitUntil("the delivery", () => endpoint.deliveries.length === 1);
    // Delivered, not yet acknowledged: the message is still processing under the relay's lease.
    expect((await store.getMessage(message.id))?.status).toBe("processing");
    gate.open(200);
    await waitForStatus(store, message.id, "processed");

    const [delivery] = endpoint.deliveries;
    expect(delivery?.path).toBe("/hooks/order.paid");
    expect(JSON.parse(delivery!.body)).toEqual({ order: 7, total: 1250 });
    const h = delivery!.headers;
    expect(h["webhook-id"]).toBe(`shop-${message.id}`);
    expect(h["webhook-timestamp"]).toBe(String(START.getTime() / 1000));
    expect(h["webhook-signature"]).toBe(webhookSignature(KEY, `shop-${message.id}`, START.getTime() / 1000, delivery!.body));
    expect(h["content-type"]).toBe("application/json");
    expect(h["wassal-type"]).toBe("order.paid");
    expect(h["wassal-key"]).toBe("order-7");
    expect(h["wassal-key-seq"]).toBe("1");
    expect(h["x-correlation-id"]).toBe("abc-123");
    expect(relay.stats).toEqual({ published: 1, duplicates: 0, unavailableRetries: 0 });
  });

  it("a 4xx refuses the message for good: it goes dead with the status, and the next message goes on", async () => {
    const { store } = ctx();
    endpoint.answer = (d) => (d.path.endsWith("/bad") ? 422 : 204);
    const bad = await enqueueMessage(store, { type: "t", destination: endpoint.url("/bad") });
    const good = await enqueueMessage(store, { type: "t", destination: endpoint.url("/good") });
    await startRelay(store);
    const dead = await waitForStatus(store, bad.id, "dead");
    expect(dead.lastError).toContain(PermanentPublishError.name);
    expect(dead.lastError).toContain("answered 422: status 422 on purpose");
    expect(dead.attempts).toBe(1);
    await waitForStatus(store, good.id, "processed");
  });

  it.each([500, 503, 429])("a %i is retried on the backoff schedule, then delivered", async (status) => {
    const { store, clock } = ctx();
    let calls = 0;
    endpoint.answer = () => (++calls === 1 ? status : 204);
    const message = await enqueueMessage(store, { type: "t" });
    await startRelay(store, { wakeOnNewMessages: false });
    await waitUntil("the first delivery", () => endpoint.deliveries.length === 1);
    const retrying = await waitForRetry(store, message.id);
    expect(retrying.lastError).toContain(`answered ${status}`);
    expect(retrying.availableAt).toEqual(new Date(START.getTime() + 1_000));
    await waitForSleepers(clock, 2); // the poll, and the retry timer
    clock.advance(1_000);
    await waitForStatus(store, message.id, "processed");
    expect(endpoint.deliveries).toHaveLength(2);
    expect(endpoint.deliveries[0]?.headers["webhook-id"]).toBe(endpoint.deliveries[1]?.headers["webhook-id"]);
  });

  it("publishes many at once, yet delivers each key's messages in enqueue order", async () => {
    const { store } = ctx();
    // The endpoint answers in reverse order of arrival, in waves: overlapping publishes would reorder a key.
    const waiting: Gate<number>[] = [];
    endpoint.answer = () => {
      const gate = new Gate<number>();
      waiting.push(gate);
      return gate.promise;
    };
    const sent: string[] = [];
    for (let n = 0; n < 12; n += 1) {
      const key = `k${n % 3}`;
      await enqueueMessage(store, { type: "t", key, payload: { key, n } });
      sent.push(`${key}:${n}`);
    }
    await startRelay(store, { maxInFlight: 50 });
    let answered = 0;
    let most = 0;
    while (answered < 12) {
      // Wait until each key's next message is out (the last wave may hold fewer keys).
      await waitUntil("deliveries waiting for an answer", () => waiting.length === Math.min(3, 12 - answered));
      most = Math.max(most, waiting.length);
      // At most one message per key is in flight at any moment.
      expect(waiting.length).toBeLessThanOrEqual(3);
      const wave = waiting.splice(0);
      for (const gate of wave.reverse()) gate.open(200);
      answered += wave.length;
    }
    await waitUntil("all processed", async () => (await store.countByStatus()).processed === 12);
    // The three keys' messages were out at once (publishes overlap), never two of one key.
    expect(most).toBe(3);
    expect(new Set(endpoint.deliveries.slice(0, 3).map((d) => (JSON.parse(d.body) as { key: string }).key)).size).toBe(3);
    const received = endpoint.deliveries.map((d) => JSON.parse(d.body) as { key: string; n: number });
    for (const key of ["k0", "k1", "k2"]) {
      expect(received.filter((r) => r.key === key).map((r) => r.n)).toEqual(sent.filter((s) => s.startsWith(`${key}:`)).map((s) => Number(s.split(":")[1])));
    }
  });

  it("a message no route covers goes dead (NoRouteError) without a delivery", async () => {
    const { store } = ctx();
    const message = await enqueueMessage(store, { type: "unrouted" });
    await startRelay(store, { routes: { byType: { other: endpoint.url("/x") } } });
    const dead = await waitForStatus(store, message.id, "dead");
    expect(dead.lastError).toContain(NoRouteError.name);
    expect(dead.lastError).toContain('no destination for message type "unrouted"');
    expect(endpoint.deliveries).toEqual([]);
  });
});

describeEachStore("from the outbox through webhooks to a receiver's inbox", (factory) => {
  const ctx = useStoreHarness(factory);
  const servers: Server[] = [];
  const relays: Relay<unknown>[] = [];
  afterEach(async () => {
    await Promise.all(relays.splice(0).map((relay) => relay.stop({ graceMs: 0 })));
    for (const server of servers.splice(0)) {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });

  async function receiver(handler: ReturnType<typeof webhookReceiver>): Promise<string> {
    const server = createServer(handler);
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}/in/{type}`;
  }

  it("each delivery applied once, in each key's order; a redelivery and a forged or stale one change nothing", async () => {
    const { store, harness, clock } = ctx();
    const consumerStore = await harness.connect();
    const applied: { key: string | null; n: number }[] = [];
    const handler = webhookReceiver({
      secret: SECRET,
      clock,
      inbox: new Inbox({ store: consumerStore, source: "hooks" }),
      handle: async (message, tx) => {
        const { n } = message.body as { n: number };
        await harness.businessWrite(tx, `effect-${n}`);
        applied.push({ key: message.key, n });
      },
    });
    const url = await receiver(handler);
    const ids: string[] = [];
    for (let n = 0; n < 6; n += 1) ids.push((await enqueueMessage(store, { type: "t", key: `k${n % 2}`, payload: { n } })).id);
    const relay = new Relay({ store, publisher: new WebhookPublisher({ secret: SECRET, clock }), routes: { default: url }, clock, pollIntervalMs: 60_000 });
    relays.push(relay);
    await relay.start();
    await waitUntil("6 applied", () => applied.length === 6);
    for (let n = 0; n < 6; n += 1) expect(await harness.countBusinessRows(`effect-${n}`)).toBe(1);
    for (const key of ["k0", "k1"]) {
      const ns = applied.filter((a) => a.key === key).map((a) => a.n);
      expect(ns).toEqual([...ns].sort((a, b) => a - b));
    }

    // The same delivery again (a sender that did not see the 204): applied once, answered 204.
    const post = (headers: Record<string, string>, body: string) => fetch(url.replace("{type}", "t"), { method: "POST", headers, body });
    const ts = Math.floor(clock.now().getTime() / 1000);
    const body = JSON.stringify({ n: 0 });
    const signed = (id: string, at: number) => ({
      "webhook-id": id,
      "webhook-timestamp": String(at),
      "webhook-signature": webhookSignature(KEY, id, at, body),
    });
    expect((await post(signed(ids[0]!, ts), body)).status).toBe(204);
    expect(handler.stats).toMatchObject({ applied: 6, duplicates: 1 });
    // Forged (wrong secret), stale (10 minutes old), unsigned: refused with 401, nothing applied.
    const forged = {
      ...signed("x-1", ts),
      "webhook-signature": webhookSignature(webhookKey(`whsec_${Buffer.alloc(32, 9).toString("base64")}`), "x-1", ts, body),
    };
    expect((await post(forged, body)).status).toBe(401);
    expect((await post(signed("x-2", ts - 600), body)).status).toBe(401);
    expect((await post({}, body)).status).toBe(401);
    expect(handler.stats).toMatchObject({ applied: 6, duplicates: 1, failed: 0 });
    expect(applied).toHaveLength(6);

    // Key k9's number 2 before its number 1: 425 Too Early with a Retry-After, nothing applied; then 1, then 2 again.
    const keyedPost = (id: string, n: number, seq: number) => {
      const text = JSON.stringify({ n });
      return fetch(url.replace("{type}", "t"), {
        method: "POST",
        headers: {
          "webhook-id": id,
          "webhook-timestamp": String(ts),
          "webhook-signature": webhookSignature(KEY, id, ts, text),
          "wassal-key": "k9",
          "wassal-key-seq": String(seq),
        },
        body: text,
      });
    };
    const tooEarly = await keyedPost("k9-2", 92, 2);
    expect([tooEarly.status, tooEarly.headers.get("retry-after")]).toEqual([425, "1"]);
    expect(await tooEarly.text()).toContain("waits for its number 1");
    expect((await keyedPost("k9-1", 91, 1)).status).toBe(204);
    expect((await keyedPost("k9-2", 92, 2)).status).toBe(204);
    expect(applied.slice(6).map((a) => a.n)).toEqual([91, 92]);
    expect(handler.stats).toMatchObject({ applied: 8, early: 1, late: 0 });
  });
});
