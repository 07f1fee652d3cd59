// What every store backend gives the one opener (open-outbox.ts): a name, which --db strings it
// takes, and how it opens its store from one. The list of backends is backends.ts.

import type { Clock } from "../outbox/clock.js";
import type { OutboxStore } from "../outbox/store.js";
import type { OnComplete } from "../outbox/types.js";
import type { Tracing } from "../outbox/tracing.js";
import type { Synchronous } from "./sqlite/open-database.js";

export interface OpenOutboxOptions {
  /** PostgreSQL schema (default "wassal"). MariaDB keeps the tables in the database its URL names. */
  readonly schema?: string;
  /** SQLite durability (default FULL). */
  readonly synchronous?: Synchronous;
  readonly clock?: Clock;
  /** Pool size of a server store. */
  readonly maxConnections?: number;
  /** The name a server shows for this process's connections (pg_stat_activity; MariaDB's program_name connect attribute). */
  readonly applicationName?: string;
  /** Refuse a SQLite path that does not exist yet (for commands that only read or repair). */
  readonly mustExist?: boolean;
  /**
   * Only look (implies mustExist): nothing is migrated, a SQLite file is opened read-only and a
   * server store's sessions are read-only, so a database this process may read but not write,
   * or one a newer Wassal migrated (refused for writing: DatabaseTooNewError), can still be inspected.
   */
  readonly readOnly?: boolean;
  /** Keep the audit trail (outbox_audit). */
  readonly audit?: boolean;
  /**
   * What a completion does with the message's row: "keep" (the default) leaves it as processed,
   * the history the dashboard and `outbox` commands show, its dedupe key taken until retention
   * purges it; "delete" removes it in the same guarded statement, so the table holds only
   * unfinished and dead messages (the audit trail, when kept, is the history), and a completed
   * message's dedupe key is free again at once.
   */
  readonly onComplete?: OnComplete;
  /** Trace enqueues (see otelTracing in "wassal/observability"). */
  readonly tracing?: Tracing;
}

/** A store a backend opened, not yet checked or migrated. */
export interface UnopenedOutbox {
  readonly store: OutboxStore<unknown>;
  /** The path, or the URL without its password (and the schema). */
  readonly location: string;
  /** What to say when a command that only reads finds no outbox there. */
  readonly missing: string;
}

/** What a server store's connect takes of the open options (those given; none undefined, for exactOptionalPropertyTypes). */
export function serverConnectOptions(
  options: OpenOutboxOptions,
): Pick<OpenOutboxOptions, "clock" | "maxConnections" | "applicationName" | "audit" | "onComplete" | "tracing" | "readOnly"> {
  return {
    ...(options.clock === undefined ? {} : { clock: options.clock }),
    ...(options.maxConnections === undefined ? {} : { maxConnections: options.maxConnections }),
    ...(options.applicationName === undefined ? {} : { applicationName: options.applicationName }),
    ...(options.audit === undefined ? {} : { audit: options.audit }),
    ...(options.onComplete === undefined ? {} : { onComplete: options.onComplete }),
    ...(options.tracing === undefined ? {} : { tracing: options.tracing }),
    ...(options.readOnly ? { readOnly: true } : {}),
  };
}

export interface StoreBackend {
  /** The store's kind ("sqlite", "postgres", "mariadb"): OutboxStore.kind of what it opens. */
  readonly name: string;
  /** How a --db string for it looks, for help and errors ("postgres://user@host:5432/db"). */
  readonly shape: string;
  /** True when `db` names a database of this backend. */
  matches(db: string): boolean;
  /**
   * Opens the store (its driver loaded only now); checks nothing and migrates nothing. With
   * `lookOnly` (and readOnly), a database that does not exist yet is looked at as an empty one,
   * and nothing is created: what `wassal migrate --check` needs.
   */
  open(db: string, options: OpenOutboxOptions, lookOnly?: boolean): Promise<UnopenedOutbox>;
}
