// Access to an outbox that ignores leases. It exists only so the lab can show the race that
// leases prevent (the BEFORE scenario); it is not part of the store contract, and the package's
// entry points do not export it. Each store registers its own when it is built.

import type { OutboxStore } from "../outbox/store.js";
import type { Finalize, OutboxMessage } from "../outbox/types.js";

/** The naive outbox loop of the BEFORE scenario: read every pending row, write without a guard. */
export interface UnleasedAccess<Tx> {
  /** Every pending message, oldest first, without claiming any. */
  loadPending(): Promise<OutboxMessage[]>;
  /** Runs `finalize` and marks the message processed, whoever else may be working on it. */
  markProcessed(messageId: string, finalize?: Finalize<Tx>): Promise<void>;
}

const registry = new WeakMap<object, UnleasedAccess<never>>();

/** Called by a store's constructor: the store's lease-ignoring access, kept off its public members. */
export function registerUnleased<Tx>(store: OutboxStore<Tx>, access: UnleasedAccess<Tx>): void {
  registry.set(store, access as UnleasedAccess<never>);
}

export function unleasedAccess<Tx>(store: OutboxStore<Tx>): UnleasedAccess<Tx> {
  const access = registry.get(store);
  if (access === undefined) throw new Error("this store registered no unleased access (only the SQLite and PostgreSQL stores have one)");
  return access as unknown as UnleasedAccess<Tx>;
}
