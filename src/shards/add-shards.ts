// Adding shards at the end of a sharded outbox. Jump hash moves only the keys whose new shard is
// one of the added ones, about 1 / (N + 1) of them per shard added. A key may move only when idle:
// with a message pending, running, or dead and holding the key on its old shard, its next message
// on the new shard could run before it, so the addition is refused and the keys are named. An idle
// key carries its place in its order (its next keySeq) to its new shard, so that a consumer's inbox
// takes its next messages as new rather than as repeats.
//
// Nothing here stops the app from enqueueing, or the workers from retrying, while it runs: stop
// enqueues to the outbox and let the workers finish first, add the shards, then start the app with
// the longer list. The busy check reads pending, then running messages, then dead holders, not one
// snapshot, so it is a safety net for that procedure, not a lock: the plan is read again after the
// carry, and a key that became busy meanwhile is reported (busyAfter).

import { InvalidArgumentError, WassalError } from "../outbox/errors.js";
import type { OutboxStore } from "../outbox/store.js";
import type { KeySequence, MessageStatus } from "../outbox/types.js";
import { MAX_ENQUEUE_MANY } from "../outbox/validate.js";
import { shardOfKey } from "./key-hash.js";
import { ShardedOutbox } from "./sharded-outbox.js";

/** A key that would move to an added shard while it has unfinished messages on its old one. */
export interface BusyKeyMove {
  readonly key: string;
  readonly from: number;
  readonly to: number;
  /** Its unfinished messages on its old shard: pending, processing, or a dead one holding the key. */
  readonly unfinished: number;
}

/** What adding shards would do, and what stands in its way. */
export interface AddShardsPlan {
  readonly shardsBefore: number;
  readonly shardsAfter: number;
  /** Keys with unfinished messages that would move: while there are any, the addition is refused. */
  readonly busyKeys: readonly BusyKeyMove[];
  /** Added shards (by their new number) that already hold messages or remembered key numbers: refused, since a new shard must start empty. */
  readonly notEmpty: readonly number[];
}

/** The result of adding shards. */
export interface AddedShards<Tx> {
  /** The outbox over the longer list of shards: give the app and its workers this list, in this order. */
  readonly outbox: ShardedOutbox<Tx>;
  /** Idle keys whose place in their order was carried to their new shard. */
  readonly carried: number;
  /** Keys that became busy while the places were carried (enqueues were not stopped): check these keys' order by hand. */
  readonly busyAfter: readonly BusyKeyMove[];
}

/** Adding shards was refused: some keys that would move have unfinished messages, or a new shard is not empty. Nothing was written. */
export class AddShardsRefusedError extends WassalError {
  override name = "AddShardsRefusedError";
  readonly plan: AddShardsPlan;
  constructor(plan: AddShardsPlan) {
    const parts: string[] = [];
    if (plan.busyKeys.length > 0) {
      const shown = plan.busyKeys.slice(0, 5).map((move) => `"${move.key}" (${move.unfinished} on shard ${move.from})`);
      const more = plan.busyKeys.length > 5 ? ` and ${plan.busyKeys.length - 5} more` : "";
      parts.push(
        `${plan.busyKeys.length} key(s) that would move have unfinished messages: ${shown.join(", ")}${more}. Stop enqueueing, let the workers finish them (redrive or skip dead holders), then add the shards again`,
      );
    }
    if (plan.notEmpty.length > 0)
      parts.push(`new shard(s) ${plan.notEmpty.join(", ")} already hold messages or key numbers: a new shard must start empty (a new database or schema)`);
    super("ADD_SHARDS_REFUSED", `adding shards ${plan.shardsBefore} → ${plan.shardsAfter} was refused, nothing written: ${parts.join("; ")}`);
    this.plan = plan;
  }
}

const UNFINISHED: readonly MessageStatus[] = ["pending", "processing"];
const PAGE = 1000;

