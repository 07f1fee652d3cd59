// OpenTelemetry spans for the outbox, after the messaging semantic conventions (docs/tracing.md
// lists every span and attribute). Wassal depends on @opentelemetry/api alone: the app brings and
// registers the SDK, and spans go wherever it sends them. This file implements the core's tracing
// hooks (src/outbox/tracing.ts); the core itself imports no tracing library.
//
// - enqueue <type>: PRODUCER, in the caller's context. Its context is the message's creation
//   context, injected into the message's headers (W3C traceparent/tracestate with the default
//   propagators). A message whose headers already carry a trace context keeps it: the span is then
//   a CLIENT span linking to it.
// - claim [<type>]: CLIENT ("receive"), a root span, one per claim that won messages (an empty
//   poll makes none), linking to each claimed message's creation context.
// - process <type>: CONSUMER, a child of the message's creation context (so one trace runs from
//   the request that enqueued it to the handler on another worker), linking to that context and
//   to the claim. The handler runs in its context.
// - complete|fail|release <type>: CLIENT ("settle"), children of the processing span.

import {
  type Attributes,
  type Context,
  context,
  isSpanContextValid,
  type Link,
  propagation,
  ROOT_CONTEXT,
  type Span,
  type SpanContext,
  SpanKind,
  SpanStatusCode,
  type TextMapGetter,
  type Tracer,
  type TracerProvider,
  trace,
} from "@opentelemetry/api";
import { LeaseLostError } from "../outbox/errors.js";
import type { ClaimTrace, EnqueueTrace, ProcessTrace, SettleOperation, SettleResult, Tracing } from "../outbox/tracing.js";
import type { JsonValue, Lease, NewMessage, OutboxMessage } from "../outbox/types.js";

/** The instrumentation scope's name (the tracer's). */
export const TRACER_NAME = "wassal";

/** messaging.system's value on every span. */
const SYSTEM = "wassal";

// Attribute names: the messaging semantic conventions', then Wassal's own.
const MESSAGING_SYSTEM = "messaging.system";
const OPERATION_TYPE = "messaging.operation.type";
const OPERATION_NAME = "messaging.operation.name";
const DESTINATION = "messaging.destination.name";
const MESSAGE_ID = "messaging.message.id";
const CLIENT_ID = "messaging.client.id";
const BATCH_COUNT = "messaging.batch.message_count";
const ERROR_TYPE = "error.type";
const MESSAGE_TYPE = "wassal.message.type";
const ATTEMPT = "wassal.attempt";
const LEASE_TOKEN = "wassal.lease.token";
const RECLAIMED_FROM = "wassal.lease.reclaimed_from";
const OUTCOME = "wassal.outcome";

/**
 * How a message's processing ended (wassal.outcome on its processing span): what the store call
 * that settled it did ("completed", "retry-scheduled", "dead", or "released" when the worker
 * stopped first and gave it back); "lease-lost" when the lease was lost (another owner has the
 * message); "unsettled" when the store call failed (the lease will expire and the message be
 * claimed again).
 */
export type ProcessOutcome = SettleResult["outcome"] | "unsettled";

export interface OtelTracingOptions {
  /** Where the spans go (default: the global tracer provider, which your OpenTelemetry SDK registers). */
  readonly tracerProvider?: TracerProvider;
}

/** Reads a message's headers whatever the case of their names (propagators ask for lower-case ones). */
const headerGetter: TextMapGetter<Readonly<Record<string, string>>> = {
  keys: (carrier) => Object.keys(carrier),
  get: (carrier, key) => {
    if (Object.hasOwn(carrier, key)) return carrier[key];
    for (const name of Object.keys(carrier)) if (name.toLowerCase() === key) return carrier[name];
    return undefined;
  },
};

/** The trace context carried in `headers` (the message's creation context), or null when they carry none. */
function carried(headers: Readonly<Record<string, string>> | undefined): { readonly context: Context; readonly span: SpanContext } | null {
  if (headers === undefined) return null;
  const extracted = propagation.extract(ROOT_CONTEXT, headers, headerGetter);
  const span = trace.getSpanContext(extracted);
  return span !== undefined && isSpanContextValid(span) ? { context: extracted, span } : null;
}

/** error.type's value: the error's class name (Wassal's errors are named after their class). */
function errorType(error: unknown): string {
  return error instanceof Error ? error.name : "_OTHER";
}

