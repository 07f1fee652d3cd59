// Live message pages: one poll per watched message, however many pages watch it. A poll reads the
// message's state (its row without payload and headers, which never change after enqueue) and the
// length of its audit trail; watchers hear only when that signature changed. When the last watcher
// of a message leaves, its poll stops and nothing of it is kept.

import type { OutboxStore } from "../outbox/store.js";

type Listener = () => void;

interface Watched {
  readonly listeners: Set<Listener>;
  /** Undefined until the first poll answered. */
  signature: string | undefined;
  timer: NodeJS.Timeout | undefined;
}

export class MessageWatch {
  readonly #store: OutboxStore<unknown>;
  readonly #pollMs: number;
  readonly #watched = new Map<string, Watched>();
  #stopped = false;

  constructor(store: OutboxStore<unknown>, pollMs: number) {
    this.#store = store;
    this.#pollMs = pollMs;
  }

  /**
   * Calls `listener` once the message's signature is known (at once when another watcher already
   * knows it), then after every poll that changed it. The returned function stops listening.
   */
  watch(messageId: string, listener: Listener): () => void {
    let watched = this.#watched.get(messageId);
    if (watched === undefined) {
      watched = { listeners: new Set(), signature: undefined, timer: undefined };
      this.#watched.set(messageId, watched);
      if (!this.#stopped) void this.#poll(messageId, watched);
    } else if (watched.signature !== undefined) {
      queueMicrotask(listener);
    }
    watched.listeners.add(listener);
    const entry = watched;
    return () => {
      entry.listeners.delete(listener);
      if (entry.listeners.size === 0 && this.#watched.get(messageId) === entry) {
        clearTimeout(entry.timer);
        this.#watched.delete(messageId);
      }
    };
  }

  /** How many messages are being polled (one per message, however many watch it). */
  get polled(): number {
    return this.#watched.size;
  }

  /** Stops every poll (watchers hear nothing more). */
  stop(): void {
    this.#stopped = true;
    for (const watched of this.#watched.values()) clearTimeout(watched.timer);
  }

  async #poll(messageId: string, watched: Watched): Promise<void> {
    let signature: string;
    try {
      const [state, trail] = await Promise.all([this.#store.getMessageState(messageId), this.#store.auditTrail({ messageId })]);
      signature = JSON.stringify([state ?? null, trail.length]);
    } catch (error) {
      // The page shows the error when it fetches its fragment again.
      signature = JSON.stringify(["error", error instanceof Error ? error.message : String(error)]);
    }
    if (this.#watched.get(messageId) !== watched || this.#stopped) return; // every watcher left while it was read
    if (signature !== watched.signature) {
      watched.signature = signature;
      for (const listener of watched.listeners) listener();
    }
    watched.timer = setTimeout(() => void this.#poll(messageId, watched), this.#pollMs);
    watched.timer.unref();
  }
}
