// The ownership timeline: bars per lease and marks, from the audit trail and from the event
// stream, and drawn as SVG with every text escaped.

import { describe, expect, it } from "vitest";
import { renderTimelineSvg, timelineFromAudit, timelineFromEvents } from "../../src/observability/timeline.js";
import type { OutboxEvent } from "../../src/outbox/events.js";
import type { AuditEntry, OutboxMessage } from "../../src/outbox/types.js";

const t = (ms: number) => new Date(Date.UTC(2026, 0, 1, 9, 0, 0, ms));

function entry(action: AuditEntry["action"], token: number, owner: string, at: number, extra: Partial<AuditEntry> = {}): AuditEntry {
  return { messageId: "7", token, owner, action, at: t(at), previousStatus: null, previousOwner: null, previousLockedUntil: null, operation: null, ...extra };
}

const row = (over: Partial<OutboxMessage>): OutboxMessage => ({
  id: "7",
  type: "t",
  dedupeKey: null,
  key: null,
  keySeq: null,
  headers: {},
  destination: null,
  priority: 0,
  singletonKey: null,
  payload: null,
  status: "processed",
  createdAt: t(0),
  availableAt: t(0),
  lockedBy: null,
  lockedUntil: null,
  leaseToken: 0,
  attempts: 0,
  lastError: null,
  processedAt: null,
  ...over,
});

/** Bars as [owner, token, from ms, to ms, end, reclaimedBy]. */
const bars = (timeline: ReturnType<typeof timelineFromAudit>) =>
  timeline.bars.map((b) => [b.owner, b.token, b.from.getTime() - t(0).getTime(), b.to.getTime() - t(0).getTime(), b.end, b.reclaimedBy]);

describe("timelineFromAudit", () => {
  it("draws a reclaim after expiry, a refused stale write, a retry, a dead-letter, a redrive and the final completion", () => {
    const trail = [
      entry("claim", 1, "A", 0, { previousStatus: "pending" }),
      entry("claim", 2, "B", 600, { previousStatus: "processing", previousOwner: "A", previousLockedUntil: t(500) }),
      entry("refused", 1, "A", 650, { previousStatus: "processing", previousOwner: "B", operation: "complete" }),
      entry("retry", 2, "B", 700),
      entry("claim", 3, "C", 800, { previousStatus: "pending" }),
      entry("dead", 3, "C", 900),
      entry("redrive", 3, "redrive", 1000),
      entry("claim", 4, "A", 1100, { previousStatus: "pending" }),
      entry("complete", 4, "A", 1200),
      entry("claim", 1, "Z", 1300, { messageId: "8" }), // another message's row: ignored
    ];
    const timeline = timelineFromAudit("7", trail, row({ status: "processed" }), t(5000));
    expect(timeline.owners).toEqual(["A", "B", "C"]);
    expect(bars(timeline)).toEqual([
      ["A", 1, 0, 500, "expired", "B"],
      ["B", 2, 600, 700, "retry", null],
      ["C", 3, 800, 900, "dead", null],
      ["A", 4, 1100, 1200, "completed", null],
    ]);
    expect(timeline.marks.map((m) => [m.kind, m.owner, m.at.getTime() - t(0).getTime()])).toEqual([
      ["refused", "A", 650],
      ["redrive", null, 1000],
    ]);
    expect(timeline.marks[0]?.label).toBe("A's completion under token 1 refused (held by B)");
  });

  it("ends the current lease at the row's locked_until: held while it runs, expired (not yet reclaimed) after", () => {
    const trail = [entry("claim", 1, "A", 0)];
    const processing = row({ status: "processing", lockedBy: "A", lockedUntil: t(30_000), leaseToken: 1 });
    expect(bars(timelineFromAudit("7", trail, processing, t(10_000)))).toEqual([["A", 1, 0, 30_000, "held", null]]);
    expect(bars(timelineFromAudit("7", trail, processing, t(40_000)))).toEqual([["A", 1, 0, 30_000, "expired", null]]);
  });

  it("ends a lease whose end was not audited where the row says the message moved on", () => {
    // Claimed by an audited worker, completed by one that was not.
    const trail = [entry("claim", 1, "A", 0)];
    const done = row({ status: "processed", lockedBy: "A", leaseToken: 1, processedAt: t(250) });
    expect(bars(timelineFromAudit("7", trail, done, t(99_000)))).toEqual([["A", 1, 0, 250, "unrecorded", null]]);
    // Claimed again since by an unaudited worker, still processing: the audited lease is not the current one.
    const taken = row({ status: "processing", lockedBy: "B", leaseToken: 2, lockedUntil: t(30_000), availableAt: t(30_000) });
    expect(bars(timelineFromAudit("7", trail, taken, t(1_000)))[0]?.[4]).toBe("expired");
  });

  it("has no bars for a message never claimed", () => {
    const timeline = timelineFromAudit("7", [], row({ status: "pending" }), t(0));
    expect(timeline.bars).toEqual([]);
    expect(renderTimelineSvg(timeline)).toContain("No lease recorded");
  });
});

