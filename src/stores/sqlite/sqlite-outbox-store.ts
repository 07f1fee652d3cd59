// The outbox on one SQLite file (better-sqlite3, WAL). Every write is a BEGIN IMMEDIATE
// transaction taken through WriteLock, so claimers on separate connections and processes are
// serialised by SQLite's write lock. Times come from the injected clock, read inside the lock.
// The lease protocol itself is LeasedOutbox's; this file is the SQLite driver under it.

import { resolve as resolvePath } from "node:path";
import type Database from "better-sqlite3";
import { claimedLease } from "../../outbox/claimed-lease.js";
import { systemClock, type Clock } from "../../outbox/clock.js";
import type {
  CancelAttempt,
  CheckedMessage,
  ClaimMessageAttempt,
  DriverCapabilities,
  EnqueueManyParams,
  EnqueueParams,
  KeyTurn,
  LeaseStats,
  OutboxDriver,
  PurgeTarget,
  RedriveCount,
  Refusal,
  SavepointStep,
  PageBounds,
  ScheduleDefinitionRecord,
  ScheduleRecord,
} from "../../outbox/driver.js";
import { LeaseSet, singletonKeyMismatch, turnAfter, waitsInList } from "../../outbox/driver.js";
import { type LimitRecord, limitRoom, windowStart } from "../../outbox/limits.js";
import { InvalidArgumentError } from "../../outbox/errors.js";
import type { Tracing } from "../../outbox/tracing.js";
import { LeasedOutbox } from "../../outbox/leased-outbox.js";
import type {
  BlockedKey,
  AuditAction,
  AuditEntry,
  ForeignTransaction,
  InboxBlockedKey,
  JsonValue,
  Lease,
  LeaseOperation,
  MessageHolder,
  MessageState,
  MessageStatus,
  OnComplete,
  MessageText,
  NewMessage,
  OutboxMessage,
  ReapedOwner,
  StatusCounts,
  TypeCount,
  KeySequence,
} from "../../outbox/types.js";
import {
  byId,
  fromForeignRow,
  toAuditEntry,
  toCancelTarget,
  toHeaders,
  toFoundHolder,
  toHolder,
  toMessage,
  toMessageState,
  toMessageText,
  toScheduleRecord,
  type LimitRow,
  toLimitRecord,
  toLimitUse,
  type AuditRow,
  type CancelRow,
  type HolderRow,
  type MessageRow,
  type MessageStateRow,
  type MessageTextRow,
  type ScheduleRow,
} from "../rows.js";
import { questionToNumbered } from "../placeholders.js";
import { applyMigrations, recordedMigrations, type Migration } from "./migrate.js";
import { listTables, openSqliteDatabase, type SqliteOpenOptions } from "./open-database.js";
import { type CandidateTuple, type ClaimedTuple, OUTBOX_MIGRATIONS, SQL } from "./outbox-sql.js";
import { type CommitWatch, WakeFileWriter, watchCommits } from "./commit-watch.js";
import { rawStatement, statement } from "./statement-cache.js";
import { WriteLock } from "./write-lock.js";

/** The transaction handle on SQLite: the better-sqlite3 connection, inside BEGIN IMMEDIATE. */
export type SqliteTx = Database.Database;

export interface SqliteStoreOptions extends SqliteOpenOptions {
  /** Path of the SQLite file (created if missing). */
  readonly path: string;
  /** The time source for every lease decision (default: the system clock). */
  readonly clock?: Clock;
  /** How long a write may wait for the write lock, retrying asynchronously, before StoreBusyError (default 30 000 ms). */
  readonly lockWaitMs?: number;
  /** Record every claim, completion, failure and release in the audit table (outbox_audit). */
  readonly audit?: boolean;
  /**
   * What a completion does with the message's row: "keep" (the default) leaves it as processed,
   * the history the dashboard and `outbox` commands show, its dedupe key taken until retention
   * purges it; "delete" removes it in the same guarded statement, so the table holds only
   * unfinished and dead messages (the audit trail, when kept, is the history), and a completed
   * message's dedupe key is free again at once.
   */
  readonly onComplete?: OnComplete;
  /** Trace every enqueue and carry its trace context in the message's headers (see otelTracing in "wassal/observability"). */
  readonly tracing?: Tracing;
}

/** A claim candidate as read inside the claim's transaction: its state before the claim. */

/** A claimed row's lease (the claim's own writes are filled in by claimedLease). */
/** A claimed row's new lease token. */
const tokenOf = (row: ClaimedTuple): number => row[11];

function sqliteClaimedLease(row: ClaimedTuple, owner: string, until: number, reclaimedFrom: string | null): Lease {
  const [id, type, dedupeKey, key, keySeq, headers, destination, priority, singletonKey, payload, createdAt, token, attempts, lastError] = row;
  const read = {
    id: String(id),
    type,
    dedupeKey,
    key,
    keySeq,
    headers: toHeaders(headers, true),
    destination,
    priority,
    singletonKey,
    payload: JSON.parse(payload) as JsonValue,
    createdAt: new Date(createdAt),
    token,
    attempts,
    lastError,
  };
  return claimedLease(read, owner, new Date(until), reclaimedFrom);
}

const message = (row: MessageRow): OutboxMessage => toMessage(row, true);

/** A message id, checked by the protocol (1 to 2^63 - 1), as SQLite binds it: a number where exact, else a BigInt. */
function rowId(messageId: string): number | bigint {
  const id = Number(messageId);
  return Number.isSafeInteger(id) ? id : BigInt(messageId);
}

/** Checked message ids (decimal digits only) as a JSON array for json_each, exact past 2^53. */
function jsonIds(messageIds: readonly string[]): string {
  return `[${messageIds.join(",")}]`;
}

/** SQL.enqueueSingleton's parameters, in its order. With a debounce the message is due that long after now. */
function singletonValues(params: CheckedMessage, now: number): unknown[] {
  const debounce = params.debounceMs === null ? 0 : 1;
  const availableAt = params.debounceMs !== null ? now + params.debounceMs : params.availableAt === null ? now : params.availableAt.getTime();
  return [
    params.type,
    params.headers,
    params.destination,
    params.payload,
    now,
    availableAt,
    params.priority,
    params.singletonKey,
    params.key,
    debounce,
    debounce,
    debounce,
    debounce,
    debounce,
  ];
}

