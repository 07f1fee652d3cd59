// The contract every store fulfils, SQLite and PostgreSQL alike. It covers the message's whole
// life under leases; it leaves out scheduling, retry policy and handler dispatch, which belong to
// whoever drives the store (the worker, the lab). One conformance suite (test/conformance) holds
// every store to it.

import type { DriverCapabilities, Migration } from "./driver.js";
import type { EventHub } from "./events.js";
import type {
  TypeCount,
  KeySequence,
  Cancelled,
  MessagePage,
  PageQuery,
  HeartbeatOptions,
  OwnerRecord,
  ReapedOwner,
  AuditEntry,
  BlockedKey,
  ClaimMessageResult,
  ClaimOptions,
  ForeignTransaction,
  Completed,
  CompletionRequest,
  CompletionResult,
  InboxBlockedKey,
  InOrderReceipt,
  InOrderMessage,
  MarkedDead,
  Finalize,
  JsonValue,
  Lease,
  LeaseLost,
  MessageState,
  MessageStatus,
  MessageText,
  NewMessage,
  OutboxMessage,
  OutboxStats,
  PurgeOptions,
  RedriveResult,
  Released,
  Renewed,
  RetryDecision,
  RetryScheduled,
  StatusCounts,
  UnblockAction,
  OnComplete,
  CancelOptions,
  LimitOptions,
  Schedule,
  TypeLimit,
  ScheduledMessage,
  ScheduleFiring,
  ScheduleOptions,
} from "./types.js";

export interface OutboxStore<Tx> {
  /** "sqlite" or "postgres". */
  readonly kind: string;
  /** What the backend can do (parallel commits, database clock, cross-process wake-ups). */
  readonly capabilities: DriverCapabilities;
  /** What a completion does with the message's row (the store's onComplete option; default "keep"). */
  readonly onComplete: OnComplete;
  /** Every lease and processing event this store sees. */
  readonly events: EventHub;

  /** Creates or upgrades the schema. Safe to call on every start. */
  migrate(): Promise<void>;

  /**
   * The outbox's migrations not yet applied to this database, in order, with the SQL each runs
   * (all of them for a database never migrated): what `wassal migrate --check` and `--print-sql` show.
   */
  pendingMigrations(): Promise<readonly Migration[]>;

  /** True when the outbox's tables already exist (commands that only read or repair check it first). */
  isInstalled(): Promise<boolean>;

  /**
   * Runs `work` in one write transaction and commits it, or rolls all of it back if `work`
   * throws. This is the caller's business transaction: enqueue inside it.
   */
  transaction<T>(work: (tx: Tx) => T | Promise<T>): Promise<T>;

  /** Adds a message inside the caller's transaction: it exists if and only if that commits. */
  enqueue<P extends JsonValue>(tx: Tx, message: NewMessage<P>): Promise<OutboxMessage<P>>;

  /**
   * Adds a message inside another library's transaction (see ForeignTransaction and the
   * integrations "wassal/kysely", "wassal/knex", "wassal/drizzle"): it exists if and only if that
   * commits. Throws NotInTransactionError, writing nothing, when the transaction is not open.
   */
  enqueueIn<P extends JsonValue>(transaction: ForeignTransaction, message: NewMessage<P>): Promise<OutboxMessage<P>>;

  /**
   * Adds several messages inside the caller's transaction in one statement: they exist if and only
   * if that commits. Each message is as enqueue takes it and behaves as enqueue would, in list
   * order: ids ascend in that order, messages of one ordering key are handled in it, and the
   * results come back in it. All or none: every message is checked before anything is written (a
   * bad one is InvalidArgumentError naming its index), a dedupe key taken in the table or given
   * twice in the list is DuplicateMessageError, and then none of the list is written. An empty list
   * returns []. At most MAX_ENQUEUE_MANY (10,000) messages.
   */
  enqueueMany<P extends JsonValue>(tx: Tx, messages: readonly NewMessage<P>[]): Promise<OutboxMessage<P>[]>;

  /** enqueueMany inside another library's transaction (see enqueueIn). */
  enqueueManyIn<P extends JsonValue>(transaction: ForeignTransaction, messages: readonly NewMessage<P>[]): Promise<OutboxMessage<P>[]>;

  /**
   * Atomically claims up to `limit` claimable messages (pending and due, or processing under an
   * expired lease), oldest first. Each claimed message gets this owner, a new expiry, a new lease
   * token and one more attempt. Returns an empty array when nothing is claimable.
   */
  claim(owner: string, options: ClaimOptions): Promise<Lease[]>;

