// "wassal/shards": N outbox stores behind one enqueue, routed by a stable hash of the ordering key,
// with a worker per shard and stats summed over them. It loads no database driver: open each
// shard's store from its own entry point ("wassal/postgres", "wassal/sqlite", "wassal/mariadb").

export { AddShardsRefusedError, addShards, planAddShards, type AddedShards, type AddShardsPlan, type BusyKeyMove } from "./shards/add-shards.js";
export { jumpShard, keyHash, shardIdPrefix, shardOfKey } from "./shards/key-hash.js";
export { ShardedOutbox, type ShardedStats, type ShardRoute, type ShardTransaction } from "./shards/sharded-outbox.js";
export { ShardWorkers, type ShardWorkerOptions } from "./shards/shard-workers.js";
