// Enqueue inside a Knex transaction: the message commits or rolls back with the app's own Knex
// writes, on the client the store uses ("pg" for the PostgreSQL store, "mysql2" for the MariaDB
// store, "better-sqlite3" on the store's SQLite file). Knex is an optional peer dependency;
// nothing of it is loaded here.

import type { Knex } from "knex";
import type { OutboxStore } from "../outbox/store.js";
import type { ForeignTransaction, JsonValue, NewMessage, OutboxMessage } from "../outbox/types.js";

/** A Knex transaction (from knex.transaction(async (trx) => …) or await knex.transaction()) as a ForeignTransaction. */
export function fromKnex(trx: Knex.Transaction | Knex): ForeignTransaction {
  return {
    placeholders: "question",
    problem: () => {
      const maybe = trx as Partial<Knex.Transaction>;
      if (maybe.isTransaction !== true || typeof maybe.isCompleted !== "function") {
        return "this Knex instance is not a transaction: call enqueue inside knex.transaction(async (trx) => …) with its trx";
      }
      if (maybe.isCompleted()) return "this Knex transaction is already committed or rolled back";
      return null;
    },
    query: async (text, params) => {
      const result = (await trx.raw(text, params as Knex.RawBinding[])) as unknown;
      // mysql2 answers [rows, fields] (or [a ResultSetHeader, fields] for a statement without rows).
      if ((trx as { client?: { dialect?: unknown } }).client?.dialect === "mysql") {
        const rows = (result as unknown[])[0];
        return Array.isArray(rows) ? (rows as Record<string, unknown>[]) : [];
      }
      // pg answers a result with rows; better-sqlite3 answers the rows themselves.
      const answer = result as { rows?: Record<string, unknown>[] } | Record<string, unknown>[];
      return Array.isArray(answer) ? answer : (answer.rows ?? []);
    },
  };
}

/** Enqueues `message` inside the Knex transaction `trx`, on `store` (see OutboxStore.enqueueIn). */
export function enqueue<P extends JsonValue>(
  store: Pick<OutboxStore<unknown>, "enqueueIn">,
  trx: Knex.Transaction,
  message: NewMessage<P>,
): Promise<OutboxMessage<P>> {
  return store.enqueueIn(fromKnex(trx), message);
}
