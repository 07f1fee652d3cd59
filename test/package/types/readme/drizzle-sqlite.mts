// What the README's synchronous Drizzle example assumes: the app's better-sqlite3 Drizzle on the
// store's file, with a one-table schema, and the store.
import type { BetterSQLite3Database } from "drizzle-orm/better-sqlite3";
import { sqliteTable, text } from "drizzle-orm/sqlite-core";
import type { SqliteOutboxStore } from "wassal/sqlite";

const orders = sqliteTable("orders", { id: text("id").primaryKey() });
declare const db: BetterSQLite3Database<{ orders: typeof orders }> & { $client: import("better-sqlite3").Database };
declare const store: SqliteOutboxStore;
