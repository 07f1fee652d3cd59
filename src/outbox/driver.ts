// The narrow contract between the one lease protocol (LeasedOutbox) and a database. A driver runs
// SQL and reports what the database did; it checks no arguments, emits no events and decides no
// outcome. Every method has the same name on every driver and takes one params object.
//
// Time: a driver owns its clock. SQLite reads the injected clock inside its write lock; PostgreSQL
// uses the database's clock_timestamp() unless a clock was injected. Every write reports the time
// it used (`at`), so the protocol can stamp its events without a clock of its own.

import { InvalidArgumentError } from "./errors.js";
import type { LimitRecord } from "./limits.js";
import type {
  AuditEntry,
  OwnerRecord,
  ReapedOwner,
  TypeCount,
  BlockedKey,
  ForeignTransaction,
  InboxBlockedKey,
  Lease,
  LeaseOperation,
  MessageHolder,
  MessageState,
  MessageStatus,
  MessageText,
  KeySequence,
  OutboxMessage,
  StatusCounts,
} from "./types.js";

/** A value, or a promise of it: what a driver whose database answers synchronously may return at once. */
export type MaybePromise<T> = T | Promise<T>;

/** What a backend can do, declared once instead of checked by name. */
export interface DriverCapabilities {
  /** Commits on separate connections proceed at once (PostgreSQL); false when one write lock serialises them (SQLite). */
  readonly parallelCommits: boolean;
  /** Lease times come from the database's clock unless a clock is injected. */
  readonly databaseClock: boolean;
  /** A wake-up after enqueue reaches other processes too (LISTEN/NOTIFY), not only this one. */
  readonly crossProcessWakeups: boolean;
}

/** Whether a completion opens a savepoint: none (alone in its transaction), a first one, or the next after a member that succeeded. */
export type SavepointStep = "none" | "first" | "next";

/** The leases a lease operation names, keyed by message and token (a stale and a fresh lease of one message may share a group). */
export function leaseKey(messageId: string, token: number): string {
  return `${messageId}#${token}`;
}

/**
 * A set of leases, by message id and token (a stale and a fresh lease of one message may share a
 * group), without a leaseKey string per lease: the message id strings are the keys, and a message
 * met with a second token keeps its tokens in a Set. A group commit checked and looked its members
 * up by leaseKey four times per message (the batcher's group split, completeMany's duplicate
 * check, the driver's result, the outcomes): 5.81 against 5.60 µs per message (medians of 7, the
 * worker over an in-memory driver), a small gain, near the noise.
 */
export class LeaseSet {
  readonly #tokens = new Map<string, number | Set<number>>();

  /** Adds the lease; false when it was in the set already. */
  add(messageId: string, token: number): boolean {
    const held = this.#tokens.get(messageId);
    if (held === undefined) {
      this.#tokens.set(messageId, token);
      return true;
    }
    if (typeof held === "number") {
      if (held === token) return false;
      this.#tokens.set(messageId, new Set([held, token]));
      return true;
    }
    if (held.has(token)) return false;
    held.add(token);
    return true;
  }

  has(messageId: string, token: number): boolean {
    const held = this.#tokens.get(messageId);
    return held === token || (typeof held === "object" && held.has(token));
  }
}

/** What claimMessage saw: the holder before it tried (null: no such message) and the lease when the claim took. */
export interface ClaimMessageAttempt {
  readonly at: Date;
  /** `waiting`: pending, but behind an earlier unfinished message of its ordering key. */
  readonly before: (MessageHolder & { readonly waiting: boolean }) | null;
  readonly lease: Lease | null;
}

/** What cancel saw: the message before (null: no such message), and whether it was cancelled (marked, or deleted with `remove`). */
/**
 * A refused lease write, recorded: with auditing on, the driver writes its "refused" audit row
 * (with the holder read here) in the same transaction as the refused write, and reports it; the
 * protocol builds its lease-lost result from this, so a crash can never separate the two.
 */
export interface Refusal {
  readonly at: Date;
  readonly holder: MessageHolder | null;
}

export interface CancelAttempt {
  readonly at: Date;
  readonly before: (MessageHolder & { readonly type: string; readonly key: string | null; readonly keySeq: number | null; readonly holdsKey: boolean }) | null;
  readonly cancelled: boolean;
}

