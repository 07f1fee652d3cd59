// Drizzle: the user's own transaction on node-postgres and mysql2 (enqueue), and on better-sqlite3
// (synchronous: store.enqueueSync with the app's connection), each with a one-table and a
// many-table schema.

import type { BetterSQLite3Database } from "drizzle-orm/better-sqlite3";
import type { MySql2Database } from "drizzle-orm/mysql2";
import { int, mysqlTable, varchar } from "drizzle-orm/mysql-core";
import type { NodePgDatabase, NodePgTransaction } from "drizzle-orm/node-postgres";
import { integer, pgTable, text } from "drizzle-orm/pg-core";
import type { ExtractTablesWithRelations } from "drizzle-orm/relations";
import { sqliteTable, text as sqliteText } from "drizzle-orm/sqlite-core";
import type { OutboxMessage } from "wassal";
import { type DrizzlePgTransaction, enqueue, fromDrizzle } from "wassal/drizzle";
import type { MariaDbOutboxStore } from "wassal/mariadb";
import type { PostgresOutboxStore } from "wassal/postgres";
import type { SqliteOutboxStore } from "wassal/sqlite";

const orders = pgTable("orders", { id: text("id").primaryKey(), total: integer("total").notNull() });
const customers = pgTable("customers", { id: text("id").primaryKey(), name: text("name").notNull() });
const lines = pgTable("lines", { orderId: text("order_id").notNull(), sku: text("sku").notNull() });
const oneTable = { orders };
const manyTables = { orders, customers, lines };

declare const postgres: PostgresOutboxStore;
declare const mariadb: MariaDbOutboxStore;
declare const sqlite: SqliteOutboxStore;

export async function pgOneTable(db: NodePgDatabase<typeof oneTable>): Promise<OutboxMessage<{ orderId: string }>> {
  return db.transaction(async (tx) => {
    await tx.insert(orders).values({ id: "o-1", total: 1250 });
    return enqueue(postgres, tx, { type: "order.placed", payload: { orderId: "o-1" } });
  });
}

export async function pgManyTables(db: NodePgDatabase<typeof manyTables>): Promise<void> {
  await db.transaction(async (tx) => {
    await tx.insert(customers).values({ id: "c-1", name: "Amal" });
    await enqueue(postgres, tx, { type: "customer.created", payload: { customerId: "c-1" } });
    await postgres.enqueueManyIn(fromDrizzle(tx), [{ type: "line.added", payload: { sku: "s-1" } }]);
  });
}

export async function pgUntyped(db: NodePgDatabase): Promise<void> {
  await db.transaction(async (tx) => {
    await enqueue(postgres, tx, { type: "order.placed", payload: { orderId: "o-2" } });
  });
}

export function pgParameters(
  one: NodePgTransaction<typeof oneTable, ExtractTablesWithRelations<typeof oneTable>>,
  many: NodePgTransaction<typeof manyTables, ExtractTablesWithRelations<typeof manyTables>>,
): DrizzlePgTransaction[] {
  return [one, many];
}

const myOrders = mysqlTable("orders", { id: varchar("id", { length: 36 }).primaryKey(), total: int("total").notNull() });
const myCustomers = mysqlTable("customers", { id: varchar("id", { length: 36 }).primaryKey(), name: varchar("name", { length: 80 }).notNull() });

export async function mysqlOneTable(db: MySql2Database<{ orders: typeof myOrders }>): Promise<void> {
  await db.transaction(async (tx) => {
    await tx.insert(myOrders).values({ id: "o-1", total: 1250 });
    await enqueue(mariadb, tx, { type: "order.placed", payload: { orderId: "o-1" } });
  });
}

export async function mysqlManyTables(db: MySql2Database<{ orders: typeof myOrders; customers: typeof myCustomers }>): Promise<void> {
  await db.transaction(async (tx) => {
    await tx.insert(myCustomers).values({ id: "c-1", name: "Amal" });
    await enqueue(mariadb, tx, { type: "customer.created", payload: { customerId: "c-1" } });
  });
}

const liteOrders = sqliteTable("orders", { id: sqliteText("id").primaryKey() });
const liteCustomers = sqliteTable("customers", { id: sqliteText("id").primaryKey(), name: sqliteText("name").notNull() });

export function sqliteOneTable(db: BetterSQLite3Database<{ orders: typeof liteOrders }> & { $client: import("better-sqlite3").Database }): OutboxMessage<{ orderId: string }> {
  return db.transaction((tx) => {
    tx.insert(liteOrders).values({ id: "o-1" }).run();
    return sqlite.enqueueSync(db.$client, { type: "order.placed", payload: { orderId: "o-1" } });
  });
}

export function sqliteManyTables(
  db: BetterSQLite3Database<{ orders: typeof liteOrders; customers: typeof liteCustomers }> & { $client: import("better-sqlite3").Database },
): void {
  db.transaction((tx) => {
    tx.insert(liteCustomers).values({ id: "c-1", name: "Amal" }).run();
    sqlite.enqueueSync(db.$client, { type: "customer.created", payload: { customerId: "c-1" } });
  });
}