/** enqueueMany's list as its statement takes it (SQL.enqueueMany): payload and headers as JSON strings, so their text goes in unchanged. */
function listParameter(messages: readonly CheckedMessage[]): string {
  const waits = waitsInList(messages);
  return JSON.stringify(
    messages.map((m, i) => [
      m.type,
      m.dedupeKey,
      m.key,
      m.headers,
      m.destination,
      m.payload,
      m.availableAt === null ? null : m.availableAt.getTime(),
      waits[i] ? 1 : 0,
      m.priority,
    ]),
  );
}

/**
 * In-process wake-ups, per database file: every store on the same file in this process hears
 * about messages that any of them committed.
 */
const wakeListeners = new Map<string, Set<() => void>>();

function wakeKey(path: string): string {
  return path === ":memory:" ? path : resolvePath(path);
}

interface PreviousHolder {
  readonly status: string | null;
  readonly owner: string | null;
  readonly lockedUntil: number | null;
}

/** A claim as made inside the write lock: its time, the lease end, the candidates and the rows it took. */
interface SqliteClaim {
  readonly now: number;
  readonly until: number;
  readonly candidates: readonly CandidateTuple[];
  readonly rows: ReadonlyMap<number, ClaimedTuple>;
}

/** The leases of a claim, in the candidates' order (the UPDATE's RETURNING order is not theirs). */
function claimedLeases(claim: SqliteClaim, owner: string): { at: Date; leases: Lease[] } {
  const leases: Lease[] = [];
  for (const [id, status, lockedBy] of claim.candidates) {
    const row = claim.rows.get(id);
    if (row !== undefined) leases.push(sqliteClaimedLease(row, owner, claim.until, status === "processing" ? lockedBy : null));
  }
  return { at: new Date(claim.now), leases };
}

/** The SQLite driver: runs the statements of outbox-sql.ts on one connection. */
export class SqliteDriver implements OutboxDriver<SqliteTx> {
  readonly capabilities: DriverCapabilities = { parallelCommits: false, databaseClock: false, crossProcessWakeups: true };
  readonly ownTransactionHint = "your own BEGIN … COMMIT";
  readonly path: string;
  readonly db: Database.Database;
  readonly writeLock: WriteLock;
  readonly #clock: Clock;
  /** The file's absolute path (or ":memory:"), resolved once: a later process.chdir must not move it. */
  readonly #fileKey: string;
  /** Null for a database in memory or opened read-only: no other process can wait on its commits. */
  readonly #wakeFile: WakeFileWriter | null;
  /**
   * Wakes every store on this file, in this process and (through the wake file) in others, after a
   * commit that enqueued or handed a key on.
   */
  readonly #wake = (): void => {
    this.#wakeFile?.poke();
    for (const wake of wakeListeners.get(this.#fileKey) ?? []) wake();
  };

  constructor(options: SqliteStoreOptions) {
    this.path = options.path;
    this.#clock = options.clock ?? systemClock;
    const lockWaitMs = options.lockWaitMs ?? 30_000;
    if (!Number.isInteger(lockWaitMs) || lockWaitMs < 0) {
      throw new InvalidArgumentError(`lockWaitMs must be a whole number of milliseconds >= 0 (got ${String(lockWaitMs)})`);
    }
    this.db = openSqliteDatabase(options.path, options);
    this.writeLock = new WriteLock(this.db, lockWaitMs);
    this.#fileKey = wakeKey(this.path);
    this.#wakeFile = this.path === ":memory:" || this.db.readonly ? null : new WakeFileWriter(this.#fileKey);
  }

  #stmt(name: keyof typeof SQL): Database.Statement {
    return statement(this.db, SQL[name]);
  }

