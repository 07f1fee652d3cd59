// The shapes every store shares: messages, leases, and the results of lease operations.

/** A value that survives JSON.stringify / JSON.parse unchanged: what a payload may hold. */
export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };

/** Where a message is in its life. See docs/architecture.md for the state diagram. */
export type MessageStatus = "pending" | "processing" | "processed" | "dead" | "cancelled";

export const MESSAGE_STATUSES: readonly MessageStatus[] = ["pending", "processing", "processed", "dead", "cancelled"];

/**
 * What a completion does with its message's row: "keep" it as processed (the history, and its
 * dedupe key stays taken until retention purges it), or "delete" it in the same guarded statement
 * (no history beyond the audit trail; its dedupe key is free again at once).
 */
export type OnComplete = "keep" | "delete";

export const ON_COMPLETE_MODES: readonly OnComplete[] = ["keep", "delete"];

/** One row of the outbox, as a store reads it back. */
export interface OutboxMessage<P extends JsonValue = JsonValue> {
  readonly id: string;
  readonly type: string;
  /** Unique across the outbox when set: one message per business key. */
  readonly dedupeKey: string | null;
  /** The ordering key (an aggregate's id, say), or null. */
  readonly key: string | null;
  /**
   * The message's place in its key's order: 1, 2, 3… with no gaps among the messages of the key
   * that are processed, given when its turn comes (it becomes the key's holder). Null while it
   * waits behind an earlier message of its key, and for a message without a key. A message skipped
   * while dead gives its number to the next one, so a consumer sees 1, 2, 3… (see the inbox).
   */
  readonly keySeq: number | null;
  /** String headers (correlation id, trace context, content type); empty when none were given. */
  readonly headers: Readonly<Record<string, string>>;
  /** Where a relay should deliver it (a topic or subject), or null. */
  readonly destination: string | null;
  /**
   * Whole seconds of head start in the claim order (0, the default, to 86,400): due messages are
   * claimed by their due time minus their priority, then by id.
   */
  readonly priority: number;
  /** At most one message of its type and singleton key waits unclaimed at a time (see NewMessage.singletonKey), or null. */
  readonly singletonKey: string | null;
  readonly payload: P;
  readonly status: MessageStatus;
  readonly createdAt: Date;
  /** The earliest time a pending message may be claimed; for a dead message, when it was marked dead. */
  readonly availableAt: Date;
  /** Who holds (or last held) the lease; kept on a processed row as a record of who did the work. */
  readonly lockedBy: string | null;
  /** When the current lease ends; null unless the message is processing. */
  readonly lockedUntil: Date | null;
  /** Counts the claims of this message; the current lease is the one carrying this token. */
  readonly leaseToken: number;
  /** Claims of this message so far (counted at claim, so a crash still counts). */
  readonly attempts: number;
  readonly lastError: string | null;
  readonly processedAt: Date | null;
}

/**
 * A message without its payload and headers (which never change after enqueue): what can be read
 * often, whatever the payload's size (a page watching a message, a list of messages).
 */
export type MessageState = Omit<OutboxMessage, "payload" | "headers">;

/** Stored JSON as text, perhaps cut short: its first characters, and the whole text's size. */
export interface JsonText {
  /** The JSON text as the database holds it (PostgreSQL's jsonb text form; SQLite's stored text), or its first `maxChars` characters. */
  readonly text: string;
  /** The whole text's size in UTF-8 bytes. */
  readonly bytes: number;
  /** True when `text` is only the start of it. */
  readonly cut: boolean;
}

/** A message with its payload and headers as JSON text, each cut to at most `maxChars` characters when asked. */
export interface MessageText extends MessageState {
  readonly payload: JsonText;
  readonly headers: JsonText;
}

