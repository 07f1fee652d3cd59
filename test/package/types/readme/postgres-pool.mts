// What the README's shared-pool example assumes: the store's class (imported in the example
// before it), and the app's pool.
import type pg from "pg";
import { PostgresOutboxStore } from "wassal/postgres";

declare const appPool: pg.Pool;
