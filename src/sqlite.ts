// "wassal/sqlite": the outbox on one SQLite file (better-sqlite3).

export type { Synchronous } from "./stores/sqlite/open-database.js";
export { SqliteOutboxStore, type SqliteStoreOptions, type SqliteTx } from "./stores/sqlite/sqlite-outbox-store.js";
