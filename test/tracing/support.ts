// Helpers for the tracing tests: an OpenTelemetry SDK registered in the test's process with an
// in-memory exporter, a store of the harness's database opened with tracing, and lookups of the
// finished spans by name and by parent.

import { SpanKind } from "@opentelemetry/api";
import { InMemorySpanExporter, NodeTracerProvider, type ReadableSpan, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-node";
import { expect } from "vitest";
import type { ManualClock } from "../../src/outbox/clock.js";
import type { OutboxStore } from "../../src/outbox/store.js";
import type { Tracing } from "../../src/outbox/tracing.js";
import { MariaDbOutboxStore } from "../../src/stores/mariadb/mariadb-outbox-store.js";
import { PostgresOutboxStore } from "../../src/stores/postgres/postgres-outbox-store.js";
import { SqliteOutboxStore } from "../../src/stores/sqlite/sqlite-outbox-store.js";
import { mariadbUrlFor } from "../support/mariadb.js";
import { TEST_DATABASE_URL } from "../support/postgres.js";
import { waitUntil } from "../worker/support.js";

/** An SDK registered as the process's global one (tracer provider, context manager, W3C propagators): every span ends in `exporter`. */
export function registerSdk(): { readonly provider: NodeTracerProvider; readonly exporter: InMemorySpanExporter } {
  const exporter = new InMemorySpanExporter();
  const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  provider.register();
  return { provider, exporter };
}

/** Another store on `store`'s database (same clock, audit on, like the harness's), with `tracing`. Close it. */
export async function tracedStore(store: OutboxStore<unknown>, clock: ManualClock, tracing: Tracing): Promise<OutboxStore<unknown>> {
  if (store instanceof SqliteOutboxStore) return new SqliteOutboxStore({ path: store.path, clock, audit: true, tracing }) as OutboxStore<unknown>;
  if (store instanceof PostgresOutboxStore) {
    return (await PostgresOutboxStore.connect({
      url: TEST_DATABASE_URL,
      schema: store.schema,
      clock,
      audit: true,
      tracing,
      maxConnections: 4,
    })) as OutboxStore<unknown>;
  }
  if (store instanceof MariaDbOutboxStore) {
    return (await MariaDbOutboxStore.connect({ url: mariadbUrlFor(store.database), clock, audit: true, tracing, maxConnections: 4 })) as OutboxStore<unknown>;
  }
  throw new Error(`no traced twin for a ${store.kind} store`);
}

/** A span's ids, as a test compares them. */
export function ids(span: ReadableSpan): { readonly traceId: string; readonly spanId: string } {
  const { traceId, spanId } = span.spanContext();
  return { traceId, spanId };
}

/** The finished spans named `name` (optionally also matching `filter`). */
export function named(spans: readonly ReadableSpan[], name: string, filter: (span: ReadableSpan) => boolean = () => true): ReadableSpan[] {
  return spans.filter((span) => span.name === name && filter(span));
}

/** The one finished span named `name` (matching `filter`); fails unless there is exactly one. */
export function one(spans: readonly ReadableSpan[], name: string, filter?: (span: ReadableSpan) => boolean): ReadableSpan {
  const found = named(spans, name, filter);
  expect(found, `exactly one span named ${JSON.stringify(name)} (have ${spans.map((s) => s.name).join(", ")})`).toHaveLength(1);
  return found[0] as ReadableSpan;
}

/** Whether `child`'s parent is `parent` (same trace, parent span id). */
export function isChildOf(child: ReadableSpan, parent: ReadableSpan): boolean {
  return child.spanContext().traceId === parent.spanContext().traceId && child.parentSpanContext?.spanId === parent.spanContext().spanId;
}

/** The span ids `span` links to. */
export function linkedSpanIds(span: ReadableSpan): string[] {
  return span.links.map((link) => link.context.spanId);
}

/** Waits until `exporter` holds a finished span named `name` matching `filter` (spans end after the store's writes). */
export async function waitForSpan(exporter: InMemorySpanExporter, name: string, filter: (span: ReadableSpan) => boolean = () => true): Promise<ReadableSpan> {
  let found: ReadableSpan | undefined;
  await waitUntil(`a finished span named ${name}`, () => {
    found = exporter.getFinishedSpans().find((span) => span.name === name && filter(span));
    return found !== undefined;
  });
  return found as ReadableSpan;
}

export const KIND = SpanKind;
