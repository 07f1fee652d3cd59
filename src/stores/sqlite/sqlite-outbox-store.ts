// The outbox on one SQLite file (better-sqlite3, WAL). Every write is a BEGIN IMMEDIATE
// transaction taken through WriteLock, so claimers on separate connections and processes are
// serialised by SQLite's write lock. Times come from the injected clock.

import { resolve as resolvePath } from "node:path";
import type Database from "better-sqlite3";
import { claimedLease } from "../../outbox/claimed-lease.js";
import { systemClock, type Clock } from "../../outbox/clock.js";
import { DuplicateMessageError, InvalidArgumentError, NotInTransactionError } from "../../outbox/errors.js";
import { EventHub } from "../../outbox/events.js";
import { leaseLost, reportClaimOne, reportClaims, type LeaseOperation } from "../../outbox/store-events.js";
import type { OutboxStore, UnleasedAccess } from "../../outbox/store.js";
import {
  MESSAGE_STATUSES,
  type AuditAction,
  type AuditEntry,
  type ClaimOneResult,
  type ClaimOptions,
  type Completed,
  type CompletionRequest,
  type CompletionResult,
  type DeadLettered,
  type Finalize,
  type JsonValue,
  type Lease,
  type LeaseLost,
  type MessageHolder,
  type MessageStatus,
  type NewMessage,
  type OutboxMessage,
  type OutboxStats,
  type PurgeOptions,
  type Released,
  type Renewed,
  type RetryDecision,
  type RetryScheduled,
  type StatusCounts,
} from "../../outbox/types.js";
import { checkBatchSize, checkClaimOptions, checkDelayMs, checkLease, checkLeaseMs, checkMessageType, checkOwner, describeError } from "../../outbox/validate.js";
import { applyMigrations, type Migration } from "./migrate.js";
import { listTables, openSqliteDatabase, type SqliteOpenOptions } from "./open-database.js";
import { OUTBOX_MIGRATIONS, SQL, type ClaimedRow, type MessageRow } from "./outbox-sql.js";
import { statement } from "./statement-cache.js";
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
  /** Record every claim, completion, failure and release in the lease journal (outbox_audit). */
  readonly audit?: boolean;
}

function toMessage(row: MessageRow): OutboxMessage {
  return {
    id: String(row.id),
    type: row.type,
    dedupeKey: row.dedupe_key,
    payload: JSON.parse(row.payload) as JsonValue,
    status: row.status as MessageStatus,
    createdAt: new Date(row.created_at),
    availableAt: new Date(row.available_at),
    lockedBy: row.locked_by,
    lockedUntil: row.locked_until === null ? null : new Date(row.locked_until),
    leaseToken: row.lease_token,
    attempts: row.attempts,
    lastError: row.last_error,
    processedAt: row.processed_at === null ? null : new Date(row.processed_at),
  };
}

/** A claimed row's lease (the claim's own writes are filled in by claimedLease). */
function sqliteClaimedLease(row: ClaimedRow, owner: string, until: number, reclaimedFrom: string | null): Lease {
  const read = { id: String(row.id), type: row.type, dedupeKey: row.dedupe_key, payload: JSON.parse(row.payload) as JsonValue, createdAt: new Date(row.created_at), token: row.lease_token, attempts: row.attempts, lastError: row.last_error };
  return claimedLease(read, owner, new Date(until), reclaimedFrom);
}

interface HolderRow {
  status: string;
  locked_by: string | null;
  locked_until: number | null;
  lease_token: number;
}

function toHolder(row: HolderRow | undefined): MessageHolder | null {
  if (row === undefined) return null;
  return {
    status: row.status as MessageStatus,
    lockedBy: row.locked_by,
    lockedUntil: row.locked_until === null ? null : new Date(row.locked_until),
    leaseToken: row.lease_token,
  };
}

/** SQLite ids are integers; anything else cannot name a message. */
function rowId(messageId: string): number | undefined {
  return /^[1-9][0-9]{0,15}$/.test(messageId) ? Number(messageId) : undefined;
}