describe("timelineFromEvents", () => {
  it("knows each lease's planned end, blocked claims, crashes and the clock", () => {
    const events: OutboxEvent[] = [
      { type: "claim-won", at: t(0), owner: "Worker-A", messageId: "7", token: 1, lockedUntil: t(500), reclaimedFrom: null },
      { type: "claim-blocked", at: t(0), owner: "Worker-B", messageId: "7", heldBy: "Worker-A", lockedUntil: t(500) },
      { type: "claim-won", at: t(600), owner: "Worker-B", messageId: "7", token: 2, lockedUntil: t(30_600), reclaimedFrom: "Worker-A" },
      {
        type: "lease-lost",
        at: t(600),
        owner: "Worker-A",
        messageId: "7",
        token: 1,
        operation: "complete",
        heldBy: "Worker-B",
        currentToken: 2,
      },
      { type: "completed", at: t(600), owner: "Worker-B", messageId: "7", token: 2 },
      { type: "completed", at: t(600), owner: "Worker-B", messageId: "9", token: 1 }, // another message
    ];
    const timeline = timelineFromEvents("7", events, [
      { at: t(0), owner: "Worker-A", text: "crash", kind: "crash" },
      { at: t(600), owner: "clock", text: "clock at 09:00:00.600", kind: "clock" },
    ]);
    expect(bars(timeline)).toEqual([
      ["Worker-A", 1, 0, 500, "expired", "Worker-B"],
      ["Worker-B", 2, 600, 600, "completed", null],
    ]);
    expect(timeline.marks.map((m) => [m.kind, m.owner])).toEqual([
      ["blocked", "Worker-B"],
      ["crash", "Worker-A"],
      ["refused", "Worker-A"],
      ["clock", null],
    ]);
  });
});

describe("renderTimelineSvg", () => {
  it("escapes owners and labels, and carries each bar's and mark's data for readers", () => {
    const evil = '<script>alert("x")</script>';
    const trail = [
      entry("claim", 1, evil, 0),
      entry("claim", 2, "B", 600, { previousStatus: "processing", previousOwner: evil, previousLockedUntil: t(500) }),
      entry("refused", 1, evil, 650, { previousOwner: "B", operation: "fail" }),
      entry("complete", 2, "B", 700),
    ];
    const svg = renderTimelineSvg(timelineFromAudit("7", trail, undefined, t(1000)));
    expect(svg).not.toContain("<script");
    expect(svg).toContain("&lt;script&gt;");
    const drawn = [
      ...svg.matchAll(/<g class="lease [^"]+" data-owner="([^"]*)" data-token="(\d+)" data-from="([^"]+)" data-to="([^"]+)" data-end="(\w+)">/g),
    ].map((m) => m.slice(1));
    expect(drawn).toEqual([
      ["&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;", "1", t(0).toISOString(), t(500).toISOString(), "expired"],
      ["B", "2", t(600).toISOString(), t(700).toISOString(), "completed"],
    ]);
    expect(svg).toMatch(/<g class="mark mark-refused" data-kind="refused" data-at="2026-01-01T09:00:00.650Z"/);
  });
});
