// Compiled, never run: `npm test` type-checks this file (tsc -p tsconfig.json) and fails if the
// Kysely integration stops accepting a user's own transaction. The README's example, on a
// one-table and on a many-table schema: `enqueue(store, trx, …)` with the `trx` of
// `db.transaction().execute`, a `Transaction<DB>` parameter and a `ControlledTransaction<DB>`.
// Under TypeScript 5.9 the one-table case failed with TS2345 (`Transaction<DB>` not assignable to
// `Kysely<{ [x: string]: … }>`) while the integration was generic over the schema.

import type { ControlledTransaction, Kysely, Transaction } from "kysely";
import { enqueue, fromKysely } from "../../src/integrations/kysely.js";
import type { OutboxStore } from "../../src/outbox/store.js";

interface OneTable {
  orders: { id: string; total: number };
}
interface ManyTables {
  orders: { id: string; total: number };
  customers: { id: string; name: string };
  lines: { order_id: string; sku: string; quantity: number };
}

declare const store: OutboxStore<unknown>;

export async function oneTable(db: Kysely<OneTable>): Promise<void> {
  await db.transaction().execute(async (trx) => {
    await trx.insertInto("orders").values({ id: "o-1", total: 1250 }).execute();
    await enqueue(store, trx, { type: "order.placed", payload: { orderId: "o-1" } });
  });
}

export async function manyTables(db: Kysely<ManyTables>): Promise<void> {
  await db.transaction().execute(async (trx) => {
    await trx.insertInto("customers").values({ id: "c-1", name: "Amal" }).execute();
    await enqueue(store, trx, { type: "customer.created", payload: { customerId: "c-1" } });
  });
}

export function asParameter(trx: Transaction<OneTable>, controlled: ControlledTransaction<ManyTables>): unknown[] {
  return [enqueue(store, trx, { type: "t", payload: 1 }), fromKysely(trx), fromKysely(controlled)];
}
