// Prisma 7: the user's own interactive transaction client, generated (prisma-client, by the test)
// from a one-model schema (./prisma-one) and from a many-model schema (./prisma-many). Not part of
// the repository's own type-check (tsconfig.json excludes it): the clients exist only in the test's
// project.

import type { OutboxMessage } from "wassal";
import type { PostgresOutboxStore } from "wassal/postgres";
import { enqueue, fromPrisma, type PrismaTransactionClient } from "wassal/prisma";
import type { PrismaClient as ManyModels, Prisma as PrismaMany } from "./prisma-many/client.js";
import type { PrismaClient as OneModel, Prisma as PrismaOne } from "./prisma-one/client.js";

declare const store: PostgresOutboxStore;

export async function oneModel(prisma: OneModel): Promise<OutboxMessage<{ orderId: string }>> {
  return prisma.$transaction(async (tx) => {
    await tx.order.create({ data: { id: "o-1" } });
    return enqueue(store, tx, { type: "order.placed", payload: { orderId: "o-1" } });
  });
}

export async function manyModels(prisma: ManyModels): Promise<void> {
  await prisma.$transaction(async (tx) => {
    await tx.customer.create({ data: { id: "c-1", name: "Amal" } });
    await enqueue(store, tx, { type: "customer.created", payload: { customerId: "c-1" } });
    await store.enqueueManyIn(fromPrisma(tx), [{ type: "line.added", payload: { sku: "s-1" } }]);
  });
}

export function asParameters(one: PrismaOne.TransactionClient, many: PrismaMany.TransactionClient): PrismaTransactionClient[] {
  return [one, many];
}
