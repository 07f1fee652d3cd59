// The consumers' parking of early messages: each is tried again after a wait that grows with its
// tries, at once when a message of its key is applied, and the due ones come out in their key's order.

import { describe, expect, it } from "vitest";
import { Parking } from "../../src/relay/parking.js";

describe("parking early messages", () => {
  it("holds a message for 50 ms, doubling with each try to 1 s; a message of its key applied makes it due at once", () => {
    let now = 1_000;
    const parking = new Parking<string>(() => now);
    parking.park("a-3", "a", 3, 0);
    parking.park("b-2", "b", 2, 4);
    expect(parking.size).toBe(2);
    expect(parking.nextDueIn()).toBe(50);
    expect(parking.takeDue()).toEqual([]);
    now += 50;
    expect(parking.takeDue().map((p) => [p.item, p.tries])).toEqual([["a-3", 1]]);
    expect(parking.nextDueIn()).toBe(750); // b-2: 50 × 2^4 = 800 ms after it was parked
    parking.applied("b");
    expect(parking.takeDue().map((p) => p.item)).toEqual(["b-2"]);
    expect(parking.nextDueIn()).toBe(Number.POSITIVE_INFINITY);
    parking.park("c-9", "c", 9, 10);
    now += 999;
    expect(parking.takeDue()).toEqual([]);
    now += 1;
    expect(parking.takeDue().map((p) => p.item)).toEqual(["c-9"]); // at most 1 s
  });

  it("gives the due messages in each key's order, and hands all of them back when cleared", () => {
    const parking = new Parking<string>(() => 0);
    for (const [item, key, seq] of [
      ["a-5", "a", 5],
      ["b-2", "b", 2],
      ["a-4", "a", 4],
    ] as const)
      parking.park(item, key, seq, 0);
    parking.applied("a");
    parking.applied("b");
    expect(parking.takeDue().map((p) => p.item)).toEqual(["a-4", "a-5", "b-2"]);
    parking.park("x", "x", 1, 0);
    expect(parking.items()).toEqual(["x"]);
    expect(parking.clear()).toEqual(["x"]);
    expect(parking.size).toBe(0);
  });
});
