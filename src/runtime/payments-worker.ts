// A ready-to-run worker for the Wassal payments domain: opens the store, registers the
// reconciliation handler, wires logs and metrics to the event stream, and starts claiming.

import type { Server } from "node:http";
import type { Logger } from "pino";
import { Worker, defaultWorkerName } from "../outbox/worker.js";
import type { RetryPolicy } from "../outbox/retry.js";
import { logEvents } from "../observability/logging.js";
import { outboxMetrics, serveMetrics } from "../observability/metrics.js";
import { PaymentsService } from "../payments/payments-service.js";
import { ProviderSimulator } from "../payments/provider-simulator.js";
import { RECONCILE_MESSAGE_TYPE } from "../payments/types.js";
import { openOutbox, type OpenOutboxOptions } from "../stores/open-outbox.js";

export interface PaymentsWorkerOptions extends OpenOutboxOptions {
  /** A SQLite file path or a postgres:// URL. */
  readonly db: string;
  readonly name?: string;
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
  const provider = new ProviderSimulator({ answerUnknownKeys: true, latencyMs: options.providerLatencyMs ?? 0 });
  const payments = new PaymentsService({ store, repository: outbox.payments, provider });
  const detachLogs = logEvents(store.events, options.logger);
  const metrics = outboxMetrics(store.events, { countByStatus: () => store.countByStatus(), processMetrics: true });
  let server: Server | undefined;
  try {
    if (options.metricsPort !== undefined) server = await serveMetrics(metrics.registry, options.metricsPort, options.metricsHost);
    const worker = new Worker({
      store,
      name,
      handlers: { [RECONCILE_MESSAGE_TYPE]: payments.handler() },
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
