// The outbox's inserts read from PostgreSQL's write-ahead log, through a logical replication slot
// and the built-in pgoutput plugin (streamed by pg-logical-replication), instead of by polling.
// A publication of the outbox table's inserts only, and a slot, are made when missing.
//
// The slot's position moves only when the consumer confirms it (the library's own acknowledgement
// is off: it would confirm what was merely received), and the keepalives the server asks for
// answer with the confirmed position. So the server keeps the log of every transaction not yet
// dealt with, and streams it again after a restart. A slot held by another consumer is waited for;
// a slot that is gone (dropped, or not on the server failed over to) is made again and reported,
// so the consumer claims what the stream missed from the table.

import type pg from "pg";
import type { InsertedMessage, InsertFeed, InsertFeedEvent, InsertFeedHandlers, InsertFeedLag } from "../../outbox/insert-feed.js";
import { InvalidArgumentError, WassalError } from "../../outbox/errors.js";
import { importOptional } from "../../outbox/optional.js";
import { type OpenedPool, openPostgresPool, type PostgresSource } from "./connect.js";
import { quoteIdent, SCHEMA_PATTERN } from "./outbox-sql.js";

/** The server cannot stream the outbox's changes: logical replication is off, or the role may not use it. */
export class LogicalReplicationUnavailableError extends WassalError {
  override name = "LogicalReplicationUnavailableError";
  constructor(message: string, options?: { cause?: unknown }) {
    super("LOGICAL_REPLICATION_UNAVAILABLE", message, options);
  }
}

export type WalFeedOptions = PostgresSource & {
  /** The schema holding Wassal's tables (default "wassal"). */
  readonly schema?: string;
  /** The replication slot (default "<schema>_outbox"): one per relay group; only one consumer streams from it at a time. */
  readonly slot?: string;
  /** The publication of the outbox table's inserts (default "<schema>_outbox_inserts"). */
  readonly publication?: string;
  /** How long to wait before trying a busy slot, or a broken stream, again (default 1 000 ms). */
  readonly retryMs?: number;
  /**
   * How often the feed reports its confirmed position and asks the server where the stream stands
   * (default 10 000 ms). When every message delivered is dealt with, the feed confirms that
   * position: without it, an idle outbox's slot would hold the log of all the database's other
   * writes since its last message.
   */
  readonly statusIntervalMs?: number;
};

/** Slot and publication names: what PostgreSQL allows for a replication slot, which is the narrower rule. */
const SLOT_PATTERN = /^[a-z0-9_]{1,63}$/;

/** The pg-logical-replication we use, loaded when a feed starts (an optional peer dependency). */
interface ReplicationModule {
  LogicalReplicationService: new (
    client: pg.ClientConfig,
    config: { acknowledge: { auto: boolean; timeoutSeconds: number }; flowControl: { enabled: boolean } },
  ) => ReplicationService;
  PgoutputPlugin: new (options: { protoVersion: 1 | 2; publicationNames: string[] }) => unknown;
}

interface ReplicationService {
  on(event: "data", listener: (lsn: string, message: PgoutputMessage) => Promise<void>): unknown;
  on(event: "start", listener: () => void): unknown;
  on(event: "heartbeat", listener: (lsn: string, timestamp: number, shouldRespond: boolean) => void): unknown;
  on(event: "error", listener: (error: Error) => void): unknown;
  subscribe(plugin: unknown, slot: string, fromLsn: string): Promise<unknown>;
  acknowledge(lsn: string, ping?: boolean): Promise<boolean>;
  stop(): Promise<unknown>;
  removeAllListeners(): unknown;
}

type PgoutputMessage =
  | { readonly tag: "begin" }
  | { readonly tag: "insert"; readonly relation: { readonly schema: string; readonly name: string }; readonly new: Record<string, unknown> }
  | { readonly tag: "commit"; readonly commitEndLsn: string | null }
  | { readonly tag: string };

/** An LSN ("16/B374D848") as a number, for comparing. */
function lsnValue(lsn: string): bigint {
  const [high, low] = lsn.split("/");
  return (BigInt(`0x${high ?? "0"}`) << 32n) + BigInt(`0x${low ?? "0"}`);
}

/** Reports `position` to the server as the confirmed one: the library's acknowledge() reports the LSN it is given plus one (the byte after the last one received), and a position is already that byte. */
function report(service: ReplicationService, position: bigint, ping = false): void {
  const last = position > 0n ? position - 1n : 0n;
  void service.acknowledge(`${(last >> 32n).toString(16).toUpperCase()}/${(last & 0xffffffffn).toString(16).toUpperCase()}`, ping);
}

function checkName(what: string, name: unknown): string {
  if (typeof name !== "string" || !SLOT_PATTERN.test(name)) {
    throw new InvalidArgumentError(`${what} must be 1 to 63 lowercase letters, digits or underscores (got ${JSON.stringify(name)})`);
  }
  return name;
}

