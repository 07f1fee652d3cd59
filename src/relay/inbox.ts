// The consumer's half of the path: an inbox records each received message's id in the consumer's
// own transaction, together with its effect. A message that comes again (the broker redelivered
// it, or the relay re-published it after a crash) finds its id recorded and changes nothing. With
// the outbox on the producing side, the whole path then has an exactly-once effect.

import { InvalidArgumentError } from "../outbox/errors.js";
import type { OutboxStore } from "../outbox/store.js";
import type { InboxBlockedKey } from "../outbox/types.js";

export interface InboxOptions<Tx> {
  /** The consumer's database, as a Wassal store (its transactions and its wassal_inbox table). */
  readonly store: OutboxStore<Tx>;
  /**
   * Where the ids come from, so two producers' ids cannot collide (e.g. the stream or the
   * producer's id prefix). Default "".
   */
  readonly source?: string;
  /**
   * Apply each key's messages in the order of the numbers a relay gives them (default true). Set it
   * to false for a consumer that sees only some of a key's messages (the relay routes the key's
   * messages to several streams, queues or URLs, and this consumer reads one of them): the numbers
   * it misses would hold its keys back for good. Messages are then applied by their id alone.
   */
  readonly keyOrder?: boolean;
}

export type Received<T> = { readonly duplicate: false; readonly result: T } | { readonly duplicate: true };

/** A received message as `handle` takes it to apply it in its key's order: its id, ordering key and number in that key (keySeq). */
export interface KeyedDelivery {
  readonly id: string;
  readonly key: string | null;
  readonly keySeq: number | null;
}

/**
 * What `handle` did with a keyed, numbered message: applied it (its number was the key's next; or
 * `late`: a message not seen before whose number the key had passed, applied rather than lost),
 * found it a duplicate (applied before), or held it back ("early": number `waitingFor` of its key
 * has not been applied yet; nothing was applied, and the message must come again: give it back to
 * the broker).
 */
export type HandledInOrder<T> =
  | { readonly duplicate: false; readonly early: false; readonly late: boolean; readonly result: T }
  | { readonly duplicate: true; readonly early: false }
  | { readonly duplicate: false; readonly early: true; readonly waitingFor: number };

export class Inbox<Tx> {
  readonly store: OutboxStore<Tx>;
  readonly source: string;
  readonly keyOrder: boolean;

  constructor(options: InboxOptions<Tx>) {
    if (typeof options !== "object" || options === null || typeof options.store?.receive !== "function") {
      throw new InvalidArgumentError("Inbox needs options { store, source? }, where store is a Wassal store (wassal/sqlite or wassal/postgres)");
    }
    this.store = options.store;
    this.source = options.source ?? "";
    if (options.keyOrder !== undefined && typeof options.keyOrder !== "boolean")
      throw new InvalidArgumentError(`keyOrder must be true or false (got ${JSON.stringify(options.keyOrder)})`);
    this.keyOrder = options.keyOrder ?? true;
  }

  /**
   * Applies a received message once: in one transaction, records its id and runs `effect` with
   * that transaction. A message whose id is already recorded skips `effect` (duplicate: true). If
   * `effect` throws, nothing is recorded and the error propagates: the message can come again.
   *
   * Given the message's ordering key and number in that key (`keySeq`, which a relay sends), it is
   * also applied in its key's order: number n only after n − 1 (early: true otherwise, with nothing
   * applied), and a number applied before is a duplicate. A message without both is applied by its
   * id alone.
   */
  handle<T>(messageId: string, effect: (tx: Tx) => T | Promise<T>): Promise<Received<T>>;
  handle<T>(message: KeyedDelivery, effect: (tx: Tx) => T | Promise<T>): Promise<HandledInOrder<T>>;
  handle<T>(message: string | KeyedDelivery, effect: (tx: Tx) => T | Promise<T>): Promise<Received<T> | HandledInOrder<T>> {
    const source = this.source;
    if (typeof message === "string") {
      return this.store.transaction(async (tx): Promise<Received<T>> => {
        if (!(await this.store.receive(tx, message, { source }))) return { duplicate: true };
        return { duplicate: false, result: await effect(tx) };
      });
    }
    if (typeof message !== "object" || message === null)
      throw new InvalidArgumentError(`inbox.handle needs a message id or { id, key, keySeq } (got ${message === null ? "null" : typeof message})`);
    const { id, key, keySeq } = message;
    return this.store.transaction(async (tx): Promise<HandledInOrder<T>> => {
      let late = false;
      if (this.keyOrder && key !== null && key !== undefined && keySeq !== null && keySeq !== undefined) {
        const receipt = await this.store.receiveInOrder(tx, { id, key, keySeq }, { source });
        if (receipt.outcome === "early") return { duplicate: false, early: true, waitingFor: receipt.waitingFor };
        if (receipt.outcome === "duplicate") return { duplicate: true, early: false };
        late = receipt.outcome === "late";
      } else if (!(await this.store.receive(tx, id, { source }))) {
        return { duplicate: true, early: false };
      }
      return { duplicate: false, early: false, late, result: await effect(tx) };
    });
  }

  /** Keys of this inbox's source that hold a message back, waiting for an earlier number: see OutboxStore.inboxBlockedKeys. */
  blockedKeys(options: { readonly limit?: number } = {}): Promise<InboxBlockedKey[]> {
    return this.store.inboxBlockedKeys({ ...options, source: this.source });
  }

  /**
   * Gives up waiting for the numbers a key misses at this inbox ("skip"): the lowest number held
   * back is applied when it comes again. A skipped message that comes later is applied then, out
   * of its place (late).
   */
  async unblockKey(key: string, action: "skip"): Promise<{ readonly key: string; readonly skipped: readonly [from: number, to: number] }> {
    if (action !== "skip")
      throw new InvalidArgumentError(
        `an inbox key can only be unblocked with "skip" (got ${JSON.stringify(action)}); to fill the gap instead, redrive the missing message in the producer's outbox`,
      );
    return this.store.skipInboxGap(key, { source: this.source });
  }

  /**
   * Skips the gaps of every key of this source held back for longer than `olderThanMs` (default 0:
   * all), up to `limit` keys (default 1,000): after a consumer joined a stream late, say, when its
   * keys are too many to skip one by one. Returns what each skip did.
   */
  async unblockKeys(
    action: "skip",
    options: { readonly olderThanMs?: number; readonly limit?: number } = {},
  ): Promise<{ readonly key: string; readonly skipped: readonly [from: number, to: number] }[]> {
    if (action !== "skip") throw new InvalidArgumentError(`inbox keys can only be unblocked with "skip" (got ${JSON.stringify(action)})`);
    const olderThanMs = options.olderThanMs ?? 0;
    if (!Number.isSafeInteger(olderThanMs) || olderThanMs < 0)
      throw new InvalidArgumentError(`olderThanMs must be a whole number of milliseconds >= 0 (got ${String(olderThanMs)})`);
    const now = Date.now();
    const done: { readonly key: string; readonly skipped: readonly [from: number, to: number] }[] = [];
    for (const blocked of await this.blockedKeys(options.limit === undefined ? {} : { limit: options.limit })) {
      if (now - blocked.heldSince.getTime() < olderThanMs) continue;
      try {
        done.push(await this.store.skipInboxGap(blocked.key, { source: this.source }));
      } catch (error) {
        // applied meanwhile (its gap filled): nothing to skip
        if ((error as { code?: unknown }).code !== "KEY_NOT_BLOCKED") throw error;
      }
    }
    return done;
  }
}
