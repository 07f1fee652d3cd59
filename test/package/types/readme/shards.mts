// What the README's example of adding a shard assumes: the sharded outbox of the example before it.
import { PostgresOutboxStore, type PostgresTx } from "wassal/postgres";
import type { ShardedOutbox } from "wassal/shards";

declare const outbox: ShardedOutbox<PostgresTx>;
