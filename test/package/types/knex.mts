// Knex: the user's own transaction, untyped and typed by a table's rows (one table) or a
// Tables map (many), from the callback and from `await knex.transaction()`.

import type { Knex } from "knex";
import type { OutboxMessage } from "wassal";
import { enqueue, fromKnex } from "wassal/knex";
import type { MariaDbOutboxStore } from "wassal/mariadb";

interface Order {
  id: string;
  total: number;
}
interface Customer {
  id: string;
  name: string;
}

declare const store: MariaDbOutboxStore;

export async function callback(knex: Knex): Promise<OutboxMessage<{ orderId: string }>> {
  return knex.transaction(async (trx) => {
    await trx<Order>("orders").insert({ id: "o-1", total: 1250 });
    await trx<Customer>("customers").insert({ id: "c-1", name: "Amal" });
    return enqueue(store, trx, { type: "order.placed", payload: { orderId: "o-1" } });
  });
}

export async function oneTable(knex: Knex<Order, Order[]>): Promise<void> {
  const trx: Knex.Transaction<Order, Order[]> = await knex.transaction();
  await trx.insert({ id: "o-2", total: 10 }).into("orders");
  await enqueue(store, trx, { type: "order.placed", payload: { orderId: "o-2" } });
  await store.enqueueManyIn(fromKnex(trx), [{ type: "order.placed", payload: { orderId: "o-3" } }]);
  await trx.commit();
}

export async function manyTables(knex: Knex<Order | Customer>): Promise<void> {
  await knex.transaction(async (trx: Knex.Transaction<Order | Customer>) => {
    await enqueue(store, trx, { type: "customer.created", payload: { customerId: "c-1" } });
  });
}
