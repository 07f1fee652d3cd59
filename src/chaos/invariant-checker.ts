// Reads what a run left behind (the outbox, the audit trail, the payments, the provider's log)
// and checks every promise the outbox makes. Nothing here trusts what the workers said they did.

import type { AuditEntry, OnComplete, OutboxMessage } from "../outbox/types.js";
import { type JudgedLimit, judgeLimits, type LimitExcess } from "./limit-checks.js";
import type { ProviderCall } from "../payments/provider-simulator.js";
import type { Payment } from "../payments/types.js";
import { textTable } from "../lab/text-table.js";
import { isCancelEntry } from "../outbox/cancels.js";

export interface InvariantRow {
  readonly name: string;
  readonly observed: number;
  /** What passes: "0", "1", "<= 1", or "info" for figures that explain rather than judge. */
  readonly expected: string;
  readonly ok: boolean;
  readonly detail: string;
}

export interface InvariantReport {
  readonly passed: boolean;
  readonly rows: readonly InvariantRow[];
  /** The first few problems found, for the reader. */
  readonly examples: readonly string[];
}

/** A message as it was enqueued: what the checker needs to know of one whose row is gone. */
export type EnqueuedMessage = Pick<OutboxMessage, "id" | "type" | "key" | "payload">;

export interface CheckerInput {
  readonly messages: readonly OutboxMessage[];
  readonly audit: readonly AuditEntry[];
  readonly payments: readonly Payment[];
  readonly providerLog: readonly ProviderCall[];
  /** Completions refused for a stale token, as the workers reported them (informational). */
  readonly staleCompletionsRejected?: number;
  /** The run stopped waiting before the workers had finished: unfinished messages are not lost, only late. */
  readonly timedOut?: boolean;
  /**
   * Message types whose dead messages let their ordering key move on (the workers'
   * keyMovesOnWhenDead). A dead message of any other type keeps blocking its key, so a later
   * message of the key claimed after it died is out of order. Default: none.
   */
  readonly keyMovesOnWhenDead?: readonly string[];
  /**
   * The messages as the run enqueued them (its own record). A completion in delete mode leaves no
   * row: this is how a deleted message's payment and ordering key stay known, and a message here
   * with neither a row nor an audited completion is lost. Without it (a database someone else
   * ran), a message without a row is known only by its audit trail, and the payments left without
   * a message are matched to such messages by count.
   */
  readonly enqueued?: readonly EnqueuedMessage[];
  /**
   * What the workers' completions did with a row (their --on-complete): "keep" (a completed
   * message whose row is gone is a violation) or "delete" (a processed row left is one). Default:
   * "keep" when any processed row is left, else "delete".
   */
  readonly onComplete?: OnComplete;
  /**
   * The run's recurring schedule (an every-second pulse the workers fire while they run; its
   * messages are judged here, not with the payments'): its first tick, the ticks its messages'
   * dedupe keys name, how many of its messages are not processed, and how many ticks a worker
   * found with their message there already (a compare-and-set that let two schedulers through),
   * as the workers logged them.
   */
  /**
   * A limit the run set on one message type (store.limit): judged over the audit trail
   * (limit-checks.ts) with the workers' lease.
   */
  readonly limit?: { readonly type: string; readonly limit: JudgedLimit; readonly leaseMs: number };
  readonly schedule?: {
    readonly firstTick: Date;
    readonly ticks: readonly string[];
    readonly unfinished: number;
    readonly alreadyEnqueued: number;
  };
}

function paymentKeyOf(message: EnqueuedMessage): string | null {
  const payload = message.payload as { idempotencyKey?: unknown } | null;
  return typeof payload?.idempotencyKey === "string" ? payload.idempotencyKey : null;
}

function countBy<T>(items: readonly T[], key: (item: T) => string | null): Map<string, number> {
  const counts = new Map<string, number>();
  for (const item of items) {
    const k = key(item);
    if (k !== null) counts.set(k, (counts.get(k) ?? 0) + 1);
  }
  return counts;
}

interface Replay {
  status: "pending" | "processing" | "processed" | "dead" | "cancelled";
  token: number;
  owner: string | null;
  claimAt: number;
  /** Why the next claim may happen: the last lease ended by expiry, a retry or a release. */
  completions: number;
}

