// What the README's Knex example assumes: the app's Knex, and a store.
import type { Knex } from "knex";
import type { PostgresOutboxStore } from "wassal/postgres";

declare const knex: Knex;
declare const store: PostgresOutboxStore;
