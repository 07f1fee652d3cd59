// Fan-out through named subscribers: one enqueue becomes one message per subscriber, in the same
// transaction, each taken by its own subscriber's types with its own lease, attempts, dead letter
// and key order, so one subscriber's dead message holds up only that subscriber's copies.

import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { InvalidArgumentError } from "../../src/outbox/errors.js";
import { subscriptions } from "../../src/outbox/fan-out.js";
import type { OutboxStore } from "../../src/outbox/store.js";
import { openOutbox } from "../../src/stores/open-outbox.js";
import { tempDir } from "../support/temp.js";

const placed = subscriptions({ "order.placed": ["billing", "relay"] });
const opened: { close(): Promise<void> }[] = [];
afterEach(async () => {
  for (const outbox of opened.splice(0)) await outbox.close();
});

async function store(): Promise<OutboxStore<unknown>> {
  const outbox = await openOutbox(join(tempDir("wassal-fan-out-"), "app.db"));
  opened.push(outbox);
  return outbox.store;
}

describe("subscriptions (fan-out)", () => {
  it("makes one message per subscriber, typed and keyed for it; a type without subscribers is left as it is", () => {
    expect(placed.messages({ type: "order.placed", payload: { orderId: "o-1" }, key: "o-1", dedupeKey: "placed-o-1" })).toEqual([
      { type: "order.placed@billing", payload: { orderId: "o-1" }, key: "o-1@billing", dedupeKey: "placed-o-1@billing" },
      { type: "order.placed@relay", payload: { orderId: "o-1" }, key: "o-1@relay", dedupeKey: "placed-o-1@relay" },
    ]);
    expect(placed.messages({ type: "order.paid", payload: 1 })).toEqual([{ type: "order.paid", payload: 1 }]);
    expect(placed.typesOf("billing")).toEqual(["order.placed@billing"]);
    expect(placed.typesOf("nobody")).toEqual([]);
  });

  it("refuses bad subscriber lists, naming what is valid", () => {
    expect(() => subscriptions({ "order.placed": [] })).toThrow(InvalidArgumentError);
    expect(() => subscriptions({ "order.placed": ["bill ing"] })).toThrow(/subscriber "bill ing" of "order\.placed" is not a valid name \(1 to 64 letters/);
    expect(() => subscriptions({ "order.placed": ["a", "a"] })).toThrow(/names a subscriber twice/);
  });

  it("each subscriber's copies have their own lease, dead letter and key order: billing's dead message holds up billing alone", async () => {
    const s = await store();
    await s.transaction(async (tx) => {
      for (const n of [1, 2]) await s.enqueueMany(tx, placed.messages({ type: "order.placed", payload: { n }, key: "o-1" }));
    });
    const billing = { types: placed.typesOf("billing"), limit: 10, leaseMs: 30_000 };
    const relay = { types: placed.typesOf("relay"), limit: 10, leaseMs: 30_000 };

    // Billing's first copy fails for good: dead, and its key (o-1@billing) waits.
    const [first] = await s.claim("billing-worker", billing);
    expect(first).toMatchObject({ message: { type: "order.placed@billing", key: "o-1@billing", payload: { n: 1 } } });
    if (first === undefined) throw new Error("no claim");
    expect(await s.fail(first, new Error("card declined"), "dead")).toMatchObject({ outcome: "dead" });
    expect(await s.claim("billing-worker", billing)).toEqual([]);

    // The relay's copies go on, in their key's order, one at a time.
    const seen: unknown[] = [];
    for (let turn = 0; turn < 2; turn += 1) {
      const leases = await s.claim("relay", relay);
      expect(leases).toHaveLength(1);
      const [lease] = leases;
      if (lease === undefined) throw new Error("no claim");
      seen.push(lease.message.payload);
      expect(await s.complete(lease)).toMatchObject({ outcome: "completed" });
    }
    expect(seen).toEqual([{ n: 1 }, { n: 2 }]);
    expect(await s.pendingByType()).toEqual([{ type: "order.placed@billing", count: 1 }]);
  });
});