/** One named migration: stable forever, e.g. "outbox-001-create", and the SQL it runs. */
export interface Migration {
  readonly name: string;
  readonly sql: string;
}

/** What retention deletes: processed and cancelled messages (by when they finished), dead ones (by when they died), or audit rows (by their time). */
export type PurgeTarget = "processed" | "dead" | "audit" | "inbox";

export interface RedriveCount {
  readonly moved: number;
  /** The ids that moved, when a list was given (null for "all"). */
  readonly movedIds: ReadonlySet<string> | null;
}

export interface OwnerLeaseCount {
  readonly owner: string;
  readonly held: number;
  readonly expired: number;
}

export interface LeaseStats {
  readonly now: Date;
  readonly oldestPendingCreatedAt: Date | null;
  readonly owners: readonly OwnerLeaseCount[];
}

/** One message to insert, checked: the payload and headers as JSON text (headers null when there are none). */
export interface CheckedMessage {
  readonly type: string;
  readonly dedupeKey: string | null;
  readonly key: string | null;
  readonly headers: string | null;
  readonly destination: string | null;
  readonly payload: string;
  readonly availableAt: Date | null;
  /** Whole seconds of head start in the claim order (0 to 86,400). */
  readonly priority: number;
  /** At most one unclaimed message per type and singleton key, or null. */
  readonly singletonKey: string | null;
  /** With singletonKey: replace the waiting one's payload, headers, destination and priority, due this long after now; null: the waiting one stays as it is. */
  readonly debounceMs: number | null;
}

/** One message to insert inside `tx`. */
export interface EnqueueParams<Tx> extends CheckedMessage {
  readonly tx: Tx;
}

/** The messages of one enqueueMany, checked, in list order (never empty, no dedupe key twice). */
export interface EnqueueManyParams<Tx> {
  readonly tx: Tx;
  readonly messages: readonly CheckedMessage[];
}

/**
 * For each message of a list, whether an earlier message of the same list has its ordering key:
 * it then waits behind that one whatever the table holds. (Every row of one statement sees the
 * table as it was before the statement, so the statement cannot see its own earlier rows.)
 */
/**
 * What a store throws when a singleton message's upsert found the waiting message of its type and
 * singleton key with another ordering key: joining it would move the message to another key's order.
 */
export function singletonKeyMismatch(message: CheckedMessage): InvalidArgumentError {
  return new InvalidArgumentError(
    `a ${message.type} message with singletonKey ${JSON.stringify(message.singletonKey)} waits unclaimed with another ordering key than ${JSON.stringify(message.key)}; a message joins the waiting one only with the same ordering key (give it the waiting one's key, or another singleton key); nothing was written`,
  );
}

export function waitsInList(messages: readonly CheckedMessage[]): boolean[] {
  const seen = new Set<string>();
  return messages.map(({ key }) => {
    if (key === null) return false;
    if (seen.has(key)) return true;
    seen.add(key);
    return false;
  });
}

/** An ordering key to hand on, and the number its next holder takes (null: the key's remembered number). */
export interface KeyTurn {
  readonly key: string;
  readonly nextSeq: number | null;
}

/** The turn a finished holder passes on: completed, its number is used (+ 1); skipped, its number is not. */
export function turnAfter(message: { readonly key: string | null; readonly keySeq: number | null }, used: boolean): KeyTurn | null {
  if (message.key === null) return null;
  return { key: message.key, nextSeq: message.keySeq === null ? null : message.keySeq + (used ? 1 : 0) };
}

/** The distinct ordering keys of a list, sorted: the order their turns are taken in (see lockKeys). */
export function keysOf(messages: readonly CheckedMessage[]): string[] {
  const keys = new Set<string>();
  for (const { key } of messages) if (key !== null) keys.add(key);
  return [...keys].sort();
}

/** One page's read (OutboxDriver.pageMessages): the filters (null: any), the id bounds (null: none), the direction and the size. */
export interface PageBounds {
  readonly status: MessageStatus | null;
  readonly type: string | null;
  readonly key: string | null;
  readonly above: string | null;
  readonly below: string | null;
  readonly ascending: boolean;
  readonly limit: number;
}

