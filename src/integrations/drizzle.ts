// Enqueue inside a Drizzle transaction on PostgreSQL (drizzle-orm/node-postgres, for the
// PostgreSQL store) or MariaDB (drizzle-orm/mysql2, for the MariaDB store): the message commits or
// rolls back with the app's own Drizzle writes. Drizzle's SQLite driver for better-sqlite3 runs
// transactions synchronously, which an asynchronous enqueue cannot join; use
// SqliteOutboxStore.enqueueSync(db.$client, …) there. drizzle-orm is an optional peer dependency.

import { type SQL, sql } from "drizzle-orm";
import type { OutboxStore } from "../outbox/store.js";
import type { ForeignTransaction, JsonValue, NewMessage, OutboxMessage } from "../outbox/types.js";
import { asTemplate } from "./split.js";

/**
 * What Wassal uses of a Drizzle transaction (PgTransaction, MySqlTransaction): raw SQL, and
 * rollback() to tell it from the database object.
 */
export interface DrizzlePgTransaction {
  execute(query: SQL): PromiseLike<unknown>;
  rollback(): unknown;
}

/** A Drizzle PostgreSQL or MySQL transaction (from db.transaction(async (tx) => …)) as a ForeignTransaction. */
export function fromDrizzle(tx: DrizzlePgTransaction): ForeignTransaction {
  return {
    placeholders: "question",
    problem: () => {
      if (typeof tx?.execute !== "function") return "this is not a Drizzle transaction (drizzle-orm/node-postgres or drizzle-orm/mysql2)";
      // The database object has no rollback(); a transaction has. Whether it has ended, the
      // PostgreSQL and MariaDB stores ask the database itself before they write.
      if (typeof tx.rollback !== "function") return "this Drizzle object is not a transaction: call enqueue inside db.transaction(async (tx) => …) with its tx";
      return null;
    },
    query: async (text, params) => {
      const statement = asTemplate(text, params, {
        text: (piece) => sql.raw(piece),
        value: (param) => sql`${param}`,
        join: (chunks) => sql.join(chunks, sql.raw("")),
      });
      // node-postgres answers a result with rows; postgres.js answers the rows themselves; mysql2
      // answers [rows, fields], or [a ResultSetHeader, fields] for a statement without rows.
      const result = (await tx.execute(statement)) as { rows?: Record<string, unknown>[] } | Record<string, unknown>[];
      if (!Array.isArray(result)) return result.rows ?? [];
      return isMysql2Answer(result) ? (Array.isArray(result[0]) ? (result[0] as Record<string, unknown>[]) : []) : result;
    },
  };
}

/** Whether `result` is mysql2's [rows or ResultSetHeader, fields] rather than a list of rows (whose rows are plain objects, never lists or headers). */
function isMysql2Answer(result: readonly unknown[]): boolean {
  if (result.length !== 2) return false;
  const [first, fields] = result;
  const header = typeof first === "object" && first !== null && "affectedRows" in first && "insertId" in first;
  return (Array.isArray(first) || header) && (fields === undefined || Array.isArray(fields));
}

/** Enqueues `message` inside the Drizzle transaction `tx`, on `store` (see OutboxStore.enqueueIn). */
export function enqueue<P extends JsonValue>(
  store: Pick<OutboxStore<unknown>, "enqueueIn">,
  tx: DrizzlePgTransaction,
  message: NewMessage<P>,
): Promise<OutboxMessage<P>> {
  return store.enqueueIn(fromDrizzle(tx), message);
}
