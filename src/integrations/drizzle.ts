// Enqueue inside a Drizzle transaction on PostgreSQL (drizzle-orm/node-postgres): the message
// commits or rolls back with the app's own Drizzle writes. Drizzle's SQLite driver for
// better-sqlite3 runs transactions synchronously, which an asynchronous enqueue cannot join; use
// SqliteOutboxStore.enqueueSync(db.$client, …) there. drizzle-orm is an optional peer dependency.

import { type SQL, sql } from "drizzle-orm";
import type { OutboxStore } from "../outbox/store.js";
import type { ForeignTransaction, JsonValue, NewMessage, OutboxMessage } from "../outbox/types.js";
import { asTemplate } from "./split.js";

/** What Wassal uses of a Drizzle PostgreSQL transaction (PgTransaction): raw SQL, and rollback() to tell it from the database object. */
export interface DrizzlePgTransaction {
  execute(query: SQL): PromiseLike<unknown>;
  rollback(): unknown;
}

/** A Drizzle PostgreSQL transaction (from db.transaction(async (tx) => …)) as a ForeignTransaction. */
export function fromDrizzle(tx: DrizzlePgTransaction): ForeignTransaction {
  return {
    placeholders: "question",
    problem: () => {
      if (typeof tx?.execute !== "function") return "this is not a Drizzle PostgreSQL transaction (drizzle-orm/node-postgres)";
      // The database object has no rollback(); a transaction has. Whether it has ended, the
      // PostgreSQL store asks the database itself before it writes.
      if (typeof tx.rollback !== "function") return "this Drizzle object is not a transaction: call enqueue inside db.transaction(async (tx) => …) with its tx";
      return null;
    },
    query: async (text, params) => {
      const statement = asTemplate(text, params, {
        text: (piece) => sql.raw(piece),
        value: (param) => sql`${param}`,
        join: (chunks) => sql.join(chunks, sql.raw("")),
      });
      // node-postgres answers a result with rows; postgres.js answers the rows themselves.
      const result = (await tx.execute(statement)) as { rows?: Record<string, unknown>[] } | Record<string, unknown>[];
      return Array.isArray(result) ? result : (result.rows ?? []);
    },
  };
}

/** Enqueues `message` inside the Drizzle transaction `tx`, on `store` (see OutboxStore.enqueueIn). */
export function enqueue<P extends JsonValue>(
  store: Pick<OutboxStore<unknown>, "enqueueIn">,
  tx: DrizzlePgTransaction,
  message: NewMessage<P>,
): Promise<OutboxMessage<P>> {
  return store.enqueueIn(fromDrizzle(tx), message);
}
