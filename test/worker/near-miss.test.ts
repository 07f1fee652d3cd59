// The near-miss warning at start: a type taken with nothing pending, one or two edits away from a
// pending type nothing here takes, is named with that type and its count.

import { describe, expect, it } from "vitest";
import { nearMisses, nearMissText } from "../../src/runtime/near-miss.js";

describe("nearMisses", () => {
  const pending = [
    { type: "order.placed", count: 200 },
    { type: "order.paid", count: 3 },
    { type: "invoice.sent", count: 1 },
  ];

  it("names the pending type a taken type with nothing pending is likely meant to be", () => {
    expect(nearMisses(["order.placd"], pending)).toEqual([{ type: "order.placd", meant: "order.placed", pending: 200 }]);
    expect(nearMissText({ type: "order.placd", meant: "order.placed", pending: 200 })).toBe(
      "order.placd: did you mean order.placed? 200 pending (nothing of order.placd is)",
    );
  });

  it("says nothing of a type with messages pending, of a type far from any, or of a pending type this process takes", () => {
    expect(nearMisses(["order.placed"], pending)).toEqual([]);
    expect(nearMisses(["shipment.booked"], pending)).toEqual([]);
    // order.paid is taken here, so order.pad is not a near miss of it (its messages are not stranded).
    expect(nearMisses(["order.paid", "order.pad"], [{ type: "order.paid", count: 0 }])).toEqual([]);
  });

  it("allows one edit per four characters: a short type does not match everything", () => {
    expect(nearMisses(["a.b"], [{ type: "a.c", count: 1 }])).toEqual([{ type: "a.b", meant: "a.c", pending: 1 }]);
    expect(nearMisses(["a.b"], [{ type: "x.y", count: 1 }])).toEqual([]);
  });
});