  /** Claims one named message if it is claimable now, or says who blocks it. */
  claimMessage(owner: string, messageId: string, options: Pick<ClaimOptions, "leaseMs">): Promise<ClaimMessageResult>;

  /**
   * Extends a held lease to now + leaseMs. A lease past its end is lost to renewal even if nobody has
   * reclaimed it yet (its token can still complete, fail or release it until someone does): an
   * expired lease never comes back, so nothing that counts held leases (a concurrency limit) counts
   * it twice.
   */
  renew(lease: Lease, leaseMs: number): Promise<Renewed | LeaseLost>;

  /**
   * Marks the message processed and runs `finalize` (the business writes) in one transaction,
   * the token-guarded update first. If the lease is lost, `finalize` never runs and nothing is
   * written; if `finalize` throws, both roll back and the error is rethrown.
   */
  complete(lease: Lease, finalize?: Finalize<Tx>): Promise<Completed | LeaseLost>;

  /**
   * Group commit: completes several leases in one transaction, each in a savepoint of its own, so
   * a lost lease or a business write that throws rolls back that message alone while the others
   * commit together (one flush to disk for all). Results come back in the order of `items`.
   */
  completeMany(items: readonly CompletionRequest<Tx>[]): Promise<CompletionResult[]>;

  /** Gives the message back as pending after a delay, or marks it dead, recording the error. */
  fail(lease: Lease, error: unknown, decision: RetryDecision): Promise<RetryScheduled | MarkedDead | LeaseLost>;

  /** Gives an unstarted message back at once (pending, due now), taking back the attempt its claim counted. */
  release(lease: Lease): Promise<Released | LeaseLost>;

  /**
   * Calls `wake` soon after a transaction that enqueued messages commits: within this process on
   * SQLite, from any process through LISTEN/NOTIFY on PostgreSQL. A wake-up is a hint (polling
   * stays the fallback). Resolves to a function that stops listening.
   */
  onNewMessages(wake: () => void): Promise<() => Promise<void>>;

  /**
   * Registers `owner` as alive until `aliveMs` from now (the store's clock: the database's unless
   * one was injected), upserting its row in outbox_owners. A Worker beats every heartbeatMs.
   */
  heartbeat(owner: string, options: HeartbeatOptions): Promise<{ readonly at: Date; readonly aliveUntil: Date }>;

  /**
   * Reaps every registered owner whose heartbeat stopped (its alive-until passed): drops its row
   * and expires at once the leases it holds, so that the next claim (anyone's) takes them, a new
   * token each, as it takes any expired lease; the dead owner's late completion is refused once a peer claimed it. Owners
   * that never registered (a bare claim loop, an older Wassal) are never reaped. `reaper` names
   * who asks, for the "owners-reaped" event.
   */
  reapDeadOwners(reaper: string): Promise<ReapedOwner[]>;

  /** Drops `owner`'s row (a graceful stop, its leases completed or released): true when it had one. */
  signOff(owner: string): Promise<boolean>;

  /** The registered owners, by name. */
  owners(): Promise<OwnerRecord[]>;

  /**
   * Adds a recurring schedule, or replaces the one of that name: at each tick of `cron` (read in
   * `options.timezone`, UTC by default) one message like `message` is enqueued, with the dedupe key
   * `schedule:<name>:<tick>` and the headers `wassal-schedule` and `wassal-tick`. Ticks fire in
   * store.fireSchedules, which every Worker calls about once a second: each tick once across all
   * schedulers, even when several look at the same moment or die midway. Replaced with the same
   * cron and timezone, a schedule keeps its next tick (so re-adding it at every start loses
   * none); otherwise its next tick is the first after now. Throws InvalidArgumentError naming a bad
   * name, expression, time zone, backfill or message.
   */
  schedule<P extends JsonValue>(name: string, cron: string, message: ScheduledMessage<P>, options?: ScheduleOptions): Promise<Schedule>;

  /**
   * Limits how many messages of `type` run at once and how many are claimed per interval, across
   * every process claiming from this database: sets the type's limit, replacing any it had. Every
   * claim obeys it, a Worker's or any other (claimMessage is not refused). Every lease of the type
   * counts until it is completed, failed, released or ends, so a killed worker's slot frees when
   * its lease does; the rate counts the claims made from this call on. Other processes' claims
   * see a new limit within a second (LIMITED_TYPES_TTL_MS); the leases they take meanwhile count
   * as running.
   */
  limit(type: string, options: LimitOptions): Promise<TypeLimit>;

  /** Lifts a type's limit: true when it had one. */
  unlimit(type: string): Promise<boolean>;

