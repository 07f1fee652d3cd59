// The outbox on PostgreSQL, for workers on many machines sharing one database. Claims are one
// statement (MATERIALIZED CTE with FOR UPDATE SKIP LOCKED feeding UPDATE … RETURNING); lease
// times come from the database's clock unless a clock is injected. READ COMMITTED is enough: a
// conditional UPDATE re-checks its condition after waiting for a row lock. No transaction is
// ever held open across a handler.

import { createHash } from "node:crypto";
import pg from "pg";
import { claimedLease } from "../../outbox/claimed-lease.js";
import type { Clock } from "../../outbox/clock.js";
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
import { openPostgresPool, type PostgresConnectOptions } from "./connect.js";
import { applyPgMigrations } from "./migrate.js";
import { outboxMigrations, outboxSql, SCHEMA_PATTERN, type OutboxSql, type PgClaimedRow, type PgMessageRow, type PgMigration } from "./outbox-sql.js";

/** The transaction handle on PostgreSQL: a pg client between BEGIN and COMMIT. */
export type PostgresTx = pg.ClientBase;

export interface PostgresStoreOptions extends PostgresConnectOptions {
  /** postgres://user[:password]@host[:port]/database */
  readonly url: string;
  /** The schema holding Wassal's tables (default "wassal"). */
  readonly schema?: string;
  /**
   * Take lease times from this clock instead of the database's clock_timestamp(). For tests and
   * the lab, which drive expiry with a ManualClock; production leaves it out.
   */
  readonly clock?: Clock;
  /** Record every claim, completion, failure and release in the lease journal (outbox_audit). */
  readonly audit?: boolean;
}

function toMessage(row: PgMessageRow): OutboxMessage {
  return {
    id: String(row.id),
    type: row.type,
    dedupeKey: row.dedupe_key,
    payload: row.payload as JsonValue,
    status: row.status as MessageStatus,
    createdAt: row.created_at,
    availableAt: row.available_at,
    lockedBy: row.locked_by,
    lockedUntil: row.locked_until,
    leaseToken: row.lease_token,
    attempts: row.attempts,
    lastError: row.last_error,
    processedAt: row.processed_at,
  };
}

/** A claimed row's lease (the claim's own writes are filled in by claimedLease). */
function pgClaimedLease(row: PgClaimedRow, owner: string): Lease {
  const read = { id: String(row.id), type: row.type, dedupeKey: row.dedupe_key, payload: row.payload as JsonValue, createdAt: new Date(row.created_ms), token: row.lease_token, attempts: row.attempts, lastError: row.last_error };
  return claimedLease(read, owner, new Date(row.until_ms), row.reclaimed_from);
}

interface HolderRow {
  status: string;
  locked_by: string | null;
  locked_until: Date | null;
  lease_token: number;
}

function toHolder(row: HolderRow | undefined): MessageHolder | null {
  if (row === undefined) return null;
  return { status: row.status as MessageStatus, lockedBy: row.locked_by, lockedUntil: row.locked_until, leaseToken: row.lease_token };
}

/** PostgreSQL ids are bigints; anything else cannot name a message. */
function rowId(messageId: string): string | null {
  return /^[1-9][0-9]{0,18}$/.test(messageId) ? messageId : null;
}

export class PostgresOutboxStore implements OutboxStore<PostgresTx> {
  readonly kind = "postgres";
  readonly events = new EventHub();
  readonly schema: string;
  readonly pool: pg.Pool;
  readonly #clock: Clock | undefined;
  readonly #sql: OutboxSql;
  /**
   * The worker's hot statements as named prepared statements: each connection plans them once
   * instead of at every call (EXPLAIN ANALYZE showed 1.9 ms and 0.7 ms of planning per call, a
   * third of their execution time).
   */
  readonly #hot: Record<"claim" | "completeBulk", { readonly name: string; readonly text: string }>;
  readonly unleased: UnleasedAccess<PostgresTx>;

  readonly #url: string;
  readonly #applicationName: string;