/** SQLSTATEs of the replication errors the feed tells apart. */
const OBJECT_IN_USE = "55006";
const UNDEFINED_OBJECT = "42704";
const DUPLICATE_OBJECT = "42710";
const INSUFFICIENT_PRIVILEGE = "42501";

/**
 * A feed of the outbox's committed inserts from a logical replication slot. It connects when
 * started; the server needs `wal_level = logical`, and the role the REPLICATION attribute (or
 * superuser) and ownership of the outbox table (for the publication).
 */
export function openWalFeed(options: WalFeedOptions): InsertFeed {
  if (typeof options !== "object" || options === null) throw new InvalidArgumentError("openWalFeed needs options: { url | config | pool, schema?, slot? }");
  const schema = options.schema ?? "wassal";
  if (typeof schema !== "string" || !SCHEMA_PATTERN.test(schema)) {
    throw new InvalidArgumentError(`schema must match ${SCHEMA_PATTERN} (got ${JSON.stringify(schema)})`);
  }
  const slot = checkName("slot", options.slot ?? `${schema}_outbox`);
  const publication = checkName("publication", options.publication ?? `${schema}_outbox_inserts`);
  const retryMs = checkMs("retryMs", options.retryMs ?? 1_000);
  const statusIntervalMs = checkMs("statusIntervalMs", options.statusIntervalMs ?? 10_000);
  const source: PostgresSource = "url" in options ? { url: options.url } : "pool" in options ? { pool: options.pool } : { config: options.config };
  return new WalFeed(source, schema, slot, publication, retryMs, statusIntervalMs);
}

function checkMs(name: string, value: unknown): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 1) {
    throw new InvalidArgumentError(`${name} must be a whole number of milliseconds >= 1 (got ${String(value)})`);
  }
  return value;
}

class WalFeed implements InsertFeed {
  readonly slot: string;
  readonly #source: PostgresSource;
  readonly #schema: string;
  readonly #publication: string;
  readonly #retryMs: number;
  readonly #statusIntervalMs: number;
  /** The position of the last batch handed to the consumer: when it is confirmed, nothing is outstanding. */
  #delivered: bigint = 0n;
  /** Between a transaction's begin and its commit. */
  #inTransaction = false;
  #opened: Promise<OpenedPool> | undefined;
  #service: ReplicationService | undefined;
  #confirmed: bigint = 0n;
  #confirmedText = "0/0";
  #stopped = false;
  #running: Promise<void> | undefined;
  /** Ends a wait between attempts early, at stop. */
  #wakeUp: (() => void) | undefined;

  constructor(source: PostgresSource, schema: string, slot: string, publication: string, retryMs: number, statusIntervalMs: number) {
    this.#statusIntervalMs = statusIntervalMs;
    this.#source = source;
    this.#schema = schema;
    this.slot = slot;
    this.#publication = publication;
    this.#retryMs = retryMs;
  }