/** What a caller hands to `enqueue`. */
export interface NewMessage<P extends JsonValue = JsonValue> {
  readonly type: string;
  readonly payload: P;
  /** Optional unique key: a second message with the same key is refused. */
  readonly dedupeKey?: string;
  /**
   * The ordering key, for example the id of the aggregate the event is about (at most 255
   * characters).
   */
  readonly key?: string;
  /**
   * String headers: correlation ids, trace context, content type. Names are HTTP tokens (letters,
   * digits and !#$%&'*+-.^_`|~, at most 100 characters); values are at most 4,096 characters
   * without control characters (tab allowed); at most 64 headers.
   */
  readonly headers?: Readonly<Record<string, string>>;
  /** Where a relay should deliver the message: a topic, subject or queue name (at most 255 characters). */
  readonly destination?: string;
  /** Delay the first claim until this time (default: now). */
  readonly availableAt?: Date;
  /**
   * Whole seconds of head start in the claim order, from 0 (the default, the lowest) to 86,400 (one
   * day). Due messages are claimed by their due time minus their priority, so a message of priority
   * 60 goes before every due message that became due less than 60 s before it, and after those due
   * earlier still: a priority ages nothing out, it never starves a lower one, and it never passes an
   * earlier message of the same ordering key.
   */
  readonly priority?: number;
  /**
   * At most one message of this type and singleton key waits unclaimed at a time (at most 255
   * characters). Enqueued while one waits, the message joins it: enqueue returns the waiting one
   * (same id), unchanged, and nothing new is written. Once a worker has claimed it, the next
   * enqueue makes a new one. Not with `dedupeKey` (unique for good, where this is unique while
   * waiting), nor in enqueueMany.
   */
  readonly singletonKey?: string;
  /**
   * With `singletonKey`: the waiting message takes this message's payload, headers, destination
   * and priority instead, and is due `debounceMs` after this enqueue (0 to one day), so it runs
   * once the enqueues have paused that long. Not with `availableAt`.
   */
  readonly debounceMs?: number;
}

/**
 * Temporary ownership of one message. Every operation on it presents the token: a lease whose
 * token is no longer the message's current one is lost, whoever holds it.
 */
export interface Lease<P extends JsonValue = JsonValue> {
  readonly messageId: string;
  readonly owner: string;
  readonly token: number;
  readonly lockedUntil: Date;
  /** The message as it was claimed (status processing, owner and token set). */
  readonly message: OutboxMessage<P>;
  /** The owner whose expired lease this claim took over, or null for a fresh claim. */
  readonly reclaimedFrom: string | null;
}

/** Who holds a message now, read back when an operation finds its lease gone. */
export interface MessageHolder {
  readonly status: MessageStatus;
  readonly lockedBy: string | null;
  readonly lockedUntil: Date | null;
  readonly leaseToken: number;
}

/** The lease presented was not the current one: nothing was written. */
export interface LeaseLost {
  readonly outcome: "lease-lost";
  readonly messageId: string;
  readonly token: number;
  /** The message's state when the operation looked; null when the message no longer exists. */
  readonly current: MessageHolder | null;
}

export interface Renewed {
  readonly outcome: "renewed";
  readonly lease: Lease;
}

export interface Completed {
  readonly outcome: "completed";
  readonly messageId: string;
  readonly processedAt: Date;
}

export interface RetryScheduled {
  readonly outcome: "retry-scheduled";
  readonly messageId: string;
  readonly availableAt: Date;
}

export interface MarkedDead {
  readonly outcome: "dead";
  readonly messageId: string;
}

export interface Released {
  readonly outcome: "released";
  readonly messageId: string;
}

/**
 * What `fail` should do: try again after a delay, or give up and mark the message dead. A dead
 * message with an ordering key blocks its key ("dead") until it is redriven or skipped, or is
 * skipped at once ("dead-and-skip": it stays dead and the next message of its key may go).
 */
export type RetryDecision = { readonly retryInMs: number } | "dead" | "dead-and-skip";

/** A received message as the inbox orders it: its id, and its ordering key and number in that key's order (keySeq). */
export interface InOrderMessage {
  readonly id: string;
  readonly key: string;
  readonly keySeq: number;
}

/**
 * What the inbox says of a keyed, numbered message: "new" (apply it now: its number is the key's
 * next), "duplicate" (this message was applied already: change nothing), "early" (an earlier
 * number of its key has not been applied: hold it back and let it come again), or "late" (another
 * message with a number the key has passed: apply it now, out of its place, rather than lose it).
 */
export type InOrderReceipt =
  | { readonly outcome: "new" }
  | { readonly outcome: "duplicate" }
  | { readonly outcome: "early"; readonly waitingFor: number }
  | { readonly outcome: "late"; readonly appliedSeq: number };

/**
 * A key at a consumer's inbox that holds a message back: a later number of the key arrived before
 * the one it waits for. Usually for a moment (the earlier one is being redelivered); a key that
 * stays here has a gap (the consumer joined the stream late, or the broker lost a message).
 */
export interface InboxBlockedKey {
  readonly source: string;
  readonly key: string;
  /** The key's last number applied (0: none yet). */
  readonly appliedSeq: number;
  /** The number the key waits for (appliedSeq + 1). */
  readonly waitingFor: number;
  /** The lowest later number that arrived and was held back. */
  readonly heldSeq: number;
  /** When a message of the key was first held back, since the last one applied. */
  readonly heldSince: Date;
}

