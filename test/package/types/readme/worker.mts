// What the README's Worker example assumes: a store, and the app's shipping client and write.
import type { OutboxMessage } from "wassal";
import type { SqliteOutboxStore, SqliteTx } from "wassal/sqlite";

declare const store: SqliteOutboxStore;
declare const shipping: { ship(order: unknown, options: { signal: AbortSignal }): Promise<void> };
declare function markShipped(tx: SqliteTx, message: OutboxMessage): void;