  #pool(): Promise<OpenedPool> {
    // A failed open is forgotten, so the next attempt connects again (the server may be back).
    this.#opened ??= openPostgresPool(this.#source, { maxConnections: 1, applicationName: "wassal-wal-feed" }).catch((error: unknown) => {
      this.#opened = undefined;
      throw error;
    });
    return this.#opened;
  }

  start(handlers: InsertFeedHandlers): Promise<void> {
    if (this.#running !== undefined) throw new InvalidArgumentError(`the WAL feed of slot ${this.slot} is already started; a feed runs once`);
    return new Promise<void>((resolve, reject) => {
      this.#running = this.#run(handlers, resolve, reject);
    });
  }

  async #run(handlers: InsertFeedHandlers, streaming: () => void, failed: (error: unknown) => void): Promise<void> {
    const event = (what: InsertFeedEvent) => {
      try {
        handlers.event?.(what);
      } catch {
        // a listener's fault is not the feed's: it streams on
      }
    };
    let started = false;
    /** The slot was found missing on the last attempt: made again at once only once in a row. */
    let slotWasMissing = false;
    let module: ReplicationModule;
    try {
      module = await importOptional<ReplicationModule>("pg-logical-replication", "the WAL relay (reading the outbox from a replication slot)");
    } catch (error) {
      failed(error);
      return;
    }
    while (!this.#stopped) {
      let waitMs = this.#retryMs;
      const missingBefore = slotWasMissing;
      slotWasMissing = false;
      try {
        const opened = await this.#pool();
        if (await this.#prepare(opened.pool)) event({ type: "slot-created", slot: this.slot });
        if (this.#stopped) break;
        await this.#stream(module, opened.clientConfig, handlers.batch, event, () => {
          if (!started) {
            started = true;
            streaming();
          }
        });
        if (this.#stopped) break;
        event({ type: "disconnected", slot: this.slot, error: "the stream ended", retryInMs: waitMs });
      } catch (error) {
        if (this.#stopped) break;
        const { code, message } = error as { code?: string; message?: string };
        const detail = message ?? String(error);
        if (!started && (error instanceof LogicalReplicationUnavailableError || error instanceof InvalidArgumentError || code === INSUFFICIENT_PRIVILEGE)) {
          failed(
            code === INSUFFICIENT_PRIVILEGE
              ? new LogicalReplicationUnavailableError(
                  `the role may not stream the outbox from slot ${this.slot} (${detail}): give it the REPLICATION attribute (ALTER ROLE … REPLICATION) and make it the outbox table's owner`,
                  { cause: error },
                )
              : error,
          );
          return;
        }
        if (code === UNDEFINED_OBJECT && /replication slot/i.test(detail) && !missingBefore) {
          slotWasMissing = true;
          waitMs = 0; // the slot went away (dropped, or a failover to a server without it): made again at once
        } else if (code === OBJECT_IN_USE) event({ type: "slot-busy", slot: this.slot, retryInMs: waitMs, detail });
        else event({ type: "disconnected", slot: this.slot, error: detail, retryInMs: waitMs });
      }
      if (waitMs > 0 && !this.#stopped) await this.#pause(waitMs);
    }
    if (!started) streaming(); // stopped before it streamed: nothing left to wait for
  }

  #pause(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.#wakeUp = done;
    });
  }

  /** Makes the publication and the slot when missing; true when the slot was made now. Reads where the slot stands. */
  async #prepare(pool: pg.Pool): Promise<boolean> {
    const level = (await pool.query<{ wal_level: string }>("SHOW wal_level")).rows[0]?.wal_level;
    if (level !== "logical") {
      throw new LogicalReplicationUnavailableError(
        `the server runs wal_level = ${level ?? "unknown"}, and reading the outbox from the WAL needs wal_level = logical: set it in postgresql.conf (or ALTER SYSTEM SET wal_level = logical) and restart the server, or run the polling relay`,
      );
    }
    const table = `${quoteIdent(this.#schema)}.outbox_messages`;
    const exists = await pool.query("SELECT 1 FROM pg_publication WHERE pubname = $1", [this.#publication]);
    if (exists.rowCount === 0) {
      try {
        // PostgreSQL 15 and later publish only the columns the feed reads, not the payloads.
        const version = Number((await pool.query<{ v: string }>("SHOW server_version_num")).rows[0]?.v ?? 0);
        const columns = version >= 150_000 ? " (id, type, ordering_key)" : "";
        await pool.query(`CREATE PUBLICATION ${quoteIdent(this.#publication)} FOR TABLE ${table}${columns} WITH (publish = 'insert')`);
      } catch (error) {
        if ((error as { code?: string }).code !== DUPLICATE_OBJECT) throw error; // another relay made it meanwhile
      }
    }
    const found = await pool.query<{ confirmed: string | null }>(
      "SELECT confirmed_flush_lsn::text AS confirmed FROM pg_replication_slots WHERE slot_name = $1",
      [this.slot],
    );
    let created = false;
    let at = found.rows[0]?.confirmed ?? null;
    if (found.rowCount === 0) {
      try {
        at =
          (await pool.query<{ lsn: string }>("SELECT lsn::text AS lsn FROM pg_create_logical_replication_slot($1, 'pgoutput')", [this.slot])).rows[0]?.lsn ??
          null;
        created = true;
      } catch (error) {
        if ((error as { code?: string }).code !== DUPLICATE_OBJECT) throw error;
      }
    }
    // Where the slot stands is what the keepalives answer with until this feed confirms more (never less).
    if (at !== null && (created || lsnValue(at) > this.#confirmed)) {
      this.#confirmed = lsnValue(at);
      this.#confirmedText = at;
    }
    return created;
  }

  /** Streams until the connection ends; resolves then (or rejects with why it could not start or broke). */
  async #stream(
    module: ReplicationModule,
    clientConfig: pg.ClientConfig,
    batch: InsertFeedHandlers["batch"],
    event: (event: InsertFeedEvent) => void,
    streaming: () => void,
  ): Promise<void> {
    // Its own session settings (the store's READ COMMITTED option) are not for a walsender.
    const { options: _sessionOptions, ...config } = clientConfig;
    const service = new module.LogicalReplicationService(
      { ...config, application_name: `wassal-wal-${this.slot}` },
      { acknowledge: { auto: false, timeoutSeconds: 0 }, flowControl: { enabled: true } },
    );
    this.#service = service;
    let inserted: InsertedMessage[] = [];
    const ignore = () => undefined;
    service.on("error", ignore); // the subscribe call below rejects with it
    // Data messages the library has parsed, and those handled: while they differ, some are queued
    // behind the one being handled (flow control), and a keepalive's position may lie past them.
    let received = 0;
    let handled = 0;
    const pgoutput = new module.PgoutputPlugin({ protoVersion: 1, publicationNames: [this.#publication] }) as { parse(buffer: Buffer): unknown };
    const parse = pgoutput.parse.bind(pgoutput);
    pgoutput.parse = (buffer) => {
      received += 1;
      return parse(buffer);
    };
    service.on("start", () => {
      event({ type: "streaming", slot: this.slot, from: this.#confirmedText });
      streaming();
    });
    service.on("heartbeat", (lsn, _timestamp, shouldRespond) => {
      // The server has sent everything before lsn. With nothing outstanding (every message
      // received handled, every batch confirmed) none of it is ours to deal with (only the
      // outbox's inserts are published to the feed): confirm it.
      const idle = received === handled && !this.#inTransaction && this.#delivered <= this.#confirmed;
      if (idle && lsnValue(lsn) > this.#confirmed) this.confirm(lsn);
      else if (shouldRespond) report(service, this.#confirmed);
    });
    const status = setInterval(() => report(service, this.#confirmed, true), this.#statusIntervalMs);
    status.unref();
    service.on("data", async (lsn, message) => {
      handled += 1;
      if (message.tag === "begin") {
        inserted = [];
        this.#inTransaction = true;
      } else if (message.tag === "insert" && "relation" in message) {
        if (message.relation.schema === this.#schema && message.relation.name === "outbox_messages") {
          const key = message.new.ordering_key;
          inserted.push({ id: String(message.new.id), type: String(message.new.type), key: typeof key === "string" ? key : null });
        }
      } else if (message.tag === "commit" && "commitEndLsn" in message) {
        const messages = inserted;
        inserted = [];
        const position = message.commitEndLsn ?? lsn;
        this.#delivered = lsnValue(position);
        this.#inTransaction = false;
        await batch({ messages, position });
      }
    });
    try {
      // From the slot's confirmed position: an LSN later than it would skip what lies between.
      await service.subscribe(pgoutput, this.slot, "0/0");
    } finally {
      clearInterval(status);
      this.#inTransaction = false;
      this.#service = undefined;
      await service.stop().catch(() => undefined);
      service.removeAllListeners();
      service.on("error", ignore); // a late error from the library's queue would otherwise be thrown
    }
  }

  confirm(position: string): void {
    const value = lsnValue(position);
    if (value <= this.#confirmed) return;
    this.#confirmed = value;
    this.#confirmedText = position;
    if (this.#service !== undefined) report(this.#service, value);
  }

  async lag(): Promise<InsertFeedLag | null> {
    const { pool } = await this.#pool();
    const row = (
      await pool.query<{ bytes: string | null; active: boolean }>(
        "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::text AS bytes, active FROM pg_replication_slots WHERE slot_name = $1",
        [this.slot],
      )
    ).rows[0];
    if (row === undefined) return null;
    return { slot: this.slot, bytes: Math.max(0, Number(row.bytes ?? 0)), active: row.active };
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    this.#wakeUp?.();
    await this.#service?.stop().catch(() => undefined);
    await this.#running;
    const opened = this.#opened;
    this.#opened = undefined;
    if (opened !== undefined) {
      const pool = await opened.catch(() => undefined);
      if (pool?.owned) await pool.pool.end().catch(() => undefined);
    }
  }
}

/**
 * Removes what a WAL feed made: its slot (once no consumer streams from it; the server would keep
 * its log for ever) and its publication. What is missing is skipped.
 */
export async function dropWalFeed(options: WalFeedOptions): Promise<void> {
  const schema = options.schema ?? "wassal";
  if (typeof schema !== "string" || !SCHEMA_PATTERN.test(schema))
    throw new InvalidArgumentError(`schema must match ${SCHEMA_PATTERN} (got ${JSON.stringify(schema)})`);
  const slot = checkName("slot", options.slot ?? `${schema}_outbox`);
  const publication = checkName("publication", options.publication ?? `${schema}_outbox_inserts`);
  const source: PostgresSource = "url" in options ? { url: options.url } : "pool" in options ? { pool: options.pool } : { config: options.config };
  const opened = await openPostgresPool(source, { maxConnections: 1, applicationName: "wassal-wal-feed" });
  try {
    // A consumer that just stopped may hold the slot a moment longer.
    for (let attempt = 0; ; attempt += 1) {
      try {
        await opened.pool.query("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", [slot]);
        break;
      } catch (error) {
        if ((error as { code?: string }).code !== OBJECT_IN_USE || attempt >= 50) throw error;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
    await opened.pool.query(`DROP PUBLICATION IF EXISTS ${quoteIdent(publication)}`);
  } finally {
    if (opened.owned) await opened.pool.end().catch(() => undefined);
  }
}
