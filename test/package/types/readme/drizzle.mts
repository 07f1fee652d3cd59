// What the README's Drizzle example assumes: the app's node-postgres Drizzle with a one-table
// schema, and a store.
import type { NodePgDatabase } from "drizzle-orm/node-postgres";
import { pgTable, text } from "drizzle-orm/pg-core";
import type { PostgresOutboxStore } from "wassal/postgres";

const orders = pgTable("orders", { id: text("id").primaryKey() });
declare const db: NodePgDatabase<{ orders: typeof orders }>;
declare const store: PostgresOutboxStore;
