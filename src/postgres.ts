// "wassal/postgres": the outbox on PostgreSQL (pg), for workers on many machines.

export type { PostgresConnectOptions } from "./stores/postgres/connect.js";
export { PostgresOutboxStore, type PostgresStoreOptions, type PostgresTx } from "./stores/postgres/postgres-outbox-store.js";
