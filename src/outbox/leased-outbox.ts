// The outbox contract, implemented once over any driver. Here and only here: argument checks,
// lease-lost lookups, events, outcomes, the audit decision and group-commit bookkeeping. A driver
// runs the SQL and reports what the database did (src/outbox/driver.ts).

import { setImmediate } from "node:timers/promises";
import type {
  CheckedMessage,
  ClaimMessageAttempt,
  DriverCapabilities,
  Migration,
  EnqueueParams,
  KeyTurn,
  MaybePromise,
  OutboxDriver,
  PurgeTarget,
  Refusal,
} from "./driver.js";
import { LeaseSet, turnAfter } from "./driver.js";
import {
  DuplicateMessageError,
  InvalidArgumentError,
  KeyNotBlockedError,
  MessageNotFoundError,
  MessageNotPendingError,
  MessageRunningError,
  NotInTransactionError,
  NotMigratedError,
} from "./errors.js";
import { EventHub, listened, publish } from "./events.js";
import type { OutboxStore } from "./store.js";
import type { EnqueueTrace, Tracing } from "./tracing.js";
import { planWrites } from "./write-together.js";
import { type ClaimSplit, checkLimitOptions, LIMITED_TYPES_TTL_MS, splitClaim, toTypeLimit } from "./limits.js";
import { checkScheduleName, checkScheduleTiming, fireSchedules, MAX_TICKS_PER_CALL, tickAfter, tickDedupeKey, tickHeaders, toSchedule } from "./schedules.js";
import {
  MESSAGE_STATUSES,
  type AuditEntry,
  type BlockedKey,
  type Cancelled,
  type ClaimMessageResult,
  type ClaimOptions,
  type Completed,
  type CompletionRequest,
  type CompletionResult,
  type MarkedDead,
  type Finalize,
  type ForeignTransaction,
  type InboxBlockedKey,
  type InOrderReceipt,
  type InOrderMessage,
  type JsonValue,
  type Lease,
  type LeaseLost,
  type LeaseOperation,
  type MessageHolder,
  type MessageState,
  type MessageStatus,
  type MessageText,
  type MessagePage,
  type NewMessage,
  type OnComplete,
  type PageQuery,
  type OutboxMessage,
  type OutboxStats,
  type PurgeOptions,
  type RedriveResult,
  type Released,
  type Renewed,
  type RetryDecision,
  type RetryScheduled,
  type StatusCounts,
  type UnblockAction,
  type TypeCount,
  type KeySequence,
  type HeartbeatOptions,
  type OwnerRecord,
  type ReapedOwner,
  type CancelOptions,
  type LimitOptions,
  type Schedule,
  type TypeLimit,
  type ScheduledMessage,
  type ScheduleFiring,
  type ScheduleOptions,
} from "./types.js";
import { payloadText } from "./payload.js";
import {
  checkBatchSize,
  checkKnownKeys,
  MAX_HEADERS,
  checkClaimOptions,
  checkDedupeKey,
  checkDelayMs,
  checkDestination,
  checkHeaders,
  checkInboxId,
  checkInboxSource,
  checkKeySeq,
  checkLease,
  checkLeaseMs,
  checkMessageId,
  checkMessageType,
  checkOnComplete,
  checkObject,
  checkOrderingKey,
  checkPriority,
  checkSingletonKey,
  checkDebounceMs,
  checkOwner,
  checkStatuses,
  checkText,
  checkTime,
  checkTypes,
  checkSearchText,
  describeError,
  isMessageId,
  MAX_ENQUEUE_MANY,
  shown,
  withAddedHeaders,
} from "./validate.js";
import { cancelOwner } from "./cancels.js";

/** The longest reason a cancel takes (it is kept in the audit row's owner, 200 characters on MariaDB). */
export const MAX_CANCEL_REASON = 180;

// How the protocol reports each outcome on the event stream, written once so that every store
// reports the same events for the same outcome.

/** A claim of up to `limit` messages: one claim-won per lease, or one claim-empty. */
function reportClaims(events: EventHub, owner: string, limit: number, at: Date, leases: readonly Lease[]): void {
  if (leases.length === 0) publish(events, { type: "claim-empty", at, owner, limit });
  if (!listened(events)) return; // an event per lease, for nobody
  for (const lease of leases) {
    publish(events, {
      type: "claim-won",
      at,
      owner,
      messageId: lease.messageId,
      token: lease.token,
      lockedUntil: lease.lockedUntil,
      reclaimedFrom: lease.reclaimedFrom,
    });
  }
}

/** A claim of one named message: won, blocked, or (not claimable) empty. */
/** The outcome of a claim of one named message, from what the driver saw before it tried and whether the claim took. */
function claimOutcome(messageId: string, { before, lease }: ClaimMessageAttempt): ClaimMessageResult {
  if (lease !== null) return { outcome: "claimed", lease };
  if (before === null) return { outcome: "not-claimable", messageId, status: "missing" };
  if (before.status === "processing") {
    return { outcome: "blocked", messageId, heldBy: before.lockedBy, lockedUntil: before.lockedUntil, token: before.leaseToken };
  }
  return { outcome: "not-claimable", messageId, status: before.waiting ? "waiting" : before.status };
}

function reportClaimMessage(events: EventHub, owner: string, messageId: string, at: Date, result: ClaimMessageResult): void {
  if (result.outcome === "claimed") {
    reportClaims(events, owner, 1, at, [result.lease]);
  } else if (result.outcome === "blocked") {
    publish(events, { type: "claim-blocked", at, owner, messageId, heldBy: result.heldBy, lockedUntil: result.lockedUntil });
  } else {
    publish(events, { type: "claim-empty", at, owner, limit: 1 });
  }
}

/** A lease operation that found its token no longer current: reports it and builds the result. */
function leaseLost(events: EventHub, lease: Lease, operation: LeaseOperation, at: Date, current: MessageHolder | null): LeaseLost {
  publish(events, {
    type: "lease-lost",
    at,
    owner: lease.owner,
    messageId: lease.messageId,
    token: lease.token,
    operation,
    heldBy: current?.lockedBy ?? null,
    currentToken: current?.leaseToken ?? null,
  });
  return { outcome: "lease-lost", messageId: lease.messageId, token: lease.token, current };
}

/** The requests of one completeMany: each names a lease, and no lease twice (it could complete only once). */
function checkCompletionRequests<Tx>(items: readonly CompletionRequest<Tx>[]): void {
  if (!Array.isArray(items)) throw new InvalidArgumentError(`completeMany takes a list of { lease, finalize? } (got ${typeof items})`);
  const seen = new LeaseSet();
  for (const item of items) {
    const { lease, finalize } = checkObject(item, "each completion request ({ lease, finalize? })");
    checkLease(lease);
    if (finalize !== undefined && typeof finalize !== "function")
      throw new InvalidArgumentError(`finalize must be a function of the transaction (got ${typeof finalize})`);
    if (!seen.add(lease.messageId, lease.token)) {
      throw new InvalidArgumentError(
        `completeMany was given the lease of message ${lease.messageId} (token ${lease.token}) twice; a lease completes once, so pass each lease once (nothing was written)`,
      );
    }
  }
}

/** A ForeignTransaction as enqueueIn and enqueueManyIn take it, still open by its library's account. */
function checkForeignTransaction(transaction: ForeignTransaction, method: string): void {
  if (typeof transaction !== "object" || transaction === null || typeof transaction.query !== "function" || typeof transaction.problem !== "function") {
    throw new InvalidArgumentError(
      `${method} needs a ForeignTransaction ({ placeholders, problem, query }): make one with an integration such as fromKysely(trx)`,
    );
  }
  if (transaction.placeholders !== "numbered" && transaction.placeholders !== "question") {
    throw new InvalidArgumentError(`a ForeignTransaction's placeholders must be "numbered" or "question" (got ${JSON.stringify(transaction.placeholders)})`);
  }
  const problem = transaction.problem();
  if (problem !== null) throw new NotInTransactionError(`enqueue needs an open transaction so the message commits with your business write: ${problem}`);
}

/** Runs `next` on a value now, or once a promise of it resolves: keeps synchronous drivers synchronous. */
function andThen<T, R>(value: MaybePromise<T>, next: (value: T) => MaybePromise<R>): MaybePromise<R> {
  return value instanceof Promise ? value.then(next) : next(value);
}