/** Marks a span as failed with `error`: status, error.type, and the exception when there is one. */
function failed(span: Span, error: unknown): void {
  span.setAttribute(ERROR_TYPE, errorType(error));
  span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
  span.recordException(error instanceof Error ? error : String(error));
}

/** Marks a span as failed by a lost lease (no exception: the store reported it as a result). */
function lost(span: Span): void {
  span.setAttribute(ERROR_TYPE, "LeaseLostError");
  span.setStatus({ code: SpanStatusCode.ERROR, message: "the lease was lost: another owner holds the message now, or it was settled" });
}

/**
 * Tracing with OpenTelemetry, for a store (enqueue spans, trace context into the headers) and a
 * Worker (claim, processing and settling spans; the handler runs in the processing span's
 * context). Give the same one to both. Spans go to the global tracer provider unless
 * `tracerProvider` is given; with no SDK registered they cost little and record nothing.
 */
export function otelTracing(options: OtelTracingOptions = {}): Tracing {
  const tracer = (options.tracerProvider ?? trace.getTracerProvider()).getTracer(TRACER_NAME);
  return {
    enqueue: (message, carrier) => enqueueTrace(tracer, message, carrier),
    claim: (owner, types) => claimTrace(tracer, owner, types),
  };
}

/**
 * otelTracing() when an OpenTelemetry SDK has registered a global tracer provider (for example an
 * instrumentation file preloaded with `node --import`), else undefined. `wassal worker` and
 * `wassal relay` use it, so they trace only when an SDK is there to record.
 */
export function registeredOtelTracing(): Tracing | undefined {
  const provider = trace.getTracerProvider() as TracerProvider & { getDelegateTracer?: (name: string) => unknown };
  // The API's proxy provider has a delegate once an SDK registered one; without one, nothing records.
  if (typeof provider.getDelegateTracer === "function" && provider.getDelegateTracer(TRACER_NAME) === undefined) return undefined;
  return otelTracing();
}

/**
 * Exports the spans the global tracer provider still holds (an SDK provider's forceFlush), waiting
 * at most `timeoutMs`. For a process about to exit: `wassal worker` and `wassal relay` call it as
 * they stop. Does nothing without an SDK.
 */
export async function flushRegisteredTracing(timeoutMs = 5_000): Promise<void> {
  type Flushable = { forceFlush?: () => Promise<void>; getDelegate?: () => unknown };
  const global = trace.getTracerProvider() as Flushable;
  const provider = (typeof global.getDelegate === "function" ? global.getDelegate() : global) as Flushable;
  if (typeof provider.forceFlush !== "function") return;
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    provider.forceFlush().catch(() => undefined),
    new Promise<void>((resolve) => {
      timer = setTimeout(resolve, timeoutMs);
    }),
  ]);
  clearTimeout(timer);
}

function enqueueTrace(tracer: Tracer, message: NewMessage<JsonValue>, carrier: Record<string, string>): EnqueueTrace {
  const { type } = message;
  // A trace context the caller put in the headers is the message's creation context: it is kept,
  // and this span links to it (and is a CLIENT span, its context not being the creation context).
  const custom = carried(message.headers);
  const parent = context.active();
  const span = tracer.startSpan(
    `enqueue ${type}`,
    {
      kind: custom ? SpanKind.CLIENT : SpanKind.PRODUCER,
      attributes: { [MESSAGING_SYSTEM]: SYSTEM, [OPERATION_TYPE]: "send", [OPERATION_NAME]: "enqueue", [DESTINATION]: type, [MESSAGE_TYPE]: type },
      ...(custom ? { links: [{ context: custom.span }] } : {}),
    },
    parent,
  );
  const active = trace.setSpan(parent, span);
  if (!custom) propagation.inject(active, carrier);
  return {
    run: (work) => context.with(active, work),
    end(stored: OutboxMessage | undefined, error?: unknown) {
      if (stored !== undefined) span.setAttribute(MESSAGE_ID, stored.id);
      if (error !== undefined) failed(span, error);
      span.end();
    },
  };
}