/** What adding `added` at the end of `outbox` would do (reads every unfinished message of every shard). */
export async function planAddShards<Tx>(outbox: ShardedOutbox<Tx>, added: readonly OutboxStore<Tx>[]): Promise<AddShardsPlan> {
  const shardsBefore = outbox.shards.length;
  const shardsAfter = checkAdded(outbox, added);
  const busyKeys: BusyKeyMove[] = [];
  for (const [from, store] of outbox.shards.entries()) {
    for (const [key, unfinished] of await unfinishedKeys(store)) {
      const to = shardOfKey(key, shardsAfter);
      if (to !== from) busyKeys.push({ key, from, to, unfinished });
    }
  }
  const notEmpty: number[] = [];
  for (const [index, store] of added.entries()) {
    // Messages, or key numbers remembered from earlier use (which would win over the carried ones).
    const { counts } = await store.stats();
    const remembered = await store.keySequences({ limit: 1 });
    if (counts.pending + counts.processing + counts.processed + counts.dead > 0 || remembered.length > 0) notEmpty.push(shardsBefore + index);
  }
  return { shardsBefore, shardsAfter, busyKeys, notEmpty };
}

/**
 * Adds `added` (migrated, empty stores) at the end of `outbox`'s shards: refuses with
 * AddShardsRefusedError, writing nothing, while a key that would move is busy or a new shard holds
 * messages; else carries each moving key's place in its order to its new shard.
 */
export async function addShards<Tx>(outbox: ShardedOutbox<Tx>, added: readonly OutboxStore<Tx>[]): Promise<AddedShards<Tx>> {
  const plan = await planAddShards(outbox, added);
  if (plan.busyKeys.length > 0 || plan.notEmpty.length > 0) throw new AddShardsRefusedError(plan);
  const grown = new ShardedOutbox<Tx>([...outbox.shards, ...added]);
  let carried = 0;
  for (const [from, store] of outbox.shards.entries()) {
    const moving = new Map<number, KeySequence[]>();
    for (let after: string | undefined, page: KeySequence[]; ; after = page.at(-1)?.key) {
      page = await store.keySequences({ ...(after === undefined ? {} : { after }), limit: PAGE });
      for (const turn of page) {
        // A key remembered here that lives elsewhere (left behind by an earlier addition) is not this shard's to carry.
        if (shardOfKey(turn.key, plan.shardsBefore) !== from) continue;
        const to = shardOfKey(turn.key, plan.shardsAfter);
        if (to === from) continue;
        const list = moving.get(to) ?? [];
        list.push(turn);
        moving.set(to, list);
      }
      if (page.length < PAGE) break;
    }
    for (const [to, turns] of moving) {
      const target = grown.shards[to] as OutboxStore<Tx>;
      for (let start = 0; start < turns.length; start += MAX_ENQUEUE_MANY) await target.carryKeySequences(turns.slice(start, start + MAX_ENQUEUE_MANY));
      carried += turns.length;
    }
  }
  const after = await planAddShards(outbox, added);
  return { outbox: grown, carried, busyAfter: after.busyKeys };
}

function checkAdded<Tx>(outbox: ShardedOutbox<Tx>, added: readonly OutboxStore<Tx>[]): number {
  if (!Array.isArray(added) || added.length === 0) throw new InvalidArgumentError("give one or more stores to add as new shards (got none)");
  const all = [...outbox.shards, ...added];
  if (new Set(all).size !== all.length) throw new InvalidArgumentError("a store to add is already a shard, or is given twice");
  return all.length;
}

/** The ordering keys with unfinished messages on a store, and how many each has. */
async function unfinishedKeys<Tx>(store: OutboxStore<Tx>): Promise<Map<string, number>> {
  const keys = new Map<string, number>();
  for (const status of UNFINISHED) {
    for (let after: string | null = null; ; ) {
      const page = await store.pageMessages({ status, order: "oldest", limit: PAGE, ...(after === null ? {} : { after }) });
      for (const message of page.messages) if (message.key !== null) keys.set(message.key, (keys.get(message.key) ?? 0) + 1);
      after = page.next;
      if (after === null) break;
    }
  }
  for (const blocked of await store.blockedKeys({ limit: 100_000 })) keys.set(blocked.key, (keys.get(blocked.key) ?? 0) + 1); // its waiting messages are pending, counted above
  return keys;
}
