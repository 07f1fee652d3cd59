// The end-of-run checks of the race tests must be able to fail: each kind of damage a broken
// store could leave behind is fed to them here, and each must be named.

import { describe, expect, it } from "vitest";
import type { AuditEntry, OutboxMessage } from "../../src/outbox/types.js";
import { businessProblems, auditProblems, unprocessed, type BusinessRow } from "./race-checks.js";

const T = new Date("2026-01-01T09:00:00.000Z");

function message(id: string, over: Partial<OutboxMessage> = {}): OutboxMessage {
  return {
    id,
    type: "race.message",
    dedupeKey: null,
    key: null,
    keySeq: null,
    headers: {},
    destination: null,
    priority: 0,
    singletonKey: null,
    payload: {},
    status: "processed",
    createdAt: T,
    availableAt: T,
    lockedBy: "A",
    lockedUntil: null,
    leaseToken: 2,
    attempts: 2,
    lastError: null,
    processedAt: T,
    ...over,
  };
}

function entry(
  messageId: string,
  action: AuditEntry["action"],
  token: number,
  owner: string,
  previous: [AuditEntry["previousStatus"], string | null] = [null, null],
): AuditEntry {
  return { messageId, token, owner, action, at: T, previousStatus: previous[0], previousOwner: previous[1], previousLockedUntil: null, operation: null };
}

/** Message 1: B claims (token 1), its lease expires, A reclaims (token 2) and completes. */
const goodAudit: AuditEntry[] = [
  entry("1", "claim", 1, "B", ["pending", null]),
  entry("1", "claim", 2, "A", ["processing", "B"]),
  entry("1", "complete", 2, "A"),
];

describe("race checks", () => {
  it("accept a clean run", () => {
    expect(auditProblems(goodAudit, [message("1")])).toEqual([]);
    expect(businessProblems([{ messageId: "1", owner: "A", token: 2 }], [message("1")])).toEqual([]);
    expect(unprocessed([message("1")])).toEqual([]);
  });

  it("name a claim after the completion", () => {
    const audit = [...goodAudit, entry("1", "claim", 3, "B", ["processed", "A"])];
    expect(auditProblems(audit, [message("1", { status: "processing", lockedBy: "B", leaseToken: 3, lockedUntil: T })]).join("\n")).toMatch(
      /message 1: claimed again after its completion/,
    );
    // Even when the message ends processed again (a second completion).
    const twice = [...audit, entry("1", "complete", 3, "B")];
    const problems = auditProblems(twice, [message("1", { lockedBy: "B", leaseToken: 3 })]).join("\n");
    expect(problems).toMatch(/claimed again after its completion/);
    expect(problems).toMatch(/2 completions in the audit trail, expected 1/);
  });

  it("name a completion under a stale token (the row moved on) and a completion by the wrong owner", () => {
    const audit = [entry("1", "claim", 1, "A", ["pending", null]), entry("1", "claim", 2, "B", ["processing", "A"]), entry("1", "complete", 1, "A")];
    const problems = auditProblems(audit, [message("1", { lockedBy: "B", leaseToken: 2 })]).join("\n");
    expect(problems).toMatch(/completed under token 1 but its final lease token is 2/);
    expect(problems).toMatch(/completed by A but the row names B/);
  });

  it("name a processed message without a completion, a token issued twice, and a claim that took over a row it should not have", () => {
    expect(auditProblems(goodAudit.slice(0, 2), [message("1")]).join("\n")).toMatch(/0 completions in the audit trail, expected 1/);
    const doubled = [entry("1", "claim", 1, "B", ["pending", null]), entry("1", "claim", 1, "A", ["pending", null]), entry("1", "complete", 1, "A")];
    const problems = auditProblems(doubled, [message("1", { leaseToken: 1 })]).join("\n");
    expect(problems).toMatch(/claim tokens \[1, 1\], expected \[1\]/);
    expect(problems).toMatch(/claim #1 by A took over pending\/null, expected processing\/B/);
  });

  it("name audit rows of unknown messages and completions of messages that are not processed", () => {
    expect(auditProblems([...goodAudit, entry("9", "claim", 1, "A", ["pending", null])], [message("1")]).join("\n")).toMatch(/unknown message 9/);
    expect(auditProblems(goodAudit, [message("1", { status: "processing", lockedUntil: T })]).join("\n")).toMatch(/status processing yet 1 completions/);
  });

  it("name a missing, a doubled or a stale business row", () => {
    const rows = (...list: BusinessRow[]) => list;
    expect(businessProblems(rows(), [message("1")])).toEqual(["message 1: 0 business rows (), expected 1"]);
    expect(businessProblems(rows({ messageId: "1", owner: "A", token: 2 }, { messageId: "1", owner: "B", token: 1 }), [message("1")])).toEqual([
      "message 1: 2 business rows (A#2, B#1), expected 1",
    ]);
    expect(businessProblems(rows({ messageId: "1", owner: "B", token: 1 }), [message("1")])).toEqual([
      "message 1: business row by B#1, but the message was completed as A#2",
    ]);
    expect(businessProblems(rows({ messageId: "1", owner: "A", token: 2 }), [message("1", { status: "processing", lockedUntil: T })])).toEqual([
      "message 1: status processing yet business rows A#2",
    ]);
  });

  it("name a message left unprocessed", () => {
    expect(unprocessed([message("1", { status: "processing", processedAt: null, lockedUntil: T })])).toHaveLength(1);
  });
});
