// TypeORM: the user's own transaction, as the EntityManager of dataSource.transaction and as the
// manager of a QueryRunner, with one entity or many.

import type { DataSource, EntityManager, QueryRunner } from "typeorm";
import type { OutboxMessage } from "wassal";
import type { SqliteOutboxStore } from "wassal/sqlite";
import { enqueue, fromTypeOrm } from "wassal/typeorm";

declare class Order {
  id: string;
  total: number;
}
declare class Customer {
  id: string;
  name: string;
}

declare const store: SqliteOutboxStore;

export async function oneEntity(dataSource: DataSource): Promise<OutboxMessage<{ orderId: string }>> {
  return dataSource.transaction(async (manager) => {
    await manager.insert(Order, { id: "o-1", total: 1250 });
    return enqueue(store, manager, { type: "order.placed", payload: { orderId: "o-1" } });
  });
}

export async function manyEntities(dataSource: DataSource): Promise<void> {
  await dataSource.transaction("READ COMMITTED", async (manager: EntityManager) => {
    await manager.insert(Order, { id: "o-1", total: 1250 });
    await manager.getRepository(Customer).insert({ id: "c-1", name: "Amal" });
    await enqueue(store, manager, { type: "customer.created", payload: { customerId: "c-1" } });
  });
}

export async function queryRunner(dataSource: DataSource): Promise<void> {
  const runner: QueryRunner = dataSource.createQueryRunner();
  await runner.startTransaction();
  await runner.manager.insert(Order, { id: "o-2", total: 10 });
  await enqueue(store, runner.manager, { type: "order.placed", payload: { orderId: "o-2" } });
  await store.enqueueManyIn(fromTypeOrm(runner.manager), [{ type: "order.placed", payload: { orderId: "o-3" } }]);
  await runner.commitTransaction();
  await runner.release();
}
