// "wassal/mariadb": the outbox on MariaDB 10.6 or later (mysql2), for workers on many machines.

export type { MariaDbConnectOptions } from "./stores/mariadb/connect.js";
export { MariaDbOutboxStore, type MariaDbStoreOptions, type MariaDbTx } from "./stores/mariadb/mariadb-outbox-store.js";
export type { MariaDbMigration } from "./stores/mariadb/outbox-sql.js";
