// OpenTelemetry spans in one process, on both stores: the enqueue span and the trace context it
// puts in the message's headers (never overwriting the caller's, never making a message invalid),
// the claim, processing and settling spans with their names, kinds, attributes and links, the
// handler running in the processing span's context, and each outcome: completed, retry-scheduled,
// dead, lease-lost, released. The cross-process trace is test/worker-cli/tracing.test.ts's.

import Database from "better-sqlite3";
import { context, type Span, SpanStatusCode, trace } from "@opentelemetry/api";
import type { ReadableSpan } from "@opentelemetry/sdk-trace-node";
import { afterEach, beforeEach, expect, it } from "vitest";
import { DuplicateMessageError, LeaseLostError } from "../../src/outbox/errors.js";
import type { OutboxStore } from "../../src/outbox/store.js";
import type { NewMessage, OutboxMessage } from "../../src/outbox/types.js";
import { otelTracing } from "../../src/observability/tracing.js";
import type { SqliteOutboxStore } from "../../src/stores/sqlite/sqlite-outbox-store.js";
import type { OutgoingMessage } from "../../src/relay/publisher.js";
import { Relay } from "../../src/relay/relay.js";
import { describeEachStore, mustGet, useStoreHarness } from "../conformance/stores.js";
import { Gate, useWorkers, waitForSleepers, waitForStatus, waitUntil, withOverrides } from "../worker/support.js";
import { ids, isChildOf, KIND, linkedSpanIds, named, one, registerSdk, tracedStore, waitForSpan } from "./support.js";

const { exporter } = registerSdk();
const app = trace.getTracer("test-app");
const tracing = otelTracing();

const LEASE_MS = 3_000;
const RENEW_MS = 1_000;
const NEVER_POLL_MS = 1_000_000;
const CUSTOM_TRACE = "0af7651916cd43dd8448eb211c80319c";
const CUSTOM_SPAN = "b7ad6b7169203331";

/** Runs `work` inside a new span of the app's (an incoming request, say), ended after it. */
async function inRequest<T>(name: string, work: () => Promise<T>): Promise<{ readonly request: Span; readonly result: T }> {
  const request = app.startSpan(name);
  try {
    return { request, result: await context.with(trace.setSpan(context.active(), request), work) };
  } finally {
    request.end();
  }
}

function enqueueIn(store: OutboxStore<unknown>, message: Partial<NewMessage>): Promise<OutboxMessage> {
  return store.transaction((tx) => store.enqueue(tx, { type: "order.ship", payload: { orderId: "o-1" }, ...message }));
}

const finished = (): ReadableSpan[] => exporter.getFinishedSpans();