function claimTrace(tracer: Tracer, owner: string, types: readonly string[] | null): ClaimTrace {
  const startTime = Date.now();
  const only = types?.length === 1 ? types[0] : undefined;
  let claimed: SpanContext | undefined;
  return {
    end(leases, error) {
      if (leases.length === 0 && error === undefined) return; // an empty poll: no span
      const links: Link[] = [];
      for (const lease of leases) {
        const creation = carried(lease.message.headers);
        if (creation) links.push({ context: creation.span, attributes: { [MESSAGE_ID]: lease.messageId } });
      }
      const attributes: Attributes = {
        [MESSAGING_SYSTEM]: SYSTEM,
        [OPERATION_TYPE]: "receive",
        [OPERATION_NAME]: "claim",
        [CLIENT_ID]: owner,
        [BATCH_COUNT]: leases.length,
      };
      if (only !== undefined) attributes[DESTINATION] = only;
      const span = tracer.startSpan(only === undefined ? "claim" : `claim ${only}`, { kind: SpanKind.CLIENT, root: true, startTime, links, attributes });
      if (error !== undefined) failed(span, error);
      span.end();
      claimed = span.spanContext();
    },
    process: (lease) => processTrace(tracer, lease, claimed),
  };
}

function processTrace(tracer: Tracer, lease: Lease, claim: SpanContext | undefined): ProcessTrace {
  const { message } = lease;
  const { type } = message;
  const creation = carried(message.headers);
  const links: Link[] = [];
  if (creation) links.push({ context: creation.span });
  if (claim) links.push({ context: claim });
  const attributes: Attributes = {
    [MESSAGING_SYSTEM]: SYSTEM,
    [OPERATION_TYPE]: "process",
    [OPERATION_NAME]: "process",
    [DESTINATION]: type,
    [MESSAGE_ID]: lease.messageId,
    [CLIENT_ID]: lease.owner,
    [MESSAGE_TYPE]: type,
    [ATTEMPT]: message.attempts,
    [LEASE_TOKEN]: lease.token,
  };
  if (lease.reclaimedFrom !== null) attributes[RECLAIMED_FROM] = lease.reclaimedFrom;
  // The creation context is the parent: one trace from the enqueuing request to the handler.
  const parent = creation ? creation.context : ROOT_CONTEXT;
  const span = tracer.startSpan(`process ${type}`, { kind: SpanKind.CONSUMER, links, attributes }, parent);
  const active = trace.setSpan(parent, span);
  // What this attempt made of the message: the first result that changed it (a later one is a
  // late completion after a timeout or a release, which the store refused), else whether a store
  // call found the lease lost.
  let outcome: Exclude<SettleResult["outcome"], "lease-lost"> | undefined;
  let lostLease = false;
  let failure: unknown;
  return {
    run: (work) => context.with(active, work),
    settle(operation: SettleOperation, error?: unknown) {
      if (error !== undefined) failure = error;
      const settling = tracer.startSpan(
        `${operation} ${type}`,
        {
          kind: SpanKind.CLIENT,
          attributes: {
            [MESSAGING_SYSTEM]: SYSTEM,
            [OPERATION_TYPE]: "settle",
            [OPERATION_NAME]: operation,
            [DESTINATION]: type,
            [MESSAGE_ID]: lease.messageId,
            [CLIENT_ID]: lease.owner,
            [MESSAGE_TYPE]: type,
            [LEASE_TOKEN]: lease.token,
          },
        },
        active,
      );
      return (result, thrown) => {
        if (result !== undefined) {
          settling.setAttribute(OUTCOME, result.outcome);
          if (result.outcome === "lease-lost") {
            lost(settling);
            lostLease = true;
          } else outcome ??= result.outcome;
        } else {
          failed(settling, thrown);
          failure ??= thrown;
        }
        settling.end();
      };
    },
    end(abortedBy) {
      const ended: ProcessOutcome = outcome ?? (lostLease || abortedBy instanceof LeaseLostError ? "lease-lost" : "unsettled");
      span.setAttribute(OUTCOME, ended);
      // A completion, and a message given back at shutdown, are no failure of the processing.
      if (ended !== "completed" && ended !== "released") {
        if (failure !== undefined) failed(span, failure);
        else if (ended === "lease-lost") lost(span);
        else if (abortedBy !== undefined) failed(span, abortedBy);
        else span.setStatus({ code: SpanStatusCode.ERROR });
      }
      span.end();
    },
  };
}
