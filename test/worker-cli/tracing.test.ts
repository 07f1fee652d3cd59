// One trace across a real process boundary: the test enqueues a message inside a request span of
// its own (an OpenTelemetry SDK registered in the test's process), then runs the real CLI worker
// with an SDK preloaded (node --import test/fixtures/otel-instrumentation.mjs dist/cli/main.js
// worker --handlers test/fixtures/traced-handlers.mjs), which writes its finished spans to a file.
// The handler's span continues the request's trace: its parent chain reaches the enqueue span and
// the request, and a message the handler enqueues carries the trace on to a second handler. The
// worker flushes the spans as it stops. On a SQLite file, a PostgreSQL schema and a MariaDB database.
//
// Needs `npm run build` first (`npm test` does it).

import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { context, SpanKind, trace } from "@opentelemetry/api";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { otelTracing } from "../../src/observability/tracing.js";
import { openOutbox } from "../../src/stores/open-outbox.js";
import { killAll, requireBuiltCli, ROOT, startCli } from "../support/cli.js";
import { mariadbAvailable } from "../support/mariadb.js";
import { postgresAvailable } from "../support/postgres.js";
import { tempDir } from "../support/temp.js";
import { registerSdk } from "../tracing/support.js";
import { closeTargets, createTarget, logLines, type StoreKind, waitForRows } from "./harness.js";

const PG = await postgresAvailable();
const MARIADB = await mariadbAvailable();
const dir = tempDir("wassal-wcli-tracing-");
const INSTRUMENTATION = join(ROOT, "test", "fixtures", "otel-instrumentation.mjs");
const HANDLERS = join(ROOT, "test", "fixtures", "traced-handlers.mjs");

const { exporter } = registerSdk();
const app = trace.getTracer("test-app");

beforeAll(requireBuiltCli);
afterEach(killAll);
afterAll(closeTargets);

/** A span as the preloaded instrumentation writes it. */
interface WrittenSpan {
  readonly name: string;
  readonly kind: SpanKind;
  readonly traceId: string;
  readonly spanId: string;
  readonly parentSpanId: string | null;
  readonly attributes: Record<string, unknown>;
  readonly links: readonly { readonly traceId: string; readonly spanId: string; readonly attributes: Record<string, unknown> }[];
  readonly flushed: boolean;
}

function only(spans: readonly WrittenSpan[], name: string): WrittenSpan {
  const found = spans.filter((span) => span.name === name);
  expect(found, `exactly one span named ${name} (have ${spans.map((s) => s.name).join(", ")})`).toHaveLength(1);
  return found[0] as WrittenSpan;
}

/** The names from `span` up through its parents, as far as `spans` know them. */
function ancestry(spans: readonly WrittenSpan[], span: WrittenSpan): string[] {
  const byId = new Map(spans.map((s) => [s.spanId, s]));
  const names = [span.name];
  for (let parent = span.parentSpanId; parent !== null; ) {
    const next = byId.get(parent);
    if (next === undefined) break;
    names.push(next.name);
    parent = next.parentSpanId;
  }
  return names;
}

