// "wassal/lab": the Wassal payments lab and what it is built from (the payments domain, opening
// either store from one string), for the benchmarks and for anyone reproducing a lab run in code.
// It is the CLI's machinery, not the library: its API may change with the lab.

export { openOutbox, withOutbox, type OpenedOutbox, type OpenOutboxOptions } from "./stores/open-outbox.js";
export { openLabOutbox, withLabOutbox, type LabOutbox } from "./lab/stores/open-lab-outbox.js";
export { paymentsRepositoryFor } from "./lab/stores/lab-stores.js";
export { SqlitePaymentsRepository } from "./lab/stores/sqlite-payments.js";
export { PostgresPaymentsRepository } from "./lab/stores/postgres-payments.js";
export {
  IdempotencyConflictError,
  InvalidPayloadError,
  PaymentsService,
  type CreatePaymentResult,
  type PaymentProvider,
  type PaymentsServiceOptions,
} from "./payments/payments-service.js";
export { PaymentEvents, parsePaymentEvent, type PaymentEventsOptions } from "./payments/payment-events.js";
export { ProviderError, ProviderSimulator, type ProviderCall, type ProviderOperation, type ProviderSimulatorOptions } from "./payments/provider-simulator.js";
export {
  RECONCILE_MESSAGE_TYPE,
  PAYMENT_EVENTS,
  type CreatePaymentRequest,
  type Payment,
  type PaymentEvent,
  type PaymentEventPayload,
  type PaymentOutcome,
  type PaymentStatus,
  type PaymentsRepository,
  type StatementLine,
} from "./payments/types.js";
export type { AtomicityMetrics, DurabilityMetrics, LabMetrics, OrderingMetrics, ScenarioMetrics } from "./lab/metrics.js";
export { findScenario, runScenario, SCENARIOS, type LabRunOptions, type LabRunResult } from "./lab/run-lab.js";
export { postgresBinaries, startPrivatePostgres, type PrivatePostgres, type PrivatePostgresOptions } from "./chaos/private-postgres.js";