  /** Use `PostgresOutboxStore.connect`: it checks the URL and the connection first. */
  readonly #audit: boolean;

  private constructor(pool: pg.Pool, url: string, schema: string, clock: Clock | undefined, applicationName: string, audit: boolean) {
    this.pool = pool;
    this.#audit = audit;
    this.#url = url;
    this.#applicationName = applicationName;
    this.schema = schema;
    this.#clock = clock;
    this.#sql = outboxSql(schema);
    const named = (text: string) => ({ name: `wassal_${createHash("sha1").update(text).digest("hex").slice(0, 16)}`, text });
    this.#hot = { claim: named(this.#sql.claim), completeBulk: named(this.#sql.completeBulk) };
    this.unleased = {
      loadPending: async () => (await this.pool.query<PgMessageRow>(this.#sql.unleasedLoadPending)).rows.map(toMessage),
      markProcessed: async (messageId, finalize) => {
        await this.transaction(async (tx) => {
          if (finalize) await finalize(tx);
          await tx.query(this.#sql.unleasedMarkProcessed, [this.#now(), rowId(messageId)]);
        });
      },
    };
  }

  static async connect(options: PostgresStoreOptions): Promise<PostgresOutboxStore> {
    const schema = checkSchema(options.schema ?? "wassal");
    const pool = await openPostgresPool(options.url, options);
    return new PostgresOutboxStore(pool, options.url, schema, options.clock, options.applicationName ?? "wassal", options.audit ?? false);
  }

  /** The injected clock's time, or null: the SQL then uses the database's clock. */
  #now(): Date | null {
    return this.#clock ? this.#clock.now() : null;
  }

  async applyMigrations(migrations: readonly PgMigration[]): Promise<string[]> {
    return applyPgMigrations(this.pool, this.schema, migrations);
  }

  /** True when this schema already holds Wassal's outbox table. */
  async isInstalled(): Promise<boolean> {
    const { rows } = await this.pool.query<{ installed: boolean }>("SELECT to_regclass($1) IS NOT NULL AS installed", [`${this.schema}.outbox_messages`]);
    return rows[0]?.installed ?? false;
  }

  async migrate(): Promise<void> {
    await this.applyMigrations(outboxMigrations(this.schema));
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

  async enqueue<P extends JsonValue>(tx: PostgresTx, message: NewMessage<P>): Promise<OutboxMessage<P>> {
    // 'T': inside a transaction block. A pool, or a client outside BEGIN, would commit alone.
    const status = typeof (tx as Partial<PostgresTx>).getTransactionStatus === "function" ? tx.getTransactionStatus() : null;
    if (status !== "T") {
      throw new NotInTransactionError("enqueue needs an open transaction so the message commits with your business write: call it inside store.transaction(tx => …) or on a pg client after BEGIN");
    }
    const type = checkMessageType(message.type);
    const payload = JSON.stringify(message.payload);
    if (payload === undefined) {
      throw new InvalidArgumentError(`payload of a ${type} message must be JSON-serialisable (got ${typeof message.payload})`);
    }
    if (message.availableAt !== undefined && Number.isNaN(message.availableAt.getTime())) {
      throw new InvalidArgumentError(`availableAt of a ${type} message is not a valid date`);
    }
    let rows: PgMessageRow[];
    try {
      ({ rows } = await tx.query<PgMessageRow>(this.#sql.enqueue, [this.#now(), type, message.dedupeKey ?? null, payload, message.availableAt ?? null]));
    } catch (error) {
      if ((error as { code?: string }).code === "23505" && message.dedupeKey !== undefined) throw new DuplicateMessageError(message.dedupeKey);
      throw error;
    }
    return toMessage(rows[0] as PgMessageRow) as OutboxMessage<P>;
  }

  async claim(owner: string, options: ClaimOptions): Promise<Lease[]> {
    checkOwner(owner);
    const { limit, leaseMs } = checkClaimOptions(options);
    const { rows } = await this.pool.query<PgClaimedRow>({ ...this.#hot.claim, values: [this.#now(), limit, owner, leaseMs, this.#audit] });
    // RETURNING has no order: put the leases back in the order they became due (as claimed).
    rows.sort((a, b) => a.old_available_ms - b.old_available_ms || Number(BigInt(a.id) - BigInt(b.id)));
    const at = rows[0] ? new Date(rows[0].now_ms) : this.#clock?.now() ?? new Date();
    const leases = rows.map((row) => pgClaimedLease(row, owner));
    reportClaims(this.events, owner, limit, at, leases);
    return leases;
  }

  #lease(row: PgMessageRow, reclaimedFrom: string | null): Lease {
    const message = toMessage(row);
    return { messageId: message.id, owner: row.locked_by ?? "", token: row.lease_token, lockedUntil: row.locked_until ?? new Date(0), message, reclaimedFrom };
  }

  async claimMessage(owner: string, messageId: string, options: Pick<ClaimOptions, "leaseMs">): Promise<ClaimOneResult> {
    checkOwner(owner);
    const leaseMs = checkLeaseMs(options.leaseMs);
    const id = rowId(messageId);
    const { result, at } = await this.transaction(async (tx): Promise<{ result: ClaimOneResult; at: Date }> => {
      const before = (await tx.query<HolderRow & { due: boolean; now: Date }>(this.#sql.lockHolder, [this.#now(), id])).rows[0];
      if (before === undefined) {
        const at = (await tx.query<{ now: Date }>(this.#sql.clockNow, [this.#now()])).rows[0]?.now ?? new Date();
        return { result: { outcome: "not-claimable", messageId, status: "missing" }, at };
      }
      const row = (await tx.query<PgMessageRow>(this.#sql.claimOne, [this.#now(), id, owner, leaseMs])).rows[0];
      if (row !== undefined) {
        if (this.#audit) {
          await tx.query(this.#sql.journal, [row.id, row.lease_token, owner, "claim", before.now, before.status, before.locked_by, before.locked_until]);
        }
        return { result: { outcome: "claimed", lease: this.#lease(row, before.status === "processing" ? before.locked_by : null) }, at: before.now };
      }
      if (before.status === "processing") {
        return { result: { outcome: "blocked", messageId, heldBy: before.locked_by, lockedUntil: before.locked_until, token: before.lease_token }, at: before.now };
      }
      return { result: { outcome: "not-claimable", messageId, status: before.status as MessageStatus }, at: before.now };
    });
    reportClaimOne(this.events, owner, messageId, at, result);
    return result;
  }

  async #lost(lease: Lease, operation: LeaseOperation): Promise<LeaseLost> {
    const current = toHolder((await this.pool.query<HolderRow>(this.#sql.holder, [rowId(lease.messageId)])).rows[0]);
    return leaseLost(this.events, lease, operation, this.#clock?.now() ?? new Date(), current);
  }

  async renew(lease: Lease, leaseMs: number): Promise<Renewed | LeaseLost> {
    checkLease(lease);
    checkLeaseMs(leaseMs);
    const row = (await this.pool.query<PgMessageRow & { now: Date }>(this.#sql.renew, [this.#now(), rowId(lease.messageId), lease.token, leaseMs])).rows[0];
    if (row === undefined) return this.#lost(lease, "renew");
    const renewed = this.#lease(row, lease.reclaimedFrom);
    this.events.emit({ type: "renewed", at: row.now, owner: lease.owner, messageId: lease.messageId, token: lease.token, lockedUntil: renewed.lockedUntil });
    return { outcome: "renewed", lease: renewed };
  }

  async complete(lease: Lease, finalize?: Finalize<PostgresTx>): Promise<Completed | LeaseLost> {
    // One item: no savepoint, and a business write that throws rolls back and is rethrown.
    const [result] = await this.completeMany([{ lease, ...(finalize ? { finalize } : {}) }]);
    return result as Completed | LeaseLost;
  }

  async completeMany(items: readonly CompletionRequest<PostgresTx>[]): Promise<CompletionResult[]> {
    for (const item of items) checkLease(item.lease); // before anything is written
    if (items.length === 0) return [];
    if (items.length > 1 && items.every((item) => item.finalize === undefined)) return this.#completeBulk(items.map((item) => item.lease));
    const single = items.length === 1;
    const outcomes = await this.transaction(async (tx) => {
      const outcomes: ({ done: Date } | "lost" | { error: unknown })[] = [];
      let open = false; // a member's savepoint is open, to be released by the next member or the commit
      for (const { lease, finalize } of items) {
        // The guarded update comes first: it also row-locks the message against a concurrent reclaim.
        // In a group it shares a round trip with the savepoints (one query of several statements);
        // a member whose lease is gone has changed nothing, so its savepoint needs no rollback.
        const done = single
          ? (await tx.query<{ now: Date }>(this.#sql.complete, [this.#now(), rowId(lease.messageId), lease.token])).rows[0]?.now
          : await this.#guardInSavepoint(tx, open, lease);
        open = !single;
        if (done === undefined) {
          outcomes.push("lost");
          continue;
        }
        try {
          if (this.#audit) await tx.query(this.#sql.journal, [rowId(lease.messageId), lease.token, lease.owner, "complete", done, null, null, null]);
          if (finalize) await finalize(tx);
          outcomes.push({ done });
        } catch (error) {
          if (single) throw error;
          await tx.query("ROLLBACK TO SAVEPOINT wassal_completion");
          outcomes.push({ error });
        }
      }
      return outcomes;
    });
    const results: CompletionResult[] = [];
    for (const [index, { lease }] of items.entries()) {
      const outcome = outcomes[index];
      if (outcome === "lost" || outcome === undefined) {
        results.push(await this.#lost(lease, "complete"));
      } else if ("done" in outcome) {
        this.events.emit({ type: "completed", at: outcome.done, owner: lease.owner, messageId: lease.messageId, token: lease.token });
        results.push({ outcome: "completed", messageId: lease.messageId, processedAt: outcome.done });
      } else {
        results.push({ outcome: "failed", messageId: lease.messageId, error: outcome.error });
      }
    }
    return results;
  }

  /** Completions without business writes: one statement, one round trip, for the whole group. */
  /** Opens a group member's savepoint and runs its guarded update, in one round trip; its completion time, or undefined if the lease is gone. */
  async #guardInSavepoint(tx: PostgresTx, releasePrevious: boolean, lease: Lease): Promise<Date | undefined> {
    const id = rowId(lease.messageId);
    if (id === null) return undefined; // no such message can exist (the token was checked on entry)
    const results = (await tx.query(this.#sql.completeInSavepoint(releasePrevious, this.#now(), id, lease.token))) as unknown as pg.QueryResult<{ now_ms: number }>[];
    const row = results.at(-1)?.rows[0];
    return row === undefined ? undefined : new Date(row.now_ms);
  }

  async #completeBulk(leases: readonly Lease[]): Promise<CompletionResult[]> {
    const { rows } = await this.pool.query<{ id: string; token: number; now_ms: number }>({
      ...this.#hot.completeBulk,
      values: [this.#now(), leases.map((l) => rowId(l.messageId)), leases.map((l) => l.token), leases.map((l) => l.owner), this.#audit],
    });
    // Keyed by message and token: a stale and a fresh lease of one message may share the group.
    const at = rows[0] ? new Date(rows[0].now_ms) : undefined; // one clock per statement
    const done = new Set(rows.map((r) => `${r.id}#${r.token}`));
    const results: CompletionResult[] = [];
    for (const lease of leases) {
      if (at === undefined || !done.has(`${lease.messageId}#${lease.token}`)) {
        results.push(await this.#lost(lease, "complete"));
      } else {
        this.events.emit({ type: "completed", at, owner: lease.owner, messageId: lease.messageId, token: lease.token });
        results.push({ outcome: "completed", messageId: lease.messageId, processedAt: at });
      }
    }
    return results;
  }

  async fail(lease: Lease, error: unknown, decision: RetryDecision): Promise<RetryScheduled | DeadLettered | LeaseLost> {
    checkLease(lease);
    const delay = decision === "dead" ? 0 : checkDelayMs(decision.retryInMs);
    const text = describeError(error);
    const id = rowId(lease.messageId);
    if (decision === "dead") {
      const row = (await this.pool.query<{ now: Date }>(this.#sql.failDead, [this.#now(), id, lease.token, text, lease.owner, this.#audit])).rows[0];
      if (row === undefined) return this.#lost(lease, "fail");
      this.events.emit({ type: "dead-lettered", at: row.now, owner: lease.owner, messageId: lease.messageId, token: lease.token, error: text });
      return { outcome: "dead", messageId: lease.messageId };
    }
    const row = (await this.pool.query<{ now: Date; available_at: Date }>(this.#sql.failRetry, [this.#now(), id, lease.token, text, delay, lease.owner, this.#audit])).rows[0];
    if (row === undefined) return this.#lost(lease, "fail");
    this.events.emit({ type: "retry-scheduled", at: row.now, owner: lease.owner, messageId: lease.messageId, token: lease.token, availableAt: row.available_at, error: text });
    return { outcome: "retry-scheduled", messageId: lease.messageId, availableAt: row.available_at };
  }

  async release(lease: Lease): Promise<Released | LeaseLost> {
    checkLease(lease);
    const row = (await this.pool.query<{ now: Date }>(this.#sql.release, [this.#now(), rowId(lease.messageId), lease.token, lease.owner, this.#audit])).rows[0];
    if (row === undefined) return this.#lost(lease, "release");
    this.events.emit({ type: "released", at: row.now, owner: lease.owner, messageId: lease.messageId, token: lease.token });
    return { outcome: "released", messageId: lease.messageId };
  }

  async onNewMessages(wake: () => void): Promise<() => Promise<void>> {
    const url = this.#url;
    let stopped = false;
    let client: pg.Client | undefined;
    let retryDelay = 100;
    const listen = async (): Promise<void> => {
      while (!stopped) {
        const next = new pg.Client({ connectionString: url, application_name: `${this.#applicationName}-listen` });
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

  async stats(): Promise<OutboxStats> {
    const counts = await this.countByStatus();
    const oldest = (await this.pool.query<{ oldest: Date | null }>(this.#sql.oldestPending)).rows[0]?.oldest ?? null;
    const now = (await this.pool.query<{ now: Date }>(this.#sql.clockNow, [this.#now()])).rows[0]?.now ?? new Date();
    const owners = (await this.pool.query<{ owner: string; held: number; expired: number }>(this.#sql.leasesByOwner, [now])).rows;
    return {
      now,
      counts,
      oldestPendingCreatedAt: oldest,
      leasesByOwner: owners.map((o) => ({ owner: o.owner, held: o.held, expired: o.expired })),
      expiredLeases: owners.reduce((sum, o) => sum + o.expired, 0),
    };
  }

  async redrive(target: { readonly messageIds: readonly string[] } | "all"): Promise<number> {
    if (target === "all") return (await this.pool.query<{ moved: number }>(this.#sql.redriveAll, [this.#now(), this.#audit])).rows[0]?.moved ?? 0;
    const ids = target.messageIds.map(rowId).filter((id): id is string => id !== null);
    if (ids.length === 0) return 0;
    return (await this.pool.query<{ moved: number }>(this.#sql.redriveSome, [this.#now(), this.#audit, ids])).rows[0]?.moved ?? 0;
  }

  async purgeProcessed(before: Date, options: PurgeOptions = {}): Promise<number> {
    const limit = checkBatchSize(options.batchSize ?? 1000);
    if (Number.isNaN(before.getTime())) throw new InvalidArgumentError("purge cutoff is not a valid date");
    let deleted = 0;
    for (;;) {
      const batch = (await this.pool.query(this.#sql.purgeBatch, [before, limit])).rowCount ?? 0;
      deleted += batch;
      options.onProgress?.(deleted);
      if (batch < limit) return deleted;
    }
  }

  async auditTrail(): Promise<AuditEntry[]> {
    const { rows } = await this.pool.query<{
      message_id: string; lease_token: number; owner: string; action: string; at: Date;
      previous_status: string | null; previous_owner: string | null; previous_locked_until: Date | null;
    }>(this.#sql.auditTrail);
    return rows.map((r) => ({
      messageId: String(r.message_id),
      token: r.lease_token,
      owner: r.owner,
      action: r.action as AuditAction,
      at: r.at,
      previousStatus: r.previous_status as MessageStatus | null,
      previousOwner: r.previous_owner,
      previousLockedUntil: r.previous_locked_until,
    }));
  }

  async getMessage(messageId: string): Promise<OutboxMessage | undefined> {
    const id = rowId(messageId);
    if (id === null) return undefined;
    const row = (await this.pool.query<PgMessageRow>(this.#sql.getMessage, [id])).rows[0];
    return row === undefined ? undefined : toMessage(row);
  }

  async listMessages(filter: { readonly status?: readonly MessageStatus[]; readonly limit?: number } = {}): Promise<OutboxMessage[]> {
    const limit = filter.limit ?? null;
    const { rows } = filter.status === undefined
      ? await this.pool.query<PgMessageRow>(this.#sql.listAll, [limit])
      : await this.pool.query<PgMessageRow>(this.#sql.listByStatus, [limit, [...filter.status]]);
    return rows.map(toMessage);
  }

  async countByStatus(): Promise<StatusCounts> {
    const counts = Object.fromEntries(MESSAGE_STATUSES.map((s) => [s, 0])) as StatusCounts;
    for (const row of (await this.pool.query<{ status: MessageStatus; n: number }>(this.#sql.countByStatus)).rows) counts[row.status] = row.n;
    return counts;
  }

  async describeSchema(): Promise<string> {
    const tables = (await this.pool.query<{ table_name: string }>(
      "SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY table_name", [this.schema])).rows;
    const parts: string[] = [];
    for (const { table_name: table } of tables) {
      const columns = (await this.pool.query<{ column_name: string; type: string; not_null: boolean; default: string | null }>(
        `SELECT a.attname AS column_name, format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull AS not_null,
                pg_get_expr(d.adbin, d.adrelid) AS default
         FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
         WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`,
        [`${this.schema}.${table}`])).rows;
      const constraints = (await this.pool.query<{ def: string }>(
        "SELECT pg_get_constraintdef(oid) AS def FROM pg_constraint WHERE conrelid = $1::regclass ORDER BY contype, conname", [`${this.schema}.${table}`])).rows;
      const lines = [
        ...columns.map((c) => `  ${c.column_name} ${c.type}${c.not_null ? " NOT NULL" : ""}${c.default ? ` DEFAULT ${c.default}` : ""}`),
        ...constraints.map((c) => `  ${c.def}`),
      ];
      parts.push(`CREATE TABLE ${this.schema}.${table} (\n${lines.join(",\n")}\n);`);
    }
    const indexes = (await this.pool.query<{ indexdef: string }>(
      "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND indexname NOT LIKE '%_pkey' AND indexname NOT LIKE '%_key' ORDER BY indexname", [this.schema])).rows;
    parts.push(...indexes.map((i) => `${i.indexdef};`));
    return parts.join("\n\n");
  }

  #closed = false;

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.pool.end();
  }
}

export function checkSchema(schema: string): string {
  if (typeof schema !== "string" || !SCHEMA_PATTERN.test(schema)) {
    throw new InvalidArgumentError(`schema name must be 1 to 63 lower-case letters, digits or underscores, starting with a letter or underscore (got ${JSON.stringify(schema)})`);
  }
  return schema;
}
