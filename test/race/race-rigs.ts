// Two connections to one outbox, for the in-process race tests: worker A's store (the completer)
// and worker B's store (the reclaimer), both on one ManualClock, both keeping the audit trail,
// plus what only store-specific code can do: a business write inside the completion transaction,
// reading the business rows back, and telling when B's operation is stuck waiting for A.
//
// SQLite: two SqliteOutboxStore instances on one file (two connections, two write locks). B's
// BEGIN IMMEDIATE is watched: a SQLITE_BUSY from it means B tried while A's transaction was open.
// (busyTimeoutMs 0: a blocked BEGIN returns at once and the store retries asynchronously, so one
// process can hold A's transaction open and run B's attempt at the same time.)
//
// PostgreSQL: two PostgresOutboxStore instances (two pools) in a schema of their own; B is "stuck"
// when pg_stat_activity shows its backend waiting on a lock. A third store, B-gated, has no
// injected clock and connects with search_path = <schema>, pg_catalog, so its
// `clock_timestamp()` is the schema's own: it reads the manual time from a table, after waiting
// for a shared advisory lock the test can hold. The store's claim takes its statement snapshot
// first and evaluates the clock before it reads or locks any row, so holding the gate parks B
// *between its read snapshot and its row lock and write*: exactly where a completion must not
// slip through.

import { mkdtempSync } from "node:fs";
import { join } from "node:path";
import { randomBytes, randomInt } from "node:crypto";
import pg from "pg";
import type { ManualClock } from "../../src/outbox/clock.js";
import type { OutboxStore } from "../../src/outbox/store.js";
import { SqliteOutboxStore, type SqliteTx } from "../../src/stores/sqlite/sqlite-outbox-store.js";
import { PostgresOutboxStore, type PostgresTx } from "../../src/stores/postgres/postgres-outbox-store.js";
import { freshSchema, TEST_DATABASE_URL } from "../support/postgres.js";
import { tempDir } from "../support/temp.js";
import { readPostgresBusinessRows, readSqliteBusinessRows, type BusinessRow } from "./race-checks.js";

/** B parked between its read and its write while the test lets A's completion run. */
export interface Gate {
  /** A store whose claims stop at the gate while it is held. */
  readonly b: OutboxStore<unknown>;
  /** Closes the gate and sets the gated store's clock to `now`. */
  hold(now: Date): Promise<void>;
  /** Resolves once the gated store's statement is waiting at the gate. */
  waiting(deadlineMs?: number): Promise<void>;
  /** Opens the gate. */
  release(): Promise<void>;
}

export interface RaceRig {
  readonly name: "sqlite" | "postgres";
  /** Worker A's connection: claims with short leases and completes. */
  readonly a: OutboxStore<unknown>;
  /** Worker B's connection: reclaims, and sweeps. */
  readonly b: OutboxStore<unknown>;
  /** Present where a claim has a read-to-write window that the test can hold open (PostgreSQL). */
  readonly gate: Gate | null;
  /** The business write of a completion, inside its transaction. */
  businessWrite(tx: unknown, row: BusinessRow): Promise<void>;
  /** Every committed business row, read on a connection of its own. */
  businessRows(): Promise<BusinessRow[]>;
  /**
   * Resolves once B's operation started after this call is seen waiting for A's transaction
   * (SQLite: its BEGIN IMMEDIATE found the write lock taken; PostgreSQL: its backend waits on a
   * lock): true; or once `stop` settles first: false.
   */
  bBlocked(stop: Promise<unknown>): Promise<boolean>;
  close(): Promise<void>;
}

const FILE_TMP = tempDir("wassal-race-");

function isBusy(error: unknown): boolean {
  const code = (error as { code?: unknown }).code;
  return typeof code === "string" && code.startsWith("SQLITE_BUSY");
}

export async function sqliteRig(clock: ManualClock): Promise<RaceRig> {
  const path = join(mkdtempSync(join(FILE_TMP, "inproc-")), "outbox.db");
  // NORMAL: no flush per commit. Durability is not what this test is about; locking is identical.
  const open = async () => {
    const store = new SqliteOutboxStore({ path, clock, audit: true, synchronous: "NORMAL", busyTimeoutMs: 0 });
    await store.migrate();
    return store;
  };
  const a = await open();
  await a.transaction((tx) => {
    tx.exec("CREATE TABLE effects (message_id INTEGER NOT NULL, owner TEXT NOT NULL, token INTEGER NOT NULL) STRICT");
  });
  const b = await open();

  // Watch B's BEGIN IMMEDIATE: SQLITE_BUSY means A's write transaction was open when B tried.
  let onBusy: (() => void) | undefined;
  const exec = b.db.exec.bind(b.db);
  b.db.exec = ((sql: string) => {
    try {
      return exec(sql);
    } catch (error) {
      if (sql.startsWith("BEGIN") && isBusy(error)) onBusy?.();
      throw error;
    }
  }) as typeof b.db.exec;

  return {
    name: "sqlite",
    a,
    b,
    gate: null,
    async businessWrite(tx, row) {
      (tx as SqliteTx).prepare("INSERT INTO effects (message_id, owner, token) VALUES (?, ?, ?)").run(Number(row.messageId), row.owner, row.token);
    },
    async businessRows() {
      return readSqliteBusinessRows(path);
    },
    bBlocked(stop) {
      return new Promise<boolean>((resolve) => {
        onBusy = () => {
          onBusy = undefined;
          resolve(true);
        };
        const stopped = () => {
          onBusy = undefined;
          resolve(false);
        };
        stop.then(stopped, stopped);
      });
    },
    async close() {
      await b.close();
      await a.close();
    },
  };
}