/** A schedule's definition as stored: its message's payload and headers as JSON text. */
export interface ScheduleDefinitionRecord {
  readonly name: string;
  readonly cron: string;
  readonly timezone: string;
  readonly backfillMs: number;
  readonly type: string;
  readonly payload: string;
  readonly headers: string | null;
  readonly key: string | null;
  readonly destination: string | null;
  readonly priority: number;
}

/** A schedule as stored, with where it stands. */
export interface ScheduleRecord extends ScheduleDefinitionRecord {
  /** Counts the schedule's puts: a compare-and-set on a tick read before a put fails. */
  readonly version: number;
  readonly nextAt: Date | null;
  readonly lastTickAt: Date | null;
  readonly createdAt: Date;
  readonly updatedAt: Date;
}

export interface OutboxDriver<Tx> {
  readonly capabilities: DriverCapabilities;

  migrate(): Promise<void>;
  isInstalled(): Promise<boolean>;
  /** The outbox's migrations this version ships, in order: a name each and the SQL it runs. */
  migrations(): readonly Migration[];
  /** The names wassal_migrations records (none when the table is not there), read without writing. */
  appliedMigrations(): Promise<readonly string[]>;
  /** True when `error` is the database saying a table (or the schema) of Wassal's does not exist: never migrated. */
  isNotMigrated(error: unknown): boolean;
  /** One write transaction: commits when `work` resolves, rolls back when it throws. */
  transaction<T>(work: (tx: Tx) => T | Promise<T>): Promise<T>;
  /** True when `tx` is inside an open transaction, so an insert would commit with the caller's writes. */
  isInTransaction(tx: Tx): boolean;
  /** What to tell a caller whose `tx` is not in a transaction (how to open one on this backend). */
  readonly ownTransactionHint: string;

  /** Inserts one message; the payload and headers are JSON text; `availableAt` null means now. */
  enqueue(params: EnqueueParams<Tx>): Promise<OutboxMessage>;
  /**
   * Inserts one message through another library's transaction (its raw SQL, its placeholders). It
   * refuses, writing nothing, when the database says the transaction is not open, where it can tell.
   */
  enqueueForeign(params: EnqueueParams<ForeignTransaction>): Promise<OutboxMessage>;
  /**
   * Inserts the messages of a list in one statement, all or none, in list order: ids ascending in
   * that order, and returned in it. A keyed message waits when its key has a holder or a queue in
   * the table or earlier in the list. Wakes listeners after commit as enqueue does (once).
   */
  enqueueMany(params: EnqueueManyParams<Tx>): Promise<OutboxMessage[]>;
  /** enqueueMany through another library's transaction, as enqueueForeign. */
  enqueueManyForeign(params: EnqueueManyParams<ForeignTransaction>): Promise<OutboxMessage[]>;
  /** True when `error` is the database refusing a second message with the same dedupe key. */
  isDuplicate(error: unknown): boolean;
  /**
   * After enqueueMany (or enqueueManyForeign) failed with `error`, a duplicate: which of
   * `dedupeKeys` the database refused, or null when it cannot tell. PostgreSQL reads it from the
   * error's detail, else among the committed messages (the transaction is aborted); SQLite, whose
   * error does not name it, looks in the table through the same transaction (`in`), still open.
   */
  takenDedupeKey(params: {
    readonly in: { readonly tx: Tx } | { readonly foreign: ForeignTransaction };
    readonly error: unknown;
    readonly dedupeKeys: readonly string[];
  }): Promise<string | null>;

