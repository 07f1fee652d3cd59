// A consumer of the packed package, as an app would write it: type-checked with strict settings,
// then run. It enqueues one message with its business write and has a Worker process it, on the
// store CONSUMER_STORE names. The test also builds a CommonJS twin (consumer.cts) from this file:
// the same code through require(), with everything below "// main" wrapped in an async function.

import { MissingClientError, type OutboxMessage, type OutboxStore, Worker } from "wassal";
import { PostgresOutboxStore } from "wassal/postgres";
import { SqliteOutboxStore } from "wassal/sqlite";

interface Report {
  readonly module: "esm" | "cjs";
  readonly store: string;
  readonly status: string | undefined;
  readonly handled: string[];
  readonly otherStore: string;
}

async function roundTrip<Tx>(store: OutboxStore<Tx>, write: (tx: Tx) => Promise<void>): Promise<{ status: string | undefined; handled: string[] }> {
  await store.migrate();
  const message: OutboxMessage<{ orderId: string }> = await store.transaction(async (tx) => {
    await write(tx);
    return store.enqueue(tx, { type: "order.ship", payload: { orderId: "order-1" } });
  });
  const handled: string[] = [];
  const worker = new Worker({
    store,
    handlers: {
      "order.ship": async (received) => {
        handled.push(JSON.stringify(received.payload));
        return {};
      },
    },
    pollIntervalMs: 20,
  });
  await worker.start();
  const deadline = Date.now() + 20_000;
  let status = (await store.getMessage(message.id))?.status;
  while (status !== "processed" && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 20));
    status = (await store.getMessage(message.id))?.status;
  }
  await worker.stop();
  return { status, handled };
}

/** What opening the other store says: its driver is not installed in this project. */
async function otherStore(which: string): Promise<string> {
  try {
    if (which === "postgres") new SqliteOutboxStore({ path: "never-created.db" });
    else await PostgresOutboxStore.connect({ url: "postgres://127.0.0.1:1/none" });
    return "opened";
  } catch (error) {
    return error instanceof MissingClientError ? `MissingClientError: ${error.message}` : `other: ${String(error)}`;
  }
}

const MODULE: Report["module"] = "esm";
// main
const which = process.env.CONSUMER_STORE ?? "";
let report: Report;
if (which === "postgres") {
  const schema = process.env.CONSUMER_SCHEMA ?? "wassal";
  const store = await PostgresOutboxStore.connect({ url: process.env.CONSUMER_DB ?? "", schema });
  try {
    const result = await roundTrip(store, async (tx) => {
      await tx.query(`CREATE TABLE IF NOT EXISTS ${schema}.orders (id text PRIMARY KEY)`);
      await tx.query(`INSERT INTO ${schema}.orders (id) VALUES ($1)`, ["order-1"]);
    });
    report = { module: MODULE, store: which, ...result, otherStore: await otherStore(which) };
  } finally {
    await store.close();
  }
} else {
  const store = new SqliteOutboxStore({ path: process.env.CONSUMER_DB ?? "" });
  try {
    const result = await roundTrip(store, async (tx) => {
      tx.prepare("CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY)").run();
      tx.prepare("INSERT INTO orders (id) VALUES (?)").run("order-1");
    });
    report = { module: MODULE, store: which, ...result, otherStore: await otherStore(which) };
  } finally {
    await store.close();
  }
}
console.log(JSON.stringify(report));