for (const kind of ["sqlite", "postgres", "mariadb"] as const satisfies readonly StoreKind[]) {
  describe.runIf(kind === "sqlite" || (kind === "postgres" ? PG : MARIADB))(`${kind}: wassal worker with an OpenTelemetry SDK preloaded`, () => {
    it("continues the enqueuing request's trace in the worker process: enqueue → process → the handler's spans → the next message", async () => {
      exporter.reset();
      const target = await createTarget(kind, dir);
      const schema = target.args[3];
      const outbox = await openOutbox(target.db, { ...(schema === undefined ? {} : { schema, maxConnections: 2 }), tracing: otelTracing() });
      const request = app.startSpan("POST /orders", { kind: SpanKind.SERVER });
      let messageId: string;
      try {
        const { store } = outbox;
        const message = await context.with(trace.setSpan(context.active(), request), () =>
          store.transaction((tx) => store.enqueue(tx, { type: "order.ship", payload: { orderId: "o-1" } })),
        );
        messageId = message.id;
      } finally {
        request.end();
        await outbox.close();
      }
      const enqueue = exporter.getFinishedSpans().find((span) => span.name === "enqueue order.ship");
      expect(enqueue?.parentSpanContext?.spanId).toBe(request.spanContext().spanId);
      const { traceId } = request.spanContext();

      const spansFile = join(mkdtempSync(join(dir, "spans-")), "spans.json");
      const worker = startCli(["worker", ...target.args, "--name", "traced-worker", "--handlers", HANDLERS, "--poll-ms", "50", "--log-level", "info"], {
        cwd: dir,
        nodeArgs: ["--import", INSTRUMENTATION],
        env: { WASSAL_TEST_SPANS_FILE: spansFile },
      });
      const rows = await waitForRows(target, "both messages processed", (r) => r.length === 2 && r.every((m) => m.status === "processed"), [worker]);
      expect(rows.map((r) => r.type)).toEqual(["order.ship", "order.notify"]);
      worker.signal("SIGTERM");
      expect((await worker.waitForExit(20_000)).code).toBe(0);
      expect(logLines(worker.stderr()).find((line) => line.msg === "worker started")).toMatchObject({ tracing: true });

      expect(existsSync(spansFile)).toBe(true);
      const spans = JSON.parse(readFileSync(spansFile, "utf8")) as WrittenSpan[];
      expect(spans.every((span) => span.flushed)).toBe(true); // the worker flushed the provider as it stopped

      // The worker's processing span is the enqueue span's child, in the request's trace.
      const process = only(spans, "process order.ship");
      expect(process).toMatchObject({ kind: SpanKind.CONSUMER, traceId, parentSpanId: enqueue?.spanContext().spanId });
      expect(process.attributes).toMatchObject({
        "messaging.system": "wassal",
        "messaging.message.id": messageId,
        "messaging.client.id": "traced-worker",
        "wassal.attempt": 1,
        "wassal.lease.token": 1,
        "wassal.outcome": "completed",
      });
      // The chain across both processes: the handler's span → process → enqueue → the request.
      const all = [
        ...spans,
        ...exporter.getFinishedSpans().map((span) => ({
          name: span.name,
          spanId: span.spanContext().spanId,
          parentSpanId: span.parentSpanContext?.spanId ?? null,
        })),
      ] as WrittenSpan[];
      expect(ancestry(all, only(spans, "ship the order"))).toEqual(["ship the order", "process order.ship", "enqueue order.ship", "POST /orders"]);

      // The handler's enqueue carried the trace on to the next message and its handler.
      expect(ancestry(all, only(spans, "process order.notify"))).toEqual([
        "process order.notify",
        "enqueue order.notify",
        "ship the order",
        "process order.ship",
        "enqueue order.ship",
        "POST /orders",
      ]);
      expect(only(spans, "process order.notify").traceId).toBe(traceId);

      // Each claim is a root of the worker's own, linked to what it claimed; each completion a child of its processing.
      const claims = spans.filter((span) => span.name.startsWith("claim"));
      expect(claims.length).toBeGreaterThanOrEqual(2);
      for (const claim of claims) {
        expect(claim).toMatchObject({ kind: SpanKind.CLIENT, parentSpanId: null });
        expect(claim.traceId).not.toBe(traceId);
      }
      expect(claims.flatMap((claim) => claim.links.map((link) => link.spanId))).toEqual(
        expect.arrayContaining([enqueue?.spanContext().spanId, only(spans, "enqueue order.notify").spanId]),
      );
      expect(process.links.map((link) => link.spanId)).toContain(enqueue?.spanContext().spanId);
      for (const type of ["order.ship", "order.notify"]) {
        expect(only(spans, `complete ${type}`).parentSpanId).toBe(only(spans, `process ${type}`).spanId);
      }
    });
  });
}
