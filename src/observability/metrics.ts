// Prometheus metrics for an outbox, built by listening to the same event stream the lab's
// ledgers use: one bookkeeping, two views.

import { createServer, type Server } from "node:http";
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";
import type { EventHub } from "../outbox/events.js";
import { MESSAGE_STATUSES, type StatusCounts } from "../outbox/types.js";
import { checkListenAddress, listenOn } from "./listen.js";

export interface OutboxMetrics {
  readonly registry: Registry;
  /** Stops listening to the events. */
  detach(): void;
}

/**
 * Registers Wassal's metrics on `registry` (a new one by default) and keeps them up to date from
 * `events`. `countByStatus`, if given, is read at each scrape for the queue-depth gauge.
 */
export function outboxMetrics(
  events: EventHub,
  options: { registry?: Registry; countByStatus?: () => Promise<StatusCounts>; processMetrics?: boolean } = {},
): OutboxMetrics {
  const registry = options.registry ?? new Registry();
  if (options.processMetrics) collectDefaultMetrics({ register: registry });
  const claims = new Counter({
    name: "wassal_claims_total",
    help: "Claim results: won (one per message), empty, blocked.",
    labelNames: ["result"],
    registers: [registry],
  });
  const attempts = new Counter({ name: "wassal_processing_attempts_total", help: "Handler runs started.", registers: [registry] });
  const completions = new Counter({ name: "wassal_completions_total", help: "Messages completed under their lease.", registers: [registry] });
  const leaseLost = new Counter({
    name: "wassal_lease_lost_total",
    help: "Lease operations refused because the lease token was no longer current.",
    labelNames: ["operation"],
    registers: [registry],
  });
  const retries = new Counter({ name: "wassal_retries_total", help: "Failed attempts scheduled for another try.", registers: [registry] });
  const dead = new Counter({ name: "wassal_dead_total", help: "Messages marked dead.", registers: [registry] });
  const released = new Counter({ name: "wassal_releases_total", help: "Messages given back unfinished (shutdown).", registers: [registry] });
  const storeErrors = new Counter({
    name: "wassal_store_errors_total",
    help: "Store operations that failed (connection lost, database busy).",
    labelNames: ["operation"],
    registers: [registry],
  });
  const duration = new Histogram({
    name: "wassal_handler_duration_seconds",
    help: "From handler start to the end of the guarded completion.",
    labelNames: ["result"],
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [registry],
  });
  for (const result of ["won", "empty", "blocked"]) claims.inc({ result }, 0);
  if (options.countByStatus) {
    const count = options.countByStatus;
    new Gauge({
      name: "wassal_messages",
      help: "Messages in the outbox, by state.",
      labelNames: ["status"],
      registers: [registry],
      async collect() {
        // A database that cannot be read now leaves the gauge out of this scrape, not the whole page.
        this.reset();
        const counts = await count().catch(() => undefined);
        if (counts !== undefined) for (const status of MESSAGE_STATUSES) this.set({ status }, counts[status]);
      },
    });
  }
  const started = new Map<string, number>();
  const detach = events.subscribe((event) => {
    switch (event.type) {
      case "claim-won":
        claims.inc({ result: "won" });
        break;
      case "claim-empty":
        claims.inc({ result: "empty" });
        break;
      case "claim-blocked":
        claims.inc({ result: "blocked" });
        break;
      case "processing-started":
        attempts.inc();
        started.set(`${event.messageId}#${event.token}`, performance.now());
        break;
      case "processing-finished": {
        const key = `${event.messageId}#${event.token}`;
        const at = started.get(key);
        started.delete(key);
        if (at !== undefined) duration.observe({ result: event.result }, (performance.now() - at) / 1000);
        break;
      }
      case "completed":
        completions.inc();
        break;
      case "lease-lost":
        leaseLost.inc({ operation: event.operation });
        break;
      case "retry-scheduled":
        retries.inc();
        break;
      case "dead":
        dead.inc();
        break;
      case "released":
        released.inc();
        break;
      case "store-error":
        storeErrors.inc({ operation: event.operation });
        break;
      default:
        break;
    }
  });
  return { registry, detach };
}

/** What a relay reports, as the relay's onEvent hands it (see RelayEvent). */
export type RelayMetricEvent = { readonly type: "published"; readonly duplicate: boolean } | { readonly type: "broker-unavailable" };

