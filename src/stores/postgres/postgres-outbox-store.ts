// The outbox on PostgreSQL, for workers on many machines sharing one database. Claims are one
// statement (MATERIALIZED CTE with FOR UPDATE SKIP LOCKED feeding UPDATE … RETURNING); lease
// times come from the database's clock unless a clock is injected. READ COMMITTED is enough: a
// conditional UPDATE re-checks its condition after waiting for a row lock. No transaction is
// ever held open across a handler. The lease protocol itself is LeasedOutbox's; this file is the
// PostgreSQL driver under it.

import { createHash } from "node:crypto";
import type pg from "pg";
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
  OutboxDriver,
  PurgeTarget,
  RedriveCount,
  Refusal,
  SavepointStep,
  PageBounds,
  ScheduleDefinitionRecord,
  ScheduleRecord,
} from "../../outbox/driver.js";
import { keysOf, LeaseSet, singletonKeyMismatch, waitsInList } from "../../outbox/driver.js";
import { DatabaseOpenError, InvalidArgumentError, NotInTransactionError, StoreReadOnlyError } from "../../outbox/errors.js";
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
import {
  byId,
  fromForeignRow,
  toAuditEntry,
  toHeaders,
  toCancelTarget,
  toFoundHolder,
  toHeldHolder,
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
  type HeldRow,
  type HolderRow,
  type MessageRow,
  type MessageStateRow,
  type MessageTextRow,
  type ScheduleRow,
} from "../rows.js";
import { numberedToQuestion } from "../placeholders.js";
import { type OpenedPool, openPostgresPool, type PostgresConnectOptions } from "./connect.js";
import { applyPgMigrations, recordedMigrations, refuseNewerPostgres } from "./migrate.js";
import { outboxMigrations, outboxSql, quoteIdent, SCHEMA_PATTERN, type OutboxSql, type PgClaimedRow, type PgMigration } from "./outbox-sql.js";

/** The transaction handle on PostgreSQL: a pg client between BEGIN and COMMIT. */
export type PostgresTx = pg.ClientBase;

interface PostgresStoreSettings extends PostgresConnectOptions {
  /** The schema holding Wassal's tables (default "wassal"). */
  readonly schema?: string;
  /**
   * Take lease times from this clock instead of the database's clock_timestamp(). For tests and
   * the lab, which drive expiry with a ManualClock; production leaves it out.
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
   * Only look: every transaction on the store's connections is read-only (PostgreSQL's
   * default_transaction_read_only), migrate() throws StoreReadOnlyError, and a schema a newer
   * Wassal migrated is not refused (DatabaseTooNewError), so it can still be inspected. Needs
   * `url` or `config`: the store sets its own connections read-only, never an app's pool.
   */
  readonly readOnly?: boolean;
}

/**
 * Where the store connects, and its settings. Give one of:
 * - `url`: postgres://user[:password]@host[:port]/database;
 * - `pool`: your app's own pg.Pool, shared (the store never ends it; maxConnections does not apply);
 * - `config`: a pg pool config (host, user, password or a password function, ssl, …).
 */
export type PostgresStoreOptions = PostgresStoreSettings &
  (
    | { readonly url: string; readonly pool?: never; readonly config?: never }
    | { readonly pool: pg.Pool; readonly url?: never; readonly config?: never }
    | { readonly config: pg.PoolConfig; readonly url?: never; readonly pool?: never }
  );

/** A statement under a name of its own text, so that each connection prepares it once and reuses it. */
function namedStatement(text: string): { readonly name: string; readonly text: string } {
  return { name: `wassal_${createHash("sha1").update(text).digest("hex").slice(0, 16)}`, text };
}

/**
 * How many claims with their limit written in a store prepares (each on every connection that runs
 * it); claims of other limits bind it. See #claimStatement.
 */
const LITERAL_CLAIM_LIMITS = 8;

/**
 * How many claims of one limit come before the store writes that limit in: the steady state's
 * limit, not those of a start or of a quiet queue, where a worker claims as many as it has free
 * slots (200, 199, 198…), takes the few statements.
 */
const CLAIMS_BEFORE_LITERAL = 5;

/**
 * Claims of more limit than this take the claim that also names its rows as an array of ids
 * (outbox-sql.ts, claimLarge), unnamed, so planned at every call; smaller ones take the kept
 * plans of #claimStatement. See claimSql.
 */
const LARGE_CLAIM = 100;

/**
 * Kept plans are made again once the outbox table has grown by this factor since they were made,
 * and is at least PLAN_MIN_BYTES. A prepared statement keeps the plan PostgreSQL made when it first
 * kept one, on the table as it was then, and makes a new one only when the table's statistics
 * change (ANALYZE; never, on a server with autovacuum off): a plan made on a new, small table (a
 * sequential scan, a hash join) goes on reading the whole table as it grows. The prepared bulk
 * completion kept from an empty table read 102,994 rows per group behind 103,000 messages (issue
 * 36). A factor bounds what such a plan can cost against the one PostgreSQL would make now. New
 * statement names (a new plan generation) make PostgreSQL plan them afresh on every connection,
 * five custom plans and then a kept one; the old ones stay prepared until their connection closes
 * (one per generation: about ten to reach 1 GiB). The hand-on function's own plans are pinned
 * instead (wassal_hand_on in outbox-sql.ts).
 */
const PLAN_GROWTH = 4;
const PLAN_MIN_BYTES = 1024 * 1024;
/** How often a store that claims looks at the table's size: one short query (pg_relation_size) at most this often. */
const PLAN_CHECK_MS = 1000;

/** A claimed row's lease (the claim's own writes are filled in by claimedLease). */
function pgClaimedLease(row: PgClaimedRow, owner: string): Lease {
  const read = {
    id: String(row.id),
    type: row.type,
    dedupeKey: row.dedupe_key,
    key: row.ordering_key,
    keySeq: row.key_seq === null ? null : Number(row.key_seq),
    headers: toHeaders(row.headers, false),
    destination: row.destination,
    priority: row.priority,
    singletonKey: row.singleton_key,
    payload: row.payload as JsonValue,
    createdAt: new Date(row.created_ms),
    token: row.lease_token,
    attempts: row.attempts,
    lastError: row.last_error,
  };
  return claimedLease(read, owner, new Date(row.until_ms), row.reclaimed_from);
}

const message = (row: MessageRow): OutboxMessage => toMessage(row, false);

/**
 * enqueueMany's list as its statement takes it (enqueueMany in outbox-sql.ts): one JSON document,
 * payload and headers in it as the JSON they are (already checked JSON text, put in unchanged).
 */
function listParameter(messages: readonly CheckedMessage[]): string {
  const waits = waitsInList(messages);
  const parts = messages.map(
    (m, i) =>
      `[${JSON.stringify(m.type)},${JSON.stringify(m.dedupeKey)},${JSON.stringify(m.key)},${m.headers ?? "null"},${JSON.stringify(m.destination)},${m.payload},${
        m.availableAt === null ? "null" : JSON.stringify(m.availableAt.toISOString())
      },${waits[i] ? "true" : "false"},${m.priority}]`,
  );
  return `[${parts.join(",")}]`;
}

/**
 * The order a claim took its rows in: rank (the due time less the priority), then id. Ids are bigints in canonical decimal (no
 * sign, no leading zero), so the shorter is the smaller and equal lengths compare as text. Comparing
 * them as BigInts instead (two allocated per comparison, and a batch's due times tie often at
 * millisecond precision) cost 0.50 against 0.14 µs per row in a micro-benchmark (100-row batches).
 */
function byRankThenId(a: PgClaimedRow, b: PgClaimedRow): number {
  return a.old_rank_ms - b.old_rank_ms || a.id.length - b.id.length || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
}

