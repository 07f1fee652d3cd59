// Enqueue inside a TypeORM transaction: the message commits or rolls back with the app's own
// TypeORM writes, on the driver the store uses ("postgres" for the PostgreSQL store, "mariadb" or
// "mysql" over mysql2 for the MariaDB store, "better-sqlite3" on the store's SQLite file). TypeORM
// is an optional peer dependency; nothing of it is loaded here.

import type { EntityManager } from "typeorm";
import type { OutboxStore } from "../outbox/store.js";
import type { ForeignTransaction, JsonValue, NewMessage, OutboxMessage } from "../outbox/types.js";

/**
 * The EntityManager of a TypeORM transaction (dataSource.transaction(async (manager) => …), or
 * queryRunner.manager after queryRunner.startTransaction()) as a ForeignTransaction.
 */
export function fromTypeOrm(manager: EntityManager): ForeignTransaction {
  const type = (manager?.connection?.options as { type?: string } | undefined)?.type;
  return {
    // node-postgres numbers parameters; mysql2 and the SQLite drivers take them in order.
    placeholders: type === "postgres" ? "numbered" : "question",
    problem: () => {
      if (type === undefined) return "this is not a TypeORM EntityManager";
      const runner = manager.queryRunner;
      if (runner === undefined)
        return "this EntityManager is not a transaction's: call enqueue inside dataSource.transaction(async (manager) => …) with its manager";
      if (runner.isReleased || !runner.isTransactionActive) return "this TypeORM transaction is already committed or rolled back";
      return null;
    },
    query: async (sql, params) => {
      // postgres and mysql2 answer the rows; the SQLite drivers answer the rows of a statement that returns rows.
      const result = (await manager.query(sql, [...params])) as unknown;
      if (Array.isArray(result)) return result as Record<string, unknown>[];
      return ((result as { records?: Record<string, unknown>[] }).records ?? []) as Record<string, unknown>[];
    },
  };
}

/** Enqueues `message` inside the TypeORM transaction whose EntityManager is `manager`, on `store` (see OutboxStore.enqueueIn). */
export function enqueue<P extends JsonValue>(
  store: Pick<OutboxStore<unknown>, "enqueueIn">,
  manager: EntityManager,
  message: NewMessage<P>,
): Promise<OutboxMessage<P>> {
  return store.enqueueIn(fromTypeOrm(manager), message);
}
