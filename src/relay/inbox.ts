// The consumer's half of the path: an inbox records each received message's id in the consumer's
// own transaction, together with its effect. A message that comes again (the broker redelivered
// it, or the relay re-published it after a crash) finds its id recorded and changes nothing. With
// the outbox on the producing side, the whole path then has an exactly-once effect.

import { InvalidArgumentError } from "../outbox/errors.js";
import type { OutboxStore } from "../outbox/store.js";

export interface InboxOptions<Tx> {
  /** The consumer's database, as a Wassal store (its transactions and its wassal_inbox table). */
  readonly store: OutboxStore<Tx>;
  /**
   * Where the ids come from, so two producers' ids cannot collide (e.g. the stream or the
   * producer's id prefix). Default "".
   */
  readonly source?: string;
}

export type Received<T> = { readonly duplicate: false; readonly result: T } | { readonly duplicate: true };

export class Inbox<Tx> {
  readonly store: OutboxStore<Tx>;
  readonly source: string;

  constructor(options: InboxOptions<Tx>) {
    if (typeof options !== "object" || options === null || typeof options.store?.receive !== "function") {
      throw new InvalidArgumentError("Inbox needs options { store, source? }, where store is a Wassal store (wassal/sqlite or wassal/postgres)");
    }
    this.store = options.store;
    this.source = options.source ?? "";
  }

  /**
   * Applies a received message once: in one transaction, records its id and runs `effect` with
   * that transaction. A message whose id is already recorded skips `effect` (duplicate: true). If
   * `effect` throws, nothing is recorded and the error propagates: the message can come again.
   */
  handle<T>(messageId: string, effect: (tx: Tx) => T | Promise<T>): Promise<Received<T>> {
    return this.store.transaction(async (tx): Promise<Received<T>> => {
      if (!(await this.store.receive(tx, messageId, { source: this.source }))) return { duplicate: true };
      return { duplicate: false, result: await effect(tx) };
    });
  }
}
