// The invariant checker must catch each kind of violation it claims to check; a checker that
// always says "ok" would make every chaos run pass.

import { describe, expect, it } from "vitest";
import { checkInvariants, type CheckerInput } from "../../src/chaos/invariant-checker.js";
import type { AuditEntry, OutboxMessage } from "../../src/outbox/types.js";
import type { ProviderCall } from "../../src/payments/provider-simulator.js";
import type { Payment } from "../../src/payments/types.js";

const t = (ms: number) => new Date(Date.UTC(2026, 0, 1, 9) + ms);

function message(id: string, key: string, over: Partial<OutboxMessage> = {}): OutboxMessage {
  return {
    id,
    type: "payment.reconcile",
    dedupeKey: `payment.reconcile:${key}`,
    key: null,
    keySeq: null,
    headers: {},
    destination: null,
    priority: 0,
    singletonKey: null,
    payload: { paymentId: id, idempotencyKey: key },
    status: "processed",
    createdAt: t(0),
    availableAt: t(0),
    lockedBy: "w1",
    lockedUntil: null,
    leaseToken: 1,
    attempts: 1,
    lastError: null,
    processedAt: t(10),
    ...over,
  };
}
function payment(key: string, over: Partial<Payment> = {}): Payment {
  return {
    id: key,
    idempotencyKey: key,
    amount: 100,
    currency: "EUR",
    status: "Paid",
    transactionId: `TXN-${key}`,
    providerReference: `PRV-${key}`,
    createdAt: t(0),
    updatedAt: t(10),
    ...over,
  };
}
function entry(messageId: string, action: AuditEntry["action"], token: number, owner: string, at: number, previous?: Partial<AuditEntry>): AuditEntry {
  return { messageId, token, owner, action, at: t(at), previousStatus: null, previousOwner: null, previousLockedUntil: null, operation: null, ...previous };
}
const call = (operation: ProviderCall["operation"], key: string, result: string): ProviderCall => ({
  pid: 1,
  at: t(0).toISOString(),
  seq: 0,
  operation,
  idempotencyKey: key,
  result,
});

/** One message, claimed once and completed by w1: everything holds. */
function clean(): CheckerInput {
  return {
    messages: [message("1", "K1")],
    payments: [payment("K1")],
    audit: [entry("1", "claim", 1, "w1", 0, { previousStatus: "pending" }), entry("1", "complete", 1, "w1", 5)],
    providerLog: [call("createPayment", "K1", "created PRV-K1"), call("checkStatus", "K1", "Paid TXN-K1")],
  };
}

const failing = (input: CheckerInput) =>
  checkInvariants(input)
    .rows.filter((r) => !r.ok)
    .map((r) => r.name.trim());

/** Two payments of one key, handled in turn: message 1 by w1, then message 2 by w2 (both Paid). */
function keyedHistory(): Pick<CheckerInput, "providerLog" | "audit"> {
  return {
    providerLog: [
      call("createPayment", "K1", "created PRV-K1"),
      call("checkStatus", "K1", "Paid TXN-K1"),
      call("createPayment", "K2", "created PRV-K2"),
      call("checkStatus", "K2", "Paid TXN-K2"),
    ],
    audit: [
      entry("1", "claim", 1, "w1", 0, { previousStatus: "pending" }),
      entry("1", "complete", 1, "w1", 5),
      entry("2", "claim", 1, "w2", 6, { previousStatus: "pending" }),
      entry("2", "complete", 1, "w2", 9),
    ],
  };
}

/** The same two messages, the second claimed and completed while the first still held its lease. */
const OVERLAPPING_AUDIT: AuditEntry[] = [
  entry("1", "claim", 1, "w1", 0, { previousStatus: "pending" }),
  entry("2", "claim", 1, "w2", 1, { previousStatus: "pending" }),
  entry("2", "complete", 1, "w2", 3),
  entry("1", "complete", 1, "w1", 5),
];