describeEachStore("OpenTelemetry spans", (factory) => {
  const ctx = useStoreHarness(factory);
  const workers = useWorkers(() => ctx().clock);
  let traced: OutboxStore<unknown>;

  beforeEach(async () => {
    exporter.reset();
    traced = await tracedStore(ctx().store, ctx().clock, tracing);
  });
  afterEach(async () => {
    await traced.close();
  });

  it("traces one message from the enqueuing request to its handler: enqueue, claim, process, complete", async () => {
    const { store, clock } = ctx();
    const { request, result: message } = await inRequest("POST /orders", () => enqueueIn(traced, { headers: { "x-correlation-id": "c-1" } }));

    const enqueue = one(finished(), "enqueue order.ship");
    expect(isChildOf(enqueue, request as unknown as ReadableSpan)).toBe(true);
    expect(enqueue.kind).toBe(KIND.PRODUCER);
    expect(enqueue.attributes).toEqual({
      "messaging.system": "wassal",
      "messaging.operation.type": "send",
      "messaging.operation.name": "enqueue",
      "messaging.destination.name": "order.ship",
      "messaging.message.id": message.id,
      "wassal.message.type": "order.ship",
    });
    expect(enqueue.status.code).toBe(SpanStatusCode.UNSET);
    // The enqueue span's context travels in the headers, next to the caller's, and is stored.
    const { traceId, spanId } = ids(enqueue);
    expect(message.headers).toEqual({ "x-correlation-id": "c-1", traceparent: `00-${traceId}-${spanId}-01` });
    expect((await mustGet(store, message.id)).headers).toEqual(message.headers);

    let handlerSpan: Span | undefined;
    await workers.start({
      store,
      clock,
      name: "worker-1",
      tracing,
      handlers: {
        "order.ship": async () => {
          handlerSpan = app.startSpan("ship the order"); // in the processing span's context
          handlerSpan.end();
          return { summary: "shipped" };
        },
      },
      leaseMs: LEASE_MS,
      pollIntervalMs: NEVER_POLL_MS,
      wakeOnNewMessages: false,
    });
    await waitForStatus(store, message.id, "processed");
    const processing = await waitForSpan(exporter, "process order.ship");
    const spans = finished();

    const claim = one(spans, "claim order.ship");
    expect(claim.kind).toBe(KIND.CLIENT);
    expect(claim.parentSpanContext).toBeUndefined(); // a root: the worker's own
    expect(claim.attributes).toEqual({
      "messaging.system": "wassal",
      "messaging.operation.type": "receive",
      "messaging.operation.name": "claim",
      "messaging.client.id": "worker-1",
      "messaging.batch.message_count": 1,
      "messaging.destination.name": "order.ship",
    });
    expect(claim.links).toEqual([
      expect.objectContaining({ context: expect.objectContaining(ids(enqueue)), attributes: { "messaging.message.id": message.id } }),
    ]);

    // The processing span continues the request's trace, under the enqueue span.
    expect(ids(processing).traceId).toBe(request.spanContext().traceId);
    expect(isChildOf(processing, enqueue)).toBe(true);
    expect(processing.kind).toBe(KIND.CONSUMER);
    expect(linkedSpanIds(processing)).toEqual([ids(enqueue).spanId, ids(claim).spanId]);
    expect(processing.attributes).toEqual({
      "messaging.system": "wassal",
      "messaging.operation.type": "process",
      "messaging.operation.name": "process",
      "messaging.destination.name": "order.ship",
      "messaging.message.id": message.id,
      "messaging.client.id": "worker-1",
      "wassal.message.type": "order.ship",
      "wassal.attempt": 1,
      "wassal.lease.token": 1,
      "wassal.outcome": "completed",
    });
    expect(processing.status.code).toBe(SpanStatusCode.UNSET);
    expect(isChildOf(one(spans, "ship the order"), processing)).toBe(true);

    const complete = one(spans, "complete order.ship");
    expect(isChildOf(complete, processing)).toBe(true);
    expect(complete.kind).toBe(KIND.CLIENT);
    expect(complete.attributes).toEqual({
      "messaging.system": "wassal",
      "messaging.operation.type": "settle",
      "messaging.operation.name": "complete",
      "messaging.destination.name": "order.ship",
      "messaging.message.id": message.id,
      "messaging.client.id": "worker-1",
      "wassal.message.type": "order.ship",
      "wassal.lease.token": 1,
      "wassal.outcome": "completed",
    });
    expect(spans.map((s) => s.name).sort()).toEqual(
      ["POST /orders", "enqueue order.ship", "claim order.ship", "process order.ship", "ship the order", "complete order.ship"].sort(),
    );
  });

  it("keeps a trace context the caller put in the headers, whatever its case, and links to it instead", async () => {
    const { store, clock } = ctx();
    const custom = `00-${CUSTOM_TRACE}-${CUSTOM_SPAN}-01`;
    const lower = await enqueueIn(traced, { headers: { traceparent: custom, tracestate: "vendor=1" } });
    const mixed = await enqueueIn(traced, { headers: { TraceParent: custom } });
    expect(lower.headers).toEqual({ traceparent: custom, tracestate: "vendor=1" });
    expect(mixed.headers).toEqual({ TraceParent: custom });
    for (const message of [lower, mixed]) {
      const enqueue = one(finished(), "enqueue order.ship", (s) => s.attributes["messaging.message.id"] === message.id);
      expect(enqueue.kind).toBe(KIND.CLIENT); // its context is not the creation context
      expect(linkedSpanIds(enqueue)).toEqual([CUSTOM_SPAN]);
    }

    await workers.start({
      store,
      clock,
      name: "worker-1",
      tracing,
      handlers: { "order.ship": async () => ({}) },
      leaseMs: LEASE_MS,
      pollIntervalMs: NEVER_POLL_MS,
      wakeOnNewMessages: false,
    });
    await waitUntil("both processed", async () => (await store.countByStatus()).processed === 2);
    await waitUntil("both processing spans", () => named(finished(), "process order.ship").length === 2);
    for (const processing of named(finished(), "process order.ship")) {
      expect(ids(processing).traceId).toBe(CUSTOM_TRACE);
      expect(processing.parentSpanContext?.spanId).toBe(CUSTOM_SPAN);
    }
  });

  it("never overwrites a header or makes a message invalid: no room, no trace context; a refused enqueue is an error span", async () => {
    const full = Object.fromEntries(Array.from({ length: 64 }, (_, n) => [`x-h${n}`, "v"]));
    const almost = Object.fromEntries(Array.from({ length: 63 }, (_, n) => [`x-h${n}`, "v"]));
    expect((await enqueueIn(traced, { headers: full })).headers).toEqual(full);
    const fitted = await enqueueIn(traced, { headers: almost });
    expect(Object.keys(fitted.headers)).toHaveLength(64);
    expect(fitted.headers.traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
    // A caller's own header named like a trace header, but carrying no trace context, is kept as it is.
    expect((await enqueueIn(traced, { headers: { traceparent: "not-a-trace" } })).headers).toEqual({ traceparent: "not-a-trace" });

    await enqueueIn(traced, { dedupeKey: "once" });
    await expect(enqueueIn(traced, { dedupeKey: "once" })).rejects.toBeInstanceOf(DuplicateMessageError);
    const refused = named(finished(), "enqueue order.ship").at(-1) as ReadableSpan;
    expect(refused.attributes["messaging.message.id"]).toBeUndefined();
    expect(refused.attributes["error.type"]).toBe("DuplicateMessageError");
    expect(refused.status.code).toBe(SpanStatusCode.ERROR);
  });

  it("traces enqueueMany as one enqueue per message: a span each, its context in that message's headers; a refused list ends them all as errors", async () => {
    const list: NewMessage[] = [
      { type: "order.ship", payload: { orderId: "o-1" }, headers: { "x-correlation-id": "c-1" } },
      { type: "order.bill", payload: { orderId: "o-1" }, dedupeKey: "bill-o-1" },
      { type: "order.ship", payload: { orderId: "o-2" } },
    ];
    const { request, result: stored } = await inRequest("POST /orders", () => traced.transaction((tx) => traced.enqueueMany(tx, list)));
    expect(stored).toHaveLength(3);
    for (const [n, message] of stored.entries()) {
      const span = one(finished(), `enqueue ${message.type}`, (s) => s.attributes["messaging.message.id"] === message.id);
      expect(isChildOf(span, request as unknown as ReadableSpan), `messages[${n}]`).toBe(true);
      expect(span.kind).toBe(KIND.PRODUCER);
      expect(message.headers).toEqual({ ...list[n]?.headers, traceparent: `00-${ids(span).traceId}-${ids(span).spanId}-01` });
      expect((await mustGet(ctx().store, message.id)).headers).toEqual(message.headers);
    }
    expect(new Set(stored.map((m) => m.headers.traceparent)).size).toBe(3);

    exporter.reset();
    await expect(traced.transaction((tx) => traced.enqueueMany(tx, [list[0] as NewMessage, list[1] as NewMessage]))).rejects.toBeInstanceOf(
      DuplicateMessageError,
    );
    const refused = finished().filter((s) => s.name.startsWith("enqueue "));
    expect(refused.map((s) => [s.name, s.status.code, s.attributes["error.type"], s.attributes["messaging.message.id"]])).toEqual([
      ["enqueue order.ship", SpanStatusCode.ERROR, "DuplicateMessageError", undefined],
      ["enqueue order.bill", SpanStatusCode.ERROR, "DuplicateMessageError", undefined],
    ]);
  });

  it.runIf(factory.name === "sqlite")("traces enqueueSync in a synchronous transaction (another connection's) the same way", async () => {
    const sqlite = traced as unknown as SqliteOutboxStore;
    const db = new Database(sqlite.path, { timeout: 5_000 });
    try {
      const enqueueSync = (message: NewMessage) => db.transaction(() => sqlite.enqueueSync(db, message))();
      const request = app.startSpan("POST /orders");
      const message = context.with(trace.setSpan(context.active(), request), () => enqueueSync({ type: "order.ship", payload: { orderId: "o-2" } }));
      request.end();
      const enqueue = one(finished(), "enqueue order.ship");
      expect(isChildOf(enqueue, request as unknown as ReadableSpan)).toBe(true);
      expect(enqueue.attributes["messaging.message.id"]).toBe(message.id);
      expect(message.headers).toEqual({ traceparent: `00-${ids(enqueue).traceId}-${ids(enqueue).spanId}-01` });
      enqueueSync({ type: "order.ship", payload: {}, dedupeKey: "k" });
      expect(() => enqueueSync({ type: "order.ship", payload: {}, dedupeKey: "k" })).toThrow(DuplicateMessageError);
      expect(named(finished(), "enqueue order.ship").map((s) => s.status.code)).toEqual([SpanStatusCode.UNSET, SpanStatusCode.UNSET, SpanStatusCode.ERROR]);
    } finally {
      db.close();
    }
  });

  it("traces a Relay's publishes: the publisher gets the message's trace context and runs inside the processing span", async () => {
    const { store, clock } = ctx();
    const message = await enqueueIn(traced, {});
    const enqueue = one(finished(), "enqueue order.ship");
    const published: { readonly message: OutgoingMessage; readonly active: string | undefined }[] = [];
    const relay = new Relay({
      store,
      clock,
      name: "relay-1",
      tracing,
      routes: { default: "orders" },
      pollIntervalMs: NEVER_POLL_MS,
      wakeOnNewMessages: false,
      publisher: {
        description: "test broker",
        publish: async (outgoing) => {
          published.push({ message: outgoing, active: trace.getActiveSpan()?.spanContext().spanId });
          return { duplicate: false };
        },
        close: async () => undefined,
      },
    });
    await relay.start();
    try {
      await waitForStatus(store, message.id, "processed");
      const processing = await waitForSpan(exporter, "process order.ship");
      expect(published).toEqual([{ message: expect.objectContaining({ headers: message.headers }), active: ids(processing).spanId }]);
      expect(message.headers.traceparent).toBe(`00-${ids(enqueue).traceId}-${ids(enqueue).spanId}-01`);
      expect(isChildOf(processing, enqueue)).toBe(true);
      expect(processing.attributes).toMatchObject({ "messaging.client.id": "relay-1", "wassal.outcome": "completed" });
    } finally {
      await relay.stop();
    }
  });

  it("records a failed attempt as retry-scheduled and the last one as dead, each a child of the enqueue span", async () => {
    const { store, clock } = ctx();
    const message = await enqueueIn(traced, {});
    const enqueue = one(finished(), "enqueue order.ship");
    let runs = 0;
    await workers.start({
      store,
      clock,
      name: "worker-1",
      tracing,
      handlers: {
        "order.ship": async () => {
          runs += 1;
          throw new Error(`provider down ${runs}`);
        },
      },
      retry: { maxAttempts: 2, baseDelayMs: 1_000, jitter: 0 },
      leaseMs: LEASE_MS,
      pollIntervalMs: NEVER_POLL_MS,
      wakeOnNewMessages: false,
    });
    await waitForSpan(exporter, "process order.ship");
    clock.advance(1_000); // the retry comes due
    await waitForStatus(store, message.id, "dead");
    await waitUntil("two processing spans", () => named(finished(), "process order.ship").length === 2);

    const [first, second] = named(finished(), "process order.ship") as [ReadableSpan, ReadableSpan];
    for (const [processing, attempt, outcome] of [
      [first, 1, "retry-scheduled"],
      [second, 2, "dead"],
    ] as const) {
      expect(isChildOf(processing, enqueue)).toBe(true);
      expect(processing.attributes).toMatchObject({
        "wassal.attempt": attempt,
        "wassal.lease.token": attempt,
        "wassal.outcome": outcome,
        "error.type": "Error",
      });
      expect(processing.status).toEqual({ code: SpanStatusCode.ERROR, message: `provider down ${attempt}` });
      expect(processing.events.map((event) => event.name)).toEqual(["exception"]);
      const fail = one(finished(), "fail order.ship", (s) => isChildOf(s, processing));
      expect(fail.attributes).toMatchObject({ "messaging.operation.type": "settle", "messaging.operation.name": "fail", "wassal.outcome": outcome });
      expect(fail.status.code).toBe(SpanStatusCode.UNSET); // the store recorded the failure as asked
    }
    expect(named(finished(), "complete order.ship")).toEqual([]);
  });

  it("records a lease lost to a reclaim (lease-lost, the late completion refused) and the new owner's reclaim", async () => {
    const { store, clock } = ctx();
    const message = await enqueueIn(traced, {});
    const enqueue = one(finished(), "enqueue order.ship");
    // Hold the heartbeat's renew until the test lets it through: the reclaim lands first.
    const renewGate = new Gate();
    let renewCalls = 0;
    const held = withOverrides(store, {
      renew: async (lease, leaseMs) => {
        renewCalls += 1;
        await renewGate.promise;
        return store.renew(lease, leaseMs);
      },
    });
    const slow = workers.blocking();
    await workers.start({
      store: held,
      clock,
      name: "stalled",
      tracing,
      handlers: { "order.ship": slow.handler },
      leaseMs: LEASE_MS,
      renewIntervalMs: RENEW_MS,
      pollIntervalMs: NEVER_POLL_MS,
      wakeOnNewMessages: false,
    });
    await slow.waitForCalls(1);
    await waitForSleepers(clock, 2);
    clock.advance(LEASE_MS); // the lease ends; the heartbeat's renew is held
    await waitUntil("the heartbeat's renew", () => renewCalls === 1);
    await workers.start({
      store,
      clock,
      name: "rescuer",
      tracing,
      handlers: { "order.ship": async () => ({}) },
      leaseMs: LEASE_MS,
      pollIntervalMs: NEVER_POLL_MS,
      wakeOnNewMessages: false,
    });
    await waitForStatus(store, message.id, "processed");
    const rescued = await waitForSpan(exporter, "process order.ship", (s) => s.attributes["messaging.client.id"] === "rescuer");
    renewGate.open();
    await waitUntil("the stalled handler's signal to abort", () => slow.call(0).signal.aborted);
    expect(slow.call(0).signal.reason).toBeInstanceOf(LeaseLostError);
    slow.call(0).release({}); // its result comes late: refused
    const stalled = await waitForSpan(exporter, "process order.ship", (s) => s.attributes["messaging.client.id"] === "stalled");

    expect(isChildOf(rescued, enqueue)).toBe(true);
    expect(rescued.attributes).toMatchObject({
      "wassal.attempt": 2,
      "wassal.lease.token": 2,
      "wassal.lease.reclaimed_from": "stalled",
      "wassal.outcome": "completed",
    });
    expect(isChildOf(stalled, enqueue)).toBe(true);
    expect(stalled.attributes).toMatchObject({ "wassal.attempt": 1, "wassal.lease.token": 1, "wassal.outcome": "lease-lost", "error.type": "LeaseLostError" });
    expect(stalled.attributes["wassal.lease.reclaimed_from"]).toBeUndefined();
    expect(stalled.status.code).toBe(SpanStatusCode.ERROR);
    const refused = one(finished(), "complete order.ship", (s) => isChildOf(s, stalled));
    expect(refused.attributes).toMatchObject({ "wassal.lease.token": 1, "wassal.outcome": "lease-lost", "error.type": "LeaseLostError" });
    expect(refused.status.code).toBe(SpanStatusCode.ERROR);
  });

  it("records messages given back at shutdown as released, whether their handlers stop at once or run on", async () => {
    const { store, clock } = ctx();
    const stubborn = await enqueueIn(traced, { payload: { orderId: "stubborn" } });
    const prompt = await enqueueIn(traced, { payload: { orderId: "prompt" } });
    const slow = workers.blocking();
    const worker = await workers.start({
      store,
      clock,
      name: "leaving",
      tracing,
      handlers: {
        "order.ship": (message, context) =>
          (message.payload as { orderId: string }).orderId === "stubborn"
            ? slow.handler(message, context) // ignores its signal
            : new Promise((_, reject) => context.signal.addEventListener("abort", () => reject(context.signal.reason))),
      },
      leaseMs: LEASE_MS,
      pollIntervalMs: NEVER_POLL_MS,
      wakeOnNewMessages: false,
    });
    await slow.waitForCalls(1);
    await waitUntil("both running", () => worker.inFlight === 2);
    await worker.stop({ graceMs: 0 });
    for (const message of [stubborn, prompt]) expect(await mustGet(store, message.id)).toMatchObject({ status: "pending", attempts: 0 });
    slow.releaseAll(); // its late result is refused
    await waitUntil("both processing spans", () => named(finished(), "process order.ship").length === 2);
    for (const message of [stubborn, prompt]) {
      const processing = one(finished(), "process order.ship", (s) => s.attributes["messaging.message.id"] === message.id);
      expect(processing.attributes["wassal.outcome"]).toBe("released");
      expect(processing.attributes["error.type"]).toBeUndefined();
      expect(processing.status.code).toBe(SpanStatusCode.UNSET);
      const release = one(finished(), "release order.ship", (s) => isChildOf(s, processing));
      expect(release.attributes).toMatchObject({ "messaging.operation.type": "settle", "messaging.operation.name": "release", "wassal.outcome": "released" });
    }
    const late = one(finished(), "complete order.ship");
    expect(late.attributes).toMatchObject({ "messaging.message.id": stubborn.id, "wassal.outcome": "lease-lost" });
  });
});