/**
 * The rows against the cancels the audit trail records: kept (onComplete "keep"), each cancelled
 * message's row says cancelled and no other row does; deleted, none is left.
 */
function cancelRowMismatches(
  messages: readonly { readonly id: string; readonly status: string }[],
  cancelled: ReadonlySet<string>,
  onComplete: "keep" | "delete",
  note: (text: string) => void,
): number {
  const rows = new Map(messages.map((m) => [m.id, m.status]));
  const wrong: string[] = [];
  if (onComplete === "delete") {
    for (const id of cancelled) if (rows.has(id)) wrong.push(`message ${id}: cancelled, and a ${rows.get(id)} row is left (on complete: delete)`);
  } else {
    for (const id of cancelled) if (rows.get(id) !== "cancelled") wrong.push(`message ${id}: cancelled, and its row is ${rows.get(id) ?? "gone"}`);
    for (const [id, status] of rows)
      if (status === "cancelled" && !cancelled.has(id)) wrong.push(`message ${id}: a cancelled row with no cancel in the audit trail`);
  }
  for (const text of wrong.slice(0, 5)) note(text);
  return wrong.length;
}

export function checkInvariants(input: CheckerInput): InvariantReport {
  const examples: string[] = [];
  const note = (text: string) => {
    if (examples.length < 20) examples.push(text);
  };
  const { messages, audit, payments, providerLog } = input;
  const rowIds = new Set(messages.map((m) => m.id));
  const processedRows = messages.filter((m) => m.status === "processed");
  const onComplete = input.onComplete ?? (processedRows.length > 0 ? "keep" : "delete");
  // Every message whose payload, key and type are known: its row, else the run's record of its enqueue.
  const known = new Map<string, EnqueuedMessage>();
  for (const m of input.enqueued ?? []) known.set(m.id, m);
  for (const m of messages) known.set(m.id, m);
  const knownInOrder = [...known.values()].sort((a, b) => Number(a.id) - Number(b.id));

  // --- Nothing lost --------------------------------------------------------------------------
  const unfinished = messages.filter((m) => m.status === "pending" || m.status === "processing");
  for (const m of unfinished.slice(0, 5)) note(`message ${m.id} (${paymentKeyOf(m)}) ended ${m.status}`);
  const messagesPerPayment = countBy(knownInOrder, (m) => paymentKeyOf(m));
  const paymentsWithoutMessage = payments.filter((p) => !messagesPerPayment.has(p.idempotencyKey));
  const dead = messages.filter((m) => m.status === "dead");
  const deadWithoutError = dead.filter((m) => !m.lastError);

  // --- Ownership, replayed from the audit trail -------------------------------------------
  const byMessage = new Map<string, AuditEntry[]>();
  for (const entry of audit) byMessage.set(entry.messageId, [...(byMessage.get(entry.messageId) ?? []), entry]);
  let ownershipViolations = 0;
  let explainedByExpiry = 0;
  let explainedByRetry = 0;
  let explainedByRelease = 0;
  let explainedByRedrive = 0;
  /** Messages store.cancel cancelled (its audit row: dead, by "cancel…"), pending or running then, and any completed after it. */
  const cancelled = new Set<string>();
  let cancelledRunning = 0;
  let completedAfterCancel = 0;
  // Every stale completion a worker reported was recorded first: its refused row commits with the refusal.
  const refusedCompletions = audit.filter((e) => e.action === "refused" && e.operation === "complete").length;
  const unrecordedRefusals = Math.max(0, (input.staleCompletionsRejected ?? 0) - refusedCompletions);
  for (const [messageId, entries] of byMessage) {
    const replay: Replay = { status: "pending", token: 0, owner: null, claimAt: 0, completions: 0 };
    let lastEnd: "none" | "retry" | "release" | "redrive" = "none";
    for (const e of entries) {
      const at = e.at.getTime();
      if (e.action === "refused") continue; // a stale lease's write, refused: it changed nothing
      if (e.action === "claim") {
        if (e.token !== replay.token + 1) {
          ownershipViolations += 1;
          note(`message ${messageId}: claim by ${e.owner} under token ${e.token}, expected ${replay.token + 1}`);
        }
        if (replay.status === "processed" || replay.status === "dead") {
          ownershipViolations += 1;
          note(`message ${messageId}: claimed by ${e.owner} after it was ${replay.status}`);
        } else if (replay.status === "processing") {
          // A reclaim: legal only once the previous lease had run out.
          if (e.previousLockedUntil === null || e.previousLockedUntil.getTime() > at) {
            ownershipViolations += 1;
            note(`message ${messageId}: ${e.owner} took it from ${replay.owner} before that lease expired`);
          } else {
            explainedByExpiry += 1;
          }
        } else if (replay.token > 0) {
          // Pending again after a claim: only a retry, a release or a redrive gets it there.
          if (lastEnd === "retry") explainedByRetry += 1;
          else if (lastEnd === "release") explainedByRelease += 1;
          else explainedByRedrive += 1;
        }
        replay.status = "processing";
        replay.token = e.token;
        replay.owner = e.owner;
        replay.claimAt = at;
        lastEnd = "none";
        continue;
      }
      if (isCancelEntry(e)) {
        // store.cancel: an operator's act, outside any lease, on a pending or (with running) a running message.
        if (replay.status !== "pending" && replay.status !== "processing") {
          ownershipViolations += 1;
          note(`message ${messageId}: cancelled while ${replay.status}`);
        }
        if (replay.status === "processing") cancelledRunning += 1;
        cancelled.add(messageId);
        replay.status = "cancelled";
        continue;
      }
      if (replay.status === "cancelled") {
        // Nothing may follow a cancel: its lease ended with it, so every later write is refused.
        if (e.action === "complete") completedAfterCancel += 1;
        ownershipViolations += 1;
        note(`message ${messageId}: ${e.action} by ${e.owner} after it was cancelled`);
        continue;
      }
      if (e.action === "redrive") {
        // An operator's act, outside any lease: legal only on a dead message.
        if (replay.status !== "dead") {
          ownershipViolations += 1;
          note(`message ${messageId}: redriven while ${replay.status}`);
        }
        replay.status = "pending";
        lastEnd = "redrive";
        continue;
      }
      // complete, retry, dead, release: must be the current lease's own act.
      if (replay.status !== "processing" || e.token !== replay.token || e.owner !== replay.owner) {
        ownershipViolations += 1;
        note(
          `message ${messageId}: ${e.action} by ${e.owner} under token ${e.token} while the current lease is ${replay.owner}#${replay.token} (${replay.status})`,
        );
      }
      if (e.action === "complete") {
        replay.status = "processed";
        replay.completions += 1;
      } else if (e.action === "dead") {
        replay.status = "dead";
      } else {
        replay.status = "pending";
        lastEnd = e.action;
      }
    }
  }
  // Every processed row: exactly one audited completion, by its recorded owner and token.
  const completions = countBy(
    audit.filter((e) => e.action === "complete"),
    (e) => e.messageId,
  );
  for (const m of messages) {
    const done = completions.get(m.id) ?? 0;
    if (m.status === "processed") {
      const completion = audit.find((e) => e.action === "complete" && e.messageId === m.id);
      if (done !== 1 || completion?.token !== m.leaseToken || completion.owner !== m.lockedBy) {
        ownershipViolations += 1;
        note(`message ${m.id}: processed with ${done} audited completions (row ${m.lockedBy}#${m.leaseToken})`);
      }
    } else if (done > 0) {
      ownershipViolations += 1;
      note(`message ${m.id}: ${m.status} but the audit trail has a completion`);
    }
  }
  // Every message without a row (enqueued, or in the audit trail): exactly one audited completion
  // (the replay above proved it the current lease's); none, and it is lost.
  const gone = [...new Set([...known.keys(), ...byMessage.keys()])].filter((id) => !rowIds.has(id));
  const lost = gone.filter((id) => (completions.get(id) ?? 0) === 0 && !cancelled.has(id));
  const deleted = gone.filter((id) => (completions.get(id) ?? 0) > 0);
  for (const id of lost.slice(0, 5)) {
    const enqueued = known.get(id);
    note(`message ${id}${enqueued ? ` (${paymentKeyOf(enqueued)})` : ""}: no row and no audited completion (lost)`);
  }
  for (const id of deleted) {
    const done = completions.get(id) ?? 0;
    if (done !== 1) {
      ownershipViolations += 1;
      note(`message ${id}: its row is gone, with ${done} audited completions`);
    }
  }
  const cancelMismatches = cancelRowMismatches(messages, cancelled, onComplete, note);
  // The rows against what the workers' completions do with them.
  const modeViolations = onComplete === "keep" ? deleted : processedRows.map((m) => m.id);
  for (const id of modeViolations.slice(0, 5))
    note(
      onComplete === "keep" ? `message ${id}: completed, and its row is gone (on complete: keep)` : `message ${id}: a processed row left (on complete: delete)`,
    );
  // Messages known only by their audit trail (no row, not in the run's record): each is some
  // payment's, but which one the checker cannot tell; the payments left without a message are
  // taken as theirs, by count.
  const unattributed = gone.filter((id) => !known.has(id) && !cancelled.has(id));
  const lostAtCreation = Math.max(0, paymentsWithoutMessage.length - unattributed.length);
  const surplusMessages = Math.max(0, unattributed.length - paymentsWithoutMessage.length);
  if (lostAtCreation > 0) for (const p of paymentsWithoutMessage.slice(0, 5)) note(`payment ${p.idempotencyKey} has no outbox message`);
  if (surplusMessages > 0)
    note(`${unattributed.length} messages known only by their audit trail, for ${paymentsWithoutMessage.length} payments without a message`);

  // --- FIFO per ordering key, from the audit trail's order (its rows are in commit order) -----
  const keyOf = new Map(knownInOrder.map((m) => [m.id, m.key]));
  // A death finishes a message's turn only where its type lets the key move on; otherwise it blocks
  // the key until an operator redrives it (it is claimed again: not finished) or skips it (not
  // in the audit trail: a run that skips by hand must not be judged by this row). A cancel
  // finishes it: its key is handed on in the cancel's transaction.
  const skipping = new Set(input.keyMovesOnWhenDead ?? []);
  const typeOf = new Map(knownInOrder.map((m) => [m.id, m.type]));
  const finishedAt = new Map<string, number>(); // message id -> index of its completion, or its death that let the key go
  const keyedCompletions: { messageId: string; key: string; index: number }[] = [];
  audit.forEach((e, index) => {
    const finishes = e.action === "complete" || isCancelEntry(e) || (e.action === "dead" && skipping.has(typeOf.get(e.messageId) ?? ""));
    if (finishes && !finishedAt.has(e.messageId)) finishedAt.set(e.messageId, index);
    const key = keyOf.get(e.messageId);
    if (e.action === "complete" && key) keyedCompletions.push({ messageId: e.messageId, key, index });
  });
  const idsByKey = new Map<string, string[]>();
  for (const m of knownInOrder) if (m.key !== null) idsByKey.set(m.key, [...(idsByKey.get(m.key) ?? []), m.id]);
  // A claim of a keyed message while an earlier message of its key had not finished: two messages
  // of the key could then hold live leases at once.
  let keyOverlaps = 0;
  audit.forEach((e, index) => {
    const key = keyOf.get(e.messageId);
    if (e.action !== "claim" || !key) return;
    for (const earlier of idsByKey.get(key) ?? []) {
      if (Number(earlier) >= Number(e.messageId)) break;
      const done = finishedAt.get(earlier);
      if (done === undefined || done > index) {
        keyOverlaps += 1;
        note(`key ${key}: message ${e.messageId} claimed by ${e.owner} while message ${earlier} had not finished`);
        break;
      }
    }
  });
  // The effects (each completion commits its business write) in the order of enqueue, per key.
  let keyInversions = 0;
  const lastCompletedByKey = new Map<string, string>();
  for (const c of keyedCompletions) {
    const last = lastCompletedByKey.get(c.key);
    if (last !== undefined && Number(last) > Number(c.messageId)) {
      keyInversions += 1;
      note(`key ${c.key}: message ${c.messageId} completed after message ${last}, enqueued later`);
    }
    lastCompletedByKey.set(c.key, c.messageId);
  }

  // --- Provider: duplicates, creations, transaction ids --------------------------------------
  const checks = providerLog.filter((c) => c.operation === "checkStatus");
  const checksPerKey = countBy(checks, (c) => c.idempotencyKey);
  const duplicateChecks = [...checksPerKey.values()].reduce((sum, n) => sum + n - 1, 0);
  const claimsOf = (id: string) => (byMessage.get(id) ?? []).filter((e) => e.action === "claim").length;
  const claimsPerKey = new Map<string, number>();
  for (const m of knownInOrder) {
    const key = paymentKeyOf(m);
    if (key !== null) claimsPerKey.set(key, claimsOf(m.id));
  }
  // The payments taken as the unattributed messages' are checked together against their claims.
  const presumed = new Set(unattributed.length > 0 ? paymentsWithoutMessage.map((p) => p.idempotencyKey) : []);
  let presumedChecks = 0;
  let checksBeyondClaims = 0;
  for (const [key, n] of checksPerKey) {
    if (presumed.has(key)) {
      presumedChecks += n;
    } else if (n > (claimsPerKey.get(key) ?? 0)) {
      checksBeyondClaims += 1;
      note(`payment ${key}: ${n} provider status checks but ${claimsPerKey.get(key) ?? 0} claims`);
    }
  }
  const unattributedClaims = unattributed.reduce((sum, id) => sum + claimsOf(id), 0);
  if (presumedChecks > unattributedClaims) {
    checksBeyondClaims += 1;
    note(
      `${presumed.size} payments without a known message: ${presumedChecks} provider status checks but ${unattributedClaims} claims of the messages known only by their audit trail`,
    );
  }
  const creationsPerKey = countBy(
    providerLog.filter((c) => c.operation === "createPayment" && c.result.startsWith("created")),
    (c) => c.idempotencyKey,
  );
  const maxCreations = Math.max(0, ...creationsPerKey.values());
  const paidIds = new Map<string, Set<string>>();
  for (const c of checks) {
    const match = /^Paid (\S+)/.exec(c.result) ?? /^error \(injected, after Paid\)/.exec(c.result);
    if (match?.[1]) paidIds.set(c.idempotencyKey, (paidIds.get(c.idempotencyKey) ?? new Set()).add(match[1]));
  }
  const badTransactionIds = payments.filter((p) => {
    if (p.status !== "Paid") return p.transactionId !== null;
    return p.transactionId === null || !(paidIds.get(p.idempotencyKey)?.has(p.transactionId) ?? false);
  });
  for (const p of badTransactionIds.slice(0, 5))
    note(`payment ${p.idempotencyKey}: ${p.status} with transaction id ${p.transactionId ?? "none"} (not one the provider answered)`);
  const paymentsPerKey = countBy(payments, (p) => p.idempotencyKey);
  const maxPaymentsPerKey = Math.max(0, ...paymentsPerKey.values());
  // A payment without a known message counts as having one while the unattributed messages cover it.
  const messageCounts = payments.map((p) => messagesPerPayment.get(p.idempotencyKey) ?? (lostAtCreation > 0 ? 0 : 1));
  // Completed: a processed row, or a message whose row is gone after its audited completion.
  const processedKeys = new Set([...processedRows, ...deleted.flatMap((id) => known.get(id) ?? [])].map(paymentKeyOf));
  const unsettled = payments.filter((p) => processedKeys.has(p.idempotencyKey) && p.status === "Pending");
  for (const p of unsettled.slice(0, 5)) note(`payment ${p.idempotencyKey}: message processed but payment still Pending`);
  // Each unattributed completion settled one of the payments taken as theirs: no more of those may be Pending than the rest.
  const unattributedCompleted = unattributed.filter((id) => (completions.get(id) ?? 0) > 0).length;
  const presumedPending = payments.filter((p) => presumed.has(p.idempotencyKey) && p.status === "Pending").length;
  const presumedUnsettled = Math.max(0, presumedPending - Math.max(0, presumed.size - unattributedCompleted));
  if (presumedUnsettled > 0)
    note(
      `${presumedPending} of the ${presumed.size} payments without a known message are Pending, but ${unattributedCompleted} messages known only by their audit trail were completed`,
    );

  const row = (name: string, observed: number, expected: string, ok: boolean, detail = ""): InvariantRow => ({ name, observed, expected, ok, detail });
  const rows: InvariantRow[] = [
    row(
      "payments without an outbox message (lost at creation)",
      lostAtCreation,
      "0",
      lostAtCreation === 0,
      unattributed.length > 0 ? `${unattributed.length} messages without a row known only by their audit trail, taken as theirs by count` : "",
    ),
    row("messages without a row or an audited completion (lost)", lost.length, "0", lost.length === 0),
    input.timedOut
      ? row(
          "messages unfinished when the run timed out (late, not lost)",
          unfinished.length,
          "0",
          unfinished.length === 0,
          `timed out with ${unfinished.length} unfinished, still pending or processing: raise --timeout or soften the faults`,
        )
      : row("messages not finished (still pending or processing)", unfinished.length, "0", unfinished.length === 0),
    onComplete === "keep"
      ? row(
          "on complete keep: completed messages whose row is gone",
          modeViolations.length,
          "0",
          modeViolations.length === 0,
          input.onComplete ? "" : "inferred: processed rows are left",
        )
      : row(
          "on complete delete: processed rows left",
          modeViolations.length,
          "0",
          modeViolations.length === 0,
          `${deleted.length} completed messages deleted, each known by its audited completion${input.onComplete ? "" : " (inferred: no processed row is left)"}`,
        ),
    row("dead messages (each with its last error)", dead.length, "info", deadWithoutError.length === 0, `${deadWithoutError.length} without an error`),
    row("ownership violations (result without the current token)", ownershipViolations, "0", ownershipViolations === 0),
    row(
      "keys: claims while an earlier message of the key was unfinished",
      keyOverlaps,
      "0",
      keyOverlaps === 0,
      idsByKey.size === 0 ? "no ordering keys in this run" : `${idsByKey.size} keys`,
    ),
    row("keys: effects committed out of enqueue order", keyInversions, "0", keyInversions === 0, idsByKey.size === 0 ? "no ordering keys in this run" : ""),
    row("stale completions rejected", input.staleCompletionsRejected ?? 0, "info", true, "refused by the token guard, as the workers reported"),
    row(
      "  reported without a 'refused' audit row",
      unrecordedRefusals,
      "0",
      unrecordedRefusals === 0,
      `${refusedCompletions} refused completions in the audit trail; each commits with its refusal, so none can be reported without one`,
    ),
    row("duplicate provider status checks", duplicateChecks, "info", true, "extra attempts of work already tried"),
    row("  explained by an expired lease (reclaim)", explainedByExpiry, "info", true),
    row("  explained by a retry after a failure", explainedByRetry, "info", true),
    row("  explained by a release on shutdown", explainedByRelease, "info", true),
    row("  explained by a redrive of a dead message", explainedByRedrive, "info", true),
    row("  payments checked more often than claimed", checksBeyondClaims, "0", checksBeyondClaims === 0),
    row("payments per idempotency key (max)", maxPaymentsPerKey, "<= 1", maxPaymentsPerKey <= 1),
    row(
      "messages per payment (min)",
      Math.min(...(messageCounts.length ? messageCounts : [1])),
      "1",
      messageCounts.every((n) => n >= 1),
    ),
    row(
      "messages per payment (max)",
      Math.max(0, ...messageCounts, surplusMessages > 0 ? 2 : 0),
      "<= 1",
      surplusMessages === 0 && messageCounts.every((n) => n <= 1),
    ),
    row("transaction ids not from the provider, or not on Paid", badTransactionIds.length, "0", badTransactionIds.length === 0),
    row("payments left Pending after their message was processed", unsettled.length + presumedUnsettled, "0", unsettled.length + presumedUnsettled === 0),
    row("provider-side creations per key (max)", maxCreations, "<= 1", maxCreations <= 1),
    ...scheduleRows(input.schedule, note),
    ...(cancelled.size === 0
      ? []
      : [
          row("cancels: messages cancelled", cancelled.size, "info", true, `${cancelledRunning} of them while running`),
          row("cancels: cancelled messages completed", completedAfterCancel, "0", completedAfterCancel === 0),
          row(
            onComplete === "keep" ? "cancels: cancelled messages whose row is not cancelled" : "cancels: cancelled messages with a row left",
            cancelMismatches,
            "0",
            cancelMismatches === 0,
          ),
        ]),
    ...limitRows(input, known, note),
  ];
  return { passed: rows.every((r) => r.ok), rows, examples };
}