  /** Every limit, by type. */
  limits(): Promise<TypeLimit[]>;

  /** Removes a schedule: true when there was one. Messages it enqueued stay. */
  unschedule(name: string): Promise<boolean>;

  /** Every schedule, by name. */
  schedules(): Promise<Schedule[]>;

  /**
   * Fires the ticks that are due, at most `limit` (default and most 1,000): each tick's message is
   * enqueued in the transaction that moves its schedule's next tick on, with a compare-and-set, so
   * a tick fires once however many processes call this at the same time. A tick found later than
   * its schedule's backfillMs is skipped and reported; a schedule that cannot fire (its stored
   * expression or message refused) is reported as failed while the others fire. `owner` names the
   * caller in the events; `signal` stops it between ticks. Says what fired, what was skipped or
   * failed, and the next tick to look for.
   */
  fireSchedules(options?: { readonly owner?: string; readonly limit?: number; readonly signal?: AbortSignal }): Promise<ScheduleFiring>;

  /** Counts by state, the oldest pending message, leases held and expired per owner. */
  stats(): Promise<OutboxStats>;

  /** Ordering keys held by a dead message (the messages behind it wait), oldest death first; at most `limit` (default 1000). */
  blockedKeys(options?: { readonly limit?: number }): Promise<BlockedKey[]>;

  /**
   * Unblocks a key held by a dead message: "redrive" moves that message back to pending (it goes
   * first again), "skip" leaves it dead and lets the next message of the key go. Throws
   * KeyNotBlockedError when no dead message holds the key.
   */
  unblockKey(key: string, action: UnblockAction): Promise<{ readonly key: string; readonly messageId: string; readonly action: UnblockAction }>;

  /**
   * Moves dead messages back to pending, due now, with their attempts reset. Says how many moved,
   * and for a list of ids, which did not and why (they were not dead, or do not exist).
   */
  redrive(target: { readonly messageIds: readonly string[] } | "all"): Promise<RedriveResult>;

  /**
   * Cancels a pending message (with `running: true`, a running one too), so it is never delivered:
   * its row becomes `cancelled` (finished at `processedAt`, `lockedBy` naming the cancel: "cancel"
   * or "cancel: <reason>"; its dedupe key stays taken, as a processed message's does, until
   * purgeProcessed deletes it), or, in a store that deletes finished rows (onComplete "delete"),
   * is deleted (its dedupe key free again). A running one's holder finds its lease gone:
   * its completion (and business write) is refused, and its handler's signal aborts, at once in a
   * Worker of this store and at the next renewal in another process. A message that held its ordering key hands the key on as a skip does: the next message
   * of the key takes its number, so the numbers a consumer sees keep no gap; one waiting behind its
   * key leaves the key as it was. With the audit trail on, a "dead" row with owner "cancel" (or
   * "cancel: <reason>") records it. One transaction; a claim at the same moment either wins (the
   * cancel is refused as running) or finds nothing. Throws MessageNotFoundError for an unknown id,
   * MessageRunningError for a leased message (status processing), MessageNotPendingError for a
   * processed, dead or cancelled one; nothing is changed then.
   */
  cancel(messageId: string, options?: CancelOptions): Promise<Cancelled>;

  /**
   * Deletes processed and cancelled messages finished (processedAt) before `before`, in short
   * batches. Returns how many. A deleted message's dedupe key is free again: a later enqueue with
   * that key is accepted.
   */
  purgeProcessed(before: Date, options?: PurgeOptions): Promise<number>;

  /** Deletes dead messages that died before `before` (a dead message's availableAt), in short batches. Returns how many. */
  purgeDead(before: Date, options?: PurgeOptions): Promise<number>;

  /** Deletes audit rows written before `before`, in short batches. Returns how many. */
  purgeAudit(before: Date, options?: PurgeOptions): Promise<number>;

  /**
   * The inbox, for a consumer: records a received message's id (from `source`, the producer or
   * stream it came from, "" by default) in the caller's transaction, with the consumer's own
   * writes. True when the id is new: apply the message. False when it was recorded before (a
   * redelivery or a re-publish): skip it; the transaction then changes nothing. A concurrent
   * receive of the same id waits for this transaction, and sees it as recorded if it commits.
   */
  receive(tx: Tx, messageId: string, options?: { readonly source?: string }): Promise<boolean>;