/** An ordering key held by a dead message: the messages behind it wait until it is redriven or skipped. */
export interface BlockedKey {
  readonly key: string;
  /** The dead message holding the key. */
  readonly messageId: string;
  readonly type: string;
  readonly lastError: string | null;
  /** When it was marked dead. */
  readonly diedAt: Date;
  /** Messages of the key waiting behind it. */
  readonly waiting: number;
}

/**
 * A key's place in its order: the number (keySeq) its next holder takes once the key's queue has
 * emptied. A key that moves to another outbox (a new shard) carries it there, so that a consumer's
 * inbox, which applies number n only after n − 1, takes its next messages as new.
 */
export interface KeySequence {
  readonly key: string;
  readonly nextSeq: number;
}

/** How to unblock a key: redrive its dead message (it goes first again) or skip it (it stays dead, the key moves on). */
export type UnblockAction = "redrive" | "skip";

/** The result of trying to claim one named message. */
export type ClaimMessageResult =
  | { readonly outcome: "claimed"; readonly lease: Lease }
  | { readonly outcome: "blocked"; readonly messageId: string; readonly heldBy: string | null; readonly lockedUntil: Date | null; readonly token: number }
  /** `waiting`: pending, but behind an earlier unfinished message of its ordering key. */
  | { readonly outcome: "not-claimable"; readonly messageId: string; readonly status: MessageStatus | "missing" | "waiting" };

export interface ClaimOptions {
  /** How many messages to claim at most (1 to 1000). */
  readonly limit: number;
  /** How long the lease lasts, in milliseconds (positive integer). */
  readonly leaseMs: number;
  /** Claim only messages of these types (1 to 1000 of them); others stay pending for whoever handles them. Default: every type. */
  readonly types?: readonly string[];
}

/** Counts of messages per status. */
export type StatusCounts = Record<MessageStatus, number>;

/** Business writes that must commit with a message's completion, in the same transaction. */
export type Finalize<Tx> = (tx: Tx) => void | Promise<void>;

/** One completion of a group commit. */
export interface CompletionRequest<Tx> {
  readonly lease: Lease;
  readonly finalize?: Finalize<Tx>;
}

/** A completion of a group whose business write threw: it alone was rolled back. */
export interface CompletionFailed {
  readonly outcome: "failed";
  readonly messageId: string;
  readonly error: unknown;
}

export type CompletionResult = Completed | LeaseLost | CompletionFailed;

/** Leases one owner holds right now. */
export interface OwnerLeases {
  readonly owner: string;
  /** Leases still running. */
  readonly held: number;
  /** Leases past their expiry, claimable by anyone. */
  readonly expired: number;
}

/** The operational view of an outbox. */
export interface OutboxStats {
  /** The store's clock when the stats were read. */
  readonly now: Date;
  readonly counts: StatusCounts;
  /** When the oldest pending message was created (null when none is pending). */
  readonly oldestPendingCreatedAt: Date | null;
  readonly leasesByOwner: readonly OwnerLeases[];
  /** Processing messages whose lease has run out (all owners). */
  readonly expiredLeases: number;
}

/**
 * A running worker's registration (the outbox_owners table): its heartbeat keeps it alive until
 * `aliveUntil`; past that, any peer's reapDeadOwners expires its leases at once and drops the row.
 * Times are the store's clock (the database's, unless a clock was injected).
 */
export interface OwnerRecord {
  readonly owner: string;
  /** What it is: "worker", "relay", or what the caller said. */
  readonly kind: string;
  /** The message types it claims, or null for every type. */
  readonly takes: readonly string[] | null;
  readonly startedAt: Date;
  readonly heartbeatAt: Date;
  readonly aliveUntil: Date;
}

/** What OutboxStore.heartbeat registers: how long the owner stays alive without another beat, and what it is. */
export interface HeartbeatOptions {
  /** Milliseconds from this beat until the owner counts as dead (its leases then reclaimable at once). */
  readonly aliveMs: number;
  /** What it is (default "worker"). */
  readonly kind?: string;
  /** The message types it claims (default null: every type). */
  readonly takes?: readonly string[] | null;
}

/** One owner whose heartbeat stopped, reaped: its row dropped and `expired` leases expired at once. */
export interface ReapedOwner {
  readonly owner: string;
  readonly expired: number;
}

/** How many messages of one type are in some state (OutboxStore.pendingByType). */
export interface TypeCount {
  readonly type: string;
  readonly count: number;
}

