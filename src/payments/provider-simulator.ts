// A payment provider that behaves the same way every run: each idempotency key has a fixed
// outcome, transaction ids are issued only here and only for Paid, and every call is counted
// and logged so reports and checkers can see exactly what the provider was asked.

import { createHash } from "node:crypto";
import { InvalidArgumentError, WassalError } from "../outbox/errors.js";
import type { CreatePaymentRequest, PaymentOutcome } from "./types.js";

export type ProviderOperation = "createPayment" | "checkStatus";

/** A failure the provider reports (or a fault injected to look like one). */
export class ProviderError extends WassalError {
  override name = "ProviderError";
  readonly operation: ProviderOperation;
  constructor(operation: ProviderOperation, message: string) {
    super("PROVIDER_ERROR", message);
    this.operation = operation;
  }
}

export interface ProviderCall {
  readonly seq: number;
  readonly operation: ProviderOperation;
  readonly idempotencyKey: string;
  /** What the caller got back: the outcome, or the error it saw. */
  readonly result: string;
}

export interface ProviderSimulatorOptions {
  /** Fixed outcomes for named keys; other keys get a stable outcome derived from the key. */
  readonly outcomes?: Readonly<Record<string, "Paid" | "Failed">>;
  /** Delay added to every call, in milliseconds (default 0). */
  readonly latencyMs?: number;
  /**
   * Answer status checks for keys this simulator never created (default false). Workers in
   * other processes than the one that created the payment need it: the simulated provider's
   * answers depend only on the key, so every process agrees.
   */
  readonly answerUnknownKeys?: boolean;
}

interface Fault {
  readonly operation: ProviderOperation;
  readonly key: string | undefined;
  remaining: number;
  /** Throw after the call took effect (the caller sees a timeout, the provider did the work). */
  readonly afterEffect: boolean;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

function digest(text: string): string {
  return createHash("sha256").update(text).digest("hex");
}

export class ProviderSimulator {
  readonly #outcomes: Readonly<Record<string, "Paid" | "Failed">>;
  #latencyMs: number;
  readonly #created = new Map<string, { reference: string; amount: number; currency: string }>();
  readonly #createCalls = new Map<string, number>();
  readonly #statusChecks = new Map<string, number>();
  readonly #issued = new Map<string, string>();
  readonly #faults: Fault[] = [];
  readonly #log: ProviderCall[] = [];
  readonly #answerUnknownKeys: boolean;

  constructor(options: ProviderSimulatorOptions = {}) {
    this.#outcomes = options.outcomes ?? {};
    this.#answerUnknownKeys = options.answerUnknownKeys ?? false;
    this.#latencyMs = 0;
    this.setLatency(options.latencyMs ?? 0);
  }

  /** The outcome this key will always have. */
  outcomeFor(idempotencyKey: string): "Paid" | "Failed" {
    const fixed = this.#outcomes[idempotencyKey];
    if (fixed !== undefined) return fixed;
    // One key in four fails, chosen by the key's hash so every run agrees.
    return Number.parseInt(digest(idempotencyKey).slice(0, 8), 16) % 4 === 0 ? "Failed" : "Paid";
  }

  setLatency(ms: number): void {
    if (!Number.isFinite(ms) || ms < 0) throw new InvalidArgumentError(`provider latency must be a number of milliseconds >= 0 (got ${ms})`);
    this.#latencyMs = ms;
  }

  /** Makes the next `times` calls of `operation` (for `key`, or any key) fail. */
  failNext(operation: ProviderOperation, options: { key?: string; times?: number; afterEffect?: boolean } = {}): void {
    const times = options.times ?? 1;
    if (!Number.isInteger(times) || times < 1) throw new InvalidArgumentError(`times must be a whole number >= 1 (got ${times})`);
    this.#faults.push({ operation, key: options.key, remaining: times, afterEffect: options.afterEffect ?? false });
  }

  #takeFault(operation: ProviderOperation, key: string): Fault | undefined {
    const fault = this.#faults.find((f) => f.operation === operation && f.remaining > 0 && (f.key === undefined || f.key === key));
    if (fault) fault.remaining -= 1;
    return fault;
  }