function isUniqueViolation(error: unknown): boolean {
  return (error as { code?: unknown }).code === "SQLITE_CONSTRAINT_UNIQUE";
}

/**
 * In-process wake-ups, per database file: every store on the same file in this process hears
 * about messages that any of them committed.
 */
const wakeListeners = new Map<string, Set<() => void>>();

function wakeKey(path: string): string {
  return path === ":memory:" ? path : resolvePath(path);
}

export class SqliteOutboxStore implements OutboxStore<SqliteTx> {
  readonly kind = "sqlite";
  readonly events = new EventHub();
  readonly path: string;
  /** The store's own connection. Business code may use it inside `transaction`. */
  readonly db: Database.Database;
  readonly writeLock: WriteLock;
  readonly #clock: Clock;
  readonly #audit: boolean;
  readonly unleased: UnleasedAccess<SqliteTx>;

  constructor(options: SqliteStoreOptions) {
    this.path = options.path;
    this.#clock = options.clock ?? systemClock;
    this.#audit = options.audit ?? false;
    const lockWaitMs = options.lockWaitMs ?? 30_000;
    if (!Number.isInteger(lockWaitMs) || lockWaitMs < 0) {
      throw new InvalidArgumentError(`lockWaitMs must be a whole number of milliseconds >= 0 (got ${String(lockWaitMs)})`);
    }
    this.db = openSqliteDatabase(options.path, options);
    this.writeLock = new WriteLock(this.db, lockWaitMs);
    this.unleased = {
      loadPending: () => this.writeLock.serial(() => (this.#stmt("unleasedLoadPending").all() as MessageRow[]).map(toMessage)),
      markProcessed: (messageId, finalize) =>
        this.writeLock.run(async () => {
          if (finalize) await finalize(this.db);
          this.#stmt("unleasedMarkProcessed").run({ id: rowId(messageId) ?? -1, now: this.#now() });
        }),
    };
  }

  #stmt(name: keyof typeof SQL): Database.Statement {
    return statement(this.db, SQL[name]);
  }

  /** Writes one journal row inside the current transaction, when auditing. */
  #journal(id: number, token: number, owner: string, action: AuditAction, at: number, previous?: { status: string; owner: string | null; lockedUntil: number | null }): void {
    if (!this.#audit) return;
    this.#stmt("audit").run({
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

  #now(): number {
    return this.#clock.now().getTime();
  }

  /** Runs extra migrations (e.g. a domain's tables) with the same bookkeeping as the outbox's. */
  async applyMigrations(migrations: readonly Migration[]): Promise<string[]> {
    return applyMigrations(this.db, this.writeLock, migrations, () => this.#now());
  }

  async isInstalled(): Promise<boolean> {
    return this.writeLock.serial(() => listTables(this.db).includes("outbox_messages"));
  }

  async migrate(): Promise<void> {
    await this.applyMigrations(OUTBOX_MIGRATIONS);
  }

  /** Set by enqueue inside this store's transaction; read after its commit. */
  #enqueuedInTransaction = false;

  async transaction<T>(work: (tx: SqliteTx) => T | Promise<T>): Promise<T> {
    const value = await this.writeLock.run(() => {
      this.#enqueuedInTransaction = false;
      return work(this.db);
    });
    if (this.#enqueuedInTransaction) {
      this.#enqueuedInTransaction = false;
      this.#wakeListeners();
    }
    return value;
  }

  #wakeListeners(): void {
    for (const wake of wakeListeners.get(wakeKey(this.path)) ?? []) wake();
  }

  async onNewMessages(wake: () => void): Promise<() => Promise<void>> {
    const key = wakeKey(this.path);
    const listeners = wakeListeners.get(key) ?? new Set();
    wakeListeners.set(key, listeners);
    const listener = () => wake();
    listeners.add(listener);
    return async () => {
      listeners.delete(listener);
      if (listeners.size === 0) wakeListeners.delete(key);
    };
  }

  async stats(): Promise<OutboxStats> {
    const now = this.#now();
    const counts = await this.countByStatus();
    const { oldest, owners } = await this.writeLock.serial(() => ({
      oldest: (this.#stmt("oldestPending").get() as { oldest: number | null }).oldest,
      owners: this.#stmt("leasesByOwner").all({ now }) as { owner: string; held: number; expired: number }[],
    }));
    return {
      now: new Date(now),
      counts,
      oldestPendingCreatedAt: oldest === null ? null : new Date(oldest),
      leasesByOwner: owners.map((o) => ({ owner: o.owner, held: o.held, expired: o.expired })),
      expiredLeases: owners.reduce((sum, o) => sum + o.expired, 0),
    };
  }

  async redrive(target: { readonly messageIds: readonly string[] } | "all"): Promise<number> {
    return this.writeLock.run(() => {
      const now = this.#now();
      if (target === "all") {
        if (this.#audit) this.#stmt("journalRedriveAll").run({ now });
        return this.#stmt("redriveAll").run({ now }).changes;
      }
      let moved = 0;
      for (const messageId of target.messageIds) {
        const id = rowId(messageId);
        if (id === undefined) continue;
        if (this.#audit) this.#stmt("journalRedriveOne").run({ id, now });
        moved += this.#stmt("redriveOne").run({ id, now }).changes;
      }
      return moved;
    });
  }

  async purgeProcessed(before: Date, options: PurgeOptions = {}): Promise<number> {
    const limit = checkBatchSize(options.batchSize ?? 1000);
    const cutoff = before.getTime();
    if (Number.isNaN(cutoff)) throw new InvalidArgumentError("purge cutoff is not a valid date");
    let deleted = 0;
    for (;;) {
      const batch = await this.writeLock.run(() => this.#stmt("purgeBatch").run({ before: cutoff, limit }).changes);
      deleted += batch;
      options.onProgress?.(deleted);
      if (batch < limit) return deleted;
    }
  }

  async enqueue<P extends JsonValue>(tx: SqliteTx, message: NewMessage<P>): Promise<OutboxMessage<P>> {
    if (!tx.inTransaction || (tx === this.db && !this.writeLock.insideTransaction())) {
      throw new NotInTransactionError("enqueue needs an open transaction so the message commits with your business write: call it inside store.transaction(tx => …) or your own BEGIN … COMMIT");
    }
    const type = checkMessageType(message.type);
    const payload = JSON.stringify(message.payload);
    if (payload === undefined) {
      throw new InvalidArgumentError(`payload of a ${type} message must be JSON-serialisable (got ${typeof message.payload})`);
    }
    const now = this.#now();
    const availableAt = message.availableAt === undefined ? now : message.availableAt.getTime();
    if (Number.isNaN(availableAt)) {
      throw new InvalidArgumentError(`availableAt of a ${type} message is not a valid date`);
    }
    try {
      const row = statement(tx, SQL.enqueue).get({ type, dedupeKey: message.dedupeKey ?? null, payload, now, availableAt }) as MessageRow;
      if (tx === this.db) this.#enqueuedInTransaction = true;
      return toMessage(row) as OutboxMessage<P>;
    } catch (error) {
      if (isUniqueViolation(error) && message.dedupeKey !== undefined) throw new DuplicateMessageError(message.dedupeKey);
      throw error;
    }
  }

  async claim(owner: string, options: ClaimOptions): Promise<Lease[]> {
    checkOwner(owner);
    const { limit, leaseMs } = checkClaimOptions(options);
    const leases = await this.writeLock.run(() => {
      const now = this.#now();
      const until = now + leaseMs;
      const candidates = this.#stmt("claimCandidates").all({ now, limit }) as { id: number; status: string; locked_by: string | null; locked_until: number | null }[];
      if (candidates.length === 0) return { won: [], now };
      // One UPDATE for the whole batch (SQLite evaluates the id list once), in candidate order.
      const rows = new Map((this.#stmt("claimMany").all({ ids: JSON.stringify(candidates.map((c) => c.id)), owner, until, now }) as ClaimedRow[]).map((row) => [row.id, row]));
      const won: Lease[] = [];
      for (const candidate of candidates) {
        const row = rows.get(candidate.id);
        if (row === undefined) continue;
        this.#journal(row.id, row.lease_token, owner, "claim", now, { status: candidate.status, owner: candidate.locked_by, lockedUntil: candidate.locked_until });
        won.push(sqliteClaimedLease(row, owner, until, candidate.status === "processing" ? candidate.locked_by : null));
      }
      return { won, now };
    });
    reportClaims(this.events, owner, limit, new Date(leases.now), leases.won);
    return leases.won;
  }

  async claimMessage(owner: string, messageId: string, options: Pick<ClaimOptions, "leaseMs">): Promise<ClaimOneResult> {
    checkOwner(owner);
    const leaseMs = checkLeaseMs(options.leaseMs);
    const id = rowId(messageId);
    const { result, now } = await this.writeLock.run((): { result: ClaimOneResult; now: number } => {
      const now = this.#now();
      const before = this.#stmt("holder").get({ id: id ?? -1 }) as HolderRow | undefined;
      if (before === undefined) return { result: { outcome: "not-claimable", messageId, status: "missing" }, now };
      const until = now + leaseMs;
      const row = this.#stmt("claimOne").get({ id, owner, until, now }) as ClaimedRow | undefined;
      if (row !== undefined) {
        this.#journal(row.id, row.lease_token, owner, "claim", now, { status: before.status, owner: before.locked_by, lockedUntil: before.locked_until });
        return { result: { outcome: "claimed", lease: sqliteClaimedLease(row, owner, until, before.status === "processing" ? before.locked_by : null) }, now };
      }
      if (before.status === "processing") {
        return {
          result: { outcome: "blocked", messageId, heldBy: before.locked_by, lockedUntil: before.locked_until === null ? null : new Date(before.locked_until), token: before.lease_token },
          now,
        };
      }
      return { result: { outcome: "not-claimable", messageId, status: before.status as MessageStatus }, now };
    });
    reportClaimOne(this.events, owner, messageId, new Date(now), result);
    return result;
  }

  /** Reads who holds the message now and reports the lease as lost. Called after the transaction. */
  #lost(lease: Lease, operation: LeaseOperation, at: number): LeaseLost {
    const current = toHolder(this.#stmt("holder").get({ id: rowId(lease.messageId) ?? -1 }) as HolderRow | undefined);
    return leaseLost(this.events, lease, operation, new Date(at), current);
  }

  async renew(lease: Lease, leaseMs: number): Promise<Renewed | LeaseLost> {
    checkLease(lease);
    checkLeaseMs(leaseMs);
    const { row, now } = await this.writeLock.run(() => {
      const now = this.#now();
      const row = this.#stmt("renew").get({ id: rowId(lease.messageId) ?? -1, token: lease.token, until: now + leaseMs }) as { locked_until: number } | undefined;
      return { row, now };
    });
    if (row === undefined) return this.#lost(lease, "renew", now);
    const lockedUntil = new Date(row.locked_until);
    const renewed: Lease = { ...lease, lockedUntil, message: { ...lease.message, lockedUntil, availableAt: lockedUntil } };
    this.events.emit({ type: "renewed", at: new Date(now), owner: lease.owner, messageId: lease.messageId, token: lease.token, lockedUntil: renewed.lockedUntil });
    return { outcome: "renewed", lease: renewed };
  }

  async complete(lease: Lease, finalize?: Finalize<SqliteTx>): Promise<Completed | LeaseLost> {
    // One item: no savepoint, and a business write that throws rolls back and is rethrown.
    const [result] = await this.completeMany([{ lease, ...(finalize ? { finalize } : {}) }]);
    return result as Completed | LeaseLost;
  }

  async completeMany(items: readonly CompletionRequest<SqliteTx>[]): Promise<CompletionResult[]> {
    for (const item of items) checkLease(item.lease); // before anything is written
    if (items.length === 0) return [];
    const single = items.length === 1;
    const { outcomes, now } = await this.writeLock.run(async () => {
      const now = this.#now();
      const outcomes: ("completed" | "lost" | { error: unknown } | undefined)[] = new Array<undefined>(items.length);
      if (!single) this.#completeBulk(items, outcomes, now);
      for (const [index, { lease, finalize }] of items.entries()) {
        if (outcomes[index] !== undefined) continue; // done in bulk
        // A savepoint only where a business write could fail: a lone guarded update cannot half-happen.
        const isolate = !single && finalize !== undefined;
        if (isolate) this.#stmt("savepoint").run();
        // The guarded update first: zero rows means the lease is gone and nothing may be written.
        const changed = this.#stmt("complete").run({ id: rowId(lease.messageId) ?? -1, token: lease.token, now }).changes;
        if (changed !== 1) {
          if (isolate) this.#undoSavepoint();
          outcomes[index] = "lost";
          continue;
        }
        this.#journal(rowId(lease.messageId) ?? -1, lease.token, lease.owner, "complete", now);
        try {
          if (finalize) await finalize(this.db);
          if (isolate) this.#stmt("releaseSavepoint").run();
          outcomes[index] = "completed";
        } catch (error) {
          if (single) throw error;
          this.#undoSavepoint();
          outcomes[index] = { error };
        }
      }
      return { outcomes, now };
    });
    return items.map(({ lease }, index): CompletionResult => {
      const outcome = outcomes[index];
      if (outcome === "lost") return this.#lost(lease, "complete", now);
      if (outcome === "completed") {
        this.events.emit({ type: "completed", at: new Date(now), owner: lease.owner, messageId: lease.messageId, token: lease.token });
        return { outcome: "completed", messageId: lease.messageId, processedAt: new Date(now) };
      }
      return { outcome: "failed", messageId: lease.messageId, error: outcome?.error };
    });
  }

  /** Undoes a group member's work and closes its savepoint (prepared: exec() parses the SQL each time). */
  #undoSavepoint(): void {
    this.#stmt("rollbackToSavepoint").run();
    this.#stmt("releaseSavepoint").run();
  }

  /**
   * The completions without a business write, in one guarded statement (inside completeMany's
   * transaction): fills in their outcomes. A lease named twice is left to the one-by-one path,
   * which then finds it already completed, as two separate completions would.
   */
  #completeBulk(items: readonly CompletionRequest<SqliteTx>[], outcomes: ("completed" | "lost" | { error: unknown } | undefined)[], now: number): void {
    const bulk: { readonly index: number; readonly lease: Lease; readonly id: number }[] = [];
    const seen = new Set<string>();
    for (const [index, { lease, finalize }] of items.entries()) {
      if (finalize !== undefined) continue;
      const id = rowId(lease.messageId) ?? -1;
      const key = `${id}#${lease.token}`;
      if (seen.has(key)) continue;
      seen.add(key);
      bulk.push({ index, lease, id });
    }
    if (bulk.length === 0) return;
    const pairs = JSON.stringify(bulk.map(({ lease, id }) => [id, lease.token]));
    // Keyed by message and token: a stale and a fresh lease of one message may share the group.
    const done = new Set((this.#stmt("completeBulk").all({ pairs, now }) as { id: number; lease_token: number }[]).map((row) => `${row.id}#${row.lease_token}`));
    for (const { index, lease, id } of bulk) {
      if (!done.has(`${id}#${lease.token}`)) {
        outcomes[index] = "lost";
        continue;
      }
      this.#journal(id, lease.token, lease.owner, "complete", now);
      outcomes[index] = "completed";
    }
  }

  async fail(lease: Lease, error: unknown, decision: RetryDecision): Promise<RetryScheduled | DeadLettered | LeaseLost> {
    checkLease(lease);
    const delay = decision === "dead" ? 0 : checkDelayMs(decision.retryInMs);
    const text = describeError(error);
    const id = rowId(lease.messageId) ?? -1;
    const { changed, now } = await this.writeLock.run(() => {
      const now = this.#now();
      const changed = decision === "dead"
        ? this.#stmt("failDead").run({ id, token: lease.token, error: text, now }).changes
        : this.#stmt("failRetry").run({ id, token: lease.token, error: text, availableAt: now + delay }).changes;
      if (changed === 1) this.#journal(id, lease.token, lease.owner, decision === "dead" ? "dead" : "retry", now);
      return { changed, now };
    });
    if (changed !== 1) return this.#lost(lease, "fail", now);
    const at = new Date(now);
    if (decision === "dead") {
      this.events.emit({ type: "dead-lettered", at, owner: lease.owner, messageId: lease.messageId, token: lease.token, error: text });
      return { outcome: "dead", messageId: lease.messageId };
    }
    const availableAt = new Date(now + delay);
    this.events.emit({ type: "retry-scheduled", at, owner: lease.owner, messageId: lease.messageId, token: lease.token, availableAt, error: text });
    return { outcome: "retry-scheduled", messageId: lease.messageId, availableAt };
  }

  async release(lease: Lease): Promise<Released | LeaseLost> {
    checkLease(lease);
    const { changed, now } = await this.writeLock.run(() => {
      const now = this.#now();
      const id = rowId(lease.messageId) ?? -1;
      const changed = this.#stmt("release").run({ id, token: lease.token, now }).changes;
      if (changed === 1) this.#journal(id, lease.token, lease.owner, "release", now);
      return { changed, now };
    });
    if (changed !== 1) return this.#lost(lease, "release", now);
    this.events.emit({ type: "released", at: new Date(now), owner: lease.owner, messageId: lease.messageId, token: lease.token });
    return { outcome: "released", messageId: lease.messageId };
  }

  async auditTrail(): Promise<AuditEntry[]> {
    const rows = await this.writeLock.serial(() => this.#stmt("auditTrail").all() as {
      message_id: number; lease_token: number; owner: string; action: string; at: number;
      previous_status: string | null; previous_owner: string | null; previous_locked_until: number | null;
    }[]);
    return rows.map((r) => ({
      messageId: String(r.message_id),
      token: r.lease_token,
      owner: r.owner,
      action: r.action as AuditAction,
      at: new Date(r.at),
      previousStatus: r.previous_status as MessageStatus | null,
      previousOwner: r.previous_owner,
      previousLockedUntil: r.previous_locked_until === null ? null : new Date(r.previous_locked_until),
    }));
  }

  async getMessage(messageId: string): Promise<OutboxMessage | undefined> {
    const id = rowId(messageId);
    if (id === undefined) return undefined;
    const row = await this.writeLock.serial(() => this.#stmt("getMessage").get({ id }) as MessageRow | undefined);
    return row === undefined ? undefined : toMessage(row);
  }

  async listMessages(filter: { readonly status?: readonly MessageStatus[]; readonly limit?: number } = {}): Promise<OutboxMessage[]> {
    const limit = filter.limit ?? -1;
    const rows = await this.writeLock.serial(() =>
      filter.status === undefined
        ? this.#stmt("listAll").all({ limit })
        : this.#stmt("listByStatus").all({ limit, statuses: JSON.stringify(filter.status) }),
    );
    return (rows as MessageRow[]).map(toMessage);
  }

  async countByStatus(): Promise<StatusCounts> {
    const counts = Object.fromEntries(MESSAGE_STATUSES.map((s) => [s, 0])) as StatusCounts;
    for (const row of await this.writeLock.serial(() => this.#stmt("countByStatus").all() as { status: MessageStatus; n: number }[])) {
      counts[row.status] = row.n;
    }
    return counts;
  }

  async describeSchema(): Promise<string> {
    return (await this.writeLock.serial(() => this.#stmt("schema").all() as { sql: string }[])).map((row) => row.sql).map((sql) => `${sql.trim()};`).join("\n\n");
  }

  async close(): Promise<void> {
    await this.writeLock.idle();
    if (this.db.open) this.db.close();
  }
}
