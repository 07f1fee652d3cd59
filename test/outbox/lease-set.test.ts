// LeaseSet: leases by message id and token, as the group commit checks and looks them up.

import { describe, expect, it } from "vitest";
import { LeaseSet } from "../../src/outbox/driver.js";

describe("LeaseSet", () => {
  it("holds each (message, token) pair once, a message with several tokens included", () => {
    const set = new LeaseSet();
    expect(set.add("1", 1)).toBe(true);
    expect(set.add("1", 1)).toBe(false);
    expect(set.add("1", 2)).toBe(true); // a stale and a fresh lease of one message
    expect(set.add("1", 2)).toBe(false);
    expect(set.add("1", 3)).toBe(true);
    expect(set.add("12", 1)).toBe(true); // not confused with message 1
    expect([set.has("1", 1), set.has("1", 2), set.has("1", 3), set.has("1", 4)]).toEqual([true, true, true, false]);
    expect([set.has("12", 1), set.has("12", 2), set.has("2", 1)]).toEqual([true, false, false]);
  });
});
