// "wassal/postgres": the outbox on PostgreSQL (pg), for workers on many machines; and a feed of its
// inserts from a logical replication slot, for the WAL relay (wassal/relay: WalRelay).

export type { PostgresConnectOptions } from "./stores/postgres/connect.js";
export { PostgresOutboxStore, type PostgresStoreOptions, type PostgresTx } from "./stores/postgres/postgres-outbox-store.js";
export { LogicalReplicationUnavailableError, openWalFeed, type WalFeedOptions } from "./stores/postgres/wal-feed.js";
