// What every long-running command (the worker, the relay) sets up around its store, the same way:
// its options in common, logs and metrics from the store's events, the metrics server, and the
// built-in retention (retention.ts) when asked for.

import type { Logger } from "pino";
import type { Registry } from "prom-client";
import type { RetryPolicy } from "../outbox/retry.js";
import type { OutboxStore } from "../outbox/store.js";
import { logEvents } from "../observability/logging.js";
import { outboxMetrics, serveMetrics } from "../observability/metrics.js";
import type { OpenOutboxOptions } from "../stores/open-outbox.js";
import { type RetentionSettings, runRetention } from "./retention.js";

/** The options a worker and a relay share. */
export interface RunnerOptions extends OpenOutboxOptions {
  /** A SQLite file path or a postgres:// URL. */
  readonly db: string;
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

export interface Observed {
  readonly registry: Registry;
  /** The metrics server's address, when serving. */
  readonly metricsUrl: string | null;
  /** Stops retention (after its current batch), logging and counting, and closes the metrics server. */
  close(): Promise<void>;
}

/** Logs and counts the store's events, serves the metrics when a port is given, and runs the retention asked for. */
export async function observe(
  store: OutboxStore<unknown>,
  options: Pick<RunnerOptions, "metricsPort" | "metricsHost" | "logger" | "retention">,
): Promise<Observed> {
  const detachLogs = logEvents(store.events, options.logger);
  const metrics = outboxMetrics(store.events, { countByStatus: () => store.countByStatus(), processMetrics: true });
  let server: Awaited<ReturnType<typeof serveMetrics>> | undefined;
  let retention: ReturnType<typeof runRetention>;
  const close = async () => {
    await retention?.stop();
    detachLogs();
    metrics.detach();
    await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  };
  try {
    if (options.metricsPort !== undefined) server = await serveMetrics(metrics.registry, options.metricsPort, options.metricsHost);
    retention = runRetention(store, options.retention, { logger: options.logger, registry: metrics.registry });
  } catch (error) {
    await close();
    throw error;
  }
  const address = server?.address();
  const metricsUrl = address && typeof address === "object" ? `http://${address.address}:${address.port}/metrics` : null;
  return { registry: metrics.registry, metricsUrl, close };
}
