// Enqueue inside a Kysely transaction: the message commits or rolls back with the app's own Kysely
// writes. Works on the dialect the store uses (PostgresDialect for the PostgreSQL store,
// MysqlDialect over a mysql2 pool for the MariaDB store, SqliteDialect on the store's SQLite
// file). Kysely is an optional peer dependency.

import { type QueryExecutorProvider, sql } from "kysely";
import { NotInTransactionError } from "../outbox/errors.js";
import type { OutboxStore } from "../outbox/store.js";
import type { ForeignTransaction, JsonValue, NewMessage, OutboxMessage } from "../outbox/types.js";
import { asTemplate } from "./split.js";

/** The state Kysely's transactions show: a ControlledTransaction says whether it ended. */
interface MaybeControlled {
  readonly isTransaction: boolean;
  readonly isCommitted?: boolean;
  readonly isRolledBack?: boolean;
}

/**
 * What Wassal uses of a Kysely transaction: something raw SQL runs on, and whether it is one. A
 * `Transaction<DB>` or `ControlledTransaction<DB>` of any schema is one, as is a `Kysely<DB>`
 * (refused at run time: not a transaction). Not generic over the schema: inferring `DB` from a
 * `Transaction<DB>` against `Kysely<DB>` failed on one-table schemas (TS2345 under TypeScript 5.9).
 */
export interface KyselyTransaction extends QueryExecutorProvider {
  readonly isTransaction: boolean;
}

/** A Kysely transaction (from db.transaction().execute, or db.startTransaction) as a ForeignTransaction. */
export function fromKysely(trx: KyselyTransaction): ForeignTransaction {
  const state = trx as unknown as MaybeControlled;
  return {
    placeholders: "question",
    problem: () => {
      if (state.isTransaction !== true)
        return "this Kysely instance is not a transaction: call enqueue inside db.transaction().execute(async (trx) => …) with its trx";
      if (state.isCommitted === true) return "this Kysely transaction is already committed";
      if (state.isRolledBack === true) return "this Kysely transaction is already rolled back";
      return null;
    },
    query: async (text, params) => {
      const statement = asTemplate(text, params, {
        text: (piece) => sql.raw(piece),
        value: (param) => sql.val(param),
        join: (chunks) => sql.join(chunks, sql.raw("")),
      });
      try {
        return (await statement.execute(trx)).rows as Record<string, unknown>[];
      } catch (error) {
        // A callback transaction that has ended refuses further queries: nothing was written.
        if (error instanceof Error && /Transaction is already (committed|rolled back)/.test(error.message)) {
          throw new NotInTransactionError(`enqueue needs an open transaction: ${error.message.toLowerCase()}; nothing was written`, { cause: error });
        }
        throw error;
      }
    },
  };
}

/** Enqueues `message` inside the Kysely transaction `trx`, on `store` (see OutboxStore.enqueueIn). */
export function enqueue<P extends JsonValue>(
  store: Pick<OutboxStore<unknown>, "enqueueIn">,
  trx: KyselyTransaction,
  message: NewMessage<P>,
): Promise<OutboxMessage<P>> {
  return store.enqueueIn(fromKysely(trx), message);
}
