// Figures and tables the Session 13 and 14 reports share, computed from rows read back from the
// database and from the provider's call log (every process's calls): never from what an instance
// believes it did.

import type { OutboxMessage } from "../outbox/types.js";
import type { ProviderCall } from "../payments/provider-simulator.js";
import type { Payment } from "../payments/types.js";
import type { CallBy, Snapshot } from "./restart-stage.js";
import { textTable } from "./text-table.js";

/** The payment key a reconciliation message is about (its payload's), or null. */
export function messageKey(message: OutboxMessage): string | null {
  const key = (message.payload as { idempotencyKey?: unknown } | null)?.idempotencyKey;
  return typeof key === "string" ? key : null;
}

/** The payment id a reconciliation message points at (its payload's), or null. */
function messagePaymentId(message: OutboxMessage): string | null {
  const id = (message.payload as { paymentId?: unknown } | null)?.paymentId;
  return typeof id === "string" ? id : null;
}

export interface Pairing {
  /** Payment rows that no outbox message points at. */
  readonly paymentsWithoutMessage: readonly Payment[];
  /** Outbox messages that point at no payment row. */
  readonly messagesWithoutPayment: readonly OutboxMessage[];
  readonly rows: ReadonlyArray<readonly [string, string, string, string]>;
}

/** Matches payment rows and reconciliation messages (by the payment id in the payload) and finds the orphans on either side. */
export function pairPaymentsAndMessages({ payments, messages }: Snapshot): Pairing {
  const byPayment = new Map<string, OutboxMessage[]>();
  for (const m of messages) {
    const id = messagePaymentId(m);
    if (id !== null) byPayment.set(id, [...(byPayment.get(id) ?? []), m]);
  }
  const paymentIds = new Set(payments.map((p) => p.id));
  const paymentsWithoutMessage = payments.filter((p) => !byPayment.has(p.id));
  const messagesWithoutPayment = messages.filter((m) => {
    const id = messagePaymentId(m);
    return id === null || !paymentIds.has(id);
  });
  const rows = [
    ...payments.map((p) => {
      const mine = byPayment.get(p.id) ?? [];
      return [
        p.idempotencyKey,
        `${p.id} (${p.status})`,
        mine.map((m) => `${m.id} (${m.status})`).join(", ") || "NONE",
        mine.length === 0 ? "ORPHAN: payment without its message" : "ok",
      ] as const;
    }),
    ...messagesWithoutPayment.map((m) => [messageKey(m) ?? "?", "NONE", `${m.id} (${m.status})`, "ORPHAN: message without its payment"] as const),
  ];
  return { paymentsWithoutMessage, messagesWithoutPayment, rows };
}

export function renderPairing(pairing: Pairing): string {
  return pairing.rows.length === 0 ? "(no payment rows, no outbox messages)" : textTable(["payment", "payment row", "outbox message", ""], pairing.rows);
}

/** Rows that share a key with an earlier row: 0 when each key has at most one. */
export function duplicates<T>(items: readonly T[], key: (item: T) => string | null): number {
  const seen = new Set<string>();
  let extra = 0;
  for (const item of items) {
    const k = key(item);
    if (k === null) continue;
    if (seen.has(k)) extra += 1;
    seen.add(k);
  }
  return extra;
}

/** The provider's calls, as the reports count them. */
export class ProviderCalls {
  readonly #calls: readonly ProviderCall[];
  readonly #by: readonly string[];

  constructor(calls: readonly (CallBy | ProviderCall)[]) {
    this.#calls = calls.map((c) => ("call" in c ? c.call : c));
    this.#by = calls.map((c) => ("call" in c ? c.by : `pid ${c.pid}`));
  }

  statusChecks(key?: string): number {
    return this.#calls.filter((c) => c.operation === "checkStatus" && (key === undefined || c.idempotencyKey === key)).length;
  }

  creates(key?: string): number {
    return this.#calls.filter((c) => c.operation === "createPayment" && (key === undefined || c.idempotencyKey === key)).length;
  }

  /** Keys whose status the provider was asked for more than once. */
  checkedMoreThanOnce(): string[] {
    const keys = this.#calls.filter((c) => c.operation === "checkStatus").map((c) => c.idempotencyKey);
    return [...new Set(keys.filter((k, i) => keys.indexOf(k) !== i))];
  }

  /** The provider references it handed out for a key, one per createPayment answer. */
  references(key: string): string[] {
    return this.#calls.filter((c) => c.operation === "createPayment" && c.idempotencyKey === key).map((c) => /PRV-[0-9a-f]+/.exec(c.result)?.[0] ?? c.result);
  }

  /** The transaction id the provider issued for a key, read from its Paid answers. */
  issuedTransactionId(key: string): string | undefined {
    const answer = this.#calls.find((c) => c.operation === "checkStatus" && c.idempotencyKey === key && c.result.startsWith("Paid "));
    return answer?.result.slice("Paid ".length);
  }

  /** Paid rows without the id the provider issued, and ids on rows that are not Paid. */
  fakeSuccesses(payments: readonly Payment[]): Payment[] {
    return payments.filter((p) =>
      p.status === "Paid" ? p.transactionId === null || p.transactionId !== this.issuedTransactionId(p.idempotencyKey) : p.transactionId !== null,
    );
  }

  render(): string {
    if (this.#calls.length === 0) return "(no provider calls)";
    return textTable(
      ["#", "caller", "call", "payment", "answer"],
      this.#calls.map((c, i) => [i + 1, this.#by[i] ?? "", c.operation, c.idempotencyKey, c.result]),
    );
  }
}