  /**
   * Claims up to `limit` claimable messages, oldest due first, in that order; of `types` only,
   * unless null; when `types` is null and `exceptTypes` is not, of every type but those.
   */
  claim(params: {
    readonly owner: string;
    readonly limit: number;
    readonly leaseMs: number;
    readonly audit: boolean;
    readonly types: readonly string[] | null;
    readonly exceptTypes?: readonly string[] | null;
  }): Promise<{ readonly at: Date; readonly leases: Lease[] }>;
  /**
   * A claim of one limited type, in one transaction: locks the type's limit row, counts its
   * leases unexpired and its claims since the rate window's start (limits.ts, windowStart) among
   * outbox_limit_starts (dropping the rows that count for neither), claims up to the room
   * limitRoom gives, and records each claim there (its message, token and time). With no limit
   * row (lifted meanwhile), claims up to `limit` as claim does.
   */
  claimLimited(params: {
    readonly owner: string;
    readonly type: string;
    readonly limit: number;
    readonly leaseMs: number;
    readonly audit: boolean;
  }): Promise<{ readonly at: Date; readonly leases: Lease[] }>;
  /** Upserts a type's limit (outbox_limits): the row as stored. */
  putLimit(params: {
    readonly type: string;
    readonly concurrency: number | null;
    readonly rateCount: number | null;
    readonly rateIntervalMs: number | null;
  }): Promise<LimitRecord>;
  /** Deletes a type's limit and its recorded claims: true when there was one. */
  removeLimit(params: { readonly type: string }): Promise<boolean>;
  /** Every limit, by type. */
  listLimits(): Promise<LimitRecord[]>;
  /**
   * Inside one transaction: reads the named message's holder (locking its row), then tries the
   * conditional claim of that message. Reports both; the protocol decides the outcome.
   */
  claimMessage(params: { readonly owner: string; readonly messageId: string; readonly leaseMs: number; readonly audit: boolean }): Promise<ClaimMessageAttempt>;
  /**
   * Extends the lease if its token is current and it has not expired: the new expiry, or null when
   * the lease is gone or expired. With `audit`, a refusal is recorded with it (see Refusal).
   */
  renew(params: {
    readonly lease: Lease;
    readonly leaseMs: number;
    readonly audit: boolean;
  }): Promise<{ readonly at: Date; readonly lockedUntil: Date | null; readonly refusal: Refusal | null }>;

  /**
   * Completes leases in one guarded statement: inside `tx` (whose business writes follow), or in a
   * transaction of its own when `tx` is null. `completed` holds each lease it completed; with
   * `audit`, `refusals` holds every other one's Refusal (by message id), recorded with it.
   */
  completeBulk(params: {
    readonly tx: Tx | null;
    readonly leases: readonly Lease[];
    readonly audit: boolean;
    /** Also hand on the ordering keys of the messages it completed (as handOn does), in the same transaction. */
    readonly handOnKeys: boolean;
    /** Delete the completed rows instead of keeping them as processed (the store's onComplete "delete"). */
    readonly remove: boolean;
  }): Promise<{ readonly at: Date; readonly completed: LeaseSet; readonly refusals: ReadonlyMap<string, Refusal> | null }>;
  /**
   * The guarded completion of one lease inside `tx`, opening a savepoint first when asked: its
   * time, or null when the lease is gone. A driver whose database answers synchronously may return
   * the value itself, so that nothing is awaited while the write lock is held.
   */
  completeOne(params: {
    readonly tx: Tx;
    readonly lease: Lease;
    readonly savepoint: SavepointStep;
    readonly audit: boolean;
    /** As completeBulk's. */
    readonly remove: boolean;
  }): Date | null | Promise<Date | null>;
  /**
   * Inside `tx`: hands each of `keys` on, its holder finished: the key's earliest waiting message
   * takes it over, numbered `nextSeq` (null: the number the key's last hand-on remembered, else 1);
   * with nobody waiting, the key remembers `nextSeq` for its next enqueue. Safe against an enqueue
   * to the key committing at the same time (it waits its turn, or is seen). A key that still has a
   * holder is left alone, so calling it after any change is safe.
   */
  handOn(params: { readonly tx: Tx; readonly keys: readonly KeyTurn[] }): MaybePromise<void>;
  /** Dead messages holding their keys, oldest death first. */
  blockedKeys(params: { readonly limit: number }): Promise<BlockedKey[]>;
  /** The dead message holding `key`, or null. */
  deadHolder(params: { readonly key: string }): Promise<string | null>;
  /**
   * Inside `tx`: marks the dead message holding `key` as skipped (it stays dead, the key is free);
   * its id and number in its key's order, or null when none holds it (or when `messageId` is given
   * and is not the one).
   */
  skipKeyHolder(params: {
    readonly tx: Tx;
    readonly key: string;
    readonly messageId: string | null;
  }): MaybePromise<{ readonly id: string; readonly keySeq: number | null } | null>;
  /**
   * Inside `tx`: cancels the message if it is pending (or, with `running`, processing), after
   * taking its key's turn where needed (a waiting message's key first, as a hand-on takes it; a
   * holder's row first, as a completion does): marks it cancelled (finished now, locked_by `owner`,
   * no lease), or with `remove` deletes it, writing a "dead" audit row with owner `owner` when
   * auditing. Reports the message as it was (null: no such message) and whether it was cancelled;
   * the protocol hands a cancelled holder's key on in the same transaction.
   */
  cancel(params: {
    readonly tx: Tx;
    readonly messageId: string;
    readonly owner: string;
    readonly audit: boolean;
    readonly running: boolean;
    readonly remove: boolean;
  }): MaybePromise<CancelAttempt>;
  /** Undoes everything since the open savepoint (a member's business write threw). */
  rollbackSavepoint(params: { readonly tx: Tx }): Promise<void>;