/** Registers the relay's counters on `registry`; returns the function that counts each relay event. */
export function relayMetrics(registry: Registry): (event: RelayMetricEvent) => void {
  const published = new Counter({
    name: "wassal_relay_published_total",
    help: 'Messages the broker acknowledged; duplicate="true" when its duplicate window already had the id.',
    labelNames: ["duplicate"],
    registers: [registry],
  });
  const unavailable = new Counter({
    name: "wassal_relay_broker_unavailable_total",
    help: "Publishes that found the broker unreachable; the message was held under its lease and published again.",
    registers: [registry],
  });
  for (const duplicate of ["false", "true"]) published.inc({ duplicate }, 0);
  return (event) => {
    if (event.type === "published") published.inc({ duplicate: String(event.duplicate) });
    else unavailable.inc();
  };
}

/**
 * The WAL relay's slot: the write-ahead log the server keeps for it (bytes between the database's
 * position and the slot's confirmed one), and whether a consumer streams from it, read at each
 * scrape. A lag that keeps growing means the slot holds log the relay has not dealt with: a relay
 * that is down, or stuck. A scrape that cannot read it (the database unreachable) leaves both out.
 */
export function slotMetrics(registry: Registry, lag: () => Promise<{ readonly slot: string; readonly bytes: number; readonly active: boolean } | null>): void {
  // One read per scrape, shared by the two gauges.
  let reading: Promise<Awaited<ReturnType<typeof lag>> | undefined> | undefined;
  const read = () => {
    reading ??= lag()
      .catch(() => undefined)
      .finally(() => {
        setImmediate(() => {
          reading = undefined;
        });
      });
    return reading;
  };
  new Gauge({
    name: "wassal_relay_slot_lag_bytes",
    help: "Write-ahead log bytes the WAL relay's replication slot holds: the database's current position minus the slot's confirmed one.",
    labelNames: ["slot"],
    registers: [registry],
    async collect() {
      this.reset();
      const now = await read();
      if (now) this.set({ slot: now.slot }, now.bytes);
    },
  });
  new Gauge({
    name: "wassal_relay_slot_active",
    help: "1 when a consumer streams from the WAL relay's replication slot, else 0.",
    labelNames: ["slot"],
    registers: [registry],
    async collect() {
      this.reset();
      const now = await read();
      if (now) this.set({ slot: now.slot }, now.active ? 1 : 0);
    },
  });
}

/** What retention reports of a pass: rows deleted per kind, and whether it failed. */
export interface RetentionMetricPass {
  readonly deleted: Readonly<Partial<Record<"processed" | "dead" | "audit" | "inbox", number>>>;
  readonly failed: boolean;
}

/** Registers the built-in retention's counters on `registry`; returns the function that counts each pass. */
export function retentionMetrics(registry: Registry, kinds: readonly string[]): (pass: RetentionMetricPass) => void {
  const purged = new Counter({
    name: "wassal_retention_purged_total",
    help: "Rows the built-in retention deleted, by kind (processed, dead, audit, inbox).",
    labelNames: ["kind"],
    registers: [registry],
  });
  const failures = new Counter({
    name: "wassal_retention_failures_total",
    help: "Retention passes that failed (the next interval tries again).",
    registers: [registry],
  });
  for (const kind of kinds) purged.inc({ kind }, 0);
  return (pass) => {
    for (const [kind, n] of Object.entries(pass.deleted)) if (n !== undefined && n > 0) purged.inc({ kind }, n);
    if (pass.failed) failures.inc();
  };
}

/** Serves `registry` at http://host:port/metrics. Resolves once listening. */
const METRICS_NAMES = { what: "metrics", portFlag: "--metrics-port", hostFlag: "--metrics-host" } as const;

/** Refuses (InvalidArgumentError) a metrics port or host the metrics server could not listen on, before anything is opened. */
export function checkMetricsAddress(port: number, host = "127.0.0.1"): Promise<void> {
  return checkListenAddress(host, port, METRICS_NAMES);
}

/** What the metrics server reads at each scrape: a registry, or several read as one. */
export type MetricsSource = Pick<Registry, "metrics" | "contentType">;

export async function serveMetrics(registry: MetricsSource, port: number, host = "127.0.0.1"): Promise<Server> {
  const server = createServer((request, response) => {
    if (request.url !== "/metrics") {
      response.writeHead(404, { "content-type": "text/plain" }).end("see /metrics\n");
      return;
    }
    registry.metrics().then(
      (text) => response.writeHead(200, { "content-type": registry.contentType }).end(text),
      (error: unknown) => response.writeHead(500, { "content-type": "text/plain" }).end(`${String(error)}\n`),
    );
  });
  await listenOn(server, host, port, METRICS_NAMES);
  return server;
}