/** The URL with libpq startup options (pg passes `options` through to the server). */
function withOptions(url: string, options: string): string {
  const parsed = new URL(url);
  parsed.searchParams.set("options", options);
  return parsed.toString();
}

export async function postgresRig(clock: ManualClock): Promise<RaceRig> {
  const schema = freshSchema("wassal_race");
  const run = randomBytes(4).toString("hex");
  // Asynchronous commit: visibility and locking are unchanged, only the flush is skipped.
  const url = withOptions(TEST_DATABASE_URL, "-c synchronous_commit=off");
  const appA = `wassal-race-a-${run}`;
  const appB = `wassal-race-b-${run}`;
  const appGated = `wassal-race-gated-${run}`;
  const a = await PostgresOutboxStore.connect({ url, schema, clock, audit: true, maxConnections: 2, applicationName: appA });
  await a.migrate();
  const gateKey = randomInt(1, 2 ** 47);
  await a.transaction(async (tx) => {
    await tx.query(`CREATE TABLE ${schema}.effects (message_id bigint NOT NULL, owner text NOT NULL, token int NOT NULL)`);
    await tx.query(`CREATE TABLE ${schema}.fake_clock (t timestamptz NOT NULL)`);
    await tx.query(`INSERT INTO ${schema}.fake_clock VALUES ($1)`, [clock.now()]);
    // Shadows pg_catalog.clock_timestamp() for connections whose search_path puts this schema first.
    await tx.query(`
      CREATE FUNCTION ${schema}.clock_timestamp() RETURNS timestamptz LANGUAGE plpgsql VOLATILE AS $fn$
      BEGIN
        IF current_setting('wassal_race.gate', true) ~ '^[0-9]+$' THEN
          PERFORM pg_catalog.pg_advisory_xact_lock_shared(current_setting('wassal_race.gate')::bigint);
        END IF;
        RETURN (SELECT t FROM ${schema}.fake_clock);
      END $fn$`);
  });
  const b = await PostgresOutboxStore.connect({ url, schema, clock, audit: true, maxConnections: 2, applicationName: appB });
  const gatedUrl = withOptions(TEST_DATABASE_URL, `-c synchronous_commit=off -c search_path=${schema},pg_catalog -c wassal_race.gate=${gateKey}`);
  const gated = await PostgresOutboxStore.connect({ url: gatedUrl, schema, audit: true, maxConnections: 2, applicationName: appGated });
  const control = new pg.Client({ connectionString: TEST_DATABASE_URL, application_name: `wassal-race-control-${run}` });
  await control.connect();
  const watcher = new pg.Client({ connectionString: TEST_DATABASE_URL, application_name: `wassal-race-watch-${run}` });
  await watcher.connect();

  /** Polls pg_stat_activity until a backend of `application` waits on a lock (true), or `stop` settles (false). */
  async function lockWait(application: string, stop: Promise<unknown>, deadlineMs = 10_000): Promise<boolean> {
    let stopped = false;
    const onStop = () => {
      stopped = true;
    };
    stop.then(onStop, onStop);
    const deadline = Date.now() + deadlineMs;
    while (!stopped) {
      const { rows } = await watcher.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'",
        [application],
      );
      if (stopped) return false;
      if ((rows[0]?.n ?? 0) > 0) return true;
      if (Date.now() > deadline) throw new Error(`no backend of ${application} waited on a lock within ${deadlineMs} ms`);
    }
    return false;
  }

  const gate: Gate = {
    b: gated,
    async hold(now) {
      await control.query(`UPDATE ${schema}.fake_clock SET t = $1`, [now]);
      await control.query("SELECT pg_advisory_lock($1)", [gateKey]);
    },
    async waiting(deadlineMs) {
      await lockWait(appGated, new Promise(() => undefined), deadlineMs);
    },
    async release() {
      await control.query("SELECT pg_advisory_unlock($1)", [gateKey]);
    },
  };

  return {
    name: "postgres",
    a,
    b,
    gate,
    async businessWrite(tx, row) {
      await (tx as PostgresTx).query(`INSERT INTO ${schema}.effects (message_id, owner, token) VALUES ($1, $2, $3)`, [row.messageId, row.owner, row.token]);
    },
    businessRows: () => readPostgresBusinessRows(control, schema),
    bBlocked(stop) {
      return lockWait(appB, stop);
    },
    async close() {
      await watcher.end().catch(() => undefined);
      await control.end().catch(() => undefined);
      await gated.close();
      await b.close();
      await a.close();
    },
  };
}