/** The limit's rows: no more leases at once than its concurrency, no more claims in an interval than its rate. */
function limitRows(input: CheckerInput, known: ReadonlyMap<string, EnqueuedMessage>, note: (text: string) => void): InvariantRow[] {
  if (input.limit === undefined) return [];
  const { type, limit, leaseMs } = input.limit;
  const report = judgeLimits(input.audit, new Map([[type, limit]]), (id) => known.get(id)?.type, leaseMs);
  for (const excess of report.excesses.slice(0, 5)) {
    note(
      `limit of ${type}: ${excess.seen} ${excess.limit === "concurrency" ? "leases at once" : "claims in one interval"} (allowed ${excess.allowed}) at ${excess.at.toISOString()}`,
    );
  }
  const peak = report.peaks[type] ?? { running: 0, perInterval: 0 };
  const count = (kind: LimitExcess["limit"]) => report.excesses.filter((e) => e.limit === kind).length;
  const rows: InvariantRow[] = [];
  const row = (name: string, observed: number, ok: boolean, detail: string): InvariantRow => ({ name, observed, expected: "0", ok, detail });
  if (limit.concurrency !== null) {
    const over = count("concurrency");
    rows.push(row("limits: leases held at once beyond the concurrency", over, over === 0, `at most ${peak.running} at once, of ${limit.concurrency} allowed`));
  }
  if (limit.rate !== null) {
    const over = count("rate");
    rows.push(
      row(
        "limits: claims in one interval beyond the rate",
        over,
        over === 0,
        `at most ${peak.perInterval} in ${limit.rate.intervalMs} ms, of ${limit.rate.count} allowed`,
      ),
    );
  }
  return rows;
}

