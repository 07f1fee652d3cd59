// What the README's relay and inbox examples assume: a store.
import type { PostgresOutboxStore } from "wassal/postgres";

declare const store: PostgresOutboxStore;
