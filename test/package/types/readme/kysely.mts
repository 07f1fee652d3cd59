// What the README's Kysely example assumes: the app's Kysely on a one-table schema (the case that
// failed under TypeScript 5.9 and 7.0), and a store.
import type { Kysely } from "kysely";
import type { PostgresOutboxStore } from "wassal/postgres";

interface Database {
  orders: { id: string };
}
declare const db: Kysely<Database>;
declare const store: PostgresOutboxStore;
