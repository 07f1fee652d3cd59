// The payments lab's side of each store backend, one entry per backend: its payments tables and
// the unguarded write of the BEFORE scenario. The library's stores know nothing of the lab; the
// lab reaches each through its public store class. A backend without an entry here runs the
// library (worker, relay, dashboard, outbox commands) but not the lab.

import type { Clock } from "../../outbox/clock.js";
import { InvalidArgumentError } from "../../outbox/errors.js";
import type { OutboxStore } from "../../outbox/store.js";
import type { Finalize, OutboxMessage } from "../../outbox/types.js";
import type { PaymentsRepository } from "../../payments/types.js";
import { MariaDbOutboxStore } from "../../stores/mariadb/mariadb-outbox-store.js";
import { PostgresOutboxStore } from "../../stores/postgres/postgres-outbox-store.js";
import { SqliteOutboxStore } from "../../stores/sqlite/sqlite-outbox-store.js";
import { MariaDbPaymentsRepository, markProcessedUnleased as markMariaDb } from "./mariadb-payments.js";
import { markProcessedUnleased as markPostgres, PostgresPaymentsRepository } from "./postgres-payments.js";
import { markProcessedUnleased as markSqlite, SqlitePaymentsRepository } from "./sqlite-payments.js";

interface LabStore {
  payments(store: OutboxStore<unknown>): PaymentsRepository<unknown>;
  markProcessedUnleased(store: OutboxStore<unknown>, messageId: string, at: Date, finalize: Finalize<unknown> | undefined): Promise<void>;
}

/** One entry per backend, by the store's kind. */
const LAB_STORES: Readonly<Record<string, (store: OutboxStore<unknown>) => LabStore | null>> = {
  sqlite: (store) =>
    store instanceof SqliteOutboxStore
      ? {
          payments: () => new SqlitePaymentsRepository(store) as PaymentsRepository<unknown>,
          markProcessedUnleased: (_, id, at, finalize) => markSqlite(store, id, at, finalize),
        }
      : null,
  postgres: (store) =>
    store instanceof PostgresOutboxStore
      ? {
          payments: () => new PostgresPaymentsRepository(store) as PaymentsRepository<unknown>,
          markProcessedUnleased: (_, id, at, finalize) => markPostgres(store, id, at, finalize),
        }
      : null,
  mariadb: (store) =>
    store instanceof MariaDbOutboxStore
      ? {
          payments: () => new MariaDbPaymentsRepository(store) as PaymentsRepository<unknown>,
          markProcessedUnleased: (_, id, at, finalize) => markMariaDb(store, id, at, finalize),
        }
      : null,
};

function labStoreFor(store: OutboxStore<unknown>): LabStore {
  const entry = LAB_STORES[store.kind]?.(store) ?? null;
  if (entry === null) {
    throw new InvalidArgumentError(`the payments lab runs on ${Object.keys(LAB_STORES).join(" and ")} stores opened by Wassal (got a ${store.kind} store)`);
  }
  return entry;
}

/** The payments tables' repository on the store's own database. */
export function paymentsRepositoryFor(store: OutboxStore<unknown>): PaymentsRepository<unknown> {
  return labStoreFor(store).payments(store);
}

/** The naive outbox loop of the BEFORE scenario: read every pending row, write without a guard. */
export interface UnleasedAccess<Tx> {
  /** Every pending message, oldest first, without claiming any. */
  loadPending(): Promise<OutboxMessage[]>;
  /** Runs `finalize` and marks the message processed, whoever else may be working on it. */
  markProcessed(messageId: string, finalize?: Finalize<Tx>): Promise<void>;
}

/** Access to the store that ignores leases, stamped with `clock`: only the BEFORE scenario uses it. */
export function unleasedAccess<Tx>(store: OutboxStore<Tx>, clock: Clock): UnleasedAccess<Tx> {
  const lab = labStoreFor(store as OutboxStore<unknown>);
  return {
    loadPending: () => store.listMessages({ status: ["pending"] }),
    markProcessed: (messageId, finalize) =>
      lab.markProcessedUnleased(store as OutboxStore<unknown>, messageId, clock.now(), finalize as Finalize<unknown> | undefined),
  };
}