  #record(operation: ProviderOperation, idempotencyKey: string, result: string): void {
    this.#log.push({ seq: this.#log.length + 1, operation, idempotencyKey, result });
  }

  /** Creates the payment at the provider; idempotent by key (a repeat returns the same reference). */
  async createPayment(request: CreatePaymentRequest): Promise<{ readonly providerReference: string }> {
    const key = request.idempotencyKey;
    this.#createCalls.set(key, (this.#createCalls.get(key) ?? 0) + 1);
    if (this.#latencyMs > 0) await sleep(this.#latencyMs);
    const fault = this.#takeFault("createPayment", key);
    if (fault && !fault.afterEffect) {
      this.#record("createPayment", key, "error (injected, before effect)");
      throw new ProviderError("createPayment", `provider refused to create payment ${key} (injected fault)`);
    }
    let created = this.#created.get(key);
    if (created === undefined) {
      created = { reference: `PRV-${digest(`ref:${key}`).slice(0, 12)}`, amount: request.amount, currency: request.currency };
      this.#created.set(key, created);
    }
    if (fault) {
      this.#record("createPayment", key, "error (injected, after effect)");
      throw new ProviderError("createPayment", `provider timed out creating payment ${key} after creating it (injected fault)`);
    }
    this.#record("createPayment", key, created.reference);
    return { providerReference: created.reference };
  }

  /** The payment's final status. Issues the transaction id on the first Paid answer, the same one ever after. */
  async checkStatus(idempotencyKey: string): Promise<PaymentOutcome> {
    const key = idempotencyKey;
    this.#statusChecks.set(key, (this.#statusChecks.get(key) ?? 0) + 1);
    if (this.#latencyMs > 0) await sleep(this.#latencyMs);
    const fault = this.#takeFault("checkStatus", key);
    if (fault && !fault.afterEffect) {
      this.#record("checkStatus", key, "error (injected, before effect)");
      throw new ProviderError("checkStatus", `provider status check for ${key} failed (injected fault)`);
    }
    if (!this.#created.has(key) && !this.#answerUnknownKeys) {
      this.#record("checkStatus", key, "error (unknown payment)");
      throw new ProviderError("checkStatus", `provider has no payment with idempotency key ${key}`);
    }
    let outcome: PaymentOutcome;
    if (this.outcomeFor(key) === "Paid") {
      let transactionId = this.#issued.get(key);
      if (transactionId === undefined) {
        transactionId = `TXN-${digest(`txn:${key}`).slice(0, 16).toUpperCase()}`;
        this.#issued.set(key, transactionId);
      }
      outcome = { status: "Paid", transactionId };
    } else {
      outcome = { status: "Failed" };
    }
    if (fault) {
      this.#record("checkStatus", key, `error (injected, after ${outcome.status})`);
      throw new ProviderError("checkStatus", `provider status check for ${key} timed out (injected fault, after it answered)`);
    }
    this.#record("checkStatus", key, outcome.status === "Paid" ? `Paid ${outcome.transactionId}` : "Failed");
    return outcome;
  }

  /** Calls of createPayment for this key (or all keys). */
  createCalls(idempotencyKey?: string): number {
    return idempotencyKey === undefined ? sum(this.#createCalls) : (this.#createCalls.get(idempotencyKey) ?? 0);
  }

  /** Payments the provider actually created: at most one per key. */
  creations(): number {
    return this.#created.size;
  }

  /** Calls of checkStatus for this key (or all keys). */
  statusChecks(idempotencyKey?: string): number {
    return idempotencyKey === undefined ? sum(this.#statusChecks) : (this.#statusChecks.get(idempotencyKey) ?? 0);
  }

  /** Per key: createPayment calls. */
  createCallsByKey(): ReadonlyMap<string, number> {
    return this.#createCalls;
  }

  /** Per key: checkStatus calls. */
  statusChecksByKey(): ReadonlyMap<string, number> {
    return this.#statusChecks;
  }

  /** The transaction id the provider issued for a key, if any. */
  issuedTransactionId(idempotencyKey: string): string | undefined {
    return this.#issued.get(idempotencyKey);
  }

  /** Every call, in order. */
  log(): readonly ProviderCall[] {
    return this.#log;
  }
}

function sum(map: ReadonlyMap<string, number>): number {
  let total = 0;
  for (const n of map.values()) total += n;
  return total;
}