describe("invariant checker", () => {
  it("passes a clean run", () => {
    expect(checkInvariants(clean()).passed).toBe(true);
  });

  it("with the run's schedule: passes each tick once and none missing; flags a tick twice, a gap, one found enqueued already, one unprocessed", () => {
    const first = new Date("2026-01-01T09:00:01.000Z");
    const tick = (s: number) => new Date(first.getTime() + s * 1000).toISOString();
    const schedule = { firstTick: first, ticks: [tick(0), tick(1), tick(2)], unfinished: 0, alreadyEnqueued: 0 };
    expect(failing({ ...clean(), schedule })).toEqual([]);
    expect(checkInvariants({ ...clean(), schedule }).rows.find((r) => r.name === "schedule: ticks fired")?.observed).toBe(3);
    expect(failing({ ...clean(), schedule: { ...schedule, ticks: [tick(0), tick(0), tick(1)] } })).toEqual([
      "schedule: ticks enqueued twice (or found enqueued already)",
    ]);
    expect(failing({ ...clean(), schedule: { ...schedule, ticks: [tick(0), tick(2)] } })).toEqual(["schedule: ticks missing from the first to the last"]);
    expect(failing({ ...clean(), schedule: { ...schedule, ticks: [tick(1), tick(2)] } })).toEqual(["schedule: ticks missing from the first to the last"]);
    expect(failing({ ...clean(), schedule: { ...schedule, alreadyEnqueued: 1 } })).toEqual(["schedule: ticks enqueued twice (or found enqueued already)"]);
    expect(failing({ ...clean(), schedule: { ...schedule, unfinished: 1 } })).toEqual(["schedule: tick messages not processed"]);
    // No tick fired before the schedule ended: nothing is missing.
    expect(failing({ ...clean(), schedule: { ...schedule, ticks: [] } })).toEqual([]);
  });

  it("flags a message left pending and a payment without a message", () => {
    const input = clean();
    expect(failing({ ...input, audit: [], providerLog: [], messages: [message("1", "K1", { status: "pending", lockedBy: null })] })).toEqual([
      "messages not finished (still pending or processing)",
      "transaction ids not from the provider, or not on Paid",
    ]);
    expect(failing({ ...input, payments: [...input.payments, payment("K2")] })).toContain("payments without an outbox message (lost at creation)");
  });

  it("says a run that timed out left messages unfinished (late, not lost), apart from messages lost at creation", () => {
    const input = clean();
    const report = checkInvariants({
      ...input,
      timedOut: true,
      audit: [],
      providerLog: [],
      messages: [message("1", "K1", { status: "processing" })],
      payments: [...input.payments, payment("K2")],
    });
    const unfinished = report.rows.find((r) => r.name.startsWith("messages unfinished when the run timed out"));
    expect(unfinished).toMatchObject({ name: "messages unfinished when the run timed out (late, not lost)", observed: 1, ok: false });
    expect(unfinished?.detail).toContain("timed out with 1 unfinished");
    expect(report.rows.find((r) => r.name.startsWith("payments without an outbox message (lost at creation)"))?.observed).toBe(1);
    expect(report.rows.some((r) => r.name.startsWith("messages not finished"))).toBe(false);
  });

  it("with ordering keys: passes FIFO, and flags a claim before an earlier message of the key finished and effects out of enqueue order", () => {
    const keyed = (id: string, key: string, owner: string) => message(id, key, { key: "account-1", lockedBy: owner });
    const input: CheckerInput = {
      messages: [keyed("1", "K1", "w1"), keyed("2", "K2", "w2")],
      payments: [payment("K1"), payment("K2")],
      ...keyedHistory(),
    };
    expect(failing(input)).toEqual([]);
    const overlapping = {
      ...input,
      audit: OVERLAPPING_AUDIT,
    };
    expect(failing(overlapping)).toEqual(["keys: claims while an earlier message of the key was unfinished", "keys: effects committed out of enqueue order"]);
    expect(checkInvariants(overlapping).examples).toContain("key account-1: message 2 claimed by w2 while message 1 had not finished");

    // A dead message blocks its key: a later one claimed after the death is out of order, unless
    // the dead message's type lets its key move on.
    const afterDeath = {
      ...input,
      messages: [keyed("1", "K1", "w1"), keyed("2", "K2", "w2")].map((m) => (m.id === "1" ? { ...m, status: "dead" as const } : m)),
      audit: [
        entry("1", "claim", 1, "w1", 0, { previousStatus: "pending" }),
        entry("1", "dead", 1, "w1", 5),
        entry("2", "claim", 1, "w2", 6, { previousStatus: "pending" }),
        entry("2", "complete", 1, "w2", 9),
      ],
    };
    expect(failing(afterDeath)).toContain("keys: claims while an earlier message of the key was unfinished");
    expect(failing({ ...afterDeath, keyMovesOnWhenDead: [afterDeath.messages[0]!.type] })).not.toContain(
      "keys: claims while an earlier message of the key was unfinished",
    );

    // A cancelled holder (running, here) hands its key on in the cancel's transaction: the next
    // message's claim after it is in order, one before it is not.
    const cancelledHolder = {
      ...input,
      payments: [payment("K1", { status: "Pending", transactionId: null }), payment("K2")],
      messages: [{ ...keyed("1", "K1", "cancel: chaos"), status: "cancelled" as const }, keyed("2", "K2", "w2")],
      audit: [
        entry("1", "claim", 1, "w1", 0, { previousStatus: "pending" }),
        entry("1", "dead", 1, "cancel: chaos", 5, { previousStatus: "processing", previousOwner: "w1" }),
        entry("2", "claim", 1, "w2", 6, { previousStatus: "pending" }),
        entry("2", "complete", 1, "w2", 9),
      ],
      onComplete: "keep" as const,
    };
    expect(failing(cancelledHolder)).toEqual([]);
    const [claimed, cancelled, ...rest] = cancelledHolder.audit;
    expect(failing({ ...cancelledHolder, audit: [claimed!, rest[0]!, cancelled!, rest[1]!] })).toContain(
      "keys: claims while an earlier message of the key was unfinished",
    );
  });

  it("with cancels: passes a cancelled message without a completion (not lost: its row cancelled, or gone in delete mode), and flags one completed after its cancel or with the wrong row", () => {
    const input = clean();
    const cancelledAudit = [
      ...input.audit,
      entry("2", "claim", 1, "w1", 10, { previousStatus: "pending" }),
      entry("2", "dead", 1, "cancel: chaos", 12, { previousStatus: "processing", previousOwner: "w1" }),
    ];
    const record = [
      { id: "1", type: "payment.reconcile", key: null, payload: { idempotencyKey: "K1" } },
      { id: "2", type: "payment.reconcile", key: null, payload: { idempotencyKey: "K2" } },
    ];
    const cancelledRow = message("2", "K2", { status: "cancelled", lockedBy: "cancel: chaos", leaseToken: 1 });
    const base = {
      ...input,
      messages: [...input.messages, cancelledRow],
      payments: [payment("K1"), payment("K2", { status: "Pending", transactionId: null })],
      enqueued: record,
      onComplete: "keep" as const,
    };
    const passed = checkInvariants({ ...base, audit: cancelledAudit });
    expect(passed.rows.filter((r) => !r.ok).map((r) => r.name)).toEqual([]);
    expect(passed.rows.find((r) => r.name === "cancels: messages cancelled")).toMatchObject({ observed: 1, detail: "1 of them while running" });
    expect(passed.rows.find((r) => r.name === "cancels: cancelled messages whose row is not cancelled")).toMatchObject({ observed: 0, ok: true });
    const completedAfter = [...cancelledAudit, entry("2", "complete", 1, "w1", 13)];
    expect(failing({ ...base, audit: completedAfter })).toEqual(
      expect.arrayContaining(["ownership violations (result without the current token)", "cancels: cancelled messages completed"]),
    );
    // Kept rows: the cancelled message's row must say so, and no row may say so without a cancel.
    const stillPending = { ...base, audit: cancelledAudit, messages: [...input.messages, message("2", "K2", { status: "pending" })] };
    expect(failing(stillPending)).toContain("cancels: cancelled messages whose row is not cancelled");
    expect(failing({ ...base, audit: cancelledAudit, messages: input.messages })).toContain("cancels: cancelled messages whose row is not cancelled");
    const unexplained = { ...base, audit: input.audit, messages: [...input.messages, cancelledRow] };
    expect(checkInvariants(unexplained).examples).toContain("message 2: a cancelled row with no cancel in the audit trail");
    // Rows deleted at completion: a cancelled message leaves no row either.
    const deleting = { ...base, messages: [], audit: cancelledAudit, onComplete: "delete" as const };
    expect(failing(deleting)).toEqual([]);
    expect(failing({ ...deleting, messages: [cancelledRow] })).toContain("cancels: cancelled messages with a row left");
  });

  it("flags a completion under a stale token", () => {
    const input = clean();
    const audit = [
      entry("1", "claim", 1, "w1", 0, { previousStatus: "pending" }),
      entry("1", "claim", 2, "w2", 20, { previousStatus: "processing", previousOwner: "w1", previousLockedUntil: t(10) }),
      entry("1", "complete", 1, "w1", 25),
    ];
    expect(
      failing({
        ...input,
        audit,
        messages: [message("1", "K1", { leaseToken: 2, attempts: 2 })],
        providerLog: [...input.providerLog, call("checkStatus", "K1", "Paid TXN-K1")],
      }),
    ).toContain("ownership violations (result without the current token)");
  });

  it("flags a stale completion a worker reported with no 'refused' row in the audit trail, and passes one recorded", () => {
    const input = clean();
    const reclaimed = [
      entry("1", "claim", 1, "w1", 0, { previousStatus: "pending" }),
      entry("1", "claim", 2, "w2", 20, { previousStatus: "processing", previousOwner: "w1", previousLockedUntil: t(10) }),
      entry("1", "complete", 2, "w2", 30),
    ];
    const refused = entry("1", "refused", 1, "w1", 25, { previousStatus: "processing", previousOwner: "w2", operation: "complete" });
    const run = (audit: AuditEntry[]) =>
      failing({
        ...input,
        audit,
        messages: [message("1", "K1", { leaseToken: 2, attempts: 2, lockedBy: "w2" })],
        providerLog: [...input.providerLog, call("checkStatus", "K1", "Paid TXN-K1")],
        staleCompletionsRejected: 1,
      });
    expect(run(reclaimed)).toEqual(["reported without a 'refused' audit row"]);
    expect(run([...reclaimed.slice(0, 2), refused, reclaimed[2] as AuditEntry])).toEqual([]);
  });

  it("flags a reclaim before the previous lease expired", () => {
    const input = clean();
    const audit = [
      entry("1", "claim", 1, "w1", 0, { previousStatus: "pending" }),
      entry("1", "claim", 2, "w2", 5, { previousStatus: "processing", previousOwner: "w1", previousLockedUntil: t(10) }),
      entry("1", "complete", 2, "w2", 8),
    ];
    expect(failing({ ...input, audit, messages: [message("1", "K1", { leaseToken: 2, lockedBy: "w2", attempts: 2 })] })).toContain(
      "ownership violations (result without the current token)",
    );
  });

  it("flags a claim after completion, and two completions", () => {
    const input = clean();
    const audit = [...input.audit, entry("1", "claim", 2, "w2", 30, { previousStatus: "processed" }), entry("1", "complete", 2, "w2", 35)];
    expect(failing({ ...input, audit, messages: [message("1", "K1", { leaseToken: 2, lockedBy: "w2" })] })).toContain(
      "ownership violations (result without the current token)",
    );
  });

  it("flags a second claim while the first lease is running, with no expiry, retry or release between", () => {
    const input = clean();
    const audit = [
      entry("1", "claim", 1, "w1", 0, { previousStatus: "pending" }),
      entry("1", "claim", 2, "w2", 1, { previousStatus: "pending" }),
      entry("1", "complete", 2, "w2", 5),
    ];
    expect(failing({ ...input, audit, messages: [message("1", "K1", { leaseToken: 2, lockedBy: "w2" })] })).toContain(
      "ownership violations (result without the current token)",
    );
  });

  it("flags a claim of a dead message that was never redriven, and accepts one that was", () => {
    const input = clean();
    const dead = [entry("1", "claim", 1, "w1", 0, { previousStatus: "pending" }), entry("1", "dead", 1, "w1", 2)];
    const again = [entry("1", "claim", 2, "w2", 10, { previousStatus: "pending" }), entry("1", "complete", 2, "w2", 12)];
    const messages = [message("1", "K1", { leaseToken: 2, lockedBy: "w2", attempts: 1 })];
    expect(failing({ ...input, messages, audit: [...dead, ...again] })).toContain("ownership violations (result without the current token)");
    expect(failing({ ...input, messages, audit: [...dead, entry("1", "redrive", 1, "operator", 5), ...again] })).toEqual([]);
  });

  it("flags more provider checks than claims", () => {
    const input = clean();
    expect(failing({ ...input, providerLog: [...input.providerLog, call("checkStatus", "K1", "Paid TXN-K1")] })).toContain(
      "payments checked more often than claimed",
    );
  });

  it("flags a transaction id the provider never gave, an id on Failed, and a Paid without one", () => {
    const input = clean();
    expect(failing({ ...input, payments: [payment("K1", { transactionId: "TXN-FAKE" })] })).toContain("transaction ids not from the provider, or not on Paid");
    expect(failing({ ...input, payments: [payment("K1", { status: "Failed" })] })).toContain("transaction ids not from the provider, or not on Paid");
    expect(failing({ ...input, payments: [payment("K1", { transactionId: null })] })).toContain("transaction ids not from the provider, or not on Paid");
  });

  it("flags two payments for one key, two messages for one payment, and two provider creations for one key", () => {
    const input = clean();
    expect(failing({ ...input, payments: [payment("K1"), payment("K1", { id: "K1b" })] })).toContain("payments per idempotency key (max)");
    expect(failing({ ...input, messages: [message("1", "K1"), message("2", "K1", { status: "dead", lastError: "x", lockedBy: null })] })).toContain(
      "messages per payment (max)",
    );
    expect(failing({ ...input, providerLog: [...input.providerLog, call("createPayment", "K1", "created PRV-K1")] })).toContain(
      "provider-side creations per key (max)",
    );
  });

  it("counts reclaims after expiry, retries and releases as explained repeats", () => {
    const input = clean();
    const audit = [
      entry("1", "claim", 1, "w1", 0, { previousStatus: "pending" }),
      entry("1", "retry", 1, "w1", 2),
      entry("1", "claim", 2, "w1", 10, { previousStatus: "pending" }),
      entry("1", "release", 2, "w1", 11),
      entry("1", "claim", 3, "w2", 12, { previousStatus: "pending" }),
      entry("1", "claim", 4, "w3", 40, { previousStatus: "processing", previousOwner: "w2", previousLockedUntil: t(30) }),
      entry("1", "complete", 4, "w3", 45),
    ];
    const report = checkInvariants({ ...input, audit, messages: [message("1", "K1", { leaseToken: 4, lockedBy: "w3", attempts: 4 })] });
    expect(report.passed).toBe(true);
    const observed = (name: string) => report.rows.find((r) => r.name.trim().startsWith(name))?.observed;
    expect([
      observed("explained by an expired lease"),
      observed("explained by a retry"),
      observed("explained by a release"),
      observed("explained by a redrive"),
    ]).toEqual([1, 1, 1, 0]);
  });
});

