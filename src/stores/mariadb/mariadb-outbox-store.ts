// The outbox on MariaDB (10.6 or later), for workers on many machines sharing one database.
// Every connection reads committed data (READ COMMITTED, set and checked by connect.ts): a
// conditional UPDATE re-checks its condition on the row as it is once locked, and each statement
// after a key's turn sees what committed while it waited. Lease times come from the database's
// clock (UTC_TIMESTAMP) unless a clock is injected. A claim is SELECT … FOR UPDATE SKIP LOCKED,
// then the UPDATE of those rows, then a SELECT of them back (MariaDB has INSERT … RETURNING but
// no UPDATE … RETURNING). An ordering key's turn is its row in outbox_keys, row-locked until the
// transaction ends. MariaDB has no LISTEN/NOTIFY: onNewMessages wakes this process's listeners
// after this process's commits, and workers in other processes find new messages by polling.
// No transaction is ever held open across a handler. The lease protocol itself is LeasedOutbox's;
// this file is the MariaDB driver under it.

import type * as mysql from "mysql2/promise";
import { claimedLease } from "../../outbox/claimed-lease.js";
import type { Clock } from "../../outbox/clock.js";
import type {
  CheckedMessage,
  CancelAttempt,
  ClaimMessageAttempt,
  DriverCapabilities,
  EnqueueManyParams,
  EnqueueParams,
  KeyTurn,
  LeaseStats,
  Migration,
  OutboxDriver,
  PurgeTarget,
  RedriveCount,
  Refusal,
  SavepointStep,
  PageBounds,
  ScheduleDefinitionRecord,
  ScheduleRecord,
} from "../../outbox/driver.js";
import { keysOf, LeaseSet, singletonKeyMismatch, turnAfter, waitsInList } from "../../outbox/driver.js";
import { InvalidArgumentError, NotInTransactionError, StoreReadOnlyError } from "../../outbox/errors.js";
import { type LimitRecord, limitRoom, windowStart } from "../../outbox/limits.js";
import { LeasedOutbox } from "../../outbox/leased-outbox.js";
import type { Tracing } from "../../outbox/tracing.js";
import type {
  AuditEntry,
  BlockedKey,
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
  OutboxMessage,
  ReapedOwner,
  StatusCounts,
  TypeCount,
  KeySequence,
} from "../../outbox/types.js";
import { questionToNumbered } from "../placeholders.js";
import {
  byId,
  fromForeignRow,
  toAuditEntry,
  toCancelTarget,
  toFoundHolder,
  toHeaders,
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
import { type MariaDbConnectOptions, type MariaDbTarget, openMariaDbPool, parseMariaDbUrl } from "./connect.js";
import { applyMariaDbMigrations, recordedMigrations, refuseNewerMariaDb } from "./migrate.js";
import { migrationScript, OUTBOX_MIGRATIONS, SQL, TURNS_SQL, type MariaDbClaimedRow, type MariaDbMigration } from "./outbox-sql.js";

/**
 * The transaction handle on MariaDB: a mysql2/promise connection of the store's pool, inside a
 * transaction the store opened (store.transaction). enqueue and receive accept only those: the
 * store cannot tell from a connection whether someone else's transaction is open on it, so an
 * app's own transaction goes through enqueueIn (a ForeignTransaction), which asks the server.
 */
export type MariaDbTx = mysql.PoolConnection;

export interface MariaDbStoreOptions extends MariaDbConnectOptions {
  /**
   * mariadb://user[:password]@host[:port]/database (mysql:// also): the database holds Wassal's
   * tables and must be named. No query parameters.
   */
  readonly url: string;
  /**
   * Take lease times from this clock instead of the database's UTC_TIMESTAMP(). For tests and the
   * lab, which drive expiry with a ManualClock; production leaves it out.
   */
  readonly clock?: Clock;
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
  /**
   * Only look: the store's sessions are read-only (tx_read_only), migrate() throws
   * StoreReadOnlyError, and a database a newer Wassal migrated is not refused (DatabaseTooNewError),
   * so it can still be inspected.
   */
  readonly readOnly?: boolean;
}

/** ER_DUP_ENTRY, ER_LOCK_WAIT_TIMEOUT, ER_LOCK_DEADLOCK, ER_NO_SUCH_TABLE, ER_BAD_DB_ERROR. */
const DUPLICATE = 1062;
const LOCK_WAIT_TIMEOUT = 1205;
const DEADLOCK = 1213;
const NO_SUCH_TABLE = 1146;
const NO_SUCH_DATABASE = 1049;

/**
 * A hand-on of several keys found some of their turns busy (see TURNS_SQL): thrown inside one of
 * the store's own transactions, whose transaction() rolls it back whole, waits for those turns one
 * at a time holding nothing, and runs the work again. Only the protocol's transactions hand keys
 * on (an app's store.transaction cannot reach handOn), and their work may run again (a completion
 * group's business writes may already run twice: see LeasedOutbox's group commit).
 */
class TurnsBusy extends Error {
  constructor(
    readonly tx: MariaDbTx,
    readonly keys: readonly string[],
  ) {
    super(`wassal: the turns of ordering keys ${JSON.stringify(keys)} are busy; the transaction runs again once they are free`);
  }
}

/** How often a transaction of the store's own is run again after InnoDB chose it as a deadlock's victim (it was rolled back whole). */
const DEADLOCK_RETRIES = 3;

/** "No limit" for a LIMIT ?. */
const ALL_ROWS = Number.MAX_SAFE_INTEGER;

type Rows = mysql.RowDataPacket[];
type Written = mysql.ResultSetHeader;
type Queryable = Pick<mysql.Pool, "query"> | Pick<mysql.PoolConnection, "query">;

/** A message id, checked by the protocol (1 to 2^63 - 1), as mysql2 writes it: a number where exact, else a BigInt (written as its digits). */
function rowId(messageId: string): number | bigint {
  const id = Number(messageId);
  return Number.isSafeInteger(id) ? id : BigInt(messageId);
}

/** An id as a row holds it (a number, or decimal text past 2^53) as a bound value. */
function boundId(id: unknown): number | bigint {
  return typeof id === "number" ? id : BigInt(String(id));
}

/** The errno of a MariaDB error, or of the error a library wrapped it in. */
function errnoOf(error: unknown): number | undefined {
  const errno = (error as { errno?: unknown } | null | undefined)?.errno;
  return typeof errno === "number" ? errno : undefined;
}

/** A claimed row's lease (the claim's own writes are filled in by claimedLease). */
function mariaDbClaimedLease(row: MariaDbClaimedRow, owner: string, until: number, reclaimedFrom: string | null): Lease {
  const read = {
    id: String(row.id),
    type: row.type,
    dedupeKey: row.dedupe_key,
    key: row.ordering_key,
    keySeq: row.key_seq === null ? null : Number(row.key_seq),
    headers: toHeaders(row.headers, true),
    destination: row.destination,
    priority: Number(row.priority),
    singletonKey: row.singleton_key,
    payload: JSON.parse(row.payload) as JsonValue,
    createdAt: new Date(Number(row.created_at)),
    token: row.lease_token,
    attempts: row.attempts,
    lastError: row.last_error,
  };
  return claimedLease(read, owner, new Date(until), reclaimedFrom);
}

const message = (row: MessageRow): OutboxMessage => toMessage(row, true);

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

/** The distinct keys, sorted: the order their turns are taken in, so no two transactions wait for each other in a circle. */
function sortedKeys(keys: readonly string[]): string[] {
  return [...new Set(keys)].sort();
}

/** Only under READ COMMITTED does a statement after a key's turn see what committed while it waited, which FIFO per key relies on. */
function checkKeyIsolation(isolation: string): void {
  if (isolation !== "READ-COMMITTED") {
    throw new InvalidArgumentError(
      `messages with an ordering key need a READ COMMITTED transaction on MariaDB (this connection's session is ${isolation}): set the session's level (SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED) on the connections that enqueue them; MariaDB does not show a level set for the next transaction alone, so the session's is what is checked`,
    );
  }
}

/**
 * In-process wake-ups, per database: every store on the same database in this process hears
 * about messages that any of them committed. (Other processes poll: MariaDB has no LISTEN.)
 */
const wakeListeners = new Map<string, Set<() => void>>();

/** A statement's audit row, in AUDIT_COLUMNS' order. */
type AuditValues = [
  messageId: number | bigint,
  token: number,
  owner: string,
  action: string,
  at: number,
  previousStatus: string | null,
  previousOwner: string | null,
  previousLockedUntil: number | null,
  operation: LeaseOperation | null,
];

/** The MariaDB driver: runs the statements of outbox-sql.ts over a mysql2 connection pool. */
export class MariaDbDriver implements OutboxDriver<MariaDbTx> {
  readonly capabilities: DriverCapabilities = { parallelCommits: true, databaseClock: true, crossProcessWakeups: false };
  readonly ownTransactionHint = "store.transaction (the MariaDB store takes only its own transactions; another library's goes through enqueueIn)";
  readonly pool: mysql.Pool;
  readonly database: string;
  readonly #clock: Clock | undefined;
  readonly #readOnly: boolean;
  readonly #wakeKey: string;
  /** The connections inside one of this store's transactions, each with what to run after its commit. */
  readonly #open = new Map<MariaDbTx, Set<() => void>>();
  readonly #migrations: readonly Migration[] = OUTBOX_MIGRATIONS.map((m) => ({ name: m.name, sql: migrationScript(m.statements) }));
  #closed = false;

  readonly #wake = (): void => {
    for (const wake of wakeListeners.get(this.#wakeKey) ?? []) wake();
  };

  constructor(pool: mysql.Pool, target: MariaDbTarget, options: { readonly clock: Clock | undefined; readonly readOnly: boolean }) {
    this.pool = pool;
    this.database = target.database;
    this.#clock = options.clock;
    this.#readOnly = options.readOnly;
    this.#wakeKey = `${target.host}:${target.port}/${target.database}`;
  }

  /** The injected clock's time (ms), or null: the SQL then uses the database's clock. */
  #injected(): number | null {
    return this.#clock ? this.#clock.now().getTime() : null;
  }

  /** The time a step uses (ms): the injected clock's, else the database's (one round trip). */
  async #time(db: Queryable): Promise<number> {
    const injected = this.#injected();
    if (injected !== null) return injected;
    const [rows] = await db.query<Rows>(SQL.clockNow, [null]);
    return Number(rows[0]?.now);
  }

  /** The time of a step that read no clock from the database. */
  #localNow(): Date {
    return this.#clock?.now() ?? new Date();
  }

  /** Wakes this process's listeners once `tx` commits (nothing after a rollback). */
  #wakeAfterCommit(tx: MariaDbTx): void {
    this.#open.get(tx)?.add(this.#wake);
  }

  /** A transaction of the store's own, run again (whole) when InnoDB rolled it back as a deadlock's victim. */
  async #retrying<T>(work: () => Promise<T>): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await work();
      } catch (error) {
        if (errnoOf(error) !== DEADLOCK || attempt >= DEADLOCK_RETRIES) throw error;
      }
    }
  }

  async #audit(db: Queryable, rows: readonly AuditValues[]): Promise<void> {
    if (rows.length > 0) await db.query(SQL.audit, [rows]);
  }

  /** Takes the keys' turns (see lockKeys in outbox-sql.ts), sorted. */
  async #lockKeys(tx: Queryable, keys: readonly string[]): Promise<void> {
    const sorted = sortedKeys(keys);
    if (sorted.length > 0) await tx.query(SQL.lockKeys(sorted.length), sorted);
  }

  /**
   * The hand-on's turns. One key: waited for, as lockKeys takes it (holding no other turn, it
   * closes no circle of turns with an app's transaction). Several: an app's transaction takes its
   * keys' turns in the order it enqueues, so waiting for one while holding another could close a
   * circle with it. They are taken without waiting (TURNS_SQL); when one is busy, TurnsBusy makes
   * transaction() roll the whole transaction back (InnoDB keeps the turns taken until then), wait
   * for each busy turn alone and run the work again. So a hand-on never waits for a turn while it
   * holds another, nor while it holds the rows it completed or a business write.
   */
  async #takeTurns(tx: MariaDbTx, keys: readonly string[]): Promise<void> {
    const sorted = sortedKeys(keys);
    // Not one of the store's own transactions (none hands keys on today): it cannot be run again.
    if (sorted.length <= 1 || !this.#open.has(tx)) return this.#lockKeys(tx, sorted);
    const [free] = await tx.query<Rows>(TURNS_SQL.takeFree, [sorted]);
    const taken = new Set(free.map((row) => String(row.ordering_key)));
    // Busy ones, and keys without a row yet (or whose row another transaction is inserting).
    const rest = sorted.filter((key) => !taken.has(key));
    if (rest.length === 0) return;
    try {
      await tx.query(TURNS_SQL.takeRest(rest.length), rest);
    } catch (error) {
      if (errnoOf(error) === LOCK_WAIT_TIMEOUT) throw new TurnsBusy(tx, rest);
      throw error;
    }
  }

  applyMigrations(migrations: readonly MariaDbMigration[]): Promise<string[]> {
    if (this.#readOnly) return Promise.reject(new StoreReadOnlyError(`MariaDB database ${this.database}`));
    return applyMariaDbMigrations(this.pool, this.database, migrations);
  }

  async migrate(): Promise<void> {
    await this.applyMigrations(OUTBOX_MIGRATIONS);
  }

  migrations(): readonly Migration[] {
    return this.#migrations;
  }

  appliedMigrations(): Promise<readonly string[]> {
    return recordedMigrations(this.pool);
  }

  isNotMigrated(error: unknown): boolean {
    const errno = errnoOf(error);
    if (errno === NO_SUCH_DATABASE) return true;
    const text = (error as { message?: unknown } | null | undefined)?.message;
    // "Table 'app.outbox_messages' doesn't exist": one of Wassal's tables, not the app's.
    return errno === NO_SUCH_TABLE && typeof text === "string" && /\.(outbox_|wassal_)/.test(text);
  }

  async isInstalled(): Promise<boolean> {
    const [rows] = await this.pool.query<Rows>(SQL.installed);
    return Number(rows[0]?.n ?? 0) > 0;
  }

  async transaction<T>(work: (tx: MariaDbTx) => T | Promise<T>): Promise<T> {
    const conn = await this.pool.getConnection();
    let broken = false;
    try {
      for (;;) {
        const afterCommit = new Set<() => void>();
        try {
          await conn.beginTransaction();
          this.#open.set(conn, afterCommit);
          let value: T;
          try {
            value = await work(conn);
          } finally {
            this.#open.delete(conn);
          }
          await conn.commit();
          for (const after of afterCommit) after();
          return value;
        } catch (error) {
          try {
            await conn.rollback();
          } catch {
            broken = true; // the connection itself failed: do not hand it out again
          }
          if (broken || !(error instanceof TurnsBusy) || error.tx !== conn) throw error;
          // A hand-on found turns busy (see #takeTurns): everything is given back; wait for each
          // busy turn alone, holding nothing, then run the work again.
          for (const key of error.keys) await conn.query(TURNS_SQL.awaitTurn, [key]);
        }
      }
    } finally {
      if (broken) conn.destroy();
      else conn.release();
    }
  }

  isInTransaction(tx: MariaDbTx): boolean {
    // Only this store's own transactions: mysql2 does not say whether a connection is inside one.
    return this.#open.has(tx);
  }

  /** The enqueue statement's parameters, in its order. */
  #enqueueValues(params: CheckedMessage): unknown[] {
    return [
      params.type,
      params.dedupeKey,
      params.headers,
      params.destination,
      params.payload,
      params.availableAt === null ? null : params.availableAt.getTime(),
      params.priority,
      this.#injected(),
      params.key,
    ];
  }

  async enqueue(params: EnqueueParams<MariaDbTx>): Promise<OutboxMessage> {
    const { tx } = params;
    // A keyed message takes its key's turn first (see lockKeys): whether it waits is decided after.
    if (params.key !== null) await this.#lockKeys(tx, [params.key]);
    if (params.singletonKey !== null) {
      const joined = await this.#enqueueSingleton(
        params,
        async (text, values) => (await tx.query<Rows>(text, [...values]))[0] as unknown as Record<string, unknown>[],
      );
      this.#wakeAfterCommit(tx);
      return joined;
    }
    const [rows] = await tx.query<Rows>(SQL.enqueue, this.#enqueueValues(params));
    this.#wakeAfterCommit(tx);
    return message(rows[0] as unknown as MessageRow);
  }

  /**
   * A message with a singleton key, in the singleton's turn (one transaction at a time per type
   * and key): the waiting one of its type and key, locked, joined (and debounced when asked), else
   * a new one. Were a new one written meanwhile all the same (the turn is taken by every enqueue of
   * the singleton, so only by a version without it), the insert fails on the singleton index, and
   * the waiting one is looked for again.
   */
  async #enqueueSingleton(
    params: CheckedMessage,
    run: (text: string, values: readonly unknown[]) => Promise<readonly Record<string, unknown>[]>,
  ): Promise<OutboxMessage> {
    await run(SQL.lockSingleton, [params.type, params.singletonKey]);
    for (let attempt = 1; ; attempt += 1) {
      // A debounce rewrites the waiting message, so it locks it; a join only reads it, so claims need not pass over it while this transaction is open.
      const waiting = (await run(params.debounceMs === null ? SQL.waitingSingleton : SQL.lockWaitingSingleton, [params.type, params.singletonKey]))[0];
      if (waiting !== undefined) {
        if ((waiting.ordering_key ?? null) !== params.key) throw singletonKeyMismatch(params);
        const id = waiting.id as number | string;
        if (params.debounceMs !== null) {
          await run(SQL.debounceSingleton, [params.payload, params.headers, params.destination, params.priority, this.#injected(), params.debounceMs, id]);
        }
        return message(fromForeignRow((await run(SQL.getMessage, [id]))[0]));
      }
      try {
        const values = [
          params.type,
          params.headers,
          params.destination,
          params.payload,
          params.availableAt === null ? null : params.availableAt.getTime(),
          params.debounceMs ?? 0,
          params.priority,
          params.singletonKey,
          this.#injected(),
          params.key,
        ];
        return message(fromForeignRow((await run(SQL.enqueueSingleton, values))[0]));
      } catch (error) {
        const singleton = errnoOf(error) === DUPLICATE && /outbox_messages_singleton/.test(String((error as Error).message));
        if (!singleton || attempt >= 3) throw error;
      }
    }
  }

  /**
   * Runs statements through another library's transaction, in its placeholders, once the guard
   * has shown that a transaction is open on its connection (refusing with NotInTransactionError,
   * nothing written); also what isolation level it runs at.
   */
  async #foreign(
    tx: ForeignTransaction,
  ): Promise<{ readonly run: (text: string, values: readonly unknown[]) => Promise<readonly Record<string, unknown>[]>; readonly isolation: string }> {
    const run = (text: string, values: readonly unknown[]) => tx.query(tx.placeholders === "question" ? text : questionToNumbered(text), values);
    const guard = (await run(SQL.foreignGuard, []))[0];
    if (Number(guard?.open) !== 1) {
      throw new NotInTransactionError(
        "enqueue needs an open transaction so the message commits with your business write: MariaDB says no transaction is open on this connection (was it already committed or rolled back?); nothing was written",
      );
    }
    return { run, isolation: String(guard?.isolation) };
  }

  async enqueueForeign(params: EnqueueParams<ForeignTransaction>): Promise<OutboxMessage> {
    // The store cannot see another library's commit: it wakes no listener; workers find the message at their next poll.
    const { run, isolation } = await this.#foreign(params.tx);
    if (params.key !== null) {
      checkKeyIsolation(isolation);
      await run(SQL.lockKey, [params.key]);
    }
    if (params.singletonKey !== null) return this.#enqueueSingleton(params, run);
    const rows = await run(SQL.enqueue, this.#enqueueValues(params));
    return message(fromForeignRow(rows[0]));
  }

  async enqueueMany(params: EnqueueManyParams<MariaDbTx>): Promise<OutboxMessage[]> {
    const { tx } = params;
    // The keys' turns first, all of them, sorted (see lockKeys); then whether each waits is decided.
    await this.#lockKeys(tx, keysOf(params.messages));
    const [rows] = await tx.query<Rows>(SQL.enqueueMany, [this.#injected(), listParameter(params.messages)]);
    this.#wakeAfterCommit(tx);
    return (rows as unknown as MessageRow[]).sort(byId).map(message);
  }

  async enqueueManyForeign(params: EnqueueManyParams<ForeignTransaction>): Promise<OutboxMessage[]> {
    const { run, isolation } = await this.#foreign(params.tx);
    const keys = keysOf(params.messages);
    if (keys.length > 0) checkKeyIsolation(isolation);
    // One key at a time, in sorted order (another library's raw SQL cannot expand a list).
    for (const key of keys) await run(SQL.lockKey, [key]);
    const rows = await run(SQL.enqueueMany, [this.#injected(), listParameter(params.messages)]);
    return rows.map(fromForeignRow).sort(byId).map(message);
  }

  isDuplicate(error: unknown): boolean {
    const text = (error as { message?: unknown } | null | undefined)?.message;
    return errnoOf(error) === DUPLICATE && typeof text === "string" && text.includes("outbox_messages_dedupe");
  }

  async takenDedupeKey(params: {
    in: { tx: MariaDbTx } | { foreign: ForeignTransaction };
    error: unknown;
    dedupeKeys: readonly string[];
  }): Promise<string | null> {
    // MariaDB's error names the key's hash. The refused statement was undone alone: the
    // transaction is open, and sees its own rows.
    const keys = JSON.stringify(params.dedupeKeys);
    let taken: unknown;
    if ("tx" in params.in) {
      taken = (await params.in.tx.query<Rows>(SQL.takenDedupeKey, [keys]))[0][0]?.dedupe_key;
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
    return this.#retrying(() =>
      this.transaction(async (conn) => {
        const now = await this.#time(conn);
        return this.#claimIn(conn, { now, owner, limit, until: now + leaseMs, audit, types, exceptTypes });
      }),
    );
  }

  claimLimited(params: { owner: string; type: string; limit: number; leaseMs: number; audit: boolean }): Promise<{ at: Date; leases: Lease[] }> {
    const { owner, type, leaseMs, audit } = params;
    return this.#retrying(() =>
      this.transaction(async (conn) => {
        const row = (await conn.query<Rows>(SQL.lockLimit, [type]))[0][0] as LimitRow | undefined;
        let now = await this.#time(conn);
        let limit = params.limit;
        if (row !== undefined) {
          const record = toLimitRecord(row);
          const from = windowStart(record, now);
          if (record.concurrency !== null) await conn.query<Written>(SQL.seedLimitStarts, [now, type, now]); // only running counts use them
          await conn.query<Written>(SQL.pruneLimitStarts, [type, from, now]);
          const use = (await conn.query<Rows>(SQL.limitUse, [now, from, type]))[0][0] as { running: number | string; started: number | string } | undefined;
          limit = limitRoom(record, toLimitUse(use), limit);
          if (limit === 0) return { at: new Date(now), leases: [] };
          // The claim's time read again, after the count: a lease the count saw end (a completion
          // that committed meanwhile, its time read before its commit) ended before this claim's
          // time, as the audit trail then shows. (PostgreSQL's claim statement reads its own clock.)
          now = await this.#time(conn);
        }
        const claimed = await this.#claimIn(conn, { now, owner, limit, until: now + leaseMs, audit, types: [type], exceptTypes: null });
        if (row !== undefined && claimed.leases.length > 0) {
          const leases = JSON.stringify(claimed.leases.map((lease) => [Number(lease.messageId), lease.token]));
          await conn.query<Written>(SQL.addLimitStarts, [type, now, leases]);
        }
        return claimed;
      }),
    );
  }

  /** The claim, inside the caller's transaction: candidates locked, claimed, read back, audited. */
  async #claimIn(
    conn: MariaDbTx,
    params: {
      now: number;
      owner: string;
      limit: number;
      until: number;
      audit: boolean;
      types: readonly string[] | null;
      exceptTypes: readonly string[] | null;
    },
  ): Promise<{ at: Date; leases: Lease[] }> {
    const { now, owner, limit, until, audit, types, exceptTypes } = params;
    const [candidates] =
      types !== null
        ? await conn.query<Rows>(SQL.claimCandidatesOfTypes, [now, now, [...types], limit])
        : exceptTypes !== null
          ? await conn.query<Rows>(SQL.claimCandidatesExceptTypes, [now, now, [...exceptTypes], limit])
          : await conn.query<Rows>(SQL.claimCandidates, [now, now, limit]);
    if (candidates.length === 0) return { at: new Date(now), leases: [] };
    const ids = candidates.map((c) => boundId(c.id));
    // The candidates are locked until commit: the claim takes every one of them.
    await conn.query(SQL.claim, [owner, until, until, ids, now]);
    const [claimed] = await conn.query<Rows>(SQL.claimedRows, [ids]);
    const rows = new Map(claimed.map((row) => [String(row.id), row as unknown as MariaDbClaimedRow]));
    const leases: Lease[] = [];
    const audited: AuditValues[] = [];
    for (const candidate of candidates) {
      const row = rows.get(String(candidate.id));
      if (row === undefined) continue;
      const previousOwner = (candidate.locked_by as string | null) ?? null;
      leases.push(mariaDbClaimedLease(row, owner, until, candidate.status === "processing" ? previousOwner : null));
      if (audit) {
        const lockedUntil = candidate.locked_until === null ? null : Number(candidate.locked_until);
        audited.push([boundId(row.id), row.lease_token, owner, "claim", now, String(candidate.status), previousOwner, lockedUntil, null]);
      }
    }
    await this.#audit(conn, audited);
    return { at: new Date(now), leases };
  }

  claimMessage(params: { owner: string; messageId: string; leaseMs: number; audit: boolean }): Promise<ClaimMessageAttempt> {
    const { owner, messageId, leaseMs, audit } = params;
    const id = rowId(messageId);
    return this.#retrying(() =>
      this.transaction(async (conn): Promise<ClaimMessageAttempt> => {
        const now = await this.#time(conn);
        const at = new Date(now);
        const found = (await conn.query<Rows>(SQL.lockHolder, [id]))[0][0] as (HolderRow & { locked_until: number | null }) | undefined;
        if (found === undefined) return { at, before: null, lease: null };
        const before = toFoundHolder(found);
        const until = now + leaseMs;
        const [written] = await conn.query<Written>(SQL.claimMessage, [owner, until, until, id, now]);
        if (written.affectedRows !== 1) return { at, before, lease: null };
        const row = (await conn.query<Rows>(SQL.getMessage, [id]))[0][0] as unknown as MariaDbClaimedRow;
        if (audit) await this.#audit(conn, [[id, row.lease_token, owner, "claim", now, found.status, found.locked_by, found.locked_until, null]]);
        return { at, before, lease: mariaDbClaimedLease(row, owner, until, found.status === "processing" ? found.locked_by : null) };
      }),
    );
  }

  renew(params: { lease: Lease; leaseMs: number; audit: boolean }): Promise<{ at: Date; lockedUntil: Date | null; refusal: Refusal | null }> {
    const { lease, leaseMs, audit } = params;
    const id = rowId(lease.messageId);
    return this.#guarded(audit, async (db) => {
      const now = await this.#time(db);
      const until = now + leaseMs;
      const [written] = await db.query<Written>(SQL.renew, [until, until, id, lease.token, now]);
      if (written.affectedRows === 1) return { at: new Date(now), lockedUntil: new Date(until), refusal: null };
      return { at: new Date(now), lockedUntil: null, refusal: audit ? await this.#recordRefusal(db, id, lease, "renew", now) : null };
    });
  }

  async completeBulk(params: {
    tx: MariaDbTx | null;
    leases: readonly Lease[];
    audit: boolean;
    handOnKeys: boolean;
    remove: boolean;
  }): Promise<{ at: Date; completed: LeaseSet; refusals: Map<string, Refusal> | null }> {
    const { leases, audit, remove } = params;
    const work = async (conn: MariaDbTx) => {
      const now = await this.#time(conn);
      const completed = new LeaseSet();
      let done: Lease[];
      const only = leases.length === 1 ? (leases[0] as Lease) : undefined;
      if (only !== undefined) {
        // One lease (a lone completion): the plain guarded update, one statement.
        done = (await this.#completeRow(conn, remove, rowId(only.messageId), only.token, now)) ? [only] : [];
      } else {
        // The group's processing rows locked, then those whose token is current completed: which
        // they are is known without UPDATE … RETURNING.
        const [locked] = await conn.query<Rows>(SQL.completeBulkLock, [[...new Set(leases.map((lease) => rowId(lease.messageId)))]]);
        const current = new Map(locked.map((row) => [String(row.id), Number(row.lease_token)]));
        done = leases.filter((lease) => current.get(lease.messageId) === lease.token);
        const ids = done.map((lease) => rowId(lease.messageId));
        if (done.length > 0) await conn.query(remove ? SQL.completeBulkDelete : SQL.completeBulk, remove ? [ids] : [now, ids]);
      }
      for (const lease of done) completed.add(lease.messageId, lease.token);
      let refusals: Map<string, Refusal> | null = null;
      if (audit) {
        await this.#audit(
          conn,
          done.map((lease): AuditValues => [rowId(lease.messageId), lease.token, lease.owner, "complete", now, null, null, null, null]),
        );
        refusals = new Map();
        for (const lease of leases) {
          if (!completed.has(lease.messageId, lease.token))
            refusals.set(lease.messageId, await this.#recordRefusal(conn, rowId(lease.messageId), lease, "complete", now));
        }
      }
      if (params.handOnKeys) {
        const keys: KeyTurn[] = [];
        for (const lease of done) {
          const turn = turnAfter(lease.message, true);
          if (turn !== null) keys.push(turn);
        }
        await this.handOn({ tx: conn, keys });
      }
      return { at: new Date(now), completed, refusals };
    };
    return params.tx === null ? this.#retrying(() => this.transaction(work)) : work(params.tx);
  }

  /** The guarded completion of one row, kept as processed or deleted: whether it was the lease's. */
  async #completeRow(conn: MariaDbTx, remove: boolean, id: number | bigint, token: number, now: number): Promise<boolean> {
    const [written] = await conn.query<Written>(remove ? SQL.completeDelete : SQL.complete, remove ? [id, token] : [now, id, token]);
    return written.affectedRows === 1;
  }

  async completeOne(params: { tx: MariaDbTx; lease: Lease; savepoint: SavepointStep; audit: boolean; remove: boolean }): Promise<Date | null> {
    const { tx, lease, savepoint } = params;
    if (savepoint === "next") await tx.query(SQL.releaseSavepoint);
    if (savepoint !== "none") await tx.query(SQL.savepoint);
    const now = await this.#time(tx);
    const id = rowId(lease.messageId);
    if (!(await this.#completeRow(tx, params.remove, id, lease.token, now))) return null;
    if (params.audit) await this.#audit(tx, [[id, lease.token, lease.owner, "complete", now, null, null, null, null]]);
    return new Date(now);
  }

  async handOn(params: { tx: MariaDbTx; keys: readonly KeyTurn[] }): Promise<void> {
    const { tx } = params;
    if (params.keys.length === 0) return;
    // The keys' turns first (an enqueue to a key waits for its turn, or is seen by the statements
    // below), several of them without waiting for one while holding another (#takeTurns).
    const turns = [...params.keys].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
    await this.#takeTurns(
      tx,
      turns.map((turn) => turn.key),
    );
    let promoted = 0;
    for (const turn of turns) {
      const [written] = await tx.query<Written>(SQL.handOn, [turn.nextSeq, turn.key, turn.key, turn.key]);
      promoted += written.affectedRows;
      // Nobody waited: the key remembers its next number, for its next enqueue.
      if (written.affectedRows === 0 && turn.nextSeq !== null) await tx.query(SQL.rememberKeySeq, [turn.nextSeq, turn.key, turn.key]);
    }
    // A message became claimable: wake this process's idle listeners once the transaction commits.
    if (promoted > 0) this.#wakeAfterCommit(tx);
  }

  async blockedKeys(params: { limit: number }): Promise<BlockedKey[]> {
    const [rows] = await this.pool.query<Rows>(SQL.blockedKeys, [params.limit]);
    return rows.map((r) => ({
      key: String(r.ordering_key),
      messageId: String(r.id),
      type: String(r.type),
      lastError: (r.last_error as string | null) ?? null,
      diedAt: new Date(Number(r.died_at)),
      waiting: Number(r.waiting),
    }));
  }

  async deadHolder(params: { key: string }): Promise<string | null> {
    const row = (await this.pool.query<Rows>(SQL.deadHolder, [params.key]))[0][0];
    return row === undefined ? null : String(row.id);
  }

  async skipKeyHolder(params: { tx: MariaDbTx; key: string; messageId: string | null }): Promise<{ id: string; keySeq: number | null } | null> {
    const { tx, key, messageId } = params;
    // The key's turn first (as an enqueue or a redrive takes it): its holder cannot change meanwhile.
    await this.#lockKeys(tx, [key]);
    const row = (await tx.query<Rows>(SQL.deadHolder, [key]))[0][0];
    if (row === undefined || (messageId !== null && String(row.id) !== messageId)) return null;
    const [written] = await tx.query<Written>(SQL.skipKeyHolder, [boundId(row.id)]);
    if (written.affectedRows !== 1) return null;
    return { id: String(row.id), keySeq: row.key_seq === null ? null : Number(row.key_seq) };
  }

  async cancel(params: { tx: MariaDbTx; messageId: string; owner: string; audit: boolean; running: boolean; remove: boolean }): Promise<CancelAttempt> {
    const { tx } = params;
    const id = rowId(params.messageId);
    // A waiting message's key turn first, as a hand-on takes it before promoting that message; a
    // holder's row first, as a completion locks it before handing its key on (no circle either way).
    const seen = (await tx.query<Rows>(SQL.cancelKey, [id]))[0][0];
    if (seen !== undefined && seen.ordering_key !== null && Number(seen.key_state) === 1) await this.#lockKeys(tx, [String(seen.ordering_key)]);
    const row = (await tx.query<Rows>(SQL.cancelTarget, [id]))[0][0] as unknown as CancelRow | undefined;
    const now = await this.#time(tx);
    if (row === undefined) return { at: new Date(now), before: null, cancelled: false };
    const running = params.running ? 1 : 0;
    const [written] = params.remove
      ? await tx.query<Written>(SQL.cancelDelete, [id, running])
      : await tx.query<Written>(SQL.cancel, [params.owner, now, id, running]);
    const cancelled = written.affectedRows === 1;
    if (cancelled && params.audit) {
      await this.#audit(tx, [
        [id, Number(row.lease_token), params.owner, "dead", now, row.status, row.locked_by, row.locked_until === null ? null : Number(row.locked_until), null],
      ]);
    }
    return { at: new Date(now), before: toCancelTarget(row), cancelled };
  }

  async rollbackSavepoint(params: { tx: MariaDbTx }): Promise<void> {
    await params.tx.query(SQL.rollbackToSavepoint);
  }

  /** A guarded write and, when auditing, its audit row: in one transaction when there is an audit row to write with it. */
  #guarded<T>(audit: boolean, work: (db: Queryable) => Promise<T>): Promise<T> {
    return audit ? this.#retrying(() => this.transaction(work)) : work(this.pool);
  }

  fail(params: {
    lease: Lease;
    error: string;
    retryInMs: number | null;
    audit: boolean;
  }): Promise<{ at: Date; changed: boolean; availableAt: Date; refusal: Refusal | null }> {
    const { lease, error, retryInMs, audit } = params;
    const id = rowId(lease.messageId);
    return this.#guarded(audit, async (db) => {
      const now = await this.#time(db);
      const availableAt = now + (retryInMs ?? 0);
      const [written] =
        retryInMs === null
          ? await db.query<Written>(SQL.failDead, [error, now, id, lease.token])
          : await db.query<Written>(SQL.failRetry, [availableAt, error, id, lease.token]);
      const changed = written.affectedRows === 1;
      if (changed && audit) await this.#audit(db, [[id, lease.token, lease.owner, retryInMs === null ? "dead" : "retry", now, null, null, null, null]]);
      const refusal = !changed && audit ? await this.#recordRefusal(db, id, lease, "fail", now) : null;
      return { at: new Date(now), changed, availableAt: new Date(availableAt), refusal };
    });
  }

  release(params: { lease: Lease; audit: boolean }): Promise<{ at: Date; changed: boolean; refusal: Refusal | null }> {
    const { lease, audit } = params;
    const id = rowId(lease.messageId);
    return this.#guarded(audit, async (db) => {
      const now = await this.#time(db);
      const [written] = await db.query<Written>(SQL.release, [now, id, lease.token]);
      const changed = written.affectedRows === 1;
      if (changed && audit) await this.#audit(db, [[id, lease.token, lease.owner, "release", now, null, null, null, null]]);
      return { at: new Date(now), changed, refusal: !changed && audit ? await this.#recordRefusal(db, id, lease, "release", now) : null };
    });
  }

  async holder(params: {
    tx?: MariaDbTx | null;
    messageId: string;
    refused: { lease: Lease; operation: LeaseOperation } | null;
  }): Promise<{ at: Date; holder: MessageHolder | null }> {
    const id = rowId(params.messageId);
    const { refused, tx } = params;
    if (refused === null) {
      const row = (await (tx ?? this.pool).query<Rows>(SQL.holder, [id]))[0][0] as HolderRow | undefined;
      return { at: this.#localNow(), holder: toHolder(row) };
    }
    const record = async (conn: Queryable) => this.#recordRefusal(conn, id, refused.lease, refused.operation, await this.#time(conn));
    return tx == null ? this.#retrying(() => this.transaction(record)) : record(tx);
  }

  /** Inside the refused write's transaction: the holder, read (READ COMMITTED: as committed now), and the refusal recorded with it. */
  async #recordRefusal(conn: Queryable, id: number | bigint, lease: Lease, operation: LeaseOperation, now: number): Promise<Refusal> {
    const row = (await conn.query<Rows>(SQL.holder, [id]))[0][0] as (HolderRow & { locked_until: number | null }) | undefined;
    await this.#audit(conn, [
      [id, lease.token, lease.owner, "refused", now, row?.status ?? null, row?.locked_by ?? null, row?.locked_until ?? null, operation],
    ]);
    return { at: new Date(now), holder: toHolder(row) };
  }

  async onNewMessages(params: { wake: () => void }): Promise<() => Promise<void>> {
    const key = this.#wakeKey;
    const listeners = wakeListeners.get(key) ?? new Set();
    wakeListeners.set(key, listeners);
    const listener = () => params.wake();
    listeners.add(listener);
    return async () => {
      listeners.delete(listener);
      if (listeners.size === 0 && wakeListeners.get(key) === listeners) wakeListeners.delete(key);
    };
  }

  async heartbeat(params: { owner: string; kind: string; takes: string | null; aliveMs: number }): Promise<{ at: Date; aliveUntil: Date }> {
    const now = await this.#time(this.pool);
    const until = now + params.aliveMs;
    await this.pool.query<Written>(SQL.heartbeat, [params.owner, params.kind, params.takes, now, now, until]);
    return { at: new Date(now), aliveUntil: new Date(until) };
  }

  reapOwners(): Promise<{ at: Date; reaped: ReapedOwner[] }> {
    return this.transaction(async (conn) => {
      const now = await this.#time(conn);
      const [dead] = await conn.query<Rows>(SQL.deadOwners, [now]);
      const names = dead.map((row) => String(row.name));
      const reaped: ReapedOwner[] = [];
      for (const owner of names) {
        const [written] = await conn.query<Written>(SQL.expireLeasesOf, [now, now, owner, now]);
        reaped.push({ owner, expired: written.affectedRows });
      }
      if (names.length > 0) await conn.query<Written>(SQL.deleteOwners, [names]);
      return { at: new Date(now), reaped };
    });
  }

  async currentTime(): Promise<Date> {
    return new Date(await this.#time(this.pool));
  }

  putSchedule(params: { schedule: ScheduleDefinitionRecord; nextAt: Date | null }): Promise<ScheduleRecord> {
    const { name, cron, timezone, backfillMs, type, payload, headers, key, destination, priority } = params.schedule;
    return this.transaction(async (conn) => {
      const now = await this.#time(conn);
      const nextAt = params.nextAt?.getTime() ?? null;
      await conn.query<Written>(SQL.putSchedule, [name, cron, timezone, backfillMs, type, payload, headers, key, destination, priority, nextAt, now, now]);
      const [rows] = await conn.query<Rows>(SQL.getSchedule, [name]);
      return toScheduleRecord(rows[0] as unknown as ScheduleRow);
    });
  }

  putLimit(params: { type: string; concurrency: number | null; rateCount: number | null; rateIntervalMs: number | null }): Promise<LimitRecord> {
    const { type, concurrency, rateCount, rateIntervalMs } = params;
    return this.#retrying(() =>
      this.transaction(async (conn) => {
        const now = await this.#time(conn);
        // The limit's row first, as a limited claim locks it before the recorded claims (no circle).
        await conn.query<Written>(SQL.putLimit, [type, concurrency, rateCount, rateIntervalMs, now, now]);
        await conn.query<Written>(SQL.resetLimitStarts, [type]);
        const [rows] = await conn.query<Rows>(SQL.limitOf, [type]);
        return toLimitRecord(rows[0] as unknown as LimitRow);
      }),
    );
  }

  removeLimit(params: { type: string }): Promise<boolean> {
    // The limit's row first, as a limited claim locks it before the recorded claims (no circle).
    return this.#retrying(() =>
      this.transaction(async (conn) => {
        const [written] = await conn.query<Written>(SQL.removeLimit, [params.type]);
        await conn.query<Written>(SQL.removeLimitStarts, [params.type]);
        return written.affectedRows > 0;
      }),
    );
  }

  async listLimits(): Promise<LimitRecord[]> {
    const [rows] = await this.pool.query<Rows>(SQL.listLimits);
    return rows.map((row) => toLimitRecord(row as unknown as LimitRow));
  }

  async removeSchedule(params: { name: string }): Promise<boolean> {
    const [written] = await this.pool.query<Written>(SQL.removeSchedule, [params.name]);
    return written.affectedRows > 0;
  }

  async listSchedules(): Promise<ScheduleRecord[]> {
    const [rows] = await this.pool.query<Rows>(SQL.listSchedules);
    return rows.map((row) => toScheduleRecord(row as unknown as ScheduleRow));
  }

  async nextSchedules(params: { limit: number }): Promise<{ at: Date; schedules: ScheduleRecord[] }> {
    const at = new Date(await this.#time(this.pool));
    const [rows] = await this.pool.query<Rows>(SQL.nextSchedules, [params.limit]);
    return { at, schedules: rows.map((row) => toScheduleRecord(row as unknown as ScheduleRow)) };
  }

  async advanceSchedule(params: { tx: MariaDbTx; name: string; version: number; from: Date; to: Date | null; fired: boolean }): Promise<boolean> {
    const { tx, name, version, from, to, fired } = params;
    const [written] = await tx.query<Written>(SQL.advanceSchedule, [to?.getTime() ?? null, fired, from.getTime(), name, version, from.getTime()]);
    return written.affectedRows === 1;
  }

  async signOff(params: { owner: string }): Promise<boolean> {
    const [written] = await this.pool.query<Written>(SQL.signOff, [params.owner]);
    return written.affectedRows > 0;
  }

  async listOwners(): Promise<{ owner: string; kind: string; takes: string | null; startedAt: Date; heartbeatAt: Date; aliveUntil: Date }[]> {
    const [rows] = await this.pool.query<Rows>(SQL.listOwners);
    return rows.map((r) => ({
      owner: String(r.owner),
      kind: String(r.kind),
      takes: r.takes === null ? null : String(r.takes),
      startedAt: new Date(Number(r.started_at)),
      heartbeatAt: new Date(Number(r.heartbeat_at)),
      aliveUntil: new Date(Number(r.alive_until)),
    }));
  }

  async leaseStats(): Promise<LeaseStats> {
    const oldest = (await this.pool.query<Rows>(SQL.oldestPending))[0][0]?.oldest;
    const now = await this.#time(this.pool);
    const [owners] = await this.pool.query<Rows>(SQL.leasesByOwner, [now, now]);
    return {
      now: new Date(now),
      oldestPendingCreatedAt: oldest === null || oldest === undefined ? null : new Date(Number(oldest)),
      owners: owners.map((o) => ({ owner: String(o.owner), held: Number(o.held), expired: Number(o.expired) })),
    };
  }

  async pendingByType(params: { limit: number }): Promise<TypeCount[]> {
    const [rows] = await this.pool.query<Rows>(SQL.pendingByType, [params.limit]);
    return rows.map((r) => ({ type: String(r.type), count: Number(r.n) }));
  }

  async keySequences(params: { after: string | null; limit: number }): Promise<KeySequence[]> {
    const [rows] = await this.pool.query<Rows>(SQL.keySequences, [params.after, params.after, params.limit]);
    return rows.map((r) => ({ key: String(r.ordering_key), nextSeq: Number(r.next_seq) }));
  }

  async carryKeySequences(params: { turns: readonly KeySequence[] }): Promise<void> {
    await this.pool.query(
      SQL.carryKeySequences(params.turns.length),
      params.turns.flatMap((turn) => [turn.key, turn.nextSeq]),
    );
  }

  async countByStatus(): Promise<Partial<StatusCounts>> {
    const [rows] = await this.pool.query<Rows>(SQL.countByStatus);
    return Object.fromEntries(rows.map((row) => [String(row.status), Number(row.n)]));
  }

  redrive(params: { messageIds: readonly string[] | "all"; audit: boolean }): Promise<RedriveCount> {
    const { messageIds, audit } = params;
    // Skipped messages rejoin their keys' order: their keys' turns first, as an enqueue takes them (see lockKeys).
    return this.#retrying(() =>
      this.transaction(async (conn): Promise<RedriveCount> => {
        const now = await this.#time(conn);
        const ids = messageIds === "all" ? [] : messageIds.map(rowId);
        const [keyRows] = await conn.query<Rows>(SQL.keysOfDead, messageIds === "all" ? [1, [0]] : [0, ids]);
        const keys = keyRows.map((row) => String(row.ordering_key));
        await this.#lockKeys(conn, keys);
        let result: RedriveCount;
        if (messageIds === "all") {
          if (audit) await conn.query(SQL.auditRedriveAll, [now]);
          const [written] = await conn.query<Written>(SQL.redriveAll, [now]);
          result = { moved: written.affectedRows, movedIds: null };
        } else {
          const [dead] = await conn.query<Rows>(SQL.lockDead, [ids]);
          const moving = dead.map((row) => boundId(row.id));
          if (moving.length > 0) {
            if (audit) await conn.query(SQL.auditRedriveSome, [now, moving]);
            await conn.query(SQL.redriveSome, [moving, moving, now, moving]);
          }
          result = { moved: moving.length, movedIds: new Set(dead.map((row) => String(row.id))) };
        }
        // Settle: a key whose earlier message vanished meanwhile (purged) gets a holder again.
        await this.handOn({ tx: conn, keys: keys.map((key) => ({ key, nextSeq: null })) });
        if (result.moved > 0) this.#wakeAfterCommit(conn);
        return result;
      }),
    );
  }

  async purgeBatch(params: { target: PurgeTarget; before: Date; limit: number }): Promise<number> {
    const sql = { processed: SQL.purgeProcessed, dead: SQL.purgeDead, audit: SQL.purgeAudit, inbox: SQL.purgeInbox }[params.target];
    const [written] = await this.#retrying(() => this.pool.query<Written>(sql, [params.before.getTime(), params.limit]));
    return written.affectedRows;
  }

  async inboxKeyTurn(params: { tx: MariaDbTx; source: string; key: string }): Promise<number> {
    const [rows] = await params.tx.query<Rows>(SQL.inboxKeyTurn, [params.source, params.key]);
    return Number(rows[0]?.applied_seq ?? 0);
  }

  async inboxKeyUpdate(params: { tx: MariaDbTx; source: string; key: string; applied: number | null; held: number | null }): Promise<void> {
    const { tx, source, key, applied, held } = params;
    if (applied !== null) await tx.query(SQL.inboxKeyApplied, [applied, applied, applied, source, key]);
    else if (held !== null) await tx.query(SQL.inboxKeyHeld, [this.#injected(), held, held, source, key]);
  }

  async inboxBlockedKeys(params: { source: string | null; limit: number }): Promise<InboxBlockedKey[]> {
    const [rows] = await this.pool.query<Rows>(SQL.inboxBlockedKeys, [params.source, params.source, params.limit]);
    return rows.map((r) => ({
      source: String(r.source),
      key: String(r.ordering_key),
      appliedSeq: Number(r.applied),
      waitingFor: Number(r.applied) + 1,
      heldSeq: Number(r.held),
      heldSince: new Date(Number(r.held_since)),
    }));
  }

  inboxSkipGap(params: { source: string; key: string }): Promise<readonly [number, number] | null> {
    const { source, key } = params;
    return this.#retrying(() =>
      this.transaction(async (conn) => {
        const before = (await conn.query<Rows>(SQL.inboxKeyHeldNow, [source, key]))[0][0];
        if (before === undefined) return null;
        await conn.query(SQL.inboxSkipGap, [source, key]);
        return [Number(before.applied_seq) + 1, Number(before.held_seq) - 1] as const;
      }),
    );
  }

  async inboxRecord(params: { tx: MariaDbTx; source: string; messageId: string }): Promise<boolean> {
    const [written] = await params.tx.query<Written>(SQL.inboxRecord, [params.source, params.messageId, this.#injected()]);
    return written.affectedRows === 1;
  }

  async auditTrail(params: { messageId: string | null }): Promise<AuditEntry[]> {
    const { messageId } = params;
    const [rows] = messageId === null ? await this.pool.query<Rows>(SQL.auditTrail) : await this.pool.query<Rows>(SQL.auditTrailOf, [rowId(messageId)]);
    return (rows as unknown as AuditRow[]).map(toAuditEntry);
  }

  async getMessage(params: { messageId: string }): Promise<OutboxMessage | undefined> {
    const row = (await this.pool.query<Rows>(SQL.getMessage, [rowId(params.messageId)]))[0][0];
    return row === undefined ? undefined : message(row as unknown as MessageRow);
  }

  async getMessageState(params: { messageId: string }): Promise<MessageState | undefined> {
    const row = (await this.pool.query<Rows>(SQL.getMessageState, [rowId(params.messageId)]))[0][0];
    return row === undefined ? undefined : toMessageState(row as unknown as MessageStateRow);
  }

  async getMessageText(params: { messageId: string; maxChars: number | null }): Promise<MessageText | undefined> {
    const { maxChars } = params;
    const row = (await this.pool.query<Rows>(SQL.getMessageText, [maxChars, maxChars, rowId(params.messageId)]))[0][0];
    return row === undefined ? undefined : toMessageText(row as unknown as MessageTextRow);
  }

  async listMessageStates(params: { status: readonly MessageStatus[] | null; limit: number | null }): Promise<MessageState[]> {
    const { status } = params;
    const limit = params.limit ?? ALL_ROWS;
    if (status !== null && status.length === 0) return [];
    const [rows] =
      status === null ? await this.pool.query<Rows>(SQL.listStatesAll, [limit]) : await this.pool.query<Rows>(SQL.listStatesByStatus, [[...status], limit]);
    return (rows as unknown as MessageStateRow[]).map(toMessageState);
  }

  async pageMessages(params: PageBounds): Promise<MessageState[]> {
    const { status, type, key, ascending, limit } = params;
    const above = params.above === null ? null : rowId(params.above);
    const below = params.below === null ? null : rowId(params.below);
    const [rows] = await this.pool.query<Rows>(ascending ? SQL.pageAscending : SQL.pageDescending, [
      status,
      status,
      type,
      type,
      key,
      key,
      above,
      above,
      below,
      below,
      limit,
    ]);
    return (rows as unknown as MessageStateRow[]).map(toMessageState);
  }

  async findMessages(params: { id: string | null; text: string; limit: number }): Promise<OutboxMessage[]> {
    const { id, text, limit } = params;
    const [rows] = await this.pool.query<Rows>(SQL.findMessages, [id === null ? null : rowId(id), text, text, limit]);
    return (rows as unknown as MessageRow[]).map(message);
  }

  async listMessages(params: { status: readonly MessageStatus[] | null; limit: number | null }): Promise<OutboxMessage[]> {
    const { status } = params;
    const limit = params.limit ?? ALL_ROWS;
    if (status !== null && status.length === 0) return [];
    const [rows] = status === null ? await this.pool.query<Rows>(SQL.listAll, [limit]) : await this.pool.query<Rows>(SQL.listByStatus, [[...status], limit]);
    return (rows as unknown as MessageRow[]).map(message);
  }

  async describeSchema(): Promise<string> {
    const [tables] = await this.pool.query<Rows>(SQL.schemaTables);
    const parts: string[] = [];
    for (const { name } of tables) {
      const [rows] = await this.pool.query<Rows>(SQL.schema(String(name)));
      parts.push(`${String(rows[0]?.["Create Table"] ?? "")};`);
    }
    return parts.join("\n\n");
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.pool.end();
  }
}

export class MariaDbOutboxStore extends LeasedOutbox<MariaDbTx> {
  readonly kind = "mariadb";
  readonly #driver: MariaDbDriver;

  /** Use `MariaDbOutboxStore.connect`: it checks the URL, the server and the sessions first. */
  private constructor(
    driver: MariaDbDriver,
    options: { readonly audit: boolean; readonly onComplete: OnComplete | undefined; readonly tracing: Tracing | undefined },
  ) {
    super(driver, options);
    this.#driver = driver;
  }

  static async connect(options: MariaDbStoreOptions): Promise<MariaDbOutboxStore> {
    if (typeof options !== "object" || options === null) {
      throw new InvalidArgumentError("MariaDbOutboxStore.connect needs options: { url: 'mariadb://user@host:3306/database', … }");
    }
    const readOnly = options.readOnly ?? false;
    if (typeof readOnly !== "boolean") throw new InvalidArgumentError(`readOnly must be true or false (got ${JSON.stringify(readOnly)})`);
    const target = parseMariaDbUrl(options.url);
    const pool = await openMariaDbPool(target, { ...options, readOnly });
    try {
      // Before anything is written: a database no newer Wassal migrated (a read-only store may look at one).
      if (!readOnly) await refuseNewerMariaDb(pool, target.database);
    } catch (error) {
      await pool.end().catch(() => undefined);
      throw error;
    }
    const driver = new MariaDbDriver(pool, target, { clock: options.clock, readOnly });
    return new MariaDbOutboxStore(driver, { audit: options.audit ?? false, onComplete: options.onComplete, tracing: options.tracing });
  }

  /** The connection pool (mysql2/promise). Business code may query through it (outside the outbox's transactions). */
  get pool(): mysql.Pool {
    return this.#driver.pool;
  }

  /** The database holding Wassal's tables: the one the URL names. */
  get database(): string {
    return this.#driver.database;
  }

  /**
   * Runs extra migrations (e.g. a domain's tables) with the same bookkeeping and lock as the
   * outbox's: each a name (prefixed by its component, see migration-guard.ts) and its statements,
   * run one by one.
   */
  applyMigrations(migrations: readonly MariaDbMigration[]): Promise<string[]> {
    return this.#driver.applyMigrations(migrations);
  }
}