/**
 * The ids, tokens and owners of a bulk completion as the array literals pg would send for them
 * ($2::bigint[], $3::int[], $4::text[]), written directly. pg writes an array parameter element by
 * element with string concatenation and two regular expressions per element; a group's three arrays
 * were 0.67 KB of the worker's 6.2 KB allocated per message, and 0.24 against 0.10 µs per message
 * in a micro-benchmark. Ids and tokens are checked decimal numbers (checkLease), so they need no
 * quoting; an owner is quoted and escaped as pg does it, once for each run of the same owner.
 */
function bulkArrays(leases: readonly Lease[]): [string, string, string] {
  const ids = new Array<string>(leases.length);
  const tokens = new Array<number>(leases.length);
  const owners = new Array<string>(leases.length);
  let owner: string | undefined;
  let quoted = "";
  for (let i = 0; i < leases.length; i++) {
    const lease = leases[i] as Lease;
    ids[i] = lease.messageId;
    tokens[i] = lease.token;
    if (lease.owner !== owner) {
      owner = lease.owner;
      quoted = `"${owner.replace(/\\/g, "\\\\").replace(/"/g, '\\"')}"`;
    }
    owners[i] = quoted;
  }
  return [`{${ids.join(",")}}`, `{${tokens.join(",")}}`, `{${owners.join(",")}}`];
}

/** Only under READ COMMITTED does a statement after a key's turn see what committed while it waited, which FIFO per key relies on. */
function checkKeyIsolation(isolation: string | undefined): void {
  if (isolation !== "read committed") {
    throw new InvalidArgumentError(
      `messages with an ordering key need a READ COMMITTED transaction on PostgreSQL (this one is ${isolation}): enqueue them in a transaction at that level, the default`,
    );
  }
}

/** The PostgreSQL driver: runs the statements of outbox-sql.ts over a connection pool. */
/** NotInTransactionError for the database's 25P01 (no transaction block), on the error or on the cause a library wrapped it in; else the error itself. */
function notInTransaction(error: unknown, message: string): unknown {
  const code = (error as { code?: unknown } | null)?.code ?? (error as { cause?: { code?: unknown } } | null)?.cause?.code;
  return code === "25P01" ? new NotInTransactionError(message, { cause: error }) : error;
}

/** What renew, fail and release return: whether the write was made, the statement's time and, refused, the holder read. */
type RefusableRow = HeldRow & { changed: boolean; now: Date };

/** A refused write's Refusal, recorded by its statement when auditing (refusedSql). */
function refusalOf(row: RefusableRow, audit: boolean): Refusal | null {
  return !row.changed && audit ? { at: row.now, holder: toHeldHolder(row) } : null;
}

export class PostgresDriver implements OutboxDriver<PostgresTx> {
  readonly capabilities: DriverCapabilities = { parallelCommits: true, databaseClock: true, crossProcessWakeups: true };
  readonly ownTransactionHint = "on a pg client after BEGIN";
  readonly schema: string;
  readonly pool: pg.Pool;
  readonly #clock: Clock | undefined;
  readonly #sql: OutboxSql;
  /**
   * The hot statements, the worker's and the enqueues, as named prepared statements: each
   * connection parses them once instead of at every call, and PostgreSQL may reuse a generic plan
   * (EXPLAIN ANALYZE showed 1.9 ms and 0.7 ms of planning per call of a claim and a completion, a
   * third of their execution time; a single enqueue in its transaction took 230–310 µs prepared
   * against 550–810 unnamed, 3 rounds of 2,000; a keyed enqueue's key lock 180–210 µs against
   * 230–340 with its BEGIN and ROLLBACK, 3 rounds of 3,000).
   */
  readonly #hot: Record<
    | "claim"
    | "claimOfTypes"
    | "completeBulk"
    | "completeBulkHandOn"
    | "completeBulkDelete"
    | "completeBulkHandOnDelete"
    | "completeBulkAudited"
    | "completeBulkHandOnAudited"
    | "completeBulkDeleteAudited"
    | "completeBulkHandOnDeleteAudited"
    | "enqueue"
    | "enqueueSingleton"
    | "enqueueSingletonFirst"
    | "waitingSingleton"
    | "enqueueMany"
    | "lockKeys",
    { readonly name: string; readonly text: string }
  >;
  /** The claims with their limit written in, by "all:<limit>" or "types:<limit>"; see #claimStatement. */
  readonly #literalClaims = new Map<string, { readonly name: string; readonly text: string }>();
  /** Claims so far of each limit not yet written in, by the same keys. */
  readonly #claimsByLimit = new Map<string, number>();
  readonly #ownsPool: boolean;
  /** How to open the LISTEN connection: made like the pool's own. */
  readonly #clientConfig: pg.ClientConfig;
  readonly #Client: OpenedPool["Client"];
  readonly #applicationName: string;
  readonly #readOnly: boolean;
  #closed = false;
  /** Statement names of this plan generation, by their first generation's name; see PLAN_GROWTH. */
  readonly #generationNames = new Map<string, { readonly name: string; readonly text: string }>();
  #generation = 0;
  /** The table's size when this generation began (undefined until first looked at). */
  #generationBytes: number | undefined;
  #sizeCheckedAt = Number.NEGATIVE_INFINITY;
  #sizeChecking = false;

