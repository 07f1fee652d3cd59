// One relay per shard of a sharded outbox, in one process, publishing to one broker: each shard is
// claimed on its own schedule (a stopped shard holds back no other), and each shard's message ids
// at the broker carry the shard ("shard<n>-"), since each shard numbers its messages on its own.

import { defaultWorkerName } from "../outbox/worker.js";
import { shardIdPrefix } from "../shards/key-hash.js";
import type { ShardedOutbox } from "../shards/sharded-outbox.js";
import { Relay, type RelayOptions } from "./relay.js";

/** Relay options for every shard: each relay gets the same, with its shard's store, name and id prefix. */
export type ShardRelayOptions<Tx> = Omit<RelayOptions<Tx>, "store">;

/** The relays of a sharded outbox, one per shard, sharing one publisher. */
export class ShardRelays<Tx> {
  /** One relay per shard, in shard order; each is named `<name>-shard<n>`, its broker ids prefixed `<idPrefix>shard<n>-`. */
  readonly relays: readonly Relay<Tx>[];

  constructor(outbox: ShardedOutbox<Tx>, options: ShardRelayOptions<Tx>) {
    const name = options.name ?? defaultWorkerName();
    this.relays = outbox.shards.map(
      (store, shard) => new Relay({ ...options, store, name: `${name}-shard${shard}`, idPrefix: shardIdPrefix(shard, options.idPrefix) }),
    );
  }

  /** Starts every shard's relay; if one fails to start, stops the ones started and rethrows. */
  async start(): Promise<void> {
    const started = await Promise.allSettled(this.relays.map((relay) => relay.start()));
    const failed = started.find((result): result is PromiseRejectedResult => result.status === "rejected");
    if (failed !== undefined) {
      await this.stop({ graceMs: 0 });
      throw failed.reason;
    }
  }

  /** Stops every shard's relay (see Relay.stop). */
  async stop(options: { readonly graceMs?: number } = {}): Promise<void> {
    await Promise.all(this.relays.map((relay) => relay.stop(options)));
  }
}