export interface PurgeOptions {
  /** Rows deleted per transaction (default 1000), so no lock is held for long. */
  readonly batchSize?: number;
  /** Called after each batch with the number deleted so far. */
  readonly onProgress?: (deletedSoFar: number) => void;
  /**
   * Stops the purge once aborted: the batch in progress commits, no further one starts, and the
   * purge resolves to the number deleted so far (an already aborted signal deletes nothing).
   */
  readonly signal?: AbortSignal;
}

/** What a redrive did. */
export interface RedriveResult {
  /** How many dead messages moved back to pending. */
  readonly moved: number;
  /**
   * For a list of ids: each one that did not move and why, namely its state when looked at after
   * the redrive ("missing" when no such message exists). Only dead messages move. Empty for "all".
   */
  readonly notMoved: readonly { readonly messageId: string; readonly status: MessageStatus | "missing" }[];
}

/** What the audit trail records. */
export type AuditAction = "claim" | "complete" | "retry" | "dead" | "release" | "redrive" | "refused";

/** The lease operations a stale lease can attempt: each is refused, writing nothing, when its token is no longer current. */
export type LeaseOperation = "renew" | "complete" | "fail" | "release";

/**
 * One row of the audit trail, written in the same transaction as the change it records (when
 * the store was opened with `audit: true`). Checkers use it to prove every result was written
 * under the current token and to explain every repeated attempt.
 */
export interface AuditEntry {
  readonly messageId: string;
  /** The lease token the action was taken under (for a claim, the new token). */
  readonly token: number;
  readonly owner: string;
  readonly action: AuditAction;
  readonly at: Date;
  /**
   * For claims: the message's state before it (pending, or processing for a reclaim). For a
   * refused write: the message's state when it was refused (null when the message was gone).
   */
  readonly previousStatus: MessageStatus | null;
  /** For claims: the previous holder. For a refused write: who held the message then. */
  readonly previousOwner: string | null;
  /** For claims: when the previous lease ran out (a reclaim must come at or after it). For a refused write: when the holder's lease ends. */
  readonly previousLockedUntil: Date | null;
  /** For a refused write ("refused"): the operation the stale lease attempted; null for every other action. */
  readonly operation: LeaseOperation | null;
}

/**
 * A transaction of another data-access library (Kysely, Knex, Drizzle, …), as Wassal runs its
 * enqueue inside it: the message commits or rolls back with the library's own writes. The
 * integrations ("wassal/kysely", "wassal/knex", "wassal/drizzle") make one from that library's
 * transaction object; `store.enqueueIn` takes it. Write one for any other library the same way.
 */
export interface ForeignTransaction {
  /** How the library's raw SQL numbers its parameters: `$1, $2…` ("numbered") or `?` in order ("question"). */
  readonly placeholders: "numbered" | "question";
  /** Why this object cannot take a write now (not a transaction; committed or rolled back), or null when it can. */
  problem(): string | null;
  /** Runs one statement, with its parameters, inside the transaction and resolves to its rows. */
  query(sql: string, params: readonly unknown[]): Promise<readonly Record<string, unknown>[]>;
}

/** What store.cancel takes. */
export interface CancelOptions {
  /** Why, recorded in the audit trail (at most 180 characters). */
  readonly reason?: string;
  /**
   * Cancel a running (leased) message too: its lease ends, its holder's completion,
   * renewal and every other write are refused, and its handler's signal aborts (at once in this
   * process's Worker, at the holder's next renewal in another). Default false: a running message
   * is refused with MessageRunningError.
   */
  readonly running?: boolean;
}

/**
 * A message cancelled (store.cancel): never delivered; its row kept as cancelled (deleted where the
 * store deletes finished rows), and its ordering key moved on as if it had been skipped (the next
 * message of the key takes the cancelled one's number, so the numbers a consumer sees have no gap).
 */
export interface Cancelled {
  readonly outcome: "cancelled";
  readonly messageId: string;
  readonly type: string;
  /** Its ordering key, or null. */
  readonly key: string | null;
  /** True when it held its key (the key was handed on to the next message waiting, if any). */
  readonly handedOn: boolean;
  /** The worker whose run was cancelled (`running: true` and the message was leased), else null. */
  readonly runningOwner: string | null;
  readonly reason: string | null;
  readonly at: Date;
}

/** A page of messages (store.pageMessages), in the order asked for, with the cursors to the next and the previous page. */
export interface MessagePage {
  readonly messages: readonly MessageState[];
  /** Pass as `after` for the next page (null: this is the last page). */
  readonly next: string | null;
  /** Pass as `before` for the previous page (null: this is the first page). */
  readonly previous: string | null;
}

