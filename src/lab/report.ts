// Renders the sections every lab report shares: schema, seed, timeline, ownership, ledgers,
// metrics, checks and verdict.

import type { OutboxMessage } from "../outbox/types.js";
import type { Payment } from "../payments/types.js";
import type { Ledger, LedgerEntry } from "./ledger.js";
import { clockTime, heading, textTable } from "./text-table.js";

export interface Check {
  readonly name: string;
  readonly passed: boolean;
  readonly observed: string;
}

export function check(name: string, passed: boolean, observed: string): Check {
  return { name, passed, observed };
}

/** Collects a report's sections in order. */
export class ReportBuilder {
  readonly #parts: string[] = [];

  line(text = ""): this {
    this.#parts.push(text);
    return this;
  }

  section(title: string, body: string): this {
    this.#parts.push(heading(title), body);
    return this;
  }

  toString(): string {
    return `${this.#parts.join("\n").trimEnd()}\n`;
  }
}

/** Message id → the payment key it is about, for readable tables. */
export type Labels = (messageId: string) => string;

export function labelsFrom(messages: readonly OutboxMessage[]): Labels {
  const byId = new Map(
    messages.map((m) => {
      const payload = m.payload as { idempotencyKey?: unknown } | null;
      return [m.id, typeof payload?.idempotencyKey === "string" ? payload.idempotencyKey : `message ${m.id}`];
    }),
  );
  return (id) => byId.get(id) ?? `message ${id}`;
}

const money = (p: Payment) => `${(p.amount / 100).toFixed(2)} ${p.currency}`;

export function renderPayments(payments: readonly Payment[]): string {
  return textTable(
    ["id", "idempotency key", "amount", "status", "transaction id", "provider ref"],
    payments.map((p) => [p.id, p.idempotencyKey, money(p), p.status, p.transactionId, p.providerReference]),
  );
}

export function renderMessages(messages: readonly OutboxMessage[], labels: Labels): string {
  return textTable(
    ["id", "type", "payment", "status", "locked by", "locked until", "token", "attempts"],
    messages.map((m) => [m.id, m.type, labels(m.id), m.status, m.lockedBy, m.lockedUntil ? clockTime(m.lockedUntil) : null, m.leaseToken, m.attempts]),
  );
}

function describe(entry: LedgerEntry, labels: Labels, work: string): string | undefined {
  switch (entry.type) {
    case "note":
      return entry.text;
    case "claim-won":
      return `claim ${labels(entry.messageId)} -> ${entry.reclaimedFrom ? `RECLAIMED from ${entry.reclaimedFrom}` : "CLAIMED"} (token ${entry.token}, lease until ${clockTime(entry.lockedUntil)})`;
    case "claim-empty":
      return "claim -> EMPTY (nothing claimable right now)";
    case "claim-blocked":
      return `claim ${labels(entry.messageId)} -> BLOCKED (held by ${entry.heldBy ?? "nobody"} until ${entry.lockedUntil ? clockTime(entry.lockedUntil) : "-"})`;
    case "processing-started":
      return `process ${labels(entry.messageId)}: ${work}${entry.token === null ? " (no lease)" : ` (token ${entry.token})`}`;
    case "processing-finished":
      return entry.result === "unguarded-write"
        ? `finalize ${labels(entry.messageId)}: wrote ${entry.detail} WITHOUT any ownership check`
        : entry.result === "completed"
          ? `finalize ${labels(entry.messageId)}: ${entry.detail}, committed with the guarded completion`
          : `finalize ${labels(entry.messageId)}: ${entry.result.toUpperCase()} (${entry.detail})`;
    case "completed":
      return undefined; // shown by processing-finished
    case "lease-lost":
      return `${entry.operation} ${labels(entry.messageId)} with token ${entry.token} -> REFUSED: lease lost (now held by ${entry.heldBy ?? "nobody"}, token ${entry.currentToken ?? "-"}); nothing written`;
    case "renewed":
      return `renew ${labels(entry.messageId)} -> lease until ${clockTime(entry.lockedUntil)}`;
    case "released":
      return `release ${labels(entry.messageId)}`;
    case "retry-scheduled":
      return `fail ${labels(entry.messageId)} -> retry at ${clockTime(entry.availableAt)} (${entry.error})`;
    case "dead":
      return `fail ${labels(entry.messageId)} -> DEAD (${entry.error})`;
  }
}

/** The run's events in order, from ledger entry `from` on; `work` says what processing a message does. */
export function renderTimeline(ledger: Ledger, labels: Labels, from = 0, work = "ask the provider for its status"): string {
  const rows = ledger.entries
    .filter((e) => e.seq > from)
    .map((e) => [String(e.seq).padStart(3), clockTime(e.at), e.owner, describe(e, labels, work)] as const)
    .filter((row): row is readonly [string, string, string, string] => row[3] !== undefined);
  return textTable(["#", "clock", "who", "what"], rows);
}

export function renderOwnership(messages: readonly OutboxMessage[], ledger: Ledger, labels: Labels, leased: boolean): string {
  const claims = new Map<string, string[]>();
  for (const e of ledger.of("claim-won")) claims.set(e.messageId, [...(claims.get(e.messageId) ?? []), `${e.owner}#${e.token}`]);
  const doneBy = new Map<string, string[]>();
  for (const e of ledger.of("processing-finished")) {
    if (e.result === "completed" || e.result === "unguarded-write") doneBy.set(e.messageId, [...(doneBy.get(e.messageId) ?? []), e.owner]);
  }
  const attempts = ledger.attemptsByMessage();
  return textTable(
    ["payment", "claims (owner#token)", "results written by", "attempts", "final status", "locked_by", "token"],
    messages.map((m) => [
      labels(m.id),
      leased ? (claims.get(m.id) ?? []).join(", ") || "-" : "none (no claims)",
      (doneBy.get(m.id) ?? []).join(", ") || "-",
      attempts.get(m.id) ?? 0,
      m.status,
      m.lockedBy,
      m.leaseToken,
    ]),
  );
}

export function renderClaimLedger(ledger: Ledger): string {
  const { total, byWorker } = ledger.claimTally();
  const rows = [...byWorker.entries()].sort(([a], [b]) => a.localeCompare(b)).map(([owner, t]) => [owner, t.won, t.empty, t.blocked]);
  rows.push(["total", total.won, total.empty, total.blocked]);
  return textTable(["worker", "won", "empty", "blocked"], rows);
}

export function renderProcessingLedger(ledger: Ledger, labels: Labels): string {
  const finished = ledger.of("processing-finished");
  const rows = ledger.of("processing-started").map((start, i) => {
    const end = finished.find((f) => f.owner === start.owner && f.messageId === start.messageId && f.token === start.token && f.seq > start.seq);
    return [i + 1, start.owner, labels(start.messageId), start.token ?? "none", end?.result ?? "unfinished", end?.detail ?? ""];
  });
  return textTable(["attempt", "worker", "payment", "token", "result", "detail"], rows);
}

export function renderMetrics(metrics: object): string {
  const show = (value: unknown) =>
    value === null
      ? "n/a"
      : typeof value === "object"
        ? Object.entries(value as Record<string, number>)
            .map(([k, v]) => `${k} ${v}`)
            .join(", ") || "-"
        : String(value);
  return textTable(
    ["metric", "value"],
    Object.entries(metrics).map(([name, value]) => [name, show(value)]),
  );
}

export function renderChecks(checks: readonly Check[]): string {
  return textTable(
    ["", "check", "observed"],
    checks.map((c) => [c.passed ? "PASS" : "FAIL", c.name, c.observed]),
  );
}
