// A consumer of the packed package on MariaDB, as an app would write it from the README: the store
// opened from a URL, migrated, a business write and its message in one transaction, a Worker
// processing it. Type-checked with strict settings in a project that installs mysql2 alone, then
// run as an ES module and (the part below "// main", wrapped) as CommonJS.

import { MissingClientError, type OutboxMessage, Worker } from "wassal";
import { MariaDbOutboxStore } from "wassal/mariadb";
import { SqliteOutboxStore } from "wassal/sqlite";

interface Report {
  readonly module: "esm" | "cjs";
  readonly store: string;
  readonly status: string | undefined;
  readonly handled: string[];
  readonly otherStore: string;
}

/** What opening the SQLite store says: its driver is not installed in this project. */
function otherStore(): string {
  try {
    new SqliteOutboxStore({ path: "never-created.db" });
    return "opened";
  } catch (error) {
    return error instanceof MissingClientError ? `MissingClientError: ${error.message}` : `other: ${String(error)}`;
  }
}

const MODULE: Report["module"] = "esm";
// main
const store = await MariaDbOutboxStore.connect({
  url: process.env.CONSUMER_DB ?? "", // mariadb://user@host:3306/database
  maxConnections: 10,
});
let report: Report;
try {
  await store.migrate();
  const message: OutboxMessage<{ orderId: string }> = await store.transaction(async (tx) => {
    await tx.query("CREATE TABLE IF NOT EXISTS orders (id VARCHAR(64) PRIMARY KEY)");
    await tx.query("INSERT INTO orders (id) VALUES (?)", ["order-1"]);
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
  report = { module: MODULE, store: "mariadb", status, handled, otherStore: otherStore() };
} finally {
  await store.close();
}
console.log(JSON.stringify(report));