  /**
   * Gives the message back (retry after `retryInMs`) or marks it dead (`retryInMs` null), if the
   * token is current. With `audit`, a refusal is recorded with it (see Refusal).
   */
  fail(params: {
    readonly lease: Lease;
    readonly error: string;
    readonly retryInMs: number | null;
    readonly audit: boolean;
  }): Promise<{ readonly at: Date; readonly changed: boolean; readonly availableAt: Date; readonly refusal: Refusal | null }>;
  /** Gives an unstarted message back at once, taking back the attempt, if the token is current. With `audit`, as fail. */
  release(params: {
    readonly lease: Lease;
    readonly audit: boolean;
  }): Promise<{ readonly at: Date; readonly changed: boolean; readonly refusal: Refusal | null }>;
  /**
   * Who holds the message now (null when it does not exist), and the driver's time of looking: in
   * `tx` when given, else on its own. With `refused`, the lease named there attempted `operation`
   * and was refused: the driver also writes a "refused" audit row, with the holder it read, in the
   * same transaction (`tx`, for a refusal inside one, so that the two commit together).
   */
  holder(params: {
    readonly tx?: Tx | null;
    readonly messageId: string;
    readonly refused: { readonly lease: Lease; readonly operation: LeaseOperation } | null;
  }): Promise<{ readonly at: Date; readonly holder: MessageHolder | null }>;

