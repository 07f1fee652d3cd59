// Kysely: the user's own transaction types, on a one-table and on a many-table schema. Under
// TypeScript 5.9 the one-table case failed with TS2345 (`Transaction<DB>` not assignable to
// `Kysely<{ [x: string]: … }>`) while the integration was generic over the schema; under 7.0 it
// failed for one table and passed for two.

import type { ControlledTransaction, Kysely, Transaction } from "kysely";
import type { OutboxMessage } from "wassal";
import { enqueue, fromKysely, type KyselyTransaction } from "wassal/kysely";
import type { PostgresOutboxStore } from "wassal/postgres";

interface OneTable {
  orders: { id: string; total: number };
}
interface ManyTables {
  orders: { id: string; total: number };
  customers: { id: string; name: string };
  lines: { order_id: string; sku: string; quantity: number };
}

declare const store: PostgresOutboxStore;

export async function oneTable(db: Kysely<OneTable>): Promise<OutboxMessage<{ orderId: string }>> {
  return db.transaction().execute(async (trx) => {
    await trx.insertInto("orders").values({ id: "o-1", total: 1250 }).execute();
    return enqueue(store, trx, { type: "order.placed", payload: { orderId: "o-1" } });
  });
}

export async function manyTables(db: Kysely<ManyTables>): Promise<void> {
  await db.transaction().execute(async (trx) => {
    await trx.insertInto("customers").values({ id: "c-1", name: "Amal" }).execute();
    await enqueue(store, trx, { type: "customer.created", payload: { customerId: "c-1" } });
    await store.enqueueManyIn(fromKysely(trx), [{ type: "line.added", payload: { sku: "s-1" } }]);
  });
}

export async function controlled(db: Kysely<OneTable>, many: Kysely<ManyTables>): Promise<void> {
  const trx: ControlledTransaction<OneTable> = await db.startTransaction().execute();
  await enqueue(store, trx, { type: "order.placed", payload: { orderId: "o-2" } });
  await trx.commit().execute();
  const other = await many.startTransaction().execute();
  await enqueue(store, other, { type: "order.placed", payload: { orderId: "o-3" } });
  await other.rollback().execute();
}

export function asParameters(one: Transaction<OneTable>, manyTrx: Transaction<ManyTables>, manyControlled: ControlledTransaction<ManyTables>): KyselyTransaction[] {
  return [one, manyTrx, manyControlled, fromKysely(one) && one];
}
