// "wassal/observability": Prometheus metrics and structured logs, both built from a store's events.

export { createLogger, logEvents, type Logger } from "./observability/logging.js";
export { otelTracing, type OtelTracingOptions, type ProcessOutcome } from "./observability/tracing.js";
export { outboxMetrics, relayMetrics, serveMetrics, type OutboxMetrics, type RelayMetricEvent } from "./observability/metrics.js";