  /**
   * Upserts the owner's row (outbox_owners): heartbeat now, alive until now + `aliveMs` (the
   * driver's clock); `takes` is JSON text (a list of types) or null; started_at is kept on update.
   */
  heartbeat(params: {
    readonly owner: string;
    readonly kind: string;
    readonly takes: string | null;
    readonly aliveMs: number;
  }): Promise<{ readonly at: Date; readonly aliveUntil: Date }>;
  /**
   * In one transaction: deletes the rows of owners whose alive_until has passed and expires now
   * the unexpired leases they hold (locked_until = available_at = now: claimable, exactly as an
   * expired lease), so a peer's next claim takes them. Owners without a row are never touched.
   */
  reapOwners(): Promise<{ readonly at: Date; readonly reaped: readonly ReapedOwner[] }>;
  /** Deletes the owner's row (a graceful stop): true when there was one. */
  signOff(params: { readonly owner: string }): Promise<boolean>;
  /** Every registered owner, by name; `takes` as stored (JSON text or null). */
  listOwners(): Promise<readonly (Omit<OwnerRecord, "takes"> & { readonly takes: string | null })[]>;
  /** The driver's time now: its injected clock's, or the database's. */
  currentTime(): Promise<Date>;
  /**
   * Upserts a schedule (outbox_schedules): a new one's next tick is `nextAt`; an existing one
   * keeps its next tick when its cron and timezone are unchanged, else takes `nextAt`, and its
   * version goes up by one. Returns the row as stored.
   */
  putSchedule(params: { readonly schedule: ScheduleDefinitionRecord; readonly nextAt: Date | null }): Promise<ScheduleRecord>;
  /** Deletes a schedule: true when there was one. */
  removeSchedule(params: { readonly name: string }): Promise<boolean>;
  /** Every schedule, by name. */
  listSchedules(): Promise<ScheduleRecord[]>;
  /** The schedules with a next tick, the earliest first (then by name), at most `limit`, and the driver's time of looking. */
  nextSchedules(params: { readonly limit: number }): Promise<{ readonly at: Date; readonly schedules: ScheduleRecord[] }>;
  /**
   * Inside `tx`: the compare-and-set that fires or skips ticks. Moves the schedule's next tick
   * from `from` to `to` only if it is still `from` and the schedule still at `version`, and
   * records `from` as its last tick when `fired`: true when it moved (false: another scheduler
   * moved it first, or it was replaced or removed).
   */
  advanceSchedule(params: {
    readonly tx: Tx;
    readonly name: string;
    readonly version: number;
    readonly from: Date;
    readonly to: Date | null;
    readonly fired: boolean;
  }): MaybePromise<boolean>;
  onNewMessages(params: { readonly wake: () => void }): Promise<() => Promise<void>>;
  leaseStats(): Promise<LeaseStats>;
  countByStatus(): Promise<Partial<StatusCounts>>;
  /** Pending messages per type, the most numerous first (then by type), at most `limit` types. */
  pendingByType(params: { readonly limit: number }): Promise<readonly TypeCount[]>;
  /** The keys outbox_keys remembers, after `after` in key order, at most `limit`. */
  keySequences(params: { readonly after: string | null; readonly limit: number }): Promise<readonly KeySequence[]>;
  /** Upserts keys' next numbers, keeping the higher one. */
  carryKeySequences(params: { readonly turns: readonly KeySequence[] }): Promise<void>;
  /** Moves dead messages back to pending: how many moved, and for a list of ids, which. */
  redrive(params: { readonly messageIds: readonly string[] | "all"; readonly audit: boolean }): Promise<RedriveCount>;
  /** Deletes one batch of processed messages, dead messages or audit rows from before `before`, oldest first; returns how many. */
  purgeBatch(params: { readonly target: PurgeTarget; readonly before: Date; readonly limit: number }): Promise<number>;
  /** Inside `tx`: takes an inbox key's turn (row-locked until the transaction ends; created at 0 if new): its last applied number. */
  inboxKeyTurn(params: { readonly tx: Tx; readonly source: string; readonly key: string }): MaybePromise<number>;
  /**
   * Inside `tx`, the key's turn taken: `applied` moves its last applied number on (and clears the
   * held number unless a later gap remains); else `held` records a number held back (the lowest
   * held, and since when).
   */
  inboxKeyUpdate(params: {
    readonly tx: Tx;
    readonly source: string;
    readonly key: string;
    readonly applied: number | null;
    readonly held: number | null;
  }): MaybePromise<void>;
  /** Inbox keys with a number held back, longest waiting first; of `source` only unless null. */
  inboxBlockedKeys(params: { readonly source: string | null; readonly limit: number }): Promise<InboxBlockedKey[]>;
  /** Moves the key's applied number to just before its lowest held number: the numbers skipped, or null when nothing is held. */
  inboxSkipGap(params: { readonly source: string; readonly key: string }): Promise<readonly [from: number, to: number] | null>;
  /** Records a received message's id in the caller's transaction: true if new, false if it was recorded before. */
  inboxRecord(params: { readonly tx: Tx; readonly source: string; readonly messageId: string }): MaybePromise<boolean>;
  /** The audit trail, oldest first: every row, or one message's rows. */
  auditTrail(params: { readonly messageId: string | null }): Promise<AuditEntry[]>;
  getMessage(params: { readonly messageId: string }): Promise<OutboxMessage | undefined>;
  getMessageState(params: { readonly messageId: string }): Promise<MessageState | undefined>;
  /** The payload and headers as stored JSON text, each cut to `maxChars` characters unless it is null. */
  getMessageText(params: { readonly messageId: string; readonly maxChars: number | null }): Promise<MessageText | undefined>;
  /** Messages whose id (when `id` is given), dedupe key or ordering key equals `text`, by id, at most `limit`. */
  findMessages(params: { readonly id: string | null; readonly text: string; readonly limit: number }): Promise<OutboxMessage[]>;
  /**
   * One page of messages, by id: those of `status`, `type` and ordering `key` (each null: any)
   * with an id above `above` and below `below` (null: no bound), ascending or descending, at most `limit`.
   */
  pageMessages(params: PageBounds): Promise<MessageState[]>;
  listMessages(params: { readonly status: readonly MessageStatus[] | null; readonly limit: number | null }): Promise<OutboxMessage[]>;
  listMessageStates(params: { readonly status: readonly MessageStatus[] | null; readonly limit: number | null }): Promise<MessageState[]>;
  describeSchema(): Promise<string>;
  close(): Promise<void>;
}