/** What store.pageMessages lists: filters, order and a keyset cursor (a message id from a page's `next` or `previous`). */
export interface PageQuery {
  readonly status?: MessageStatus;
  readonly type?: string;
  /** The ordering key. */
  readonly key?: string;
  /** "newest" first (the default) or "oldest" first, by id. */
  readonly order?: "newest" | "oldest";
  /** The messages after this id in the page's order (a page's `next`). */
  readonly after?: string;
  /** The messages before this id in the page's order (a page's `previous`). */
  readonly before?: string;
  /** Messages per page, 1 to 1000 (default 50). */
  readonly limit?: number;
}

/**
 * What a schedule enqueues at each tick: a message as enqueue takes it, without `dedupeKey` and
 * `availableAt`. Each tick's message gets the dedupe key `schedule:<name>:<tick, ISO-8601>` and
 * the headers `wassal-schedule` (the schedule's name) and `wassal-tick` (the tick's time).
 */
export type ScheduledMessage<P extends JsonValue = JsonValue> = Omit<NewMessage<P>, "dedupeKey" | "availableAt" | "singletonKey" | "debounceMs">;

/** How a schedule reads its cron expression and treats ticks found late. */
export interface ScheduleOptions {
  /** The IANA time zone the expression is read in, e.g. "Europe/Oslo" (default "UTC"). */
  readonly timezone?: string;
  /**
   * How late a tick may be found and still fire, in milliseconds (default 60 000; 10 000 to 31
   * days). A tick found later than this (every scheduler was down) is skipped, and reported so.
   * After downtime the ticks of the last `backfillMs` fire, each once, oldest first.
   */
  readonly backfillMs?: number;
}

/** A recurring schedule as stored (store.schedules()). */
export interface Schedule {
  readonly name: string;
  readonly cron: string;
  /** The IANA time zone the expression is read in. */
  readonly timezone: string;
  readonly backfillMs: number;
  /** The message each tick enqueues. */
  readonly message: ScheduledMessage;
  /** The next tick to fire, or null when the expression has no tick left. */
  readonly nextAt: Date | null;
  /** The last tick that enqueued its message, or null before the first. */
  readonly lastTickAt: Date | null;
  readonly createdAt: Date;
  readonly updatedAt: Date;
}

/** A tick's message enqueued by store.fireSchedules. */
export interface FiredTick {
  readonly schedule: string;
  readonly tick: Date;
  readonly messageId: string;
}

/**
 * Ticks store.fireSchedules passed over without a message: found later than the schedule's
 * backfillMs ("too-late", from `from` up to, not including, `until`), or whose message was in the
 * outbox already ("already-enqueued": the tick `from`; the clock went back).
 */
export interface SkippedTicks {
  readonly schedule: string;
  readonly reason: "too-late" | "already-enqueued";
  readonly from: Date;
  readonly until: Date;
}

/** A schedule store.fireSchedules could not fire (its expression or message refused): the others fired. */
export interface FailedSchedule {
  readonly schedule: string;
  readonly error: string;
}

/** What one store.fireSchedules call did, and when to call it next. */
export interface ScheduleFiring {
  /** The store's time when the call looked. */
  readonly at: Date;
  readonly fired: readonly FiredTick[];
  readonly skipped: readonly SkippedTicks[];
  readonly failed: readonly FailedSchedule[];
  /**
   * The earliest tick still to fire that the call knows of (for a schedule another scheduler moved
   * meanwhile, the tick after the one it moved: no sooner), or null when it knows none.
   */
  readonly nextAt: Date | null;
  /** True when the call stopped (at its limit, or its signal) with ticks still due: call again at once. */
  readonly more: boolean;
}

/** A rate: at most `count` claims in any `intervalMs` milliseconds. */
export interface Rate {
  /** 1 to 100,000. */
  readonly count: number;
  /** 100 ms to one day (86,400,000). */
  readonly intervalMs: number;
}

/** What store.limit sets for one message type: a concurrency limit, a rate limit, or both. */
export interface LimitOptions {
  /**
   * At most this many messages of the type hold a lease at once, across every process (1 to
   * 100,000). A lease counts until its message is completed, failed, released or its lease ends,
   * so a killed worker's slot frees when its lease does. Omit (or null) for none.
   */
  readonly concurrency?: number | null;
  /**
   * At most `count` claims of the type in any `intervalMs`, across every process (a sliding
   * window: a retry and a reclaim are claims too). Omit (or null) for none.
   */
  readonly rate?: Rate | null;
}

/** A message type's limit as stored (store.limits()). */
export interface TypeLimit {
  readonly type: string;
  readonly concurrency: number | null;
  readonly rate: Rate | null;
  readonly createdAt: Date;
  readonly updatedAt: Date;
}
