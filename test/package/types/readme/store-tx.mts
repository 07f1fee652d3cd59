// What the README's enqueue examples assume: a store, a transaction of it, and the values they send.
import type { SqliteOutboxStore, SqliteTx } from "wassal/sqlite";

declare const store: SqliteOutboxStore;
declare const tx: SqliteTx;
declare const requestId: string;
declare const invoiceId: string;
declare const lines: { sku: string; quantity: number }[];