/**
 * How one completion of a group ended inside its transaction: "lost" when its lease was refused
 * and nothing was recorded (no auditing: the holder is looked up afterwards), `lost` when the
 * refusal was recorded with it.
 */
type Outcome = { readonly done: Date } | "lost" | { readonly lost: Refusal } | { readonly error: unknown };

/** A refused completion's outcome: with the refusal the driver recorded, if any. */
function lostOutcome(refusals: ReadonlyMap<string, Refusal> | null, lease: Lease): Outcome {
  const refusal = refusals?.get(lease.messageId);
  return refusal === undefined ? "lost" : { lost: refusal };
}

export abstract class LeasedOutbox<Tx> implements OutboxStore<Tx> {
  readonly events = new EventHub();
  abstract readonly kind: string;
  readonly #driver: OutboxDriver<Tx>;
  readonly #audit: boolean;
  /** onComplete "delete": a completion deletes the message's row. */
  readonly #remove: boolean;
  readonly #tracing: Tracing | undefined;
  /** The limited types (store.limit) as last read, when (performance.now()), and a read under way. */
  #limited: ReadonlySet<string> = new Set();
  #limitedReadAt = Number.NEGATIVE_INFINITY;
  #limitedReading: Promise<ReadonlySet<string>> | undefined;
  /** Moves on at each limit()/unlimit() here, so that a read begun before one does not count as fresh. */
  #limitsGeneration = 0;

  protected constructor(
    driver: OutboxDriver<Tx>,
    options: { readonly audit?: boolean; readonly onComplete?: OnComplete | undefined; readonly tracing?: Tracing | undefined },
  ) {
    this.#driver = driver;
    this.#audit = options.audit ?? false;
    this.#remove = checkOnComplete(options.onComplete) === "delete";
    this.#tracing = options.tracing;
  }

  /** What a completion does with the message's row: "keep" it as processed, or "delete" it. */
  get onComplete(): OnComplete {
    return this.#remove ? "delete" : "keep";
  }

  get capabilities(): DriverCapabilities {
    return this.#driver.capabilities;
  }

  migrate(): Promise<void> {
    return this.#driver.migrate();
  }

  isInstalled(): Promise<boolean> {
    return this.#driver.isInstalled();
  }

  transaction<T>(work: (tx: Tx) => T | Promise<T>): Promise<T> {
    return this.#driver.transaction(work);
  }

  async enqueue<P extends JsonValue>(tx: Tx, message: NewMessage<P>): Promise<OutboxMessage<P>> {
    if (!this.#driver.isInTransaction(tx)) {
      throw new NotInTransactionError(
        `enqueue needs an open transaction so the message commits with your business write: call it inside store.transaction(tx => …) or ${this.#driver.ownTransactionHint}`,
      );
    }
    return this.#insert(message, (checked) => this.#driver.enqueue({ tx, ...checked }));
  }

  async enqueueIn<P extends JsonValue>(transaction: ForeignTransaction, message: NewMessage<P>): Promise<OutboxMessage<P>> {
    checkForeignTransaction(transaction, "enqueueIn");
    return this.#insert(message, (checked) => this.#driver.enqueueForeign({ tx: transaction, ...checked }));
  }

  async enqueueMany<P extends JsonValue>(tx: Tx, messages: readonly NewMessage<P>[]): Promise<OutboxMessage<P>[]> {
    if (!this.#driver.isInTransaction(tx)) {
      throw new NotInTransactionError(
        `enqueueMany needs an open transaction so the messages commit with your business write: call it inside store.transaction(tx => …) or ${this.#driver.ownTransactionHint}`,
      );
    }
    return this.#insertMany(messages, (checked) => this.#driver.enqueueMany({ tx, messages: checked }), { tx });
  }

  async enqueueManyIn<P extends JsonValue>(transaction: ForeignTransaction, messages: readonly NewMessage<P>[]): Promise<OutboxMessage<P>[]> {
    checkForeignTransaction(transaction, "enqueueManyIn");
    return this.#insertMany(messages, (checked) => this.#driver.enqueueManyForeign({ tx: transaction, messages: checked }), { foreign: transaction });
  }

