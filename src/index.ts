// Wassal's core: the outbox contract, the worker, the errors and the types. It loads no database
// driver: each store has its own entry point ("wassal/sqlite", "wassal/postgres"), so an app that
// uses one never loads the other's driver. Metrics and logging are in "wassal/observability".

export { ManualClock, systemClock, type Clock } from "./outbox/clock.js";
export { CompletionBatcher } from "./outbox/completion-batcher.js";
export type { DriverCapabilities } from "./outbox/driver.js";
export {
  AttemptsExhaustedError,
  DatabaseOpenError,
  DatabaseTooNewError,
  DuplicateMessageError,
  InvalidArgumentError,
  KeyNotBlockedError,
  LeaseLostError,
  MessageNotFoundError,
  ScheduleNotFoundError,
  LimitNotFoundError,
  MessageNotPendingError,
  MessageRunningError,
  NotInTransactionError,
  ProcessingTimeoutError,
  ShutdownError,
  StoreBusyError,
  StoreReadOnlyError,
  UnknownMessageTypeError,
  UnrecoverableError,
  UnroutedTypesError,
  UnsupportedPayloadError,
  WassalError,
  WrongShardError,
} from "./outbox/errors.js";
export { SUBSCRIBER_SEPARATOR, subscriberCopy, type Subscriptions, subscriptions } from "./outbox/fan-out.js";
export { EventHub, type EventListener, type OutboxEvent, type OutboxEventType } from "./outbox/events.js";
export {
  type DeliveryLike,
  type MessageOptions,
  type MessageTypes,
  messageTypes,
  type TypedDelivery,
  type TypedHandler,
  type TypedMessage,
} from "./outbox/message-types.js";
export { processLease, type Handler, type HandlerResult, type ProcessOptions } from "./outbox/process-lease.js";
export type { BatchHandler } from "./outbox/batch-handler.js";
export { backoffDelay, DEFAULT_RETRY, type RetryPolicy } from "./outbox/retry.js";
export {
  DEFAULT_RETENTION_INTERVAL_MS,
  MIN_INBOX_RETENTION_MS,
  RETENTION_KINDS,
  startRetention,
  type Retention,
  type RetentionAges,
  type RetentionKind,
  type RetentionOptions,
  type RetentionPass,
} from "./outbox/retention.js";
export type { OutboxStore } from "./outbox/store.js";
export type {
  AuditAction,
  AuditEntry,
  BlockedKey,
  Cancelled,
  ClaimMessageResult,
  ClaimOptions,
  Completed,
  CompletionFailed,
  CompletionRequest,
  CompletionResult,
  Finalize,
  HeartbeatOptions,
  ForeignTransaction,
  InboxBlockedKey,
  InOrderMessage,
  InOrderReceipt,
  JsonValue,
  KeySequence,
  Lease,
  LeaseLost,
  MarkedDead,
  MessageHolder,
  MessagePage,
  MessageState,
  MessageStatus,
  OnComplete,
  NewMessage,
  OutboxMessage,
  OutboxStats,
  OwnerLeases,
  OwnerRecord,
  FiredTick,
  Schedule,
  LimitOptions,
  Rate,
  TypeLimit,
  ScheduledMessage,
  ScheduleFiring,
  ScheduleOptions,
  SkippedTicks,
  PageQuery,
  PurgeOptions,
  ReapedOwner,
  RedriveResult,
  Released,
  Renewed,
  RetryDecision,
  RetryScheduled,
  StatusCounts,
  TypeCount,
  UnblockAction,
} from "./outbox/types.js";
export { MESSAGE_STATUSES } from "./outbox/types.js";
export { assertHeld, MAX_CLAIM_LIMIT, MAX_ENQUEUE_MANY, MAX_RETRY_DELAY_MS } from "./outbox/validate.js";
export { MAX_PAYLOAD_DEPTH } from "./outbox/payload.js";
export { MAX_CANCEL_REASON } from "./outbox/leased-outbox.js";
export { MissingClientError } from "./outbox/optional.js";
export { finalizeTogether, type TogetherWriter } from "./outbox/write-together.js";
export type { ClaimTrace, EnqueueTrace, ProcessTrace, SettleOperation, SettleResult, Tracing } from "./outbox/tracing.js";
export { defaultWorkerName, type TypeSettings, Worker, type WorkerOptions } from "./outbox/worker.js";
export type { HandlerMap, HandlersContext, ModuleSchedule, ScheduleMap } from "./runtime/handlers-module.js";