  constructor(
    opened: OpenedPool,
    options: { readonly schema: string; readonly clock: Clock | undefined; readonly applicationName: string; readonly readOnly: boolean },
  ) {
    this.pool = opened.pool;
    this.#ownsPool = opened.owned;
    this.#clientConfig = opened.clientConfig;
    this.#Client = opened.Client;
    this.#applicationName = options.applicationName;
    this.#readOnly = options.readOnly;
    this.schema = options.schema;
    this.#clock = options.clock;
    this.#sql = outboxSql(options.schema);
    this.#hot = {
      claim: namedStatement(this.#sql.claim),
      claimOfTypes: namedStatement(this.#sql.claimOfTypes),
      completeBulk: namedStatement(this.#sql.completeBulk),
      completeBulkHandOn: namedStatement(this.#sql.completeBulkHandOn),
      completeBulkDelete: namedStatement(this.#sql.completeBulkDelete),
      completeBulkHandOnDelete: namedStatement(this.#sql.completeBulkHandOnDelete),
      completeBulkAudited: namedStatement(this.#sql.completeBulkAudited),
      completeBulkHandOnAudited: namedStatement(this.#sql.completeBulkHandOnAudited),
      completeBulkDeleteAudited: namedStatement(this.#sql.completeBulkDeleteAudited),
      completeBulkHandOnDeleteAudited: namedStatement(this.#sql.completeBulkHandOnDeleteAudited),
      enqueue: namedStatement(this.#sql.enqueue),
      enqueueSingleton: namedStatement(this.#sql.enqueueSingleton),
      enqueueSingletonFirst: namedStatement(this.#sql.enqueueSingletonFirst),
      waitingSingleton: namedStatement(this.#sql.waitingSingleton),
      enqueueMany: namedStatement(this.#sql.enqueueMany),
      lockKeys: namedStatement(this.#sql.lockKeys),
    };
  }

  /** `statement` under its name in the current plan generation (the first keeps the name). */
  #named(statement: { readonly name: string; readonly text: string }): { readonly name: string; readonly text: string } {
    if (this.#generation === 0) return statement;
    let named = this.#generationNames.get(statement.name);
    if (named === undefined) {
      named = { name: `${statement.name}_g${this.#generation}`, text: statement.text };
      this.#generationNames.set(statement.name, named);
    }
    return named;
  }

  /**
   * The table's size, at most once per PLAN_CHECK_MS (the claim that comes due waits for it: one
   * short query a second), and a new plan generation when the table has grown PLAN_GROWTH times
   * (and to PLAN_MIN_BYTES) since this one began. A table that shrank (VACUUM FULL) only moves the
   * mark down. The time is the injected clock's, when there is one.
   */
  async #checkTableGrowth(): Promise<void> {
    const now = this.#clock?.now().getTime() ?? performance.now();
    if (this.#sizeChecking || now - this.#sizeCheckedAt < PLAN_CHECK_MS) return;
    this.#sizeChecking = true;
    this.#sizeCheckedAt = now;
    try {
      const { rows } = await this.pool.query<{ bytes: number }>(this.#sql.tableBytes, [`${quoteIdent(this.schema)}.outbox_messages`]);
      const bytes = rows[0]?.bytes ?? 0;
      const since = this.#generationBytes;
      if (since === undefined || bytes < since / PLAN_GROWTH) {
        this.#generationBytes = bytes;
      } else if (bytes >= Math.max(since * PLAN_GROWTH, PLAN_MIN_BYTES)) {
        this.#generation += 1;
        this.#generationNames.clear();
        this.#generationBytes = bytes;
      }
    } catch {
      // looked at again at the next claim after PLAN_CHECK_MS; the claim itself reports a dead connection
    } finally {
      this.#sizeChecking = false;
    }
  }

  /**
   * For a store that enqueues and never claims (an app's): the growth check, not waited for (the
   * enqueue runs on the caller's connection, and the check needs another one, which a pool of one
   * gives only after the caller's transaction); its next enqueue uses what it found.
   */
  #lookAtGrowth(): void {
    const now = this.#clock?.now().getTime() ?? performance.now();
    if (this.#sizeChecking || now - this.#sizeCheckedAt < PLAN_CHECK_MS) return;
    void this.#checkTableGrowth();
  }

  /** The injected clock's time, or null: the SQL then uses the database's clock. */
  #now(): Date | null {
    return this.#clock ? this.#clock.now() : null;
  }

  /** The time of a step that read no clock from the database. */
  #localNow(): Date {
    return this.#clock?.now() ?? new Date();
  }

  applyMigrations(migrations: readonly PgMigration[]): Promise<string[]> {
    if (this.#readOnly) return Promise.reject(new StoreReadOnlyError(`PostgreSQL schema ${this.schema}`));
    return applyPgMigrations(this.pool, this.schema, migrations);
  }

  async migrate(): Promise<void> {
    await this.applyMigrations(outboxMigrations(this.schema));
  }

  migrations(): readonly PgMigration[] {
    return outboxMigrations(this.schema);
  }

  appliedMigrations(): Promise<readonly string[]> {
    return recordedMigrations(this.pool, this.schema);
  }

  isNotMigrated(error: unknown): boolean {
    // undefined_table, or invalid_schema_name: the schema itself is not there.
    const code = (error as { code?: unknown } | null | undefined)?.code;
    return code === "42P01" || code === "3F000";
  }

  async isInstalled(): Promise<boolean> {
    const { rows } = await this.pool.query<{ installed: boolean }>(this.#sql.installed, [`${quoteIdent(this.schema)}.outbox_messages`]);
    return rows[0]?.installed ?? false;
  }

  async transaction<T>(work: (tx: PostgresTx) => T | Promise<T>): Promise<T> {
    const client = await this.pool.connect();
    let broken = false;
    // A checked-out client has no error listener of the pool's: without ours, a connection that
    // dies mid-transaction (killed backend, server restart) would crash the process.
    const onError = () => {
      broken = true;
    };
    client.on("error", onError);
    try {
      await client.query("BEGIN");
      const value = await work(client);
      await client.query("COMMIT");
      return value;
    } catch (error) {
      try {
        await client.query("ROLLBACK");
      } catch {
        broken = true; // the connection itself failed: do not hand it out again
      }
      throw error;
    } finally {
      client.removeListener("error", onError);
      client.release(broken);
    }
  }

  isInTransaction(tx: PostgresTx): boolean {
    // 'T': inside a transaction block. A pool, or a client outside BEGIN, would commit alone.
    return typeof (tx as Partial<PostgresTx>).getTransactionStatus === "function" && tx.getTransactionStatus() === "T";
  }

  async enqueue(params: EnqueueParams<PostgresTx>): Promise<OutboxMessage> {
    // A keyed message takes its key's turn first (see lockKeys): whether it waits is decided after.
    if (params.key !== null) await this.#lockKeys(params.tx, [params.key]);
    this.#lookAtGrowth();
    if (params.singletonKey !== null) {
      const { tx } = params;
      return this.#enqueueSingleton(params, async (statement, values) => (await tx.query<MessageRow>({ ...this.#named(statement), values })).rows);
    }
    const { rows } = await params.tx.query<MessageRow>({ ...this.#named(this.#hot.enqueue), values: this.#enqueueValues(params) });
    return message(rows[0] as MessageRow);
  }

  /**
   * A message with a singleton key. With a debounce, one upsert that rewrites the waiting message
   * (locking it until the transaction ends). Without one, an insert that does nothing when one
   * waits, then a read of the waiting one, unlocked: claims need not pass over it while the
   * joining transaction is open. Claimed between the two, it is gone: the insert is tried again.
   */
  async #enqueueSingleton(
    params: Omit<EnqueueParams<unknown>, "tx">,
    run: (statement: { readonly name: string; readonly text: string }, values: unknown[]) => Promise<readonly MessageRow[]>,
  ): Promise<OutboxMessage> {
    const values = this.#singletonValues(params);
    if (params.debounceMs !== null) {
      const rows = await run(this.#hot.enqueueSingleton, values);
      if (rows[0] === undefined) throw singletonKeyMismatch(params);
      return message(rows[0]);
    }
    for (let attempt = 1; attempt <= 3; attempt += 1) {
      const inserted = (await run(this.#hot.enqueueSingletonFirst, values))[0];
      if (inserted !== undefined) return message(inserted);
      const waiting = (await run(this.#hot.waitingSingleton, [params.type, params.singletonKey]))[0];
      if (waiting !== undefined) {
        if (waiting.ordering_key !== params.key) throw singletonKeyMismatch(params);
        return message(waiting);
      }
    }
    throw new Error(
      `enqueue: the waiting ${params.type} message of singleton key ${JSON.stringify(params.singletonKey)} was claimed three times while this enqueue joined it; try again`,
    );
  }

  /** enqueueSingleton's parameters, in its order ($1 … $9 as enqueue's, $10 singleton key, $11 debounce ms). */
  #singletonValues(params: Omit<EnqueueParams<unknown>, "tx">): unknown[] {
    return [...this.#enqueueValues(params), params.singletonKey, params.debounceMs];
  }

  /** The enqueue statement's parameters, in its order ($1 now … $8 destination). */
  #enqueueValues(params: Omit<EnqueueParams<unknown>, "tx">): unknown[] {
    return [this.#now(), params.type, params.dedupeKey, params.payload, params.availableAt, params.key, params.headers, params.destination, params.priority];
  }

  async enqueueForeign(params: EnqueueParams<ForeignTransaction>): Promise<OutboxMessage> {
    const run = await this.#foreign(params.tx);
    if (params.key !== null) checkKeyIsolation(String((await run(this.#sql.lockKey, [params.key]))[0]?.isolation));
    if (params.singletonKey !== null) {
      return this.#enqueueSingleton(params, async (statement, values) => (await run(statement.text, values)).map((row) => fromForeignRow(row)));
    }
    const rows = await run(this.#sql.enqueue, this.#enqueueValues(params));
    return message(fromForeignRow(rows[0]));
  }

  /**
   * Runs statements through another library's transaction, in its placeholders, once the guard
   * has shown that the transaction is open (refusing with NotInTransactionError, nothing written).
   */
  async #foreign(tx: ForeignTransaction): Promise<(text: string, values: readonly unknown[]) => Promise<readonly Record<string, unknown>[]>> {
    const run = (text: string, values: readonly unknown[]) => {
      const statement = tx.placeholders === "numbered" ? { sql: text, params: values } : numberedToQuestion(text, values);
      return tx.query(statement.sql, statement.params);
    };
    try {
      await run(this.#sql.foreignGuard, []);
    } catch (error) {
      throw notInTransaction(
        error,
        "enqueue needs an open transaction so the message commits with your business write: the database ran this outside a transaction block (was the transaction already committed or rolled back?); nothing was written",
      );
    }
    try {
      await run(this.#sql.foreignGuardRelease, []);
    } catch (error) {
      // The transaction was open for the savepoint and had ended by its release: the caller's code
      // went on (and committed or rolled back) without waiting for enqueue.
      throw notInTransaction(
        error,
        "enqueue needs an open transaction, and this one ended while enqueue ran: await enqueue inside the transaction (an enqueue not awaited runs after the commit); nothing was written",
      );
    }
    return run;
  }

  async enqueueMany(params: EnqueueManyParams<PostgresTx>): Promise<OutboxMessage[]> {
    // The keys' turns first, all of them, sorted (see lockKeys); then whether each waits is decided.
    const keys = keysOf(params.messages);
    if (keys.length > 0) await this.#lockKeys(params.tx, keys);
    this.#lookAtGrowth();
    const { rows } = await params.tx.query<MessageRow>({ ...this.#named(this.#hot.enqueueMany), values: [this.#now(), listParameter(params.messages)] });
    return rows.sort(byId).map(message);
  }

  async enqueueManyForeign(params: EnqueueManyParams<ForeignTransaction>): Promise<OutboxMessage[]> {
    const run = await this.#foreign(params.tx);
    // One key at a time, in sorted order, with a text parameter (some libraries cannot bind arrays).
    for (const key of keysOf(params.messages)) checkKeyIsolation(String((await run(this.#sql.lockKey, [key]))[0]?.isolation));
    const rows = await run(this.#sql.enqueueMany, [this.#now(), listParameter(params.messages)]);
    return rows.map(fromForeignRow).sort(byId).map(message);
  }

  isDuplicate(error: unknown): boolean {
    return (error as { code?: string } | null | undefined)?.code === "23505";
  }

  async takenDedupeKey(params: { error: unknown; dedupeKeys: readonly string[] }): Promise<string | null> {
    // "Key (dedupe_key)=(order-1) already exists.": the value in the last parentheses. A library
    // may wrap the error (Drizzle: its cause), or drop the detail (Prisma): then the committed
    // messages are looked in, outside the aborted transaction. A key taken earlier in the same
    // transaction stays unnamed then.
    const { error } = params;
    const detail = (error as { detail?: unknown } | null)?.detail ?? (error as { cause?: { detail?: unknown } } | null)?.cause?.detail;
    const named = typeof detail === "string" ? /\(dedupe_key\)=\((.*)\)/s.exec(detail)?.[1] : undefined;
    if (named !== undefined) return named;
    return (await this.pool.query<{ dedupe_key: string }>(this.#sql.takenDedupeKey, [params.dedupeKeys])).rows[0]?.dedupe_key ?? null;
  }

  async claim(params: {
    owner: string;
    limit: number;
    leaseMs: number;
    audit: boolean;
    types: readonly string[] | null;
    exceptTypes?: readonly string[] | null;
  }): Promise<{ at: Date; leases: Lease[] }> {
    const { owner, limit, leaseMs, audit, types } = params;
    const exceptTypes = params.exceptTypes ?? null;
    const values = [this.#now(), limit, owner, leaseMs, audit];
    await this.#checkTableGrowth();
    let rows: PgClaimedRow[];
    if (types === null && exceptTypes !== null) {
      // Only when some types are limited: planned at every call, off the plain path.
      const text = limit > LARGE_CLAIM ? this.#sql.claimLargeExceptTypes : this.#sql.claimExceptTypes;
      rows = (await this.pool.query<PgClaimedRow>(text, [...values, exceptTypes])).rows;
    } else {
      const statement = this.#claimStatement(limit, types !== null);
      rows = (await this.pool.query<PgClaimedRow>({ ...statement, values: types === null ? values : [...values, types] })).rows;
    }
    return this.#claimedLeases(rows, owner);
  }

  /** A claim's leases, in the order their messages became due (RETURNING has no order). */
  #claimedLeases(rows: PgClaimedRow[], owner: string): { at: Date; leases: Lease[] } {
    rows.sort(byRankThenId);
    const at = rows[0] ? new Date(rows[0].now_ms) : this.#localNow();
    return { at, leases: rows.map((row) => pgClaimedLease(row, owner)) };
  }

  async claimLimited(params: { owner: string; type: string; limit: number; leaseMs: number; audit: boolean }): Promise<{ at: Date; leases: Lease[] }> {
    const { owner, type, leaseMs, audit } = params;
    await this.#checkTableGrowth();
    return this.transaction(async (tx) => {
      const row = (await tx.query<LimitRow & { now: Date }>(this.#sql.lockLimit, [this.#now(), type])).rows[0];
      let limit = params.limit;
      if (row !== undefined) {
        const record = toLimitRecord(row);
        const from = new Date(windowStart(record, row.now.getTime()));
        if (record.concurrency !== null) await tx.query(this.#sql.seedLimitStarts, [type, row.now]); // only running counts use them
        await tx.query(this.#sql.pruneLimitStarts, [type, from, row.now]);
        const use = (await tx.query<{ running: string; started: string }>(this.#sql.limitUse, [type, from, row.now])).rows[0];
        limit = limitRoom(record, toLimitUse(use), limit);
        if (limit === 0) return { at: row.now, leases: [] };
      }
      // The bound claim of named types (or, past LARGE_CLAIM, its by-ids form), not one with the
      // limit written in: a limited claim's room varies, and would fill #literalClaims.
      const statement = limit > LARGE_CLAIM ? { text: this.#sql.claimLargeOfTypes } : this.#named(this.#hot.claimOfTypes);
      const rows = (await tx.query<PgClaimedRow>({ ...statement, values: [this.#now(), limit, owner, leaseMs, audit, [type]] })).rows;
      const claimed = this.#claimedLeases(rows, owner);
      if (row !== undefined && rows.length > 0) {
        await tx.query(this.#sql.addLimitStarts, [type, claimed.at, rows.map((r) => r.id), rows.map((r) => r.lease_token)]);
      }
      return claimed;
    });
  }

  /**
   * A claim of more than LARGE_CLAIM: the claim by an array of ids, planned at every call. Else
   * the claim with `limit` written in (outbox-sql.ts, claimSql: then PostgreSQL keeps one plan
   * instead of planning every call), for up to LITERAL_CLAIM_LIMITS limits, each once the store
   * has claimed with it CLAIMS_BEFORE_LITERAL times; any other claim binds its limit. A worker
   * claims as many as it has free slots, which settles at one group commit's worth (a throwaway
   * count over 30,000 messages: 299 claims of 100 and 1 of 200 at concurrency 200), so a few
   * statements cover nearly every claim.
   */
  #claimStatement(limit: number, ofTypes: boolean): { readonly name?: string; readonly text: string } {
    if (limit > LARGE_CLAIM) return { text: ofTypes ? this.#sql.claimLargeOfTypes : this.#sql.claimLarge };
    const key = `${ofTypes ? "types" : "all"}:${limit}`;
    const known = this.#literalClaims.get(key);
    if (known !== undefined) return this.#named(known);
    const bound = this.#named(ofTypes ? this.#hot.claimOfTypes : this.#hot.claim);
    if (this.#literalClaims.size >= LITERAL_CLAIM_LIMITS) return bound;
    const seen = (this.#claimsByLimit.get(key) ?? 0) + 1;
    if (seen < CLAIMS_BEFORE_LITERAL) {
      this.#claimsByLimit.set(key, seen); // at most 200 keys: limits 1 to LARGE_CLAIM, for all types and named ones
      return bound;
    }
    this.#claimsByLimit.delete(key);
    const statement = namedStatement(this.#sql.claimOfLimit(limit, ofTypes));
    this.#literalClaims.set(key, statement);
    return this.#named(statement);
  }

  async claimMessage(params: { owner: string; messageId: string; leaseMs: number; audit: boolean }): Promise<ClaimMessageAttempt> {
    const { owner, messageId, leaseMs, audit } = params;
    return this.transaction(async (tx): Promise<ClaimMessageAttempt> => {
      const found = (await tx.query<HolderRow & { locked_until: Date | null; now: Date }>(this.#sql.lockHolder, [this.#now(), messageId])).rows[0];
      if (found === undefined) {
        const at = (await tx.query<{ now: Date }>(this.#sql.clockNow, [this.#now()])).rows[0]?.now ?? new Date();
        return { at, before: null, lease: null };
      }
      const at = found.now;
      const before = toFoundHolder(found);
      const row = (await tx.query<MessageRow>(this.#sql.claimMessage, [this.#now(), messageId, owner, leaseMs])).rows[0];
      if (row === undefined) return { at, before, lease: null };
      if (audit) await tx.query(this.#sql.audit, [row.id, row.lease_token, owner, "claim", at, found.status, found.locked_by, found.locked_until]);
      const claimed = message(row);
      const lease: Lease = {
        messageId: claimed.id,
        owner,
        token: claimed.leaseToken,
        lockedUntil: claimed.lockedUntil ?? new Date(0),
        message: claimed,
        reclaimedFrom: found.status === "processing" ? found.locked_by : null,
      };
      return { at, before, lease };
    });
  }

  async renew(params: { lease: Lease; leaseMs: number; audit: boolean }): Promise<{ at: Date; lockedUntil: Date | null; refusal: Refusal | null }> {
    const { lease, leaseMs, audit } = params;
    const values = [this.#now(), lease.messageId, lease.token, leaseMs, lease.owner, audit];
    const row = (await this.pool.query<HeldRow & { locked_until: Date | null; now: Date }>(this.#sql.renew, values)).rows[0] as HeldRow & {
      locked_until: Date | null;
      now: Date;
    };
    return { at: row.now, lockedUntil: row.locked_until, refusal: refusalOf({ ...row, changed: row.locked_until !== null }, audit) };
  }

  async completeBulk(params: {
    tx: PostgresTx | null;
    leases: readonly Lease[];
    audit: boolean;
    handOnKeys: boolean;
    remove: boolean;
  }): Promise<{ at: Date; completed: LeaseSet; refusals: Map<string, Refusal> | null }> {
    const { leases, handOnKeys, remove, audit } = params;
    const hot = this.#hot;
    const statement = audit
      ? handOnKeys
        ? remove
          ? hot.completeBulkHandOnDeleteAudited
          : hot.completeBulkHandOnAudited
        : remove
          ? hot.completeBulkDeleteAudited
          : hot.completeBulkAudited
      : handOnKeys
        ? remove
          ? hot.completeBulkHandOnDelete
          : hot.completeBulkHandOn
        : remove
          ? hot.completeBulkDelete
          : hot.completeBulk;
    const query = {
      ...this.#named(statement),
      values: [this.#now(), ...bulkArrays(leases), audit],
    };
    // Audited, every lease comes back: the refused ones marked, with their holders.
    const { rows } = await (params.tx ?? this.pool).query<{ id: string; token: number; now_ms: number; refused?: boolean } & Partial<HeldRow>>(query);
    const at = rows[0] ? new Date(rows[0].now_ms) : this.#localNow(); // one clock per statement
    const completed = new LeaseSet();
    const refusals = audit ? new Map<string, Refusal>() : null;
    for (const row of rows) {
      if (row.refused === true) refusals?.set(row.id, { at, holder: toHeldHolder(row as HeldRow) });
      else completed.add(row.id, row.token);
    }
    return { at, completed, refusals };
  }

  async completeOne(params: { tx: PostgresTx; lease: Lease; savepoint: SavepointStep; audit: boolean; remove: boolean }): Promise<Date | null> {
    const { tx, lease, savepoint, remove } = params;
    const id = lease.messageId;
    let done: Date | undefined;
    if (savepoint === "none") {
      done = (await tx.query<{ now: Date }>(remove ? this.#sql.completeDelete : this.#sql.complete, [this.#now(), id, lease.token])).rows[0]?.now;
    } else {
      // The savepoint (and the release of the previous member's) share one round trip with the guarded update.
      const results = (await tx.query(this.#sql.completeInSavepoint(savepoint === "next", this.#now(), id, lease.token, remove))) as unknown as pg.QueryResult<{
        now_ms: number;
      }>[];
      const row = results.at(-1)?.rows[0];
      done = row === undefined ? undefined : new Date(row.now_ms);
    }
    if (done === undefined) return null;
    if (params.audit) await tx.query(this.#sql.audit, [id, lease.token, lease.owner, "complete", done, null, null, null]);
    return done;
  }

  async handOn(params: { tx: PostgresTx; keys: readonly KeyTurn[] }): Promise<void> {
    if (params.keys.length === 0) return;
    await params.tx.query(this.#sql.handOn, [params.keys.map((turn) => turn.key), params.keys.map((turn) => turn.nextSeq)]);
  }

  async blockedKeys(params: { limit: number }): Promise<BlockedKey[]> {
    const { rows } = await this.pool.query<{ key: string; id: string; type: string; last_error: string | null; died_at: Date; waiting: number }>(
      this.#sql.blockedKeys,
      [params.limit],
    );
    return rows.map((r) => ({ key: r.key, messageId: r.id, type: r.type, lastError: r.last_error, diedAt: r.died_at, waiting: r.waiting }));
  }

  async deadHolder(params: { key: string }): Promise<string | null> {
    return (await this.pool.query<{ id: string }>(this.#sql.deadHolder, [params.key])).rows[0]?.id ?? null;
  }

  async skipKeyHolder(params: { tx: PostgresTx; key: string; messageId: string | null }): Promise<{ id: string; keySeq: number | null } | null> {
    // The key's turn first (as an enqueue or a redrive takes it), then the skip reads afresh.
    await this.#lockKeys(params.tx, [params.key]);
    const row = (await params.tx.query<{ id: string; key_seq: string | null }>(this.#sql.skipKeyHolder, [params.key, params.messageId])).rows[0];
    return row === undefined ? null : { id: row.id, keySeq: row.key_seq === null ? null : Number(row.key_seq) };
  }

  async cancel(params: { tx: PostgresTx; messageId: string; owner: string; audit: boolean; running: boolean; remove: boolean }): Promise<CancelAttempt> {
    const { tx, messageId } = params;
    // A waiting message's key turn first, as a hand-on takes it before promoting that message; a
    // holder's row first, as a completion locks it before handing its key on (no circle either way).
    const seen = (await tx.query<{ ordering_key: string | null; key_state: number }>(this.#sql.cancelKey, [messageId])).rows[0];
    if (seen?.ordering_key != null && seen.key_state === 1) await this.#lockKeys(tx, [seen.ordering_key]);
    const row = (await tx.query<CancelRow & { now: Date }>(this.#sql.cancelTarget, [this.#now(), messageId])).rows[0];
    if (row === undefined) return { at: this.#localNow(), before: null, cancelled: false };
    const done = params.remove
      ? await tx.query(this.#sql.cancelDelete, [messageId, params.running])
      : await tx.query(this.#sql.cancel, [messageId, params.running, params.owner, row.now]);
    const cancelled = (done.rowCount ?? 0) === 1;
    if (cancelled && params.audit) {
      await tx.query(this.#sql.audit, [messageId, row.lease_token, params.owner, "dead", row.now, row.status, row.locked_by, row.locked_until]);
    }
    return { at: row.now, before: toCancelTarget(row), cancelled };
  }

  /**
   * Takes the keys' turns (see lockKeys). Only under READ COMMITTED does the next statement see what
   * committed while it waited, which FIFO per key relies on: any other level is refused here.
   */
  async #lockKeys(tx: PostgresTx, keys: readonly string[]): Promise<void> {
    checkKeyIsolation((await tx.query<{ isolation: string }>({ ...this.#named(this.#hot.lockKeys), values: [keys] })).rows[0]?.isolation);
  }

  async rollbackSavepoint(params: { tx: PostgresTx }): Promise<void> {
    await params.tx.query(this.#sql.rollbackToSavepoint);
  }

  async fail(params: {
    lease: Lease;
    error: string;
    retryInMs: number | null;
    audit: boolean;
  }): Promise<{ at: Date; changed: boolean; availableAt: Date; refusal: Refusal | null }> {
    const { lease, error, retryInMs, audit } = params;
    const id = lease.messageId;
    const [text, values] =
      retryInMs === null
        ? [this.#sql.failDead, [this.#now(), id, lease.token, error, lease.owner, audit]]
        : [this.#sql.failRetry, [this.#now(), id, lease.token, error, retryInMs, lease.owner, audit]];
    const row = (await this.pool.query<RefusableRow & { available_at: Date | null }>(text, values)).rows[0] as RefusableRow & { available_at: Date | null };
    return { at: row.now, changed: row.changed, availableAt: row.available_at ?? row.now, refusal: refusalOf(row, audit) };
  }

  async release(params: { lease: Lease; audit: boolean }): Promise<{ at: Date; changed: boolean; refusal: Refusal | null }> {
    const { lease, audit } = params;
    const row = (await this.pool.query<RefusableRow>(this.#sql.release, [this.#now(), lease.messageId, lease.token, lease.owner, audit]))
      .rows[0] as RefusableRow;
    return { at: row.now, changed: row.changed, refusal: refusalOf(row, audit) };
  }

  async holder(params: {
    tx?: PostgresTx | null;
    messageId: string;
    refused: { lease: Lease; operation: LeaseOperation } | null;
  }): Promise<{ at: Date; holder: MessageHolder | null }> {
    const { messageId, refused } = params;
    const client = params.tx ?? this.pool;
    if (refused === null) {
      const row = (await client.query<HolderRow>(this.#sql.holder, [messageId])).rows[0];
      return { at: this.#localNow(), holder: toHolder(row) };
    }
    const row = (
      await client.query<Omit<HolderRow, "status"> & { status: string | null; now: Date }>(this.#sql.holderRefused, [
        this.#now(),
        messageId,
        refused.lease.token,
        refused.lease.owner,
        refused.operation,
      ])
    ).rows[0];
    return { at: row?.now ?? this.#localNow(), holder: row?.status == null ? null : toHolder({ ...row, status: row.status }) };
  }

  async onNewMessages(params: { wake: () => void }): Promise<() => Promise<void>> {
    const { wake } = params;
    let stopped = false;
    let client: pg.Client | undefined;
    let retryDelay = 100;
    const listen = async (): Promise<void> => {
      while (!stopped) {
        const next = new this.#Client({ ...this.#clientConfig, application_name: `${this.#applicationName}-listen` });
        next.on("notification", () => wake());
        next.on("error", () => undefined); // followed by "end"; reconnect there
        next.on("end", () => {
          if (!stopped && client === next) {
            client = undefined;
            wake(); // messages may have arrived while we were not listening
            void listen();
          }
        });
        try {
          await next.connect();
          await next.query(this.#sql.listen);
          if (stopped) {
            await next.end().catch(() => undefined);
            return;
          }
          client = next;
          retryDelay = 100;
          return;
        } catch {
          await next.end().catch(() => undefined);
          await new Promise((resolve) => setTimeout(resolve, retryDelay));
          retryDelay = Math.min(retryDelay * 2, 5000);
        }
      }
    };
    await listen();
    return async () => {
      stopped = true;
      const current = client;
      client = undefined;
      await current?.end().catch(() => undefined);
    };
  }

  async heartbeat(params: { owner: string; kind: string; takes: string | null; aliveMs: number }): Promise<{ at: Date; aliveUntil: Date }> {
    const { rows } = await this.pool.query<{ now: Date; alive_until: Date }>(this.#sql.heartbeat, [
      this.#now(),
      params.owner,
      params.kind,
      params.takes,
      params.aliveMs,
    ]);
    const row = rows[0] as { now: Date; alive_until: Date };
    return { at: row.now, aliveUntil: row.alive_until };
  }

  async reapOwners(): Promise<{ at: Date; reaped: ReapedOwner[] }> {
    return this.transaction(async (tx) => {
      const row = (await tx.query<{ names: string[]; now: Date }>(this.#sql.deadOwners, [this.#now()])).rows[0] as { names: string[]; now: Date };
      if (row.names.length === 0) return { at: row.now, reaped: [] };
      const expired = (await tx.query<{ owner: string }>(this.#sql.expireLeasesOf, [row.now, row.names])).rows;
      return { at: row.now, reaped: row.names.map((owner) => ({ owner, expired: expired.filter((e) => e.owner === owner).length })) };
    });
  }

  async currentTime(): Promise<Date> {
    return (await this.pool.query<{ now: Date }>(this.#sql.clockNow, [this.#now()])).rows[0]?.now ?? this.#localNow();
  }

  async putSchedule(params: { schedule: ScheduleDefinitionRecord; nextAt: Date | null }): Promise<ScheduleRecord> {
    const { name, cron, timezone, backfillMs, type, payload, headers, key, destination, priority } = params.schedule;
    const { rows } = await this.pool.query<ScheduleRow>(this.#sql.putSchedule, [
      this.#now(),
      name,
      cron,
      timezone,
      backfillMs,
      type,
      payload,
      headers,
      key,
      destination,
      params.nextAt,
      priority,
    ]);
    return toScheduleRecord(rows[0] as ScheduleRow);
  }

  async putLimit(params: { type: string; concurrency: number | null; rateCount: number | null; rateIntervalMs: number | null }): Promise<LimitRecord> {
    const { type, concurrency, rateCount, rateIntervalMs } = params;
    // The limit's row first, as a limited claim locks it before the recorded claims (no circle).
    return this.transaction(async (tx) => {
      const { rows } = await tx.query<LimitRow>(this.#sql.putLimit, [this.#now(), type, concurrency, rateCount, rateIntervalMs]);
      await tx.query(this.#sql.resetLimitStarts, [type]);
      return toLimitRecord(rows[0] as LimitRow);
    });
  }

  async removeLimit(params: { type: string }): Promise<boolean> {
    return ((await this.pool.query(this.#sql.removeLimit, [params.type])).rowCount ?? 0) > 0;
  }

  async listLimits(): Promise<LimitRecord[]> {
    return (await this.pool.query<LimitRow>(this.#sql.listLimits)).rows.map(toLimitRecord);
  }

  async removeSchedule(params: { name: string }): Promise<boolean> {
    return ((await this.pool.query(this.#sql.removeSchedule, [params.name])).rowCount ?? 0) > 0;
  }

  async listSchedules(): Promise<ScheduleRecord[]> {
    return (await this.pool.query<ScheduleRow>(this.#sql.listSchedules)).rows.map(toScheduleRecord);
  }

  async nextSchedules(params: { limit: number }): Promise<{ at: Date; schedules: ScheduleRecord[] }> {
    const { rows } = await this.pool.query<ScheduleRow & { now: Date }>(this.#sql.nextSchedules, [this.#now(), params.limit]);
    const at = rows[0]?.now ?? this.#localNow();
    return { at, schedules: rows.filter((row) => row.name !== null).map(toScheduleRecord) };
  }

  async advanceSchedule(params: { tx: PostgresTx; name: string; version: number; from: Date; to: Date | null; fired: boolean }): Promise<boolean> {
    const { tx, name, version, from, to, fired } = params;
    return ((await tx.query(this.#sql.advanceSchedule, [name, from, to, fired, version])).rowCount ?? 0) === 1;
  }

  async signOff(params: { owner: string }): Promise<boolean> {
    return ((await this.pool.query(this.#sql.signOff, [params.owner])).rowCount ?? 0) > 0;
  }

  async listOwners(): Promise<{ owner: string; kind: string; takes: string | null; startedAt: Date; heartbeatAt: Date; aliveUntil: Date }[]> {
    const { rows } = await this.pool.query<{ owner: string; kind: string; takes: string | null; started_at: Date; heartbeat_at: Date; alive_until: Date }>(
      this.#sql.listOwners,
    );
    return rows.map((r) => ({ owner: r.owner, kind: r.kind, takes: r.takes, startedAt: r.started_at, heartbeatAt: r.heartbeat_at, aliveUntil: r.alive_until }));
  }

  async leaseStats(): Promise<LeaseStats> {
    const oldest = (await this.pool.query<{ oldest: Date | null }>(this.#sql.oldestPending)).rows[0]?.oldest ?? null;
    const now = (await this.pool.query<{ now: Date }>(this.#sql.clockNow, [this.#now()])).rows[0]?.now ?? new Date();
    const owners = (await this.pool.query<{ owner: string; held: number; expired: number }>(this.#sql.leasesByOwner, [now])).rows;
    return { now, oldestPendingCreatedAt: oldest, owners };
  }

  async pendingByType(params: { limit: number }): Promise<TypeCount[]> {
    const { rows } = await this.pool.query<{ type: string; n: number }>(this.#sql.pendingByType, [params.limit]);
    return rows.map((r) => ({ type: r.type, count: r.n }));
  }

  async keySequences(params: { after: string | null; limit: number }): Promise<KeySequence[]> {
    return (await this.pool.query<KeySequence>(this.#sql.keySequences, [params.after, params.limit])).rows;
  }

  async carryKeySequences(params: { turns: readonly KeySequence[] }): Promise<void> {
    await this.pool.query(this.#sql.carryKeySequences, [params.turns.map((turn) => turn.key), params.turns.map((turn) => turn.nextSeq)]);
  }

  async countByStatus(): Promise<Partial<StatusCounts>> {
    const { rows } = await this.pool.query<{ status: MessageStatus; n: number }>(this.#sql.countByStatus);
    return Object.fromEntries(rows.map((row) => [row.status, row.n]));
  }

  async redrive(params: { messageIds: readonly string[] | "all"; audit: boolean }): Promise<RedriveCount> {
    const { messageIds, audit } = params;
    // Skipped messages rejoin their keys' order: their keys' turns first, as an enqueue takes them (see lockKeys).
    return this.transaction(async (tx) => {
      const keys = (await tx.query<{ key: string }>(this.#sql.keysOfDead, [messageIds === "all" ? null : messageIds])).rows.map((r) => r.key);
      if (keys.length > 0) await this.#lockKeys(tx, keys);
      let result: RedriveCount;
      if (messageIds === "all") {
        result = { moved: (await tx.query<{ moved: number }>(this.#sql.redriveAll, [this.#now(), audit])).rows[0]?.moved ?? 0, movedIds: null };
      } else {
        const rows = (await tx.query<{ id: string }>(this.#sql.redriveSome, [this.#now(), audit, messageIds])).rows;
        result = { moved: rows.length, movedIds: new Set(rows.map((row) => row.id)) };
      }
      // Settle: a key whose earlier message vanished meanwhile (purged) gets a holder again.
      await this.handOn({ tx, keys: keys.map((key) => ({ key, nextSeq: null })) });
      return result;
    });
  }

  async purgeBatch(params: { target: PurgeTarget; before: Date; limit: number }): Promise<number> {
    const sql = { processed: this.#sql.purgeProcessed, dead: this.#sql.purgeDead, audit: this.#sql.purgeAudit, inbox: this.#sql.purgeInbox }[params.target];
    return (await this.pool.query(sql, [params.before, params.limit])).rowCount ?? 0;
  }

  async inboxKeyTurn(params: { tx: PostgresTx; source: string; key: string }): Promise<number> {
    return (await params.tx.query<{ applied: number }>(this.#sql.inboxKeyTurn, [params.source, params.key])).rows[0]?.applied ?? 0;
  }

  async inboxKeyUpdate(params: { tx: PostgresTx; source: string; key: string; applied: number | null; held: number | null }): Promise<void> {
    const { tx, source, key } = params;
    if (params.applied !== null) await tx.query(this.#sql.inboxKeyApplied, [source, key, params.applied]);
    else if (params.held !== null) await tx.query(this.#sql.inboxKeyHeld, [source, key, params.held, this.#now()]);
  }

  async inboxBlockedKeys(params: { source: string | null; limit: number }): Promise<InboxBlockedKey[]> {
    const { rows } = await this.pool.query<{ source: string; key: string; applied: number; held: number; held_since: Date }>(this.#sql.inboxBlockedKeys, [
      params.source,
      params.limit,
    ]);
    return rows.map((r) => ({ source: r.source, key: r.key, appliedSeq: r.applied, waitingFor: r.applied + 1, heldSeq: r.held, heldSince: r.held_since }));
  }

  async inboxSkipGap(params: { source: string; key: string }): Promise<readonly [number, number] | null> {
    const row = (await this.pool.query<{ skipped_from: number; skipped_to: number }>(this.#sql.inboxSkipGap, [params.source, params.key])).rows[0];
    return row === undefined ? null : [row.skipped_from, row.skipped_to];
  }

  async inboxRecord(params: { tx: PostgresTx; source: string; messageId: string }): Promise<boolean> {
    return ((await params.tx.query(this.#sql.inboxRecord, [this.#now(), params.source, params.messageId])).rowCount ?? 0) === 1;
  }

  async auditTrail(params: { messageId: string | null }): Promise<AuditEntry[]> {
    const { messageId } = params;
    const result =
      messageId === null ? await this.pool.query<AuditRow>(this.#sql.auditTrail) : await this.pool.query<AuditRow>(this.#sql.auditTrailOf, [messageId]);
    return result.rows.map(toAuditEntry);
  }

  async getMessage(params: { messageId: string }): Promise<OutboxMessage | undefined> {
    const row = (await this.pool.query<MessageRow>(this.#sql.getMessage, [params.messageId])).rows[0];
    return row === undefined ? undefined : message(row);
  }

  async getMessageState(params: { messageId: string }): Promise<MessageState | undefined> {
    const row = (await this.pool.query<MessageStateRow>(this.#sql.getMessageState, [params.messageId])).rows[0];
    return row === undefined ? undefined : toMessageState(row);
  }

  async getMessageText(params: { messageId: string; maxChars: number | null }): Promise<MessageText | undefined> {
    const row = (await this.pool.query<MessageTextRow>(this.#sql.getMessageText, [params.messageId, params.maxChars])).rows[0];
    return row === undefined ? undefined : toMessageText(row);
  }

  async listMessageStates(params: { status: readonly MessageStatus[] | null; limit: number | null }): Promise<MessageState[]> {
    const { status, limit } = params;
    const { rows } =
      status === null
        ? await this.pool.query<MessageStateRow>(this.#sql.listStatesAll, [limit])
        : await this.pool.query<MessageStateRow>(this.#sql.listStatesByStatus, [limit, [...status]]);
    return rows.map(toMessageState);
  }

  async pageMessages(params: PageBounds): Promise<MessageState[]> {
    const { status, type, key, above, below, ascending, limit } = params;
    const sql = ascending ? this.#sql.pageAscending : this.#sql.pageDescending;
    return (await this.pool.query<MessageStateRow>(sql, [status, type, key, above, below, limit])).rows.map(toMessageState);
  }

  async findMessages(params: { id: string | null; text: string; limit: number }): Promise<OutboxMessage[]> {
    const { id, text, limit } = params;
    return (await this.pool.query<MessageRow>(this.#sql.findMessages, [id, text, limit])).rows.map(message);
  }

  async listMessages(params: { status: readonly MessageStatus[] | null; limit: number | null }): Promise<OutboxMessage[]> {
    const { status, limit } = params;
    const { rows } =
      status === null
        ? await this.pool.query<MessageRow>(this.#sql.listAll, [limit])
        : await this.pool.query<MessageRow>(this.#sql.listByStatus, [limit, [...status]]);
    return rows.map(message);
  }

  async describeSchema(): Promise<string> {
    const sql = this.#sql;
    const tables = (await this.pool.query<{ table_name: string }>(sql.schemaTables, [this.schema])).rows;
    const parts: string[] = [];
    // Written as PostgreSQL writes names (pg_indexes): quoted only where it must be, as "select".
    const shown = (await this.pool.query<{ name: string }>(sql.schemaName, [this.schema])).rows[0]?.name ?? quoteIdent(this.schema);
    for (const { table_name: table } of tables) {
      const qualified = `${quoteIdent(this.schema)}.${quoteIdent(table)}`;
      const columns = (await this.pool.query<{ column_name: string; type: string; not_null: boolean; default: string | null }>(sql.schemaColumns, [qualified]))
        .rows;
      const constraints = (await this.pool.query<{ def: string }>(sql.schemaConstraints, [qualified])).rows;
      const lines = [
        ...columns.map((c) => `  ${c.column_name} ${c.type}${c.not_null ? " NOT NULL" : ""}${c.default ? ` DEFAULT ${c.default}` : ""}`),
        ...constraints.map((c) => `  ${c.def}`),
      ];
      parts.push(`CREATE TABLE ${shown}.${table} (\n${lines.join(",\n")}\n);`);
    }
    const indexes = (await this.pool.query<{ indexdef: string }>(sql.schemaIndexes, [this.schema])).rows;
    parts.push(...indexes.map((i) => `${i.indexdef};`));
    return parts.join("\n\n");
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    // The app's own pool stays open: the app ends it.
    if (this.#ownsPool) await this.pool.end();
  }
}

export class PostgresOutboxStore extends LeasedOutbox<PostgresTx> {
  readonly kind = "postgres";
  readonly #driver: PostgresDriver;

  /** Use `PostgresOutboxStore.connect`: it checks the URL and the connection first. */
  private constructor(
    driver: PostgresDriver,
    options: { readonly audit: boolean; readonly onComplete: OnComplete | undefined; readonly tracing: Tracing | undefined },
  ) {
    super(driver, options);
    this.#driver = driver;
  }

  static async connect(options: PostgresStoreOptions): Promise<PostgresOutboxStore> {
    if (typeof options !== "object" || options === null)
      throw new InvalidArgumentError("PostgresOutboxStore.connect needs options: { url } or { pool } or { config }, and schema, …");
    const schema = checkSchema(options.schema ?? "wassal");
    if ([options.url, options.pool, options.config].filter((given) => given !== undefined).length !== 1) {
      throw new InvalidArgumentError("give exactly one of url (postgres://…), pool (your pg.Pool) or config (a pg pool config)");
    }
    const readOnly = options.readOnly ?? false;
    if (typeof readOnly !== "boolean") throw new InvalidArgumentError(`readOnly must be true or false (got ${JSON.stringify(readOnly)})`);
    if (readOnly && options.pool !== undefined) {
      throw new InvalidArgumentError(
        "readOnly needs url or config: the store makes its own connections read-only, and leaves your pool's sessions as they are",
      );
    }
    const source =
      options.pool !== undefined
        ? { pool: options.pool }
        : readOnly
          ? { config: readOnlyConfig(options.config ?? { connectionString: options.url as string }) }
          : options.config !== undefined
            ? { config: options.config }
            : { url: options.url as string };
    const opened = await openPostgresPool(source, options);
    try {
      // Before anything is written: readOnly sessions, or a schema no newer Wassal migrated.
      if (readOnly) await checkReadOnly(opened.pool);
      else await refuseNewerPostgres(opened.pool, schema);
    } catch (error) {
      if (opened.owned) await opened.pool.end().catch(() => undefined);
      throw error;
    }
    const driver = new PostgresDriver(opened, { schema, clock: options.clock, applicationName: options.applicationName ?? "wassal", readOnly });
    return new PostgresOutboxStore(driver, { audit: options.audit ?? false, onComplete: options.onComplete, tracing: options.tracing });
  }

  /** The schema holding Wassal's tables. */
  get schema(): string {
    return this.#driver.schema;
  }

  /** The connection pool. Business code may query through it (outside the outbox's transactions). */
  get pool(): pg.Pool {
    return this.#driver.pool;
  }

  /** Runs extra migrations (e.g. a domain's tables) with the same bookkeeping as the outbox's. */
  applyMigrations(migrations: readonly PgMigration[]): Promise<string[]> {
    return this.#driver.applyMigrations(migrations);
  }
}

const READ_ONLY = "-c default_transaction_read_only=on";

/** A pool config whose sessions default to read-only transactions. */
function readOnlyConfig(config: pg.PoolConfig): pg.PoolConfig {
  if (typeof config !== "object" || config === null) return config; // openPostgresPool says what is wrong with it
  return { ...config, options: config.options === undefined ? READ_ONLY : `${config.options} ${READ_ONLY}` };
}

/** Throws DatabaseOpenError unless the pool's sessions are read-only (a URL's own ?options=… replaces the store's). */
async function checkReadOnly(pool: pg.Pool): Promise<void> {
  const setting = (await pool.query<{ read_only: string }>("SELECT current_setting('default_transaction_read_only') AS read_only")).rows[0]?.read_only;
  if (setting !== "on") {
    throw new DatabaseOpenError(
      "readOnly: the store's sessions are not read-only, because the URL's or config's options override it: add -c default_transaction_read_only=on to them",
    );
  }
}

/**
 * The one check of a schema name, for the library and the CLI alike: lower-case letters, digits
 * and underscores (reserved words such as "select" are fine: SQL always quotes the name), and
 * none of PostgreSQL's own schemas.
 */
export function checkSchema(schema: string): string {
  if (typeof schema === "string" && (/^pg_/i.test(schema) || schema.toLowerCase() === "information_schema")) {
    throw new InvalidArgumentError(
      `schema name ${JSON.stringify(schema)} is PostgreSQL's own (it keeps pg_* and information_schema for its catalogs); give Wassal a schema of its own, e.g. wassal`,
    );
  }
  if (typeof schema !== "string" || !SCHEMA_PATTERN.test(schema)) {
    throw new InvalidArgumentError(
      `schema name must be 1 to 63 lower-case letters, digits or underscores, starting with a letter or underscore (got ${JSON.stringify(schema)})`,
    );
  }
  return schema;
}
