// Access to an outbox that ignores leases. It exists only so the lab can show the race that
// leases prevent (the BEFORE scenario); it is not part of the store contract, and the package's
// entry points do not export it.

import type { Finalize, OutboxMessage } from "../outbox/types.js";
import type { OutboxStore } from "../outbox/store.js";
import { postgresUnleased, PostgresOutboxStore } from "./postgres/postgres-outbox-store.js";
import { sqliteUnleased, SqliteOutboxStore } from "./sqlite/sqlite-outbox-store.js";

/** The naive outbox loop of the BEFORE scenario: read every pending row, write without a guard. */
export interface UnleasedAccess<Tx> {
  /** Every pending message, oldest first, without claiming any. */
  loadPending(): Promise<OutboxMessage[]>;
  /** Runs `finalize` and marks the message processed, whoever else may be working on it. */
  markProcessed(messageId: string, finalize?: Finalize<Tx>): Promise<void>;
}

export function unleasedAccess<Tx>(store: OutboxStore<Tx>): UnleasedAccess<Tx> {
  if (store instanceof SqliteOutboxStore) return sqliteUnleased(store) as UnleasedAccess<unknown> as UnleasedAccess<Tx>;
  if (store instanceof PostgresOutboxStore) return postgresUnleased(store) as UnleasedAccess<unknown> as UnleasedAccess<Tx>;
  throw new Error("unleased access exists only for the SQLite and PostgreSQL stores");
}
