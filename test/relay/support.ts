// Shared by the relay tests: relays (and their publishers) stopped after each test, and moving the
// manual clock (the relay's backoff) until something settles.

import { afterEach } from "vitest";
import type { ManualClock } from "../../src/outbox/clock.js";
import type { OutboxStore } from "../../src/outbox/store.js";
import type { OutgoingMessage, Publisher } from "../../src/relay/publisher.js";
import { Relay, type RelayOptions } from "../../src/relay/relay.js";
import type { OutboxMessage } from "../../src/outbox/types.js";
import { settlesWithin, waitForMessage } from "../worker/support.js";

/** A message for a publisher alone (no outbox): id `test-<n>`, broker id `<n>`, body {"n": n}. */
export function outgoing(n: number | string, destination: string): OutgoingMessage {
  return {
    id: `test-${n}`,
    messageId: String(n),
    type: "t",
    key: null,
    keySeq: null,
    destination,
    headers: {},
    body: JSON.stringify({ n }),
    createdAt: new Date(),
  };
}

/** Moves the manual clock 250 ms at a time until `promise` settles; returns its value. */
export async function advanceUntil<T>(clock: ManualClock, promise: Promise<T>): Promise<T> {
  while (!(await settlesWithin(promise, 50))) clock.advance(250);
  return promise;
}

/** Waits until the message failed and waits for its retry (pending again, with its error): not merely pending before its first claim. */
export function waitForRetry(store: OutboxStore<unknown>, messageId: string): Promise<OutboxMessage> {
  return waitForMessage(store, messageId, "to wait for a retry", (m) => m.status === "pending" && m.lastError !== null);
}

/**
 * Relays started by a test, stopped (with their publishers closed) after it. Call inside the
 * describe, after useStoreHarness, so they stop before the database closes.
 */
export function useRelays(clock: () => ManualClock) {
  const started: { relay: Relay<unknown>; publisher: Publisher }[] = [];
  afterEach(async () => {
    for (const { relay, publisher } of started.splice(0)) {
      await relay.stop({ graceMs: 0 });
      await publisher.close();
    }
  });
  return {
    /** A started relay on the test's clock, polling once a minute (wake-ups do the rest). */
    async start(store: OutboxStore<unknown>, publisher: Publisher, options: Partial<RelayOptions<unknown>> = {}): Promise<Relay<unknown>> {
      const relay = new Relay({ store, publisher, clock: clock(), pollIntervalMs: 60_000, ...options });
      started.push({ relay, publisher });
      await relay.start();
      return relay;
    },
  };
}