  /**
   * The inbox in each key's order, for a consumer of a relay's keyed messages: in the caller's
   * transaction, takes the key's turn (a concurrent receive of the same key waits for this
   * transaction), then compares the message's number with the key's last applied one. "new": the
   * next number; its id is recorded and the key's number moves on, with the caller's writes.
   * "duplicate": this message was applied already: skip it. "early": an earlier number has not
   * been applied yet: nothing is applied, the wait is recorded (see inboxBlockedKeys), and the
   * message must come again later (the consumer gives it back to the broker). "late": a message not
   * seen before whose number the key has passed (a number given twice): its id is recorded, apply
   * it now; the key's number stays.
   */
  receiveInOrder(tx: Tx, message: InOrderMessage, options?: { readonly source?: string }): Promise<InOrderReceipt>;

  /** Keys whose inbox holds a message back, waiting for an earlier number, longest waiting first (of one source, or all). */
  inboxBlockedKeys(options?: { readonly source?: string; readonly limit?: number }): Promise<InboxBlockedKey[]>;

  /**
   * Gives up waiting for a key's missing numbers: the key's applied number moves to just before the
   * lowest one held back, which is applied when it comes again. Throws KeyNotBlockedError when the
   * inbox holds nothing back for the key.
   */
  skipInboxGap(key: string, options?: { readonly source?: string }): Promise<{ readonly key: string; readonly skipped: readonly [from: number, to: number] }>;

  /**
   * Deletes inbox ids recorded before `before`, in short batches. Returns how many. Keep ids at
   * least as long as a message can come back: the broker's redelivery window and any replay.
   */
  purgeInbox(before: Date, options?: PurgeOptions): Promise<number>;

  /**
   * The audit trail, oldest first (empty unless the store was opened with `audit: true`): every
   * row, or with `messageId` that message's rows alone.
   */
  auditTrail(filter?: { readonly messageId?: string }): Promise<AuditEntry[]>;

  getMessage(messageId: string): Promise<OutboxMessage | undefined>;
  /** The message without its payload and headers (cheap to read, whatever the payload's size), or undefined. */
  getMessageState(messageId: string): Promise<MessageState | undefined>;
  /**
   * The message with its payload and headers as stored JSON text, each cut to its first `maxChars`
   * characters when given, with the whole text's size: a page can show a 10 MB payload's start
   * without reading it into memory as a value. Undefined when there is no such message.
   */
  getMessageText(messageId: string, options?: { readonly maxChars?: number }): Promise<MessageText | undefined>;
  /**
   * Looks a message up the way an operator would: the messages whose id, dedupe key or ordering
   * key is `text` (by id; at most `limit`, default 50). Unfinished messages are found by their key
   * through an index; processed ones with that key are scanned for.
   */
  findMessages(text: string, options?: { readonly limit?: number }): Promise<OutboxMessage[]>;
  listMessages(filter?: { readonly status?: readonly MessageStatus[]; readonly limit?: number }): Promise<OutboxMessage[]>;
  /** As listMessages, without payloads and headers. */
  listMessageStates(filter?: { readonly status?: readonly MessageStatus[]; readonly limit?: number }): Promise<MessageState[]>;
  /**
   * A page of messages without payloads and headers, for browsing: filtered by status, type and
   * ordering key, newest or oldest first, paged by a keyset cursor (a message id: `after` a page's
   * `next`, `before` a page's `previous`), so messages added meanwhile do not shift the pages.
   */
  pageMessages(query?: PageQuery): Promise<MessagePage>;
  countByStatus(): Promise<StatusCounts>;
  /**
   * Pending messages per type, the most numerous first, at most `limit` types (default 20, at most
   * 1000): which types wait, for `wassal outbox stats`. It reads every pending row: not for a hot path.
   */
  pendingByType(options?: { readonly limit?: number }): Promise<TypeCount[]>;
  /**
   * The next number (keySeq) each key takes once its queue has emptied, as this outbox remembers
   * it: the keys after `after`, in key order, at most `limit` (1 to 100,000; default 1,000). A key
   * with unfinished messages may be listed with a number its queue will still move on: what a key
   * carries to a new shard when it moves, which it may do only when idle.
   */
  keySequences(options?: { readonly after?: string; readonly limit?: number }): Promise<KeySequence[]>;
  /**
   * Sets keys' next numbers here, keeping a higher one already remembered (at most
   * MAX_ENQUEUE_MANY per call): a key moved from another outbox goes on from its place there.
   * Call it before the key's first message here.
   */
  carryKeySequences(turns: readonly KeySequence[]): Promise<void>;
  /** The schema as the database reports it (DDL text), for reports and support. */
  describeSchema(): Promise<string>;

  /** Closes the store's connections. */
  close(): Promise<void>;
}