/** The schedule's rows: no tick enqueued twice, none missing from the first to the last, each one processed. */
function scheduleRows(schedule: CheckerInput["schedule"], note: (text: string) => void): InvariantRow[] {
  if (schedule === undefined) return [];
  const row = (name: string, observed: number, expected: string, ok: boolean, detail = ""): InvariantRow => ({ name, observed, expected, ok, detail });
  const twice = schedule.alreadyEnqueued + schedule.ticks.length - new Set(schedule.ticks).size;
  if (twice > 0) note(`schedule: ${twice} ticks enqueued twice, or found with their message there already`);
  const times = [...new Set(schedule.ticks)].map((t) => Date.parse(t)).sort((a, b) => a - b);
  const last = times.at(-1) ?? Number.NEGATIVE_INFINITY; // none fired: the run ended before its first tick
  const expected = times.length === 0 ? 0 : Math.round((last - schedule.firstTick.getTime()) / 1000) + 1;
  const present = new Set(times);
  let missing = 0;
  for (let t = schedule.firstTick.getTime(); t <= last; t += 1000) {
    if (!present.has(t)) {
      missing += 1;
      note(`schedule: the tick ${new Date(t).toISOString()} enqueued no message`);
    }
  }
  return [
    row("schedule: ticks enqueued twice (or found enqueued already)", twice, "0", twice === 0),
    row("schedule: ticks missing from the first to the last", missing, "0", missing === 0, `every second from ${schedule.firstTick.toISOString()}`),
    row("schedule: tick messages not processed", schedule.unfinished, "0", schedule.unfinished === 0),
    row("schedule: ticks fired", times.length, "info", true, `${times.length} of the ${expected} from the first tick to the last`),
  ];
}

export function renderInvariants(report: InvariantReport): string {
  const table = textTable(
    ["", "invariant", "observed", "expected", "detail"],
    report.rows.map((r) => [r.ok ? "ok" : "FAIL", r.name, r.observed, r.expected, r.detail]),
  );
  const problems = report.examples.length ? `\n\nProblems found (first ${report.examples.length}):\n${report.examples.map((e) => `  - ${e}`).join("\n")}` : "";
  return `${table}${problems}\n`;
}
