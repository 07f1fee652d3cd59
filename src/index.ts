// Wassal's public API. Everything a user imports comes from here.

export { ManualClock, systemClock, type Clock } from "./outbox/clock.js";
export {
  DatabaseOpenError,
  DuplicateMessageError,
  InvalidArgumentError,
  LeaseLostError,
  MessageNotFoundError,
  NotInTransactionError,
  StoreBusyError,
  WassalError,
} from "./outbox/errors.js";
export { EventHub, type EventListener, type OutboxEvent, type OutboxEventType } from "./outbox/events.js";
export { processLease, type Handler, type HandlerResult } from "./outbox/process-lease.js";
export type { OutboxStore, UnleasedAccess } from "./outbox/store.js";
export type {
  ClaimMessageResult,
  ClaimOptions,
  Completed,
  MarkedDead,
  Finalize,
  JsonValue,
  Lease,
  LeaseLost,
  MessageHolder,
  MessageStatus,
  NewMessage,
  OutboxMessage,
  OutboxStats,
  OwnerLeases,
  PurgeOptions,
  Released,
  Renewed,
  RetryDecision,
  RetryScheduled,
  StatusCounts,
} from "./outbox/types.js";
export { MESSAGE_STATUSES } from "./outbox/types.js";
export { assertHeld, MAX_CLAIM_LIMIT } from "./outbox/validate.js";
export { Worker, defaultWorkerName, type WorkerOptions } from "./outbox/worker.js";
export { backoffDelay, DEFAULT_RETRY, type RetryPolicy } from "./outbox/retry.js";
export { AttemptsExhaustedError, ShutdownError, UnknownMessageTypeError } from "./outbox/errors.js";
export { outboxMetrics, serveMetrics, type OutboxMetrics } from "./observability/metrics.js";
export { createLogger, logEvents } from "./observability/logging.js";
export { openOutbox, withOutbox, type OpenedOutbox, type OpenOutboxOptions } from "./stores/open-outbox.js";

export { SqliteOutboxStore, type SqliteStoreOptions, type SqliteTx } from "./stores/sqlite/sqlite-outbox-store.js";
export { SqlitePaymentsRepository } from "./stores/sqlite/payments-repository.js";
export type { Synchronous } from "./stores/sqlite/open-database.js";

export { PostgresOutboxStore, type PostgresStoreOptions, type PostgresTx } from "./stores/postgres/postgres-outbox-store.js";
export { PostgresPaymentsRepository } from "./stores/postgres/payments-repository.js";
export type { PostgresConnectOptions } from "./stores/postgres/connect.js";

export { IdempotencyConflictError, InvalidPayloadError, PaymentsService, type CreatePaymentResult, type PaymentProvider, type PaymentsServiceOptions } from "./payments/payments-service.js";
export { ProviderError, ProviderSimulator, type ProviderCall, type ProviderOperation, type ProviderSimulatorOptions } from "./payments/provider-simulator.js";
export { RECONCILE_MESSAGE_TYPE, type CreatePaymentRequest, type Payment, type PaymentOutcome, type PaymentStatus, type PaymentsRepository } from "./payments/types.js";

export { findScenario, runScenario, SCENARIOS, type LabRunOptions, type LabRunResult } from "./lab/run-lab.js";
