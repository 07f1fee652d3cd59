// A ready-to-run worker: opens the store, loads the app's handlers module (see handlers-module.ts)
// or, by default, the payments demo's (payments-handlers.ts), wires logs and metrics to the event
// stream, and starts claiming.

import type { Server } from "node:http";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import type { Logger } from "pino";
import type { Handler } from "../outbox/process-lease.js";
import { type TypeSettings, Worker, defaultWorkerName } from "../outbox/worker.js";
import type { RetryPolicy } from "../outbox/retry.js";
import { logEvents } from "../observability/logging.js";
import { outboxMetrics, serveMetrics } from "../observability/metrics.js";
import { openOutbox, type OpenOutboxOptions } from "../stores/open-outbox.js";
import { loadHandlers } from "./handlers-module.js";
import type { PaymentsHandlerSettings, WorkerFaults } from "./payments-handlers.js";

export type { WorkerFaults } from "./payments-handlers.js";

/** The payments demo's handlers module, next to this file (built, or its source under a TypeScript runner). */
const PAYMENTS_HANDLERS = [".js", ".ts"]
  .map((extension) => fileURLToPath(new URL(`./payments-handlers${extension}`, import.meta.url)))
  .find((path) => existsSync(path)) as string;

export interface PaymentsWorkerOptions extends OpenOutboxOptions {
  /** A SQLite file path or a postgres:// URL. */
  readonly db: string;
  readonly name?: string;
  /** A module exporting the app's handlers by message type; without it, the payments handler. */
  readonly handlersModule?: string;
  /** The message types to claim (default: those the handlers handle). */
  readonly types?: readonly string[];
  /** The longest a handler may run (default: no limit); a module's perType may set it per type. */
  readonly maxProcessingMs?: number;
  readonly concurrency?: number;
  readonly leaseMs?: number;
  readonly pollIntervalMs?: number;
  readonly retry?: Partial<RetryPolicy>;
  readonly shutdownGraceMs?: number;
  /** Serve Prometheus metrics on this port (127.0.0.1) when set. */
  readonly metricsPort?: number;
  readonly metricsHost?: string;
  /** Simulated provider latency per call. */
  readonly providerLatencyMs?: number;
  /** Append every provider call to this file (shared by processes; read by the chaos checker). */
  readonly providerLog?: string;
  /** Keep the audit trail (outbox_audit). */
  readonly audit?: boolean;
  /** Faults to inject, for chaos runs. */
  readonly faults?: WorkerFaults;
  readonly logger: Logger;
}

export interface RunningPaymentsWorker {
  readonly worker: Worker<unknown>;
  readonly location: string;
  /** The metrics server's address, when serving. */
  readonly metricsUrl: string | null;
  /** Graceful stop: finish or release in-flight work, then close everything. */
  stop(graceMs?: number): Promise<void>;
}

export async function startPaymentsWorker(options: PaymentsWorkerOptions): Promise<RunningPaymentsWorker> {
  const name = options.name ?? defaultWorkerName();
  const outbox = await openOutbox(options.db, { ...options, applicationName: `wassal-worker-${name}`.slice(0, 63) });
  const { store } = outbox;
  let handlers: Readonly<Record<string, Handler<unknown>>>;
  let perType: Readonly<Record<string, TypeSettings>> | undefined;
  try {
    // The payments demo is a handlers module too, loaded the same way; its settings are the demo's flags.
    const settings: PaymentsHandlerSettings = {
      ...(options.providerLatencyMs === undefined ? {} : { providerLatencyMs: options.providerLatencyMs }),
      ...(options.providerLog === undefined ? {} : { providerLog: options.providerLog }),
      ...(options.faults === undefined ? {} : { faults: options.faults }),
    };
    ({ handlers, perType } = await loadHandlers(options.handlersModule ?? PAYMENTS_HANDLERS, {
      store,
      logger: options.logger,
      ...(options.handlersModule === undefined ? { settings: { ...settings } } : {}),
    }));
  } catch (error) {
    await outbox.close();
    throw error;
  }
  const detachLogs = logEvents(store.events, options.logger);
  const metrics = outboxMetrics(store.events, { countByStatus: () => store.countByStatus(), processMetrics: true });
  let server: Server | undefined;
  try {
    if (options.metricsPort !== undefined) server = await serveMetrics(metrics.registry, options.metricsPort, options.metricsHost);
    const worker = new Worker({
      store,
      name,
      handlers,
      ...(options.types === undefined ? {} : { types: options.types }),
      ...(perType === undefined ? {} : { perType }),
      ...(options.maxProcessingMs === undefined ? {} : { maxProcessingMs: options.maxProcessingMs }),
      ...(options.concurrency === undefined ? {} : { concurrency: options.concurrency }),
      ...(options.leaseMs === undefined ? {} : { leaseMs: options.leaseMs }),
      ...(options.pollIntervalMs === undefined ? {} : { pollIntervalMs: options.pollIntervalMs }),
      ...(options.retry === undefined ? {} : { retry: options.retry }),
      ...(options.shutdownGraceMs === undefined ? {} : { shutdownGraceMs: options.shutdownGraceMs }),
    });
    await worker.start();
    const address = server?.address();
    const metricsUrl = address && typeof address === "object" ? `http://${address.address}:${address.port}/metrics` : null;
    return {
      worker,
      location: outbox.location,
      metricsUrl,
      async stop(graceMs) {
        await worker.stop(graceMs === undefined ? {} : { graceMs });
        detachLogs();
        metrics.detach();
        await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
        await outbox.close();
      },
    };
  } catch (error) {
    detachLogs();
    metrics.detach();
    server?.close();
    await outbox.close();
    throw error;
  }
}
