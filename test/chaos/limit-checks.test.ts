// The flow-control judge over hand-made audit trails: it finds too many leases at once and too
// many claims in an interval, and passes a trail that keeps both.

import { describe, expect, it } from "vitest";
import { judgeLimits } from "../../src/chaos/limit-checks.js";
import type { AuditAction, AuditEntry } from "../../src/outbox/types.js";

const entry = (messageId: string, token: number, action: AuditAction, at: number): AuditEntry => ({
  messageId,
  token,
  owner: "w",
  action,
  at: new Date(at),
  previousStatus: null,
  previousOwner: null,
  previousLockedUntil: null,
  operation: null,
});

const typeOf = (id: string) => (id.startsWith("x") ? "other" : "limited");
const LEASE_MS = 1_000;

describe("judgeLimits", () => {
  it("passes leases that never overlap beyond the concurrency, ending at completion, next claim or lease end", () => {
    const trail = [
      entry("a", 1, "claim", 0),
      entry("a", 1, "complete", 100),
      entry("b", 1, "claim", 100), // a's slot freed at 100
      entry("c", 1, "claim", 150), // b's worker dies: its lease ends at 1,100
      entry("c", 1, "release", 1_100),
      entry("b", 2, "claim", 1_100),
      entry("x1", 1, "claim", 0), // another type: not judged
      entry("x2", 1, "claim", 0),
      entry("x3", 1, "claim", 0),
    ];
    const report = judgeLimits(trail, new Map([["limited", { concurrency: 2, rate: null }]]), typeOf, LEASE_MS);
    expect(report.excesses).toEqual([]);
    expect(report.peaks.limited?.running).toBe(2);
  });

  it("finds three leases at once under a concurrency of 2", () => {
    const trail = [entry("a", 1, "claim", 0), entry("b", 1, "claim", 10), entry("c", 1, "claim", 999), entry("a", 1, "complete", 1_000)];
    const report = judgeLimits(trail, new Map([["limited", { concurrency: 2, rate: null }]]), typeOf, LEASE_MS);
    expect(report.excesses).toMatchObject([{ type: "limited", limit: "concurrency", seen: 3, allowed: 2 }]);
  });

  it("finds four claims in one sliding interval under a rate of 3, and none when the fourth is an interval after the first", () => {
    const rate = new Map([["limited", { concurrency: null, rate: { count: 3, intervalMs: 1_000 } }]]);
    const claims = (times: number[]) => times.flatMap((at, n) => [entry(`m${n}`, 1, "claim", at), entry(`m${n}`, 1, "complete", at + 1)]);
    expect(judgeLimits(claims([0, 400, 500, 1_000]), rate, typeOf, LEASE_MS).excesses).toEqual([]);
    expect(judgeLimits(claims([0, 400, 500, 999]), rate, typeOf, LEASE_MS).excesses).toMatchObject([{ limit: "rate", seen: 4, allowed: 3 }]);
    expect(judgeLimits(claims([600, 1_000, 1_200, 1_599]), rate, typeOf, LEASE_MS).peaks.limited?.perInterval).toBe(4);
  });
});
