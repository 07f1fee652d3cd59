// Compiled, never run: `npm test` type-checks this file (tsc -p tsconfig.json). A message map
// declared once types what enqueues, handles and consumes its messages; each `@ts-expect-error`
// line is a mistake the compiler must catch (an unused one fails the compile).

import type { Kysely } from "kysely";
import { enqueue } from "../../src/integrations/kysely.js";
import { messageTypes } from "../../src/outbox/message-types.js";
import type { OutboxStore } from "../../src/outbox/store.js";
import type { Worker } from "../../src/outbox/worker.js";
import type { NatsConsumerOptions } from "../../src/relay/nats-consumer.js";
import type { HandlerMap } from "../../src/runtime/handlers-module.js";

/** Interfaces, not only type aliases: JsonValue alone would refuse them (no index signature). */
interface OrderPlaced {
  readonly orderId: string;
  readonly total: number;
}

const messages = messageTypes<{ "order.placed": OrderPlaced; "order.cancelled": { orderId: string; reason?: string } }>();

declare const store: OutboxStore<unknown>;
declare const db: Kysely<{ orders: { id: string; total: number } }>;

export async function enqueueTyped(): Promise<void> {
  await db.transaction().execute(async (trx) => {
    await enqueue(store, trx, messages.message("order.placed", { orderId: "o-1", total: 1250 }, { key: "o-1" }));
    // @ts-expect-error total is missing
    await enqueue(store, trx, messages.message("order.placed", { orderId: "o-1" }));
    // @ts-expect-error not a type of the map
    await enqueue(store, trx, messages.message("order.placd", { orderId: "o-1", total: 1 }));
  });
  await store.transaction(async (tx) => {
    await store.enqueue(tx, messages.message("order.cancelled", { orderId: "o-1" }));
  });
}

// A handlers module: the payload typed from the map, and the result what a HandlerMap takes.
export const handlers: HandlerMap = messages.handlers({
  "order.placed": async (message) => {
    const cents: number = message.payload.total;
    // @ts-expect-error no such field
    void message.payload.customer;
    return { summary: `placed ${message.payload.orderId} for ${cents}` };
  },
  "order.cancelled": async (message) => {
    const reason: string | undefined = message.payload.reason;
    void reason;
  },
});

messages.handlers({
  // @ts-expect-error not a type of the map
  "order.placd": async () => undefined,
});

export function narrow(worker: Worker<unknown>, message: Parameters<HandlerMap[string]>[0]): number {
  void worker;
  return messages.is(message, "order.placed") ? message.payload.total : 0;
}

// A relay consumer's handler: the body typed from the map, the transaction the inbox's.
declare const pg: { query(sql: string, values: unknown[]): Promise<unknown> };
export const consumerHandle: NatsConsumerOptions<typeof pg>["handle"] = messages.delivery({
  "order.placed": async (message, tx) => {
    await tx.query("INSERT INTO totals (order_id, total) VALUES ($1, $2)", [message.body.orderId, message.body.total]);
    // @ts-expect-error the body has no such field
    void message.body.customer;
  },
});