  /**
   * Checks every message of a list, then inserts them all with `insert` (one statement). Tracing:
   * one enqueue trace per message, as enqueue gives, each ended with its stored message or with
   * the error that refused the list; the one statement runs in the caller's context, not inside
   * any one message's trace.
   */
  async #insertMany<P extends JsonValue>(
    messages: readonly NewMessage<P>[],
    insert: (checked: readonly CheckedMessage[]) => Promise<OutboxMessage[]>,
    via: { readonly tx: Tx } | { readonly foreign: ForeignTransaction },
  ): Promise<OutboxMessage<P>[]> {
    const checked = this.#checkedList(messages);
    if (checked.length === 0) return [];
    const tracing = this.#tracing;
    const traces = tracing === undefined ? undefined : checked.map((one, index) => this.#traced(tracing, messages[index] as NewMessage<JsonValue>, one));
    let stored: OutboxMessage[];
    try {
      stored = await insert(traces === undefined ? checked : traces.map((t) => t.traced));
      if (stored.length !== checked.length) throw new Error(`enqueueMany: the store returned ${stored.length} messages for ${checked.length}`);
    } catch (error) {
      const refused = await this.#refusedMany(error, checked, via);
      for (const { trace } of traces ?? []) trace.end(undefined, refused);
      throw refused;
    }
    for (const [index, { trace }] of (traces ?? []).entries()) trace.end(stored[index]);
    return stored as OutboxMessage<P>[];
  }

  /**
   * Every message of a list checked before anything is written: a bad one is refused naming its
   * index, and so is a dedupe key given twice (DuplicateMessageError, as two enqueues of it in one
   * transaction would end).
   */
  #checkedList(messages: readonly NewMessage<JsonValue>[]): CheckedMessage[] {
    if (!Array.isArray(messages)) throw new InvalidArgumentError(`enqueueMany takes a list of messages (got ${messages === null ? "null" : typeof messages})`);
    if (messages.length > MAX_ENQUEUE_MANY) {
      throw new InvalidArgumentError(
        `enqueueMany takes at most ${MAX_ENQUEUE_MANY} messages at once (got ${messages.length}); split the list (each part commits with your transaction all the same)`,
      );
    }
    const checked: CheckedMessage[] = [];
    const firstWithKey = new Map<string, number>();
    for (const [index, message] of messages.entries()) {
      let one: CheckedMessage;
      try {
        one = this.#checked(message);
      } catch (error) {
        if (!(error instanceof InvalidArgumentError)) throw error;
        throw new InvalidArgumentError(`messages[${index}]: ${error.message} (nothing of the list was written)`, error.code, { cause: error });
      }
      if (one.singletonKey !== null) {
        throw new InvalidArgumentError(
          `messages[${index}]: enqueueMany takes no singletonKey (a singleton message may join a waiting one instead of being written): enqueue it alone (nothing of the list was written)`,
        );
      }
      if (one.dedupeKey !== null) {
        const earlier = firstWithKey.get(one.dedupeKey);
        if (earlier !== undefined) {
          throw new DuplicateMessageError(one.dedupeKey, {
            message: `messages[${earlier}] and messages[${index}] have the same dedupe key ${JSON.stringify(one.dedupeKey)}; each dedupe key is enqueued once, so the list was refused (nothing of it was written)`,
          });
        }
        firstWithKey.set(one.dedupeKey, index);
      }
      checked.push(one);
    }
    return checked;
  }

  /** What a list's insert error becomes: a taken dedupe key is DuplicateMessageError naming it (and its index), anything else itself. */
  async #refusedMany(
    error: unknown,
    checked: readonly CheckedMessage[],
    via: { readonly tx: Tx } | { readonly foreign: ForeignTransaction },
  ): Promise<unknown> {
    const duplicate = this.#driver.isDuplicate(error) || this.#driver.isDuplicate((error as { cause?: unknown } | null)?.cause);
    const dedupeKeys = checked.flatMap((m) => (m.dedupeKey === null ? [] : [m.dedupeKey]));
    if (!duplicate || dedupeKeys.length === 0) return this.#unmigrated(error);
    let key: string | null = dedupeKeys.length === 1 ? (dedupeKeys[0] as string) : null;
    if (key === null) key = await this.#driver.takenDedupeKey({ in: via, error, dedupeKeys }).catch(() => null);
    if (key === null || !dedupeKeys.includes(key)) {
      // The database did not say which (PostgreSQL without the error's detail): name them all.
      return new DuplicateMessageError(dedupeKeys[0] as string, {
        message: `one of the list's dedupe keys already exists (${dedupeKeys.map((k) => JSON.stringify(k)).join(", ")}); each dedupe key is enqueued once, so the list was refused (nothing of it was written)`,
        cause: error,
      });
    }
    const index = checked.findIndex((m) => m.dedupeKey === key);
    return new DuplicateMessageError(key, {
      message: `an outbox message with dedupe key ${JSON.stringify(key)} (messages[${index}]) already exists; each dedupe key is enqueued once, so the list was refused (nothing of it was written; look the existing one up instead)`,
      cause: error,
    });
  }

  /** Checks a new message and inserts it with `insert`; a taken dedupe key is DuplicateMessageError. */
  async #insert<P extends JsonValue>(message: NewMessage<P>, insert: (checked: CheckedMessage) => Promise<OutboxMessage>): Promise<OutboxMessage<P>> {
    const checked = this.#checked(message);
    if (this.#tracing !== undefined) {
      const { trace, traced } = this.#traced(this.#tracing, message, checked);
      let stored: OutboxMessage<P>;
      try {
        stored = (await trace.run(() => insert(traced))) as OutboxMessage<P>;
      } catch (error) {
        const refused = this.#refused(error, message);
        trace.end(undefined, refused);
        throw refused;
      }
      trace.end(stored);
      return stored;
    }
    try {
      return (await insert(checked)) as OutboxMessage<P>;
    } catch (error) {
      throw this.#refused(error, message);
    }
  }

  /**
   * enqueue for a store whose database answers synchronously (SQLite): everything, errors
   * included, happens before it returns, so it can run inside a synchronous transaction.
   */
  protected enqueueNow<P extends JsonValue>(tx: Tx, message: NewMessage<P>, insert: (params: EnqueueParams<Tx>) => OutboxMessage): OutboxMessage<P> {
    if (!this.#driver.isInTransaction(tx)) {
      throw new NotInTransactionError(
        `enqueue needs an open transaction so the message commits with your business write: call it inside a transaction, ${this.#driver.ownTransactionHint}`,
      );
    }
    const checked = this.#checked(message);
    if (this.#tracing !== undefined) {
      const { trace, traced } = this.#traced(this.#tracing, message, checked);
      let stored: OutboxMessage<P>;
      try {
        stored = trace.run(() => insert({ tx, ...traced })) as OutboxMessage<P>;
      } catch (error) {
        const refused = this.#refused(error, message);
        trace.end(undefined, refused);
        throw refused;
      }
      trace.end(stored);
      return stored;
    }
    try {
      return insert({ tx, ...checked }) as OutboxMessage<P>;
    } catch (error) {
      throw this.#refused(error, message);
    }
  }

  /** Starts an enqueue's trace and adds the trace context it gives to the checked message's headers. */
  #traced(tracing: Tracing, message: NewMessage<JsonValue>, checked: CheckedMessage): { readonly trace: EnqueueTrace; readonly traced: CheckedMessage } {
    const carrier: Record<string, string> = {};
    const trace = tracing.enqueue(message, carrier);
    const given = message.headers ?? null;
    const headers = withAddedHeaders(given, carrier) as Readonly<Record<string, string>> | null;
    if (headers === given || headers === null) return { trace, traced: checked };
    return { trace, traced: { ...checked, headers: Object.keys(headers).length === 0 ? null : JSON.stringify(headers) } };
  }

  #checked(message: NewMessage<JsonValue>): CheckedMessage {
    checkObject(message, "message ({ type, payload })");
    const type = checkMessageType(message.type);
    const payload = payloadText(message.payload);
    // null is taken as absent, as it was before these fields were checked.
    const dedupeKey = message.dedupeKey == null ? null : checkDedupeKey(message.dedupeKey);
    const availableAt = message.availableAt == null ? null : checkTime(message.availableAt, `availableAt of a ${type} message`);
    const key = message.key == null ? null : checkOrderingKey(message.key);
    const headers = message.headers == null ? null : checkHeaders(message.headers);
    const destination = message.destination == null ? null : checkDestination(message.destination);
    const priority = message.priority == null ? 0 : checkPriority(message.priority, `a ${type} message`);
    const singletonKey = message.singletonKey == null ? null : checkSingletonKey(message.singletonKey);
    const debounceMs = message.debounceMs == null ? null : checkDebounceMs(message.debounceMs, `a ${type} message`);
    if (singletonKey !== null && dedupeKey !== null) {
      throw new InvalidArgumentError(
        `a ${type} message takes a dedupeKey or a singletonKey, not both: a dedupe key is unique for good (a second enqueue is refused), a singleton key while its message waits unclaimed (a second enqueue joins it)`,
      );
    }
    if (debounceMs !== null && singletonKey === null)
      throw new InvalidArgumentError(`debounceMs of a ${type} message needs a singletonKey: it replaces the message of that key that waits unclaimed`);
    if (debounceMs !== null && availableAt !== null)
      throw new InvalidArgumentError(
        `a ${type} message takes debounceMs or availableAt, not both: with debounceMs it is due debounceMs after the last enqueue`,
      );
    return { type, dedupeKey, key, headers, destination, payload, availableAt, priority, singletonKey, debounceMs };
  }

  /** What an insert's error becomes: a taken dedupe key is DuplicateMessageError, missing tables NotMigratedError, anything else itself. */
  #refused(error: unknown, message: NewMessage<JsonValue>): unknown {
    // Some libraries wrap the database's error (Drizzle: "Failed query: …", with it as the cause).
    const duplicate = this.#driver.isDuplicate(error) || this.#driver.isDuplicate((error as { cause?: unknown } | null)?.cause);
    return message.dedupeKey !== undefined && message.dedupeKey !== null && duplicate ? new DuplicateMessageError(message.dedupeKey) : this.#unmigrated(error);
  }

  /** NotMigratedError when `error` (or its cause) says Wassal's tables do not exist; else `error` itself. */
  #unmigrated(error: unknown): unknown {
    const driver = this.#driver;
    if (!driver.isNotMigrated(error) && !driver.isNotMigrated((error as { cause?: unknown } | null)?.cause)) return error;
    return new NotMigratedError(null, [], { cause: error });
  }

  async pendingMigrations(): Promise<readonly Migration[]> {
    const applied = new Set(await this.#driver.appliedMigrations());
    return this.#driver.migrations().filter((migration) => !applied.has(migration.name));
  }

  async claim(owner: string, options: ClaimOptions): Promise<Lease[]> {
    checkOwner(owner);
    const { limit, leaseMs, types } = checkClaimOptions(options);
    let claimed: { readonly at: Date; readonly leases: Lease[] };
    try {
      const limited = performance.now() - this.#limitedReadAt < LIMITED_TYPES_TTL_MS ? this.#limited : await this.#readLimitedTypes();
      claimed =
        limited.size === 0
          ? await this.#driver.claim({ owner, limit, leaseMs, audit: this.#audit, types: types ?? null })
          : await this.#claimSplit(owner, limit, leaseMs, splitClaim(types ?? null, limited));
    } catch (error) {
      throw this.#unmigrated(error);
    }
    const { at, leases } = claimed;
    reportClaims(this.events, owner, limit, at, leases);
    return leases;
  }

  /** The limited types, read again (one read at a time); kept for LIMITED_TYPES_TTL_MS. */
  #readLimitedTypes(): Promise<ReadonlySet<string>> {
    const generation = this.#limitsGeneration;
    this.#limitedReading ??= this.#driver
      .listLimits()
      .then((limits) => {
        this.#limited = new Set(limits.map((limit) => limit.type));
        // A limit set here while this read was on its way: the next claim reads again.
        this.#limitedReadAt = generation === this.#limitsGeneration ? performance.now() : Number.NEGATIVE_INFINITY;
        return this.#limited;
      })
      .finally(() => {
        this.#limitedReading = undefined;
      });
    return this.#limitedReading;
  }

  /**
   * A claim when some types are limited: each limited type claimed is claimed alone, within its
   * limit (the driver's claimLimited), first; then the other types, up to what is left. Limited
   * types first, as the Worker's capped types: claimed after the others, they would wait for every
   * message of the unlimited types, however old their own are.
   */
  async #claimSplit(owner: string, limit: number, leaseMs: number, split: ClaimSplit): Promise<{ readonly at: Date; readonly leases: Lease[] }> {
    const leases: Lease[] = [];
    let at: Date | undefined;
    try {
      for (const type of split.limited) {
        if (leases.length >= limit) break;
        const claimed = await this.#driver.claimLimited({ owner, type, limit: limit - leases.length, leaseMs, audit: this.#audit });
        at ??= claimed.at;
        leases.push(...claimed.leases);
      }
      if (leases.length < limit && (split.rest === null || split.rest.length > 0)) {
        const claimed = await this.#driver.claim({
          owner,
          limit: limit - leases.length,
          leaseMs,
          audit: this.#audit,
          types: split.rest,
          exceptTypes: split.except,
        });
        at ??= claimed.at;
        leases.push(...claimed.leases);
      }
    } catch (error) {
      // Each step commits alone: the leases already taken are the caller's, not to be dropped (they
      // would wait out their leases, holding their limit's slots). The next claim meets the error.
      if (leases.length === 0 || at === undefined) throw error;
      return { at, leases };
    }
    return { at: at ?? (await this.#driver.currentTime()), leases };
  }

  async limit(type: string, options: LimitOptions): Promise<TypeLimit> {
    const checkedType = checkMessageType(type);
    const { concurrency, rate } = checkLimitOptions(options, checkedType);
    try {
      const stored = await this.#driver.putLimit({ type: checkedType, concurrency, rateCount: rate?.count ?? null, rateIntervalMs: rate?.intervalMs ?? null });
      // This store's next claim sees it.
      this.#limitsGeneration += 1;
      this.#limitedReadAt = Number.NEGATIVE_INFINITY;
      return toTypeLimit(stored);
    } catch (error) {
      throw this.#unmigrated(error);
    }
  }

  async unlimit(type: string): Promise<boolean> {
    const checkedType = checkMessageType(type);
    try {
      const removed = await this.#driver.removeLimit({ type: checkedType });
      this.#limitsGeneration += 1;
      this.#limitedReadAt = Number.NEGATIVE_INFINITY;
      return removed;
    } catch (error) {
      throw this.#unmigrated(error);
    }
  }

  async limits(): Promise<TypeLimit[]> {
    try {
      const limits = await this.#driver.listLimits();
      this.#limited = new Set(limits.map((limit) => limit.type));
      this.#limitedReadAt = performance.now();
      return limits.map(toTypeLimit);
    } catch (error) {
      throw this.#unmigrated(error);
    }
  }

  async claimMessage(owner: string, messageId: string, options: Pick<ClaimOptions, "leaseMs">): Promise<ClaimMessageResult> {
    checkOwner(owner);
    checkMessageId(messageId);
    const leaseMs = checkLeaseMs(checkObject(options, "claimMessage options ({ leaseMs })").leaseMs);
    const attempt = await this.#driver.claimMessage({ owner, messageId, leaseMs, audit: this.#audit });
    const { at } = attempt;
    const result = claimOutcome(messageId, attempt);
    reportClaimMessage(this.events, owner, messageId, at, result);
    return result;
  }

  /**
   * Reports the lease as lost: from the refusal recorded with the refused write (auditing), or from
   * who holds the message now, read after the operation's transaction. (A driver that recorded no
   * refusal while auditing has it recorded here, apart: no driver of this repository does.)
   */
  async #lost(lease: Lease, operation: LeaseOperation, refusal: Refusal | null): Promise<LeaseLost> {
    const { at, holder } = refusal ?? (await this.#driver.holder({ messageId: lease.messageId, refused: this.#audit ? { lease, operation } : null }));
    return leaseLost(this.events, lease, operation, at, holder);
  }

  /** A completion refused inside `tx`: with auditing, its "refused" row is written there, to commit with the rest. */
  #refusedIn(tx: Tx, lease: Lease): Outcome | Promise<Outcome> {
    if (!this.#audit) return "lost";
    return this.#driver.holder({ tx, messageId: lease.messageId, refused: { lease, operation: "complete" } }).then((lost) => ({ lost }));
  }

  async renew(lease: Lease, leaseMs: number): Promise<Renewed | LeaseLost> {
    checkLease(lease);
    checkLeaseMs(leaseMs);
    const { at, lockedUntil, refusal } = await this.#driver.renew({ lease, leaseMs, audit: this.#audit });
    if (lockedUntil === null) return this.#lost(lease, "renew", refusal);
    const renewed: Lease = { ...lease, lockedUntil, message: { ...lease.message, lockedUntil, availableAt: lockedUntil } };
    publish(this.events, { type: "renewed", at, owner: lease.owner, messageId: lease.messageId, token: lease.token, lockedUntil });
    return { outcome: "renewed", lease: renewed };
  }

  async complete(lease: Lease, finalize?: Finalize<Tx>): Promise<Completed | LeaseLost> {
    checkCompletionRequests([finalize === undefined ? { lease } : { lease, finalize }]); // before anything is written
    // Alone in its transaction: no savepoint, and a business write that throws rolls back and is rethrown.
    return (await this.#report(lease, await this.#completeAlone(lease, finalize))) as Completed | LeaseLost;
  }

  async completeMany(items: readonly CompletionRequest<Tx>[]): Promise<CompletionResult[]> {
    checkCompletionRequests(items); // before anything is written
    if (items.length === 0) return [];
    const only = items.length === 1 ? (items[0] as CompletionRequest<Tx>) : undefined;
    const outcomes = only ? [await this.#completeAlone(only.lease, only.finalize)] : await this.#completeGroup(items);
    // Only a lost lease's report is awaited (it looks the holder up); the events go out in the same
    // order. Awaiting each report, with an entries() iterator's pair per item: 5.80 against 5.67 µs
    // per message (medians of 9, the worker over an in-memory driver, groups of 100), within the
    // noise, kept for the await and the allocations it saves per message.
    const results: CompletionResult[] = new Array<CompletionResult>(items.length);
    for (let index = 0; index < items.length; index++) {
      const reported = this.#report((items[index] as CompletionRequest<Tx>).lease, outcomes[index] ?? "lost");
      results[index] = reported instanceof Promise ? await reported : reported;
    }
    return results;
  }

  /** Publishes how a completion ended and builds its result (a lost lease is looked up first). */
  #report(lease: Lease, outcome: Outcome): CompletionResult | Promise<LeaseLost> {
    if (outcome === "lost") return this.#lost(lease, "complete", null);
    if ("lost" in outcome) return leaseLost(this.events, lease, "complete", outcome.lost.at, outcome.lost.holder);
    if ("done" in outcome) {
      if (listened(this.events))
        publish(this.events, { type: "completed", at: outcome.done, owner: lease.owner, messageId: lease.messageId, token: lease.token });
      return { outcome: "completed", messageId: lease.messageId, processedAt: outcome.done };
    }
    return { outcome: "failed", messageId: lease.messageId, error: outcome.error };
  }

  /**
   * One completion in a transaction of its own; a business write that throws rolls it back and is
   * rethrown. Written without async steps where the driver answers synchronously, so that nothing
   * is awaited while SQLite's write lock is held (each await there lengthens every other
   * process's wait).
   */
  #completeAlone(lease: Lease, finalize: Finalize<Tx> | undefined): Promise<Outcome> {
    const key = lease.message.key;
    // Nothing to write with it: the one guarded statement (which hands the key on too) is the whole
    // transaction. On PostgreSQL that is one round trip instead of BEGIN, UPDATE, COMMIT; on SQLite
    // the driver's synchronous path, with no caller's transaction to track.
    if (finalize === undefined) {
      return this.#driver
        .completeBulk({ tx: null, leases: [lease], audit: this.#audit, handOnKeys: key !== null, remove: this.#remove })
        .then(({ at, completed, refusals }) => (completed.has(lease.messageId, lease.token) ? { done: at } : lostOutcome(refusals, lease)));
    }
    return this.#driver.transaction((tx) => {
      if (key !== null) return this.#completeKeyed(tx, lease, key, finalize);
      // The guarded update first: if the lease is gone, the business write never runs.
      return andThen(this.#driver.completeOne({ tx, lease, savepoint: "none", audit: this.#audit, remove: this.#remove }), (done) =>
        this.#afterGuard(tx, lease, done, finalize),
      );
    });
  }

  /** A keyed completion: the guarded update, then the key passes to the next message waiting, in the same transaction. */
  #completeKeyed(tx: Tx, lease: Lease, key: string, finalize: Finalize<Tx> | undefined): MaybePromise<Outcome> {
    const turn = turnAfter(lease.message, true) ?? { key, nextSeq: null };
    return andThen(this.#driver.completeOne({ tx, lease, savepoint: "none", audit: this.#audit, remove: this.#remove }), (done) =>
      done === null ? this.#refusedIn(tx, lease) : andThen(this.#driver.handOn({ tx, keys: [turn] }), () => this.#afterGuard(tx, lease, done, finalize)),
    );
  }

  #afterGuard(tx: Tx, lease: Lease, done: Date | null, finalize: Finalize<Tx> | undefined): Outcome | Promise<Outcome> {
    if (done === null) return this.#refusedIn(tx, lease);
    if (finalize === undefined) return { done };
    return Promise.resolve(finalize(tx)).then(() => ({ done }));
  }

  /**
   * Group commit. Every member's guarded update goes in one statement, then the business writes
   * run one after another in the same transaction, with no savepoints (members whose finalize
   * shares a writer, see finalizeTogether, in one call). That is the common case,
   * and the cheap one: on PostgreSQL a savepoint is a subtransaction, and more than 64 of them in
   * one transaction overflow each backend's subtransaction cache, which every other snapshot then
   * pays for.
   *
   * A business write that throws rolls the whole attempt back. That member's outcome is its error
   * (its guarded update was rolled back with it), and the others run again in savepoints of their
   * own (#completeGroupInSavepoints), where a second failure undoes only itself. So a finalize may
   * run twice, the first run rolled back: it must write only through `tx`.
   *
   * Tried first: a savepoint per member with a business write, opened in the same round trip as
   * its guarded update (so two round trips per member). The payments bench (a write per message)
   * measured that at 0.12–0.21 of the no-op rate on PostgreSQL, and its server cost at 450 µs per
   * message against 70 for the no-op.
   */
  async #completeGroup(items: readonly CompletionRequest<Tx>[]): Promise<Outcome[]> {
    const leases = items.map((item) => item.lease);
    // Completed messages with ordering keys hand their keys on in the same statement.
    const handOnKeys = leases.some((lease) => lease.message.key !== null);
    const outcomes: Outcome[] = new Array<Outcome>(items.length);
    const record = (at: Date, completed: LeaseSet, refusals: ReadonlyMap<string, Refusal> | null) => {
      const done = { done: at }; // one for the group: an outcome is never changed
      for (let index = 0; index < leases.length; index++) {
        const lease = leases[index] as Lease;
        outcomes[index] = completed.has(lease.messageId, lease.token) ? done : lostOutcome(refusals, lease);
      }
    };
    if (items.every((item) => item.finalize === undefined)) {
      const { at, completed, refusals } = await this.#driver.completeBulk({ tx: null, leases, audit: this.#audit, handOnKeys, remove: this.#remove });
      record(at, completed, refusals);
      return outcomes;
    }
    let failed: { readonly members: readonly number[]; readonly error: unknown } | undefined;
    try {
      await this.#driver.transaction(async (tx) => {
        const { at, completed, refusals } = await this.#driver.completeBulk({ tx, leases, audit: this.#audit, handOnKeys, remove: this.#remove });
        record(at, completed, refusals);
        // A lost lease's write never runs; members sharing a writer (finalizeTogether) write in one call.
        for (const step of planWrites(items.map((item) => (completed.has(item.lease.messageId, item.lease.token) ? item.finalize : undefined)))) {
          try {
            await step.run(tx);
          } catch (error) {
            failed = { members: step.members, error };
            throw error; // rolls the attempt back
          }
        }
      });
      return outcomes;
    } catch (error) {
      if (failed === undefined) throw error; // not a member's business write: the commit itself failed
    }
    const { members, error } = failed;
    // One member's own write failed: that is its outcome. A shared write failed: whose item was to
    // blame is unknown, so every member runs again alone.
    if (members.length > 1) return this.#completeGroupInSavepoints(items);
    const index = members[0] as number;
    const again = items.length === 1 ? [] : await this.#completeGroupInSavepoints(items.filter((_, i) => i !== index));
    again.splice(index, 0, { error });
    return again;
  }

  /**
   * The group again, after a member's business write threw: completions without a business write
   * share one guarded statement; each of the others runs in a savepoint of its own, so its failure
   * undoes it alone. (No lease appears twice: checked before.)
   */
  async #completeGroupInSavepoints(items: readonly CompletionRequest<Tx>[]): Promise<Outcome[]> {
    const outcomes: Outcome[] = new Array<Outcome>(items.length);
    const bulk: number[] = [];
    for (const [index, { finalize }] of items.entries()) {
      if (finalize === undefined) bulk.push(index);
    }
    const bulkLeases = bulk.map((index) => (items[index] as CompletionRequest<Tx>).lease);
    await this.#driver.transaction(async (tx) => {
      const handedOn: KeyTurn[] = []; // keys of the completions, handed on together at the end
      if (bulk.length > 0) {
        const { at, completed, refusals } = await this.#driver.completeBulk({
          tx,
          leases: bulkLeases,
          audit: this.#audit,
          handOnKeys: false,
          remove: this.#remove,
        });
        for (const [i, index] of bulk.entries()) {
          const lease = bulkLeases[i] as Lease;
          const done = completed.has(lease.messageId, lease.token);
          outcomes[index] = done ? { done: at } : lostOutcome(refusals, lease);
          const turn = done ? turnAfter(lease.message, true) : null;
          if (turn !== null) handedOn.push(turn);
        }
      }
      let open = false; // a member's savepoint is open; the next member releases it, or the commit does
      for (const [index, { lease, finalize }] of items.entries()) {
        if (finalize === undefined) continue; // done in bulk
        const done = await this.#driver.completeOne({ tx, lease, savepoint: open ? "next" : "first", audit: this.#audit, remove: this.#remove });
        open = true;
        if (done === null) {
          // Nothing was changed, so the savepoint needs no rollback (its refused row, if any, stays).
          outcomes[index] = await this.#refusedIn(tx, lease);
          continue;
        }
        try {
          await finalize(tx);
          const turn = turnAfter(lease.message, true);
          if (turn !== null) handedOn.push(turn);
          outcomes[index] = { done };
        } catch (error) {
          await this.#driver.rollbackSavepoint({ tx });
          outcomes[index] = { error };
        }
      }
      // One call, its keys sorted, after every member: a member whose business write failed hands
      // nothing on, and no two groups take the same keys' turns in opposite orders.
      // (One holder per key, so no key comes twice.)
      if (handedOn.length > 0) await this.#driver.handOn({ tx, keys: handedOn.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0)) });
    });
    return outcomes;
  }

  async fail(lease: Lease, error: unknown, decision: RetryDecision): Promise<RetryScheduled | MarkedDead | LeaseLost> {
    checkLease(lease);
    const dead = decision === "dead" || decision === "dead-and-skip";
    const retryInMs = dead ? null : checkDelayMs(checkObject(decision, 'fail decision ("dead", "dead-and-skip" or { retryInMs })').retryInMs);
    const text = describeError(error);
    const { at, changed, availableAt, refusal } = await this.#driver.fail({ lease, error: text, retryInMs, audit: this.#audit });
    if (!changed) return this.#lost(lease, "fail", refusal);
    if (retryInMs === null) {
      // Skipped at once: its key moves on. (A crash between the two transactions leaves the key
      // blocked by this dead message, the safe side: nothing out of order; skip it by hand.)
      if (decision === "dead-and-skip" && lease.message.key !== null) await this.#skip(lease.message.key, lease.messageId);
      publish(this.events, { type: "dead", at, owner: lease.owner, messageId: lease.messageId, token: lease.token, error: text });
      return { outcome: "dead", messageId: lease.messageId };
    }
    publish(this.events, { type: "retry-scheduled", at, owner: lease.owner, messageId: lease.messageId, token: lease.token, availableAt, error: text });
    return { outcome: "retry-scheduled", messageId: lease.messageId, availableAt };
  }

  async release(lease: Lease): Promise<Released | LeaseLost> {
    checkLease(lease);
    const { at, changed, refusal } = await this.#driver.release({ lease, audit: this.#audit });
    if (!changed) return this.#lost(lease, "release", refusal);
    publish(this.events, { type: "released", at, owner: lease.owner, messageId: lease.messageId, token: lease.token });
    return { outcome: "released", messageId: lease.messageId };
  }

  onNewMessages(wake: () => void): Promise<() => Promise<void>> {
    return this.#driver.onNewMessages({ wake });
  }

  async heartbeat(owner: string, options: HeartbeatOptions): Promise<{ readonly at: Date; readonly aliveUntil: Date }> {
    checkOwner(owner);
    const { aliveMs, kind, takes } = checkObject(options, "heartbeat options ({ aliveMs, kind?, takes? })");
    if (typeof aliveMs !== "number" || !Number.isInteger(aliveMs) || aliveMs < 1 || aliveMs > 2_147_483_647) {
      throw new InvalidArgumentError(`heartbeat's aliveMs must be a whole number of milliseconds from 1 to 2147483647 (got ${shown(aliveMs)})`);
    }
    const checkedKind = kind === undefined ? "worker" : checkText(kind, "heartbeat's kind", 50);
    const checkedTakes = takes === undefined || takes === null ? null : JSON.stringify(checkTypes(takes));
    try {
      return await this.#driver.heartbeat({ owner, kind: checkedKind, takes: checkedTakes, aliveMs });
    } catch (error) {
      throw this.#unmigrated(error);
    }
  }

  async reapDeadOwners(reaper: string): Promise<ReapedOwner[]> {
    checkOwner(reaper);
    let result: { readonly at: Date; readonly reaped: readonly ReapedOwner[] };
    try {
      result = await this.#driver.reapOwners();
    } catch (error) {
      throw this.#unmigrated(error);
    }
    const reaped = [...result.reaped];
    if (reaped.length > 0) publish(this.events, { type: "owners-reaped", at: result.at, owner: reaper, reaped });
    return reaped;
  }

  async signOff(owner: string): Promise<boolean> {
    checkOwner(owner);
    return this.#driver.signOff({ owner });
  }

  async owners(): Promise<OwnerRecord[]> {
    return (await this.#driver.listOwners()).map((row) => ({ ...row, takes: row.takes === null ? null : (JSON.parse(row.takes) as string[]) }));
  }

  async schedule<P extends JsonValue>(name: string, cron: string, message: ScheduledMessage<P>, options: ScheduleOptions = {}): Promise<Schedule> {
    const checkedName = checkScheduleName(name);
    const timing = checkScheduleTiming(checkedName, cron, checkKnownKeys(options, "schedule options", ["timezone", "backfillMs"]));
    checkKnownKeys(message, `the message of schedule ${shown(checkedName)}`, [
      "type",
      "payload",
      "key",
      "headers",
      "destination",
      "priority",
      "dedupeKey",
      "availableAt",
    ]);
    for (const field of ["dedupeKey", "availableAt"] as const) {
      if ((message as NewMessage)[field] != null) {
        throw new InvalidArgumentError(
          `the message of schedule ${shown(checkedName)} takes no ${field}: each tick's message is due at its tick, with the dedupe key "schedule:<name>:<tick>"`,
        );
      }
    }
    const own = message.headers == null ? [] : Object.keys(message.headers).map((header) => header.toLowerCase());
    const reserved = Object.keys(tickHeaders(checkedName, new Date(0)));
    if (reserved.some((header) => own.includes(header))) {
      throw new InvalidArgumentError(
        `the message of schedule ${shown(checkedName)} may not set the headers ${reserved.join(" and ")}: each tick's message gets them`,
      );
    }
    if (own.length > MAX_HEADERS - reserved.length) {
      throw new InvalidArgumentError(
        `the message of schedule ${shown(checkedName)} has ${own.length} headers; a tick's message adds ${reserved.length}, so give at most ${MAX_HEADERS - reserved.length}`,
      );
    }
    // Checked as a tick's message will be, its added headers included.
    const sample = new Date(0);
    const { type, payload, key, destination, priority } = this.#checked({
      ...message,
      dedupeKey: tickDedupeKey(checkedName, sample),
      headers: withAddedHeaders(message.headers ?? null, tickHeaders(checkedName, sample)) as Record<string, string>,
    });
    const headers = message.headers == null ? null : checkHeaders(message.headers);
    try {
      const at = await this.#driver.currentTime();
      const nextAt = tickAfter(timing, at);
      if (nextAt === null) {
        throw new InvalidArgumentError(
          `the cron expression ${shown(timing.cron)} of schedule ${shown(checkedName)} has no tick after now (${at.toISOString()})`,
        );
      }
      const stored = await this.#driver.putSchedule({ schedule: { name: checkedName, ...timing, type, payload, headers, key, destination, priority }, nextAt });
      return toSchedule(stored);
    } catch (error) {
      throw this.#unmigrated(error);
    }
  }

  async unschedule(name: string): Promise<boolean> {
    const checkedName = checkScheduleName(name);
    try {
      return await this.#driver.removeSchedule({ name: checkedName });
    } catch (error) {
      throw this.#unmigrated(error);
    }
  }

  async schedules(): Promise<Schedule[]> {
    try {
      return (await this.#driver.listSchedules()).map(toSchedule);
    } catch (error) {
      throw this.#unmigrated(error);
    }
  }

  async fireSchedules(options: { readonly owner?: string; readonly limit?: number; readonly signal?: AbortSignal } = {}): Promise<ScheduleFiring> {
    const { owner, limit, signal } = checkKnownKeys(options, "fireSchedules options", ["owner", "limit", "signal"]);
    const firer = { driver: this.#driver, events: this.events, enqueue: (tx: Tx, message: NewMessage) => this.enqueue(tx, message) };
    if (limit !== undefined && (typeof limit !== "number" || !Number.isInteger(limit) || limit < 1 || limit > MAX_TICKS_PER_CALL)) {
      throw new InvalidArgumentError(`fireSchedules' limit must be a whole number of ticks from 1 to ${MAX_TICKS_PER_CALL} (got ${shown(limit)})`);
    }
    const checkedLimit = limit ?? MAX_TICKS_PER_CALL;
    try {
      return await fireSchedules(firer, owner === undefined ? "scheduler" : checkOwner(owner), checkedLimit, signal);
    } catch (error) {
      throw this.#unmigrated(error);
    }
  }

  async stats(): Promise<OutboxStats> {
    const counts = await this.countByStatus();
    const { now, oldestPendingCreatedAt, owners } = await this.#driver.leaseStats();
    return {
      now,
      counts,
      oldestPendingCreatedAt,
      leasesByOwner: owners.map((o) => ({ owner: o.owner, held: o.held, expired: o.expired })),
      expiredLeases: owners.reduce((sum, o) => sum + o.expired, 0),
    };
  }

  /** Skips the dead message holding `key` and hands the key on: its id, or null when no dead message holds it. */
  #skip(key: string, messageId: string | null): Promise<string | null> {
    return this.#driver.transaction((tx) =>
      andThen(this.#driver.skipKeyHolder({ tx, key, messageId }), (skipped) =>
        // The skipped message's number was never used: the next holder takes it.
        skipped === null ? null : andThen(this.#driver.handOn({ tx, keys: [{ key, nextSeq: skipped.keySeq }] }), () => skipped.id),
      ),
    );
  }

  async blockedKeys(options: { readonly limit?: number } = {}): Promise<BlockedKey[]> {
    const { limit } = checkObject(options, "blockedKeys options ({ limit })");
    return this.#driver.blockedKeys({ limit: limit === undefined ? 1000 : checkBatchSize(limit, "limit") });
  }

  async unblockKey(key: string, action: UnblockAction): Promise<{ readonly key: string; readonly messageId: string; readonly action: UnblockAction }> {
    checkOrderingKey(key);
    if (action !== "redrive" && action !== "skip") throw new InvalidArgumentError(`unblock action must be "redrive" or "skip" (got ${shown(action)})`);
    if (action === "skip") {
      const skipped = await this.#skip(key, null);
      if (skipped === null) throw new KeyNotBlockedError(key);
      return { key, messageId: skipped, action };
    }
    const holder = await this.#driver.deadHolder({ key });
    if (holder === null || (await this.redrive({ messageIds: [holder] })).moved === 0) throw new KeyNotBlockedError(key);
    return { key, messageId: holder, action };
  }

  async redrive(target: { readonly messageIds: readonly string[] } | "all"): Promise<RedriveResult> {
    if (target === "all") return { moved: (await this.#driver.redrive({ messageIds: "all", audit: this.#audit })).moved, notMoved: [] };
    const { messageIds } = checkObject(target, 'redrive target ("all" or { messageIds })');
    if (!Array.isArray(messageIds)) throw new InvalidArgumentError(`redrive target's messageIds must be a list of message ids (got ${typeof messageIds})`);
    const ids = [...new Set(messageIds.map(checkMessageId))];
    if (ids.length === 0) return { moved: 0, notMoved: [] };
    const { moved, movedIds } = await this.#driver.redrive({ messageIds: ids, audit: this.#audit });
    const notMoved: { messageId: string; status: MessageStatus | "missing" }[] = [];
    for (const messageId of ids) {
      if (movedIds?.has(messageId)) continue;
      const { holder } = await this.#driver.holder({ messageId, refused: null });
      notMoved.push({ messageId, status: holder?.status ?? "missing" });
    }
    return { moved, notMoved };
  }

  async cancel(messageId: string, options: CancelOptions = {}): Promise<Cancelled> {
    const id = checkMessageId(messageId);
    const { reason, running } = checkKnownKeys(options, "cancel options", ["reason", "running"]);
    if (reason !== undefined && (typeof reason !== "string" || reason.length > MAX_CANCEL_REASON)) {
      throw new InvalidArgumentError(`a cancel's reason must be text of at most ${MAX_CANCEL_REASON} characters (got ${shown(reason)})`);
    }
    if (running !== undefined && typeof running !== "boolean") {
      throw new InvalidArgumentError(`a cancel's running must be true (cancel a running message too) or false (refuse one) (got ${shown(running)})`);
    }
    const owner = cancelOwner(reason);
    const { at, before, cancelled } = await this.#driver.transaction((tx) =>
      andThen(this.#driver.cancel({ tx, messageId: id, owner, audit: this.#audit, running: running === true, remove: this.#remove }), (attempt) =>
        // A holder's number was never used (it was not delivered): the next holder takes it, as after a skip.
        attempt.cancelled && attempt.before?.holdsKey === true && attempt.before.key !== null
          ? andThen(this.#driver.handOn({ tx, keys: [{ key: attempt.before.key, nextSeq: attempt.before.keySeq }] }), () => attempt)
          : attempt,
      ),
    );
    if (before === null)
      throw new MessageNotFoundError(
        `no outbox message has id ${id}; nothing was cancelled (browse the messages on the dashboard's messages page, or look one up with store.findMessages)`,
      );
    if (!cancelled) {
      if (before.status === "processing") throw new MessageRunningError(id, before.lockedBy, before.lockedUntil);
      if (before.status === "processed" || before.status === "dead" || before.status === "cancelled") throw new MessageNotPendingError(id, before.status);
      throw new Error(`cancel: message ${id} was ${before.status} and yet not cancelled`);
    }
    const wasRunning = before.status === "processing";
    // The holder's run, in this process, aborts at once (a Worker listens); in another, its next
    // renewal finds the lease gone.
    publish(this.events, {
      type: "cancelled",
      at,
      owner,
      messageId: id,
      token: before.leaseToken,
      runningOwner: wasRunning ? before.lockedBy : null,
      reason: reason ?? null,
    });
    return {
      outcome: "cancelled",
      messageId: id,
      type: before.type,
      key: before.key,
      handedOn: before.holdsKey && before.key !== null,
      runningOwner: wasRunning ? before.lockedBy : null,
      reason: reason ?? null,
      at,
    };
  }

  async pageMessages(query: PageQuery = {}): Promise<MessagePage> {
    const { status, type, key, order, after, before, limit } = checkObject(query, "pageMessages query ({ status, type, key, order, after, before, limit })");
    if (status !== undefined && !MESSAGE_STATUSES.includes(status)) {
      throw new InvalidArgumentError(`status must be one of ${MESSAGE_STATUSES.join(", ")} (got ${shown(status)})`);
    }
    if (order !== undefined && order !== "newest" && order !== "oldest")
      throw new InvalidArgumentError(`order must be "newest" or "oldest" (got ${shown(order)})`);
    if (after !== undefined && before !== undefined) throw new InvalidArgumentError("give after (the next page) or before (the previous page), not both");
    const size = limit ?? 50;
    if (typeof size !== "number" || !Number.isInteger(size) || size < 1 || size > 1000) {
      throw new InvalidArgumentError(`limit must be a whole number from 1 to 1000 (got ${shown(size)})`);
    }
    const newest = order !== "oldest";
    const filter = {
      status: status ?? null,
      type: type === undefined ? null : checkMessageType(type),
      key: key === undefined ? null : checkOrderingKey(key),
    };
    const cursor = after ?? before;
    const from = cursor === undefined ? null : checkMessageId(cursor);
    // In the page's order, "after" a cursor is below it when the newest come first, above it otherwise.
    const forward = before === undefined;
    const bounds = (id: string | null, onward: boolean) => (onward === newest ? { above: null, below: id } : { above: id, below: null });
    const rows = await this.#driver.pageMessages({ ...filter, ...bounds(from, forward), ascending: forward !== newest, limit: size + 1 });
    const more = rows.length > size;
    const page = rows.slice(0, size);
    if (!forward) page.reverse();
    const first = page[0];
    const last = page[page.length - 1];
    if (first === undefined || last === undefined) {
      // An empty page: from a cursor, the way back is the cursor itself.
      return { messages: [], next: forward || from === null ? null : from, previous: !forward || from === null ? null : from };
    }
    // A page reached by a cursor has the cursor's side behind it only if a message is still there: look once.
    const beyond = async (id: string, onward: boolean) =>
      (await this.#driver.pageMessages({ ...filter, ...bounds(id, onward), ascending: onward !== newest, limit: 1 })).length > 0;
    const hasNext = forward ? more : await beyond(last.id, true);
    const hasPrevious = forward ? from !== null && (await beyond(first.id, false)) : more;
    return { messages: page, next: hasNext ? last.id : null, previous: hasPrevious ? first.id : null };
  }

  purgeProcessed(before: Date, options: PurgeOptions = {}): Promise<number> {
    return this.#purge("processed", before, options);
  }

  purgeDead(before: Date, options: PurgeOptions = {}): Promise<number> {
    return this.#purge("dead", before, options);
  }

  purgeAudit(before: Date, options: PurgeOptions = {}): Promise<number> {
    return this.#purge("audit", before, options);
  }

  async receive(tx: Tx, messageId: string, options: { readonly source?: string } = {}): Promise<boolean> {
    if (!this.#driver.isInTransaction(tx)) {
      throw new NotInTransactionError(
        `receive needs an open transaction so the id commits with your effect: call it inside store.transaction(tx => …) or ${this.#driver.ownTransactionHint}`,
      );
    }
    const id = checkInboxId(messageId);
    const source = checkInboxSource(checkObject(options, "receive options ({ source })").source ?? "");
    return this.#driver.inboxRecord({ tx, source, messageId: id });
  }

  async receiveInOrder(tx: Tx, message: InOrderMessage, options: { readonly source?: string } = {}): Promise<InOrderReceipt> {
    if (!this.#driver.isInTransaction(tx)) {
      throw new NotInTransactionError(
        `receiveInOrder needs an open transaction so the id and the key's number commit with your effect: call it inside store.transaction(tx => …) or ${this.#driver.ownTransactionHint}`,
      );
    }
    const { id, key, keySeq } = checkObject(message, "receiveInOrder message ({ id, key, keySeq })");
    const messageId = checkInboxId(id);
    const orderingKey = checkOrderingKey(key);
    const seq = checkKeySeq(keySeq);
    const source = checkInboxSource(checkObject(options, "receiveInOrder options ({ source })").source ?? "");
    const applied = await this.#driver.inboxKeyTurn({ tx, source, key: orderingKey });
    if (seq <= applied) {
      // Its number was applied or skipped past: a redelivery, whose id is recorded, changes nothing.
      // An id not seen with a number the key has passed is another message (a number given again:
      // a message skipped in the outbox after the broker had it, a producer restored from a
      // backup): applied now rather than lost, and reported as late.
      return (await this.#driver.inboxRecord({ tx, source, messageId })) ? { outcome: "late", appliedSeq: applied } : { outcome: "duplicate" };
    }
    if (seq > applied + 1) {
      await this.#driver.inboxKeyUpdate({ tx, source, key: orderingKey, applied: null, held: seq });
      return { outcome: "early", waitingFor: applied + 1 };
    }
    const recorded = await this.#driver.inboxRecord({ tx, source, messageId });
    await this.#driver.inboxKeyUpdate({ tx, source, key: orderingKey, applied: seq, held: null });
    // Its id was recorded before (received once without its number): applied then; the key moves on.
    return recorded ? { outcome: "new" } : { outcome: "duplicate" };
  }

  async inboxBlockedKeys(options: { readonly source?: string; readonly limit?: number } = {}): Promise<InboxBlockedKey[]> {
    const { source, limit } = checkObject(options, "inboxBlockedKeys options ({ source, limit })");
    return this.#driver.inboxBlockedKeys({
      source: source === undefined ? null : checkInboxSource(source),
      limit: limit === undefined ? 1000 : checkBatchSize(limit, "limit"),
    });
  }

  async skipInboxGap(
    key: string,
    options: { readonly source?: string } = {},
  ): Promise<{ readonly key: string; readonly skipped: readonly [from: number, to: number] }> {
    const orderingKey = checkOrderingKey(key);
    const source = checkInboxSource(checkObject(options, "skipInboxGap options ({ source })").source ?? "");
    const skipped = await this.#driver.inboxSkipGap({ source, key: orderingKey });
    if (skipped === null) throw new KeyNotBlockedError(orderingKey, { source });
    return { key: orderingKey, skipped };
  }

  purgeInbox(before: Date, options: PurgeOptions = {}): Promise<number> {
    return this.#purge("inbox", before, options);
  }

  /**
   * Retention in short batches, so no lock is held for long. Between batches it yields to the
   * event loop (setImmediate), so the process's other work (claims, completions, an HTTP request)
   * goes between two batches instead of waiting for the whole purge.
   */
  async #purge(target: PurgeTarget, before: Date, options: PurgeOptions): Promise<number> {
    checkTime(before, "purge cutoff");
    const { batchSize, signal } = checkObject(options, "purge options");
    const limit = checkBatchSize(batchSize ?? 1000);
    if (signal !== undefined && !(signal instanceof AbortSignal)) {
      throw new InvalidArgumentError(`purge options' signal must be an AbortSignal, or left out (got ${typeof signal})`);
    }
    let deleted = 0;
    while (signal?.aborted !== true) {
      const batch = await this.#driver.purgeBatch({ target, before, limit });
      deleted += batch;
      options.onProgress?.(deleted);
      if (batch < limit) break;
      await setImmediate();
    }
    return deleted;
  }

  async auditTrail(filter?: { readonly messageId?: string }): Promise<AuditEntry[]> {
    const messageId = checkObject(filter ?? {}, "auditTrail's filter ({ messageId? })").messageId;
    return this.#driver.auditTrail({ messageId: messageId === undefined ? null : checkMessageId(messageId) });
  }

  async getMessage(messageId: string): Promise<OutboxMessage | undefined> {
    return this.#driver.getMessage({ messageId: checkMessageId(messageId) });
  }

  async getMessageState(messageId: string): Promise<MessageState | undefined> {
    return this.#driver.getMessageState({ messageId: checkMessageId(messageId) });
  }

  async getMessageText(messageId: string, options: { readonly maxChars?: number } = {}): Promise<MessageText | undefined> {
    const { maxChars } = checkObject(options, "getMessageText options ({ maxChars? })");
    if (maxChars !== undefined && (typeof maxChars !== "number" || !Number.isInteger(maxChars) || maxChars < 1 || maxChars > 2 ** 30)) {
      throw new InvalidArgumentError(`maxChars must be a whole number from 1 to ${2 ** 30}, or left out for the whole text (got ${String(maxChars)})`);
    }
    return this.#driver.getMessageText({ messageId: checkMessageId(messageId), maxChars: maxChars ?? null });
  }

  async findMessages(text: string, options: { readonly limit?: number } = {}): Promise<OutboxMessage[]> {
    checkSearchText(text);
    const { limit } = checkObject(options, "findMessages options ({ limit })");
    return this.#driver.findMessages({
      id: isMessageId(text) ? text : null,
      text,
      limit: limit === undefined ? 50 : checkBatchSize(limit, "limit"),
    });
  }

  async listMessages(filter: { readonly status?: readonly MessageStatus[]; readonly limit?: number } = {}): Promise<OutboxMessage[]> {
    const { status, limit } = checkObject(filter, "listMessages filter ({ status, limit })");
    return this.#driver.listMessages({
      status: status === undefined ? null : checkStatuses(status),
      limit: limit === undefined ? null : checkBatchSize(limit, "limit"),
    });
  }

  async listMessageStates(filter: { readonly status?: readonly MessageStatus[]; readonly limit?: number } = {}): Promise<MessageState[]> {
    const { status, limit } = checkObject(filter, "listMessageStates filter ({ status, limit })");
    return this.#driver.listMessageStates({
      status: status === undefined ? null : checkStatuses(status),
      limit: limit === undefined ? null : checkBatchSize(limit, "limit"),
    });
  }

  async countByStatus(): Promise<StatusCounts> {
    const counts = Object.fromEntries(MESSAGE_STATUSES.map((s) => [s, 0])) as StatusCounts;
    return { ...counts, ...(await this.#driver.countByStatus()) };
  }

  async pendingByType(options: { readonly limit?: number } = {}): Promise<TypeCount[]> {
    const limit = options.limit ?? 20;
    if (typeof limit !== "number" || !Number.isInteger(limit) || limit < 1 || limit > 1000) {
      throw new InvalidArgumentError(`limit must be a whole number from 1 to 1000 (got ${String(limit)})`);
    }
    return [...(await this.#driver.pendingByType({ limit }))];
  }

  async keySequences(options: { readonly after?: string; readonly limit?: number } = {}): Promise<KeySequence[]> {
    const { after, limit } = checkObject(options, "keySequences options ({ after, limit })");
    return [
      ...(await this.#driver.keySequences({
        after: after === undefined ? null : checkOrderingKey(after),
        limit: limit === undefined ? 1000 : checkBatchSize(limit, "limit"),
      })),
    ];
  }

  async carryKeySequences(turns: readonly KeySequence[]): Promise<void> {
    if (!Array.isArray(turns)) throw new InvalidArgumentError(`carryKeySequences takes a list of { key, nextSeq } (got ${shown(turns)})`);
    if (turns.length > MAX_ENQUEUE_MANY)
      throw new InvalidArgumentError(`carryKeySequences takes at most ${MAX_ENQUEUE_MANY} keys at once (got ${turns.length})`);
    // One entry per key (the highest number given), as the one statement upserting them needs.
    const highest = new Map<string, number>();
    turns.forEach((turn: KeySequence, index) => {
      checkObject(turn, `key sequence ${index} ({ key, nextSeq })`);
      const key = checkOrderingKey(turn.key);
      highest.set(key, Math.max(highest.get(key) ?? 0, checkKeySeq(turn.nextSeq)));
    });
    if (highest.size > 0) await this.#driver.carryKeySequences({ turns: [...highest].map(([key, nextSeq]) => ({ key, nextSeq })) });
  }

  describeSchema(): Promise<string> {
    return this.#driver.describeSchema();
  }

  close(): Promise<void> {
    return this.#driver.close();
  }
}