  /**
   * The statement in raw mode (rows as arrays), for the claim's and the bulk completion's rows:
   * building no object per row saved 1.9–2.0 µs of the process's CPU per message (claim 1.3–1.5,
   * candidates 0.4, completion 0.15–0.25; a throwaway loop of 100-message claims and completions
   * over 100,000 messages, NORMAL, two alternated runs each).
   */
  #raw(
    name: "claim" | "claimMessage" | "claimCandidates" | "claimCandidatesOfTypes" | "claimCandidatesExceptTypes" | "completeBulk" | "completeBulkDelete",
  ): Database.Statement {
    return rawStatement(this.db, SQL[name]);
  }

  now(): number {
    return this.#clock.now().getTime();
  }

  /** Writes one audit row inside the current transaction, when auditing. */
  #audit(
    audit: boolean,
    id: number | bigint,
    token: number,
    owner: string,
    action: AuditAction,
    at: number,
    previous?: PreviousHolder,
    operation: LeaseOperation | null = null,
  ): void {
    if (!audit) return;
    this.#stmt("audit").run({
      operation,
      id,
      token,
      owner,
      action,
      at,
      previousStatus: previous?.status ?? null,
      previousOwner: previous?.owner ?? null,
      previousLockedUntil: previous?.lockedUntil ?? null,
    });
  }

  applyMigrations(migrations: readonly Migration[]): Promise<string[]> {
    return applyMigrations(this.db, this.writeLock, migrations, () => this.now());
  }

  async migrate(): Promise<void> {
    await this.applyMigrations(OUTBOX_MIGRATIONS);
  }

  migrations(): readonly Migration[] {
    return OUTBOX_MIGRATIONS;
  }

  appliedMigrations(): Promise<readonly string[]> {
    return this.writeLock.serial(() => recordedMigrations(this.db));
  }

  isNotMigrated(error: unknown): boolean {
    const message = (error as { message?: unknown } | null | undefined)?.message;
    return typeof message === "string" && /^no such table: (outbox_|wassal_)/.test(message);
  }

  isInstalled(): Promise<boolean> {
    return this.writeLock.serial(() => listTables(this.db).includes("outbox_messages"));
  }

  transaction<T>(work: (tx: SqliteTx) => T | Promise<T>): Promise<T> {
    return this.writeLock.run(() => work(this.db));
  }

  isInTransaction(tx: SqliteTx): boolean {
    return tx.inTransaction && (tx !== this.db || this.writeLock.insideTransaction());
  }

  async enqueue(params: EnqueueParams<SqliteTx>): Promise<OutboxMessage> {
    return this.enqueueNow(params);
  }

  /** The insert itself, synchronous (better-sqlite3 answers at once). */
  enqueueNow(params: EnqueueParams<SqliteTx>): OutboxMessage {
    const now = this.now();
    if (params.singletonKey !== null) {
      const row = statement(params.tx, SQL.enqueueSingleton).get(...singletonValues(params, now)) as MessageRow | undefined;
      if (row === undefined) throw singletonKeyMismatch(params);
      if (params.tx === this.db) this.writeLock.afterCommit(this.#wake);
      return message(row);
    }
    const row = statement(params.tx, SQL.enqueue).get({
      type: params.type,
      dedupeKey: params.dedupeKey,
      key: params.key,
      headers: params.headers,
      destination: params.destination,
      payload: params.payload,
      now,
      availableAt: params.availableAt === null ? now : params.availableAt.getTime(),
      priority: params.priority,
    }) as MessageRow;
    if (params.tx === this.db) this.writeLock.afterCommit(this.#wake);
    return message(row);
  }

  async enqueueForeign(params: EnqueueParams<ForeignTransaction>): Promise<OutboxMessage> {
    // SQLite cannot say from SQL whether a transaction is open: the integration's problem() checks
    // the library's own state. Another connection's commit wakes this file's workers through the
    // -wal watch, as any other process's does.
    const { tx } = params;
    const now = this.now();
    if (params.singletonKey !== null) {
      const rows = await tx.query(
        tx.placeholders === "question" ? SQL.enqueueSingleton : questionToNumbered(SQL.enqueueSingleton),
        singletonValues(params, now),
      );
      if (rows[0] === undefined) throw singletonKeyMismatch(params);
      return message(fromForeignRow(rows[0]));
    }
    const values = [
      params.type,
      params.dedupeKey,
      params.headers,
      params.destination,
      params.payload,
      now,
      params.availableAt === null ? now : params.availableAt.getTime(),
      params.priority,
      params.key,
    ];
    const rows = await tx.query(tx.placeholders === "question" ? SQL.enqueueForeign : questionToNumbered(SQL.enqueueForeign), values);
    return message(fromForeignRow(rows[0]));
  }

  async enqueueMany(params: EnqueueManyParams<SqliteTx>): Promise<OutboxMessage[]> {
    return this.enqueueManyNow(params);
  }

  /** The one multi-row insert, synchronous (better-sqlite3 answers at once). */
  enqueueManyNow(params: EnqueueManyParams<SqliteTx>): OutboxMessage[] {
    const now = this.now();
    const rows = statement(params.tx, SQL.enqueueMany).all(now, now, listParameter(params.messages)) as MessageRow[];
    if (params.tx === this.db) this.writeLock.afterCommit(this.#wake);
    return rows.sort(byId).map(message);
  }

  async enqueueManyForeign(params: EnqueueManyParams<ForeignTransaction>): Promise<OutboxMessage[]> {
    // As enqueueForeign: the integration's problem() has checked the library's own state.
    const { tx } = params;
    const now = this.now();
    const rows = await tx.query(tx.placeholders === "question" ? SQL.enqueueMany : questionToNumbered(SQL.enqueueMany), [
      now,
      now,
      listParameter(params.messages),
    ]);
    return rows.map(fromForeignRow).sort(byId).map(message);
  }

  isDuplicate(error: unknown): boolean {
    return (error as { code?: unknown } | null | undefined)?.code === "SQLITE_CONSTRAINT_UNIQUE";
  }

  async takenDedupeKey(params: {
    in: { tx: SqliteTx } | { foreign: ForeignTransaction };
    error: unknown;
    dedupeKeys: readonly string[];
  }): Promise<string | null> {
    // The refused statement was undone alone: the transaction is open, and sees its own rows.
    const keys = JSON.stringify(params.dedupeKeys);
    let taken: unknown;
    if ("tx" in params.in) {
      taken = (statement(params.in.tx, SQL.takenDedupeKey).get(keys) as { dedupe_key: string } | undefined)?.dedupe_key;
    } else {
      const tx = params.in.foreign;
      taken = (await tx.query(tx.placeholders === "question" ? SQL.takenDedupeKey : questionToNumbered(SQL.takenDedupeKey), [keys]))[0]?.dedupe_key;
    }
    return typeof taken === "string" ? taken : null;
  }

  claim(params: {
    owner: string;
    limit: number;
    leaseMs: number;
    audit: boolean;
    types: readonly string[] | null;
    exceptTypes?: readonly string[] | null;
  }): Promise<{ at: Date; leases: Lease[] }> {
    const { owner, limit, leaseMs, audit, types } = params;
    const exceptTypes = params.exceptTypes ?? null;
    const taken = this.writeLock.runSync(() => {
      const now = this.now();
      return this.#claimLocked({ now, owner, limit, until: now + leaseMs, audit, types, exceptTypes });
    });
    // The leases are built after the commit, outside the write lock, which every other process's
    // writer waits for: parsing the payloads and headers and building the leases is 1.4–1.9 µs per
    // message, of the 15–21 µs a claim of 100 and its completion hold the lock (a throwaway loop,
    // one process, NORMAL). With 4 worker processes, 3 alternated rounds of 100,000 messages moved
    // neither the rate nor the held time beyond the noise (31–42 k msg/s, 22–33 µs either way).
    // The rows were checked when written (CHECK: payload and headers are valid JSON), so a lease
    // that cannot be built is not expected here; were one, its message would wait out its lease.
    return taken.then((claimed) => claimedLeases(claimed, owner));
  }

  claimLimited(params: { owner: string; type: string; limit: number; leaseMs: number; audit: boolean }): Promise<{ at: Date; leases: Lease[] }> {
    const { owner, type, leaseMs, audit } = params;
    const taken = this.writeLock.runSync(() => {
      const now = this.now();
      const row = this.#stmt("limitOf").get({ type }) as LimitRow | undefined;
      let limit = params.limit;
      if (row !== undefined) {
        const record = toLimitRecord(row);
        const from = windowStart(record, now);
        if (record.concurrency !== null) this.#stmt("seedLimitStarts").run({ type, now }); // only running counts use them
        this.#stmt("pruneLimitStarts").run({ type, windowStart: from, now });
        limit = limitRoom(
          record,
          toLimitUse(this.#stmt("limitUse").get({ type, windowStart: from, now }) as { running: number; started: number } | undefined),
          limit,
        );
      }
      if (limit === 0) return { now, until: now + leaseMs, candidates: [], rows: new Map<number, ClaimedTuple>() };
      const claimed = this.#claimLocked({ now, owner, limit, until: now + leaseMs, audit, types: [type], exceptTypes: null });
      if (row !== undefined && claimed.rows.size > 0) {
        this.#stmt("addLimitStarts").run({ type, now, leases: JSON.stringify([...claimed.rows.values()].map((r) => [r[0], tokenOf(r)])) });
      }
      return claimed;
    });
    return taken.then((claimed) => claimedLeases(claimed, owner));
  }

  /** The claim, inside the write lock: the candidates, the rows it claimed (by id), audited. */
  #claimLocked(params: {
    now: number;
    owner: string;
    limit: number;
    until: number;
    audit: boolean;
    types: readonly string[] | null;
    exceptTypes: readonly string[] | null;
  }): SqliteClaim {
    const { now, owner, limit, until, audit, types, exceptTypes } = params;
    const candidates = (
      types !== null
        ? this.#raw("claimCandidatesOfTypes").all({ now, limit, types: JSON.stringify(types) })
        : exceptTypes !== null
          ? this.#raw("claimCandidatesExceptTypes").all({ now, limit, types: JSON.stringify(exceptTypes) })
          : this.#raw("claimCandidates").all({ now, limit })
    ) as CandidateTuple[];
    if (candidates.length === 0) return { now, until, candidates, rows: new Map<number, ClaimedTuple>() };
    // One UPDATE for the whole batch (SQLite evaluates the id list once), in candidate order. One
    // candidate: the conditional claim of one message, without json_each (see completeBulk).
    const only = candidates.length === 1 ? candidates[0] : undefined;
    const claimed = (
      only !== undefined
        ? this.#raw("claimMessage").all({ id: only[0], owner, until, now })
        : this.#raw("claim").all({ ids: JSON.stringify(candidates.map((c) => c[0])), owner, until, now })
    ) as ClaimedTuple[];
    // By id: the UPDATE's RETURNING order is not the candidates' order.
    const rows = new Map(claimed.map((row) => [row[0], row]));
    if (audit) {
      for (const [id, status, lockedBy, lockedUntil] of candidates) {
        const row = rows.get(id);
        if (row === undefined) continue;
        this.#audit(true, id, tokenOf(row), owner, "claim", now, { status, owner: lockedBy, lockedUntil });
      }
    }
    return { now, until, candidates, rows };
  }

  claimMessage(params: { owner: string; messageId: string; leaseMs: number; audit: boolean }): Promise<ClaimMessageAttempt> {
    const { owner, messageId, leaseMs, audit } = params;
    const id = rowId(messageId);
    return this.writeLock.runSync((): ClaimMessageAttempt => {
      const now = this.now();
      const at = new Date(now);
      const found = this.#stmt("holder").get({ id }) as (HolderRow & { locked_until: number | null }) | undefined;
      if (found === undefined) return { at, before: null, lease: null };
      const before = toFoundHolder(found);
      const until = now + leaseMs;
      const row = this.#raw("claimMessage").get({ id, owner, until, now }) as ClaimedTuple | undefined;
      if (row === undefined) return { at, before, lease: null };
      this.#audit(audit, id, tokenOf(row), owner, "claim", now, { status: found.status, owner: found.locked_by, lockedUntil: found.locked_until });
      return { at, before, lease: sqliteClaimedLease(row, owner, until, found.status === "processing" ? found.locked_by : null) };
    });
  }

  renew(params: { lease: Lease; leaseMs: number; audit: boolean }): Promise<{ at: Date; lockedUntil: Date | null; refusal: Refusal | null }> {
    const { lease, leaseMs, audit } = params;
    return this.writeLock.runSync(() => {
      const now = this.now();
      const id = rowId(lease.messageId);
      const row = this.#stmt("renew").get({ id, token: lease.token, now, until: now + leaseMs }) as { locked_until: number } | undefined;
      if (row !== undefined) return { at: new Date(now), lockedUntil: new Date(row.locked_until), refusal: null };
      return { at: new Date(now), lockedUntil: null, refusal: audit ? this.#recordRefusal(id, lease, "renew", now) : null };
    });
  }

  async completeBulk(params: {
    tx: SqliteTx | null;
    leases: readonly Lease[];
    audit: boolean;
    handOnKeys: boolean;
    remove: boolean;
  }): Promise<{ at: Date; completed: LeaseSet; refusals: Map<string, Refusal> | null }> {
    const { leases, audit, remove } = params;
    const work = () => {
      const now = this.now();
      const completed = new LeaseSet();
      const only = leases.length === 1 ? (leases[0] as Lease) : undefined;
      if (only !== undefined) {
        // One lease (a lone completion): the plain guarded update. Through json_each, one row cost
        // 37–106 µs per BEGIN…COMMIT against 21–31 for this statement (5 rounds of 5,000 each,
        // interleaved, a throwaway script), and a worker without group commit paid it per message.
        if (this.#completeRow(remove, rowId(only.messageId), only.token, now)) completed.add(only.messageId, only.token);
      } else {
        const pairs = `[${leases.map((lease) => `[${lease.messageId},${lease.token}]`).join(",")}]`;
        const rows = (remove ? this.#raw("completeBulkDelete").all({ pairs }) : this.#raw("completeBulk").all({ pairs, now })) as [id: number, token: number][];
        for (const [id, token] of rows) completed.add(String(id), token);
      }
      let refusals: Map<string, Refusal> | null = null;
      if (audit) {
        refusals = new Map();
        for (const lease of leases) {
          const id = rowId(lease.messageId);
          if (completed.has(lease.messageId, lease.token)) this.#audit(true, id, lease.token, lease.owner, "complete", now);
          else refusals.set(lease.messageId, this.#recordRefusal(id, lease, "complete", now));
        }
      }
      if (params.handOnKeys) {
        const keys: KeyTurn[] = [];
        for (const lease of leases) {
          const turn = completed.has(lease.messageId, lease.token) ? turnAfter(lease.message, true) : null;
          if (turn !== null) keys.push(turn);
        }
        this.handOn({ tx: this.db, keys });
      }
      return { at: new Date(now), completed, refusals };
    };
    return params.tx === null ? this.writeLock.runSync(work) : work();
  }

  /** Synchronous: better-sqlite3 runs it at once, and the protocol awaits nothing inside the write lock. */
  /** The guarded completion of one row, kept as processed or deleted: whether it was the lease's. */
  #completeRow(remove: boolean, id: number | bigint, token: number, now: number): boolean {
    return (remove ? this.#stmt("completeDelete").run({ id, token }) : this.#stmt("complete").run({ id, token, now })).changes === 1;
  }

  completeOne(params: { tx: SqliteTx; lease: Lease; savepoint: SavepointStep; audit: boolean; remove: boolean }): Date | null {
    const { lease, savepoint, audit } = params;
    // Prepared statements: exec() would parse the SQL each time.
    if (savepoint === "next") this.#stmt("releaseSavepoint").run();
    if (savepoint !== "none") this.#stmt("savepoint").run();
    const now = this.now();
    const id = rowId(lease.messageId);
    if (!this.#completeRow(params.remove, id, lease.token, now)) return null;
    this.#audit(audit, id, lease.token, lease.owner, "complete", now);
    return new Date(now);
  }

  handOn(params: { tx: SqliteTx; keys: readonly KeyTurn[] }): void {
    // BEGIN IMMEDIATE already keeps enqueues out; one prepared statement per key costs microseconds in-process.
    const handOn = this.#stmt("handOn");
    let promoted = 0;
    const remember: KeyTurn[] = []; // keys nobody waited for: their next number, remembered in one statement
    for (const turn of params.keys) {
      const changes = handOn.run(turn).changes;
      promoted += changes;
      if (changes === 0 && turn.nextSeq !== null) remember.push(turn);
    }
    if (remember.length === 1) this.#stmt("rememberKeySeq").run(remember[0] as KeyTurn);
    else if (remember.length > 1) this.#stmt("rememberKeySeqs").run({ turns: JSON.stringify(remember.map((t) => [t.key, t.nextSeq])) });
    // A message became claimable: wake this process's idle listeners, and others' (the wake file).
    if (promoted > 0 && params.tx === this.db) this.writeLock.afterCommit(this.#wake);
  }

  async blockedKeys(params: { limit: number }): Promise<BlockedKey[]> {
    const rows = await this.writeLock.serial(
      () =>
        this.#stmt("blockedKeys").all({ limit: params.limit }) as {
          key: string;
          id: number;
          type: string;
          last_error: string | null;
          died_at: number;
          waiting: number;
        }[],
    );
    return rows.map((r) => ({ key: r.key, messageId: String(r.id), type: r.type, lastError: r.last_error, diedAt: new Date(r.died_at), waiting: r.waiting }));
  }

  async deadHolder(params: { key: string }): Promise<string | null> {
    const id = await this.writeLock.serial(() => this.#stmt("deadHolder").pluck().get({ key: params.key }) as number | undefined);
    return id === undefined ? null : String(id);
  }

  skipKeyHolder(params: { tx: SqliteTx; key: string; messageId: string | null }): { id: string; keySeq: number | null } | null {
    const row = this.#stmt("skipKeyHolder").get({ key: params.key, id: params.messageId === null ? null : rowId(params.messageId) }) as
      | { id: number; key_seq: number | null }
      | undefined;
    return row === undefined ? null : { id: String(row.id), keySeq: row.key_seq };
  }

  cancel(params: { tx: SqliteTx; messageId: string; owner: string; audit: boolean; running: boolean; remove: boolean }): CancelAttempt {
    const id = rowId(params.messageId);
    const now = this.now();
    const row = statement(params.tx, SQL.cancelTarget).get({ id }) as CancelRow | undefined;
    if (row === undefined) return { at: new Date(now), before: null, cancelled: false };
    const running = params.running ? 1 : 0;
    const cancelled =
      (params.remove
        ? statement(params.tx, SQL.cancelDelete).run({ id, running })
        : statement(params.tx, SQL.cancel).run({ id, running, owner: params.owner, now })
      ).changes === 1;
    if (cancelled)
      this.#audit(params.audit, id, row.lease_token, params.owner, "dead", now, {
        status: row.status,
        owner: row.locked_by,
        lockedUntil: row.locked_until as number | null,
      });
    return { at: new Date(now), before: toCancelTarget(row), cancelled };
  }

  async rollbackSavepoint(): Promise<void> {
    this.#stmt("rollbackToSavepoint").run();
  }

  fail(params: {
    lease: Lease;
    error: string;
    retryInMs: number | null;
    audit: boolean;
  }): Promise<{ at: Date; changed: boolean; availableAt: Date; refusal: Refusal | null }> {
    const { lease, error, retryInMs, audit } = params;
    const id = rowId(lease.messageId);
    return this.writeLock.runSync(() => {
      const now = this.now();
      const availableAt = now + (retryInMs ?? 0);
      const changed =
        retryInMs === null
          ? this.#stmt("failDead").run({ id, token: lease.token, error, now }).changes === 1
          : this.#stmt("failRetry").run({ id, token: lease.token, error, availableAt }).changes === 1;
      if (changed) this.#audit(audit, id, lease.token, lease.owner, retryInMs === null ? "dead" : "retry", now);
      const refusal = !changed && audit ? this.#recordRefusal(id, lease, "fail", now) : null;
      return { at: new Date(now), changed, availableAt: new Date(availableAt), refusal };
    });
  }

  release(params: { lease: Lease; audit: boolean }): Promise<{ at: Date; changed: boolean; refusal: Refusal | null }> {
    const { lease, audit } = params;
    const id = rowId(lease.messageId);
    return this.writeLock.runSync(() => {
      const now = this.now();
      const changed = this.#stmt("release").run({ id, token: lease.token, now }).changes === 1;
      if (changed) this.#audit(audit, id, lease.token, lease.owner, "release", now);
      return { at: new Date(now), changed, refusal: !changed && audit ? this.#recordRefusal(id, lease, "release", now) : null };
    });
  }

  async holder(params: {
    tx?: SqliteTx | null;
    messageId: string;
    refused: { lease: Lease; operation: LeaseOperation } | null;
  }): Promise<{ at: Date; holder: MessageHolder | null }> {
    const id = rowId(params.messageId);
    const { refused } = params;
    if (refused === null) {
      // Read at once, after the operation's transaction, as the operation's own follow-up.
      const row = this.#stmt("holder").get({ id }) as HolderRow | undefined;
      return { at: new Date(this.now()), holder: toHolder(row) };
    }
    // Inside the caller's transaction (the write lock is held), or in a write of its own.
    const record = () => this.#recordRefusal(id, refused.lease, refused.operation, this.now());
    return params.tx == null ? this.writeLock.runSync(record) : record();
  }

  /** Inside the write lock: the holder, read, and the refused write recorded with it in the audit trail. */
  #recordRefusal(id: number | bigint, lease: Lease, operation: LeaseOperation, now: number): Refusal {
    const row = this.#stmt("holder").get({ id }) as (HolderRow & { locked_until: number | null }) | undefined;
    const previous = { status: row?.status ?? null, owner: row?.locked_by ?? null, lockedUntil: row?.locked_until ?? null };
    this.#audit(true, id, lease.token, lease.owner, "refused", now, previous, operation);
    return { at: new Date(now), holder: toHolder(row) };
  }

  async onNewMessages(params: { wake: () => void }): Promise<() => Promise<void>> {
    const key = this.#fileKey;
    const listeners = wakeListeners.get(key) ?? new Set();
    wakeListeners.set(key, listeners);
    const listener = () => params.wake();
    listeners.add(listener);
    const watcher = this.#watchOtherProcesses(params.wake);
    return async () => {
      watcher?.close();
      listeners.delete(listener);
      if (listeners.size === 0) wakeListeners.delete(key);
    };
  }

  /**
   * Wake-ups from other processes: commit-watch.ts hears their commits. A look: PRAGMA
   * data_version says whether another connection committed since the last look (this connection's
   * own commits do not count), the newest id whether that commit enqueued, and the claimable index
   * whether a message became claimable now without being enqueued (a completion handed its key on
   * to a waiting message). Looks go through the lock's queue, never inside this connection's own
   * transaction.
   */
  #watchOtherProcesses(wake: () => void): CommitWatch | undefined {
    if (this.path === ":memory:" || this.db.readonly) return undefined;
    const dataVersion = this.#stmt("dataVersion").pluck();
    const newestId = this.#stmt("newestId");
    // Both reads in one read transaction: read apart, a commit landing between them could count in
    // the version and not in the newest id, and its message would wake no one until the next commit.
    const read = this.db.transaction(() => {
      const { newest, due } = newestId.get({ now: this.now() }) as { newest: number | null; due: number };
      return { version: dataVersion.get() as number, newest: newest ?? 0, due: due === 1 };
    });
    const look = () => this.writeLock.serial(() => read.deferred());
    let seen: { version: number; newest: number; due: boolean } | undefined;
    void look().then((first) => {
      seen ??= first;
    });
    /** True once another connection's commit is visible (and wakes the listener if it enqueued). */
    const changed = async (): Promise<boolean> => {
      const now = await look();
      const before = seen;
      seen = now;
      if (before === undefined || now.version === before.version) return before === undefined;
      // Woken by a new message, or by work that appeared without one (edge-triggered: a backlog
      // that stays claimable does not wake the listener at every commit).
      if (now.newest > before.newest || (now.due && !before.due)) wake();
      return true;
    };
    return watchCommits(this.#fileKey, changed, () => this.db.open);
  }

  heartbeat(params: { owner: string; kind: string; takes: string | null; aliveMs: number }): Promise<{ at: Date; aliveUntil: Date }> {
    return this.writeLock.runSync(() => {
      const now = this.now();
      const until = now + params.aliveMs;
      this.#stmt("heartbeat").run({ owner: params.owner, kind: params.kind, takes: params.takes, now, until });
      return { at: new Date(now), aliveUntil: new Date(until) };
    });
  }

  reapOwners(): Promise<{ at: Date; reaped: ReapedOwner[] }> {
    return this.writeLock.runSync(() => {
      const now = this.now();
      const names = (this.#stmt("deadOwners").all({ now }) as { name: string }[]).map((row) => row.name);
      if (names.length === 0) return { at: new Date(now), reaped: [] };
      const owners = JSON.stringify(names);
      const expired = this.#stmt("expireLeasesOf").all({ owners, now }) as { owner: string }[];
      this.#stmt("deleteOwners").run({ owners });
      return { at: new Date(now), reaped: names.map((owner) => ({ owner, expired: expired.filter((e) => e.owner === owner).length })) };
    });
  }

  signOff(params: { owner: string }): Promise<boolean> {
    return this.writeLock.runSync(() => this.#stmt("signOff").run({ owner: params.owner }).changes > 0);
  }

  async currentTime(): Promise<Date> {
    return new Date(this.now());
  }

  putSchedule(params: { schedule: ScheduleDefinitionRecord; nextAt: Date | null }): Promise<ScheduleRecord> {
    const { schedule } = params;
    return this.writeLock.runSync(() => {
      const row = this.#stmt("putSchedule").get({ ...schedule, nextAt: params.nextAt?.getTime() ?? null, now: this.now() }) as ScheduleRow;
      return toScheduleRecord(row);
    });
  }

  putLimit(params: { type: string; concurrency: number | null; rateCount: number | null; rateIntervalMs: number | null }): Promise<LimitRecord> {
    return this.writeLock.runSync(() => {
      const row = this.#stmt("putLimit").get({ ...params, now: this.now() }) as LimitRow;
      this.#stmt("resetLimitStarts").run({ type: params.type });
      return toLimitRecord(row);
    });
  }

  removeLimit(params: { type: string }): Promise<boolean> {
    return this.writeLock.runSync(() => {
      const removed = this.#stmt("removeLimit").run(params).changes > 0;
      this.#stmt("removeLimitStarts").run(params);
      return removed;
    });
  }

  listLimits(): Promise<LimitRecord[]> {
    return this.writeLock.serial(() => (this.#stmt("listLimits").all() as LimitRow[]).map(toLimitRecord));
  }

  removeSchedule(params: { name: string }): Promise<boolean> {
    return this.writeLock.runSync(() => this.#stmt("removeSchedule").run({ name: params.name }).changes > 0);
  }

  listSchedules(): Promise<ScheduleRecord[]> {
    return this.writeLock.serial(() => (this.#stmt("listSchedules").all() as ScheduleRow[]).map(toScheduleRecord));
  }

  nextSchedules(params: { limit: number }): Promise<{ at: Date; schedules: ScheduleRecord[] }> {
    return this.writeLock.serial(() => {
      const at = new Date(this.now());
      return { at, schedules: (this.#stmt("nextSchedules").all({ limit: params.limit }) as ScheduleRow[]).map(toScheduleRecord) };
    });
  }

  advanceSchedule(params: { tx: SqliteTx; name: string; version: number; from: Date; to: Date | null; fired: boolean }): boolean {
    const { tx, name, version, from, to, fired } = params;
    return statement(tx, SQL.advanceSchedule).run({ name, version, from: from.getTime(), to: to?.getTime() ?? null, fired: fired ? 1 : 0 }).changes === 1;
  }

  listOwners(): Promise<{ owner: string; kind: string; takes: string | null; startedAt: Date; heartbeatAt: Date; aliveUntil: Date }[]> {
    return this.writeLock.serial(() =>
      (
        this.#stmt("listOwners").all() as { owner: string; kind: string; takes: string | null; started_at: number; heartbeat_at: number; alive_until: number }[]
      ).map((r) => ({
        owner: r.owner,
        kind: r.kind,
        takes: r.takes,
        startedAt: new Date(r.started_at),
        heartbeatAt: new Date(r.heartbeat_at),
        aliveUntil: new Date(r.alive_until),
      })),
    );
  }

  async leaseStats(): Promise<LeaseStats> {
    const now = this.now();
    return this.writeLock.serial(() => {
      const oldest = (this.#stmt("oldestPending").get() as { oldest: number | null }).oldest;
      const owners = this.#stmt("leasesByOwner").all({ now }) as { owner: string; held: number; expired: number }[];
      return { now: new Date(now), oldestPendingCreatedAt: oldest === null ? null : new Date(oldest), owners };
    });
  }

  pendingByType(params: { limit: number }): Promise<TypeCount[]> {
    return this.writeLock.serial(() =>
      (this.#stmt("pendingByType").all({ limit: params.limit }) as { type: string; n: number }[]).map((r) => ({ type: r.type, count: r.n })),
    );
  }

  keySequences(params: { after: string | null; limit: number }): Promise<KeySequence[]> {
    return this.writeLock.serial(() => this.#stmt("keySequences").all({ after: params.after, limit: params.limit }) as KeySequence[]);
  }

  async carryKeySequences(params: { turns: readonly KeySequence[] }): Promise<void> {
    const turns = JSON.stringify(params.turns.map((turn) => [turn.key, turn.nextSeq]));
    await this.writeLock.runSync(() => this.#stmt("carryKeySequences").run({ turns }));
  }

  async countByStatus(): Promise<Partial<StatusCounts>> {
    const rows = await this.writeLock.serial(() => this.#stmt("countByStatus").all() as { status: MessageStatus; n: number }[]);
    return Object.fromEntries(rows.map((row) => [row.status, row.n]));
  }

  redrive(params: { messageIds: readonly string[] | "all"; audit: boolean }): Promise<RedriveCount> {
    const { messageIds, audit } = params;
    return this.writeLock.runSync(() => {
      const now = this.now();
      if (messageIds === "all") {
        if (audit) this.#stmt("auditRedriveAll").run({ now });
        return { moved: this.#stmt("redriveAll").run({ now }).changes, movedIds: null };
      }
      const ids = jsonIds(messageIds);
      if (audit) this.#stmt("auditRedriveSome").run({ ids, now });
      const movedIds = new Set((this.#stmt("redriveSome").all({ ids, now }) as { id: number }[]).map((row) => String(row.id)));
      return { moved: movedIds.size, movedIds };
    });
  }

  purgeBatch(params: { target: PurgeTarget; before: Date; limit: number }): Promise<number> {
    const name = ({ processed: "purgeProcessed", dead: "purgeDead", audit: "purgeAudit", inbox: "purgeInbox" } as const)[params.target];
    return this.writeLock.runSync(() => this.#stmt(name).run({ before: params.before.getTime(), limit: params.limit }).changes);
  }

  inboxKeyTurn(params: { tx: SqliteTx; source: string; key: string }): number {
    return (statement(params.tx, SQL.inboxKeyTurn).get({ source: params.source, key: params.key }) as { applied_seq: number }).applied_seq;
  }

  inboxKeyUpdate(params: { tx: SqliteTx; source: string; key: string; applied: number | null; held: number | null }): void {
    const { source, key } = params;
    if (params.applied !== null) statement(params.tx, SQL.inboxKeyApplied).run({ source, key, seq: params.applied });
    else if (params.held !== null) statement(params.tx, SQL.inboxKeyHeld).run({ source, key, seq: params.held, now: this.now() });
  }

  async inboxBlockedKeys(params: { source: string | null; limit: number }): Promise<InboxBlockedKey[]> {
    const rows = await this.writeLock.serial(
      () => this.#stmt("inboxBlockedKeys").all(params) as { source: string; key: string; applied: number; held: number; held_since: number }[],
    );
    return rows.map((r) => ({
      source: r.source,
      key: r.key,
      appliedSeq: r.applied,
      waitingFor: r.applied + 1,
      heldSeq: r.held,
      heldSince: new Date(r.held_since),
    }));
  }

  inboxSkipGap(params: { source: string; key: string }): Promise<readonly [number, number] | null> {
    return this.writeLock.runSync(() => {
      const before = this.#stmt("inboxKeyHeldNow").get(params) as { applied_seq: number } | undefined;
      if (before === undefined) return null;
      const after = this.#stmt("inboxSkipGap").get(params) as { applied_seq: number };
      return [before.applied_seq + 1, after.applied_seq] as const;
    });
  }

  inboxRecord(params: { tx: SqliteTx; source: string; messageId: string }): boolean {
    return statement(params.tx, SQL.inboxRecord).run({ source: params.source, id: params.messageId, now: this.now() }).changes === 1;
  }

  async auditTrail(params: { messageId: string | null }): Promise<AuditEntry[]> {
    const { messageId } = params;
    const rows = await this.writeLock.serial(
      () => (messageId === null ? this.#stmt("auditTrail").all() : this.#stmt("auditTrailOf").all({ id: rowId(messageId) })) as AuditRow[],
    );
    return rows.map(toAuditEntry);
  }

  async getMessage(params: { messageId: string }): Promise<OutboxMessage | undefined> {
    const id = rowId(params.messageId);
    const row = await this.writeLock.serial(() => this.#stmt("getMessage").get({ id }) as MessageRow | undefined);
    return row === undefined ? undefined : message(row);
  }

  async getMessageState(params: { messageId: string }): Promise<MessageState | undefined> {
    const id = rowId(params.messageId);
    const row = await this.writeLock.serial(() => this.#stmt("getMessageState").get({ id }) as MessageStateRow | undefined);
    return row === undefined ? undefined : toMessageState(row);
  }

  async getMessageText(params: { messageId: string; maxChars: number | null }): Promise<MessageText | undefined> {
    const id = rowId(params.messageId);
    const row = await this.writeLock.serial(() => this.#stmt("getMessageText").get({ id, max: params.maxChars }) as MessageTextRow | undefined);
    return row === undefined ? undefined : toMessageText(row);
  }

  async listMessageStates(params: { status: readonly MessageStatus[] | null; limit: number | null }): Promise<MessageState[]> {
    const limit = params.limit ?? -1;
    const { status } = params;
    const rows = await this.writeLock.serial(() =>
      status === null ? this.#stmt("listStatesAll").all({ limit }) : this.#stmt("listStatesByStatus").all({ limit, statuses: JSON.stringify(status) }),
    );
    return (rows as MessageStateRow[]).map(toMessageState);
  }

  async findMessages(params: { id: string | null; text: string; limit: number }): Promise<OutboxMessage[]> {
    const { id, text, limit } = params;
    const rows = await this.writeLock.serial(() => this.#stmt("findMessages").all({ id: id === null ? null : rowId(id), text, limit }) as MessageRow[]);
    return rows.map(message);
  }

  async listMessages(params: { status: readonly MessageStatus[] | null; limit: number | null }): Promise<OutboxMessage[]> {
    const limit = params.limit ?? -1;
    const { status } = params;
    const rows = await this.writeLock.serial(() =>
      status === null ? this.#stmt("listAll").all({ limit }) : this.#stmt("listByStatus").all({ limit, statuses: JSON.stringify(status) }),
    );
    return (rows as MessageRow[]).map(message);
  }

  async pageMessages(params: PageBounds): Promise<MessageState[]> {
    const { ascending, above, below, ...filter } = params;
    const bound = { ...filter, above: above === null ? null : rowId(above), below: below === null ? null : rowId(below) };
    const rows = await this.writeLock.serial(() => this.#stmt(ascending ? "pageAscending" : "pageDescending").all(bound) as MessageStateRow[]);
    return rows.map(toMessageState);
  }

  async describeSchema(): Promise<string> {
    const rows = await this.writeLock.serial(() => this.#stmt("schema").all() as { sql: string }[]);
    return rows.map((row) => `${row.sql.trim()};`).join("\n\n");
  }

  async close(): Promise<void> {
    await this.writeLock.idle();
    this.#wakeFile?.close();
    this.writeLock.stopMeasuringHolding();
    if (this.db.open) this.db.close();
  }
}

export class SqliteOutboxStore extends LeasedOutbox<SqliteTx> {
  readonly kind = "sqlite";
  readonly #driver: SqliteDriver;

  constructor(options: SqliteStoreOptions) {
    const driver = new SqliteDriver(options);
    super(driver, options);
    this.#driver = driver;
  }

  /** Path of the SQLite file. */
  get path(): string {
    return this.#driver.path;
  }

  /** The store's own connection. Business code may use it inside `transaction`. */
  get db(): Database.Database {
    return this.#driver.db;
  }

  /** Serialises this connection's transactions and waits for other connections' write lock. */
  get writeLock(): WriteLock {
    return this.#driver.writeLock;
  }

  /** Runs extra migrations (e.g. a domain's tables) with the same bookkeeping as the outbox's. */
  applyMigrations(migrations: readonly Migration[]): Promise<string[]> {
    return this.#driver.applyMigrations(migrations);
  }

  /**
   * enqueue, synchronously: for a synchronous transaction on a better-sqlite3 connection to this
   * file (better-sqlite3's db.transaction(), Drizzle's better-sqlite3 transactions), which cannot
   * await. Checks, errors and the insert all happen before it returns, so a refused message throws
   * inside the transaction and rolls it back.
   */
  enqueueSync<P extends JsonValue>(tx: SqliteTx, message: NewMessage<P>): OutboxMessage<P> {
    return this.enqueueNow(tx, message, (params) => this.#driver.enqueueNow(params));
  }
}