describe("invariant checker, delete on complete (a completed message has no row)", () => {
  /** clean(), as a run that deletes on complete leaves it: no row, the run's record of the enqueue, the audited completion. */
  function deleted(): CheckerInput {
    const input = clean();
    return { ...input, messages: [], enqueued: input.messages, onComplete: "delete" };
  }
  const observed = (input: CheckerInput, name: string) => checkInvariants(input).rows.find((r) => r.name.trim().startsWith(name));

  it("passes a clean history: the audited completion is the record of the deleted message", () => {
    const report = checkInvariants(deleted());
    expect(report.examples).toEqual([]);
    expect(report.passed).toBe(true);
    expect(observed(deleted(), "on complete delete: processed rows left")).toMatchObject({
      observed: 0,
      ok: true,
      detail: "1 completed messages deleted, each known by its audited completion",
    });
  });

  it("passes it without being told the mode or given the record (chaos check): the mode inferred, the message matched to its payment by count", () => {
    const input: CheckerInput = { ...clean(), messages: [] };
    expect(checkInvariants(input).examples).toEqual([]);
    expect(checkInvariants(input).passed).toBe(true);
    expect(observed(input, "on complete delete")?.detail).toContain("(inferred: no processed row is left)");
  });

  it("reports a message with no row and no audited completion as lost, with the run's record and without it", () => {
    const claimedOnly = [entry("1", "claim", 1, "w1", 0, { previousStatus: "pending" })];
    const pending = [payment("K1", { status: "Pending", transactionId: null })];
    const provider = [call("createPayment", "K1", "created PRV-K1")];
    // Claimed, then its row deleted without a completion; and never claimed at all.
    for (const audit of [claimedOnly, []]) {
      const input = { ...deleted(), audit, payments: pending, providerLog: provider };
      expect(failing(input)).toEqual(["messages without a row or an audited completion (lost)"]);
      expect(checkInvariants(input).examples).toEqual(["message 1 (K1): no row and no audited completion (lost)"]);
    }
    // Without the record the claimed one is still lost (its audit trail names it); one never
    // claimed leaves its payment without a message.
    const bare = { messages: [], payments: pending, providerLog: provider };
    expect(failing({ ...bare, audit: claimedOnly })).toEqual(["messages without a row or an audited completion (lost)"]);
    expect(failing({ ...bare, audit: [] })).toEqual(["payments without an outbox message (lost at creation)", "messages per payment (min)"]);
  });

  it("flags two audited completions of a deleted message (a double)", () => {
    const input = deleted();
    const audit = [
      entry("1", "claim", 1, "w1", 0, { previousStatus: "pending" }),
      entry("1", "claim", 2, "w2", 20, { previousStatus: "processing", previousOwner: "w1", previousLockedUntil: t(10) }),
      entry("1", "complete", 2, "w2", 25),
      entry("1", "complete", 1, "w1", 26),
    ];
    const twice = { ...input, audit, providerLog: [...input.providerLog, call("checkStatus", "K1", "Paid TXN-K1")] };
    expect(failing(twice)).toEqual(["ownership violations (result without the current token)"]);
    expect(checkInvariants(twice).examples).toContain("message 1: its row is gone, with 2 audited completions");
  });

  it("flags a deleted message whose payment stayed Pending, and more provider checks than claims", () => {
    const input = deleted();
    expect(failing({ ...input, payments: [payment("K1", { status: "Pending", transactionId: null })] })).toEqual([
      "payments left Pending after their message was processed",
    ]);
    expect(failing({ ...input, providerLog: [...input.providerLog, call("checkStatus", "K1", "Paid TXN-K1")] })).toEqual([
      "payments checked more often than claimed",
    ]);
  });

  it("checks the rows against the mode: a processed row left in delete mode, a completed row gone in keep mode (told, or inferred from the processed rows left)", () => {
    expect(failing({ ...clean(), onComplete: "delete" })).toEqual(["on complete delete: processed rows left"]);
    expect(failing({ ...deleted(), onComplete: "keep" })).toEqual(["on complete keep: completed messages whose row is gone"]);
    // Two payments: message 2 kept its row as processed, message 1's row is gone.
    const mixed: CheckerInput = {
      messages: [message("2", "K2")],
      payments: [payment("K1"), payment("K2")],
      audit: [...clean().audit, entry("2", "claim", 1, "w1", 6, { previousStatus: "pending" }), entry("2", "complete", 1, "w1", 8)],
      providerLog: [...clean().providerLog, call("createPayment", "K2", "created PRV-K2"), call("checkStatus", "K2", "Paid TXN-K2")],
    };
    expect(failing(mixed)).toEqual(["on complete keep: completed messages whose row is gone"]);
  });

  it("without the record, matches by count: a payment more than the deleted messages is lost at creation, a Pending one was not settled by its completion, a message more is a second one", () => {
    const bare = { messages: [], audit: clean().audit, providerLog: clean().providerLog };
    expect(failing({ ...bare, payments: [payment("K1"), payment("K2", { status: "Pending", transactionId: null })] })).toEqual([
      "payments without an outbox message (lost at creation)",
      "messages per payment (min)",
    ]);
    expect(failing({ ...bare, payments: [payment("K1", { status: "Pending", transactionId: null })] })).toEqual([
      "payments left Pending after their message was processed",
    ]);
    const second = [entry("2", "claim", 1, "w2", 6, { previousStatus: "pending" }), entry("2", "complete", 1, "w2", 8)];
    expect(failing({ ...bare, audit: [...bare.audit, ...second], payments: [payment("K1")] })).toEqual(["messages per payment (max)"]);
  });

  it("with ordering keys, knows a deleted message's key from the record: FIFO holds, and a claim before an earlier message finished is flagged", () => {
    const keyed = (id: string, key: string) => message(id, key, { key: "account-1" });
    const base: CheckerInput = {
      messages: [],
      enqueued: [keyed("1", "K1"), keyed("2", "K2")],
      onComplete: "delete",
      payments: [payment("K1"), payment("K2")],
      ...keyedHistory(),
    };
    expect(failing(base)).toEqual([]);
    expect(observed(base, "keys: claims while")?.detail).toBe("1 keys");
    const overlapping = {
      ...base,
      audit: OVERLAPPING_AUDIT,
    };
    expect(failing(overlapping)).toEqual(["keys: claims while an earlier message of the key was unfinished", "keys: effects committed out of enqueue order"]);
  });
});
