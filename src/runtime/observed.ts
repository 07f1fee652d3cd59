// What every long-running command (the worker, the relay) sets up around its store, the same way:
// its options in common, logs and metrics from the store's events, the metrics server, and the
// built-in retention (retention.ts) when asked for; for one store, or for each shard of a sharded one.

import type { Logger } from "pino";
import { AggregatorRegistry, collectDefaultMetrics, Registry } from "prom-client";
import type { RetryPolicy } from "../outbox/retry.js";
import type { OutboxStore } from "../outbox/store.js";
import { logEvents } from "../observability/logging.js";
import { type MetricsSource, outboxMetrics, serveMetrics } from "../observability/metrics.js";
import type { Retention } from "../outbox/retention.js";
import type { OpenOutboxOptions } from "../stores/open-outbox.js";
import { type RetentionSettings, runRetention } from "./retention.js";

/** The options a worker and a relay share. */
export interface RunnerOptions extends OpenOutboxOptions {
  /**
   * A SQLite file path or a server's URL; or the shards of a sharded outbox (wassal/shards), in
   * shard order, each run by its own worker or relay in this process, named <name>-shard<n>.
   */
  readonly db: string | readonly string[];
  /** The owner name on its leases (default: host-pid-random). */
  readonly name?: string;
  readonly leaseMs?: number;
  readonly pollIntervalMs?: number;
  readonly retry?: Partial<RetryPolicy>;
  readonly shutdownGraceMs?: number;
  /** Its heartbeat (Worker's heartbeatMs; false: none) and how long after the last one its peers count it dead. */
  readonly heartbeatMs?: number | false;
  readonly ownerDeadAfterMs?: number;
  /** Serve Prometheus metrics on this port when set, on metricsHost (default 127.0.0.1). */
  readonly metricsPort?: number;
  readonly metricsHost?: string;
  /** Purge old rows in the background (off when absent or naming no age). */
  readonly retention?: RetentionSettings;
  readonly logger: Logger;
}

/** The lease, polling, retry, shutdown and heartbeat settings a Worker and a Relay take alike, those given. */
export function runnerTiming(options: RunnerOptions) {
  return {
    ...(options.leaseMs === undefined ? {} : { leaseMs: options.leaseMs }),
    ...(options.pollIntervalMs === undefined ? {} : { pollIntervalMs: options.pollIntervalMs }),
    ...(options.retry === undefined ? {} : { retry: options.retry }),
    ...(options.shutdownGraceMs === undefined ? {} : { shutdownGraceMs: options.shutdownGraceMs }),
    ...(options.heartbeatMs === undefined ? {} : { heartbeatMs: options.heartbeatMs }),
    ...(options.ownerDeadAfterMs === undefined ? {} : { ownerDeadAfterMs: options.ownerDeadAfterMs }),
  };
}

/** The databases a runner opens: the one, or the shards in order. */
export function outboxDbs(db: RunnerOptions["db"]): readonly string[] {
  return typeof db === "string" ? [db] : db;
}

/** The owner name on a shard's leases: the runner's name, with -shard<n> when there are shards. */
export function shardName(name: string, shard: number, dbs: readonly string[]): string {
  return dbs.length > 1 ? `${name}-shard${shard}` : name;
}

/** A shard's logger: its lines carry the shard's number when there are shards. */
export function shardLogger(logger: Logger, shard: number, dbs: readonly string[]): Logger {
  return dbs.length > 1 ? logger.child({ shard }) : logger;
}

export interface Observed {
  /** The registry of what the process counts as a whole (the relay's publishes). */
  readonly registry: Registry;
  /**
   * Each store's own registry, in shard order: its outbox and retention metrics, and anything else
   * of that store (a WAL relay's slot). With one store, the one registry above; with shards, one
   * each, labelled shard="<n>".
   */
  readonly registries: readonly Registry[];
  /** The metrics server's address, when serving. */
  readonly metricsUrl: string | null;
  /**
   * Logs and counts shard `shard`'s store events (with one store: shard 0) and runs the retention
   * asked for on it; the function returned undoes that and empties the shard's registry.
   */
  attach(shard: number, store: OutboxStore<unknown>): () => Promise<void>;
  /** Stops every retention (after its current batch), logging and counting, and closes the metrics server. */
  close(): Promise<void>;
}

/**
 * The process's logs and metrics over `shards` stores (1: one outbox): serves the metrics when a
 * port is given; each store is attached once it is open. One store: one registry, as ever.
 * Several (the shards of a sharded outbox, in order): each shard's series carry a shard="<n>"
 * label and its log lines a shard field, served together on the one port.
 */
export async function observe(shards: number, options: Pick<RunnerOptions, "metricsPort" | "metricsHost" | "logger" | "retention">): Promise<Observed> {
  const sharded = shards > 1;
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const registries = sharded
    ? Array.from({ length: shards }, (_, shard) => {
        const own = new Registry();
        own.setDefaultLabels({ shard: String(shard) });
        return own;
      })
    : [registry];
  const attached = new Set<() => Promise<void>>();
  let server: Awaited<ReturnType<typeof serveMetrics>> | undefined;
  if (options.metricsPort !== undefined) {
    server = await serveMetrics(sharded ? mergedRegistries([registry, ...registries]) : registry, options.metricsPort, options.metricsHost);
  }
  const address = server?.address();
  const metricsUrl = address && typeof address === "object" ? `http://${address.address}:${address.port}/metrics` : null;
  return {
    registry,
    registries,
    metricsUrl,
    attach(shard, store) {
      const logger = sharded ? options.logger.child({ shard }) : options.logger;
      const own = registries[shard] as Registry;
      const detachLogs = logEvents(store.events, logger);
      const metrics = outboxMetrics(store.events, { registry: own, countByStatus: () => store.countByStatus() });
      let retention: Retention | undefined;
      const detach = async () => {
        attached.delete(detach);
        await retention?.stop();
        detachLogs();
        metrics.detach();
        if (sharded) {
          own.clear(); // its default labels too: set again for the next attach
          own.setDefaultLabels({ shard: String(shard) });
        }
      };
      attached.add(detach);
      try {
        retention = runRetention(store, options.retention, { logger, registry: own });
      } catch (error) {
        void detach();
        throw error;
      }
      return detach;
    },
    async close() {
      await Promise.all([...attached].map((detach) => detach()));
      await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
    },
  };
}

/** The registries read together at each scrape: each metric once, with every registry's series (told apart by their default labels). */
function mergedRegistries(registries: readonly Registry[]): MetricsSource {
  return {
    contentType: (registries[0] as Registry).contentType,
    async metrics() {
      // Each metric appears in one registry only, so none needs adding up: "omit" (the process's start time) would drop it.
      const all = (await Promise.all(registries.map((registry) => registry.getMetricsAsJSON()))).map((metrics) =>
        metrics.map((metric) => (metric.aggregator === "omit" ? { ...metric, aggregator: "first" as const } : metric)),
      );
      return AggregatorRegistry.aggregate(all).metrics();
    },
  };
}
