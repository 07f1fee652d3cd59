// A payment provider that behaves the same way every run: each idempotency key has a fixed
// outcome, transaction ids are issued only here and only for Paid, and every call is counted
// and (unless told to keep counts only) logged, so reports and checkers can see exactly what the
// provider was asked.

import { createHash } from "node:crypto";
import { appendFileSync, readFileSync } from "node:fs";
import { seededRandom } from "../outbox/seeded-random.js";
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
  /** The process that made the call (several workers may share one log file). */
  readonly pid: number;
  readonly at: string;
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
  /** Append every call as a JSON line to this file, so processes can share one log. */
  readonly logFile?: string;
  /**
   * What the simulator remembers of the calls made to it (default "calls"):
   * - "calls": every call in order (log()), and the calls and issued transaction id per key;
   * - "counts": the number of calls of each operation only, so status checks add nothing to its
   *   memory however many it answers (the payments it creates it still keeps, as a provider
   *   does). For a long-running worker, which reads none of it; the `logFile` still gets every call.
   */
  readonly keep?: "calls" | "counts";
  /** Random faults, replayable from the seed (for chaos runs). */
  readonly randomFaults?: RandomProviderFaults;
}

export interface RandomProviderFaults {
  readonly seed: number;
  /** Share of status checks that fail before the provider does anything. */
  readonly statusFailureRate?: number;
  /** Share of status checks that time out after the provider answered (and issued any id). */
  readonly statusTimeoutAfterSuccessRate?: number;
  /** Share of calls that take `latencySpikeMs` longer. */
  readonly latencySpikeRate?: number;
  readonly latencySpikeMs?: number;
}

/** Reads a log written with the `logFile` option. */
export function readProviderLog(file: string): ProviderCall[] {
  return readFileSync(file, "utf8")
    .split("\n")
    .filter((line) => line.trim() !== "")
    .flatMap((line) => {
      try {
        return [JSON.parse(line) as ProviderCall];
      } catch {
        return []; // a line cut short by a killed process
      }
    });
}

interface Fault {
  readonly operation: ProviderOperation;
  readonly key: string | undefined;
  remaining: number;
  /** Throw after the call took effect (the caller sees a timeout, the provider did the work). */
  readonly afterEffect: boolean;
}

/** Waits `ms`, or rejects with the signal's reason as soon as it aborts (a real client would cancel its request). */
function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

function digest(text: string): string {
  return createHash("sha256").update(text).digest("hex");
}

/** What a key's hash decides: one key in four fails, and a Paid key's transaction id. Every run agrees. */
function derived(idempotencyKey: string): { readonly outcome: "Paid" | "Failed"; readonly transactionId: string } {
  const hash = digest(idempotencyKey);
  return {
    outcome: Number.parseInt(hash.slice(0, 8), 16) % 4 === 0 ? "Failed" : "Paid",
    transactionId: `TXN-${hash.slice(8, 24).toUpperCase()}`,
  };
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
  /** False with keep: "counts": no log, no per-key maps, only the totals below. */
  readonly #keepCalls: boolean;
  readonly #totals = { createPayment: 0, checkStatus: 0 };
  #seq = 0;
  readonly #answerUnknownKeys: boolean;
  readonly #logFile: string | undefined;
  readonly #randomFaults: RandomProviderFaults | undefined;
  readonly #random: () => number;

  constructor(options: ProviderSimulatorOptions = {}) {
    this.#outcomes = options.outcomes ?? {};
    this.#answerUnknownKeys = options.answerUnknownKeys ?? false;
    this.#logFile = options.logFile;
    const keep = options.keep ?? "calls";
    if (keep !== "calls" && keep !== "counts") throw new InvalidArgumentError(`keep must be "calls" or "counts" (got ${JSON.stringify(keep)})`);
    this.#keepCalls = keep === "calls";
    this.#randomFaults = options.randomFaults;
    this.#random = seededRandom(options.randomFaults?.seed ?? 0);
    for (const rate of [options.randomFaults?.statusFailureRate, options.randomFaults?.statusTimeoutAfterSuccessRate, options.randomFaults?.latencySpikeRate]) {
      if (rate !== undefined && !(rate >= 0 && rate <= 1)) throw new InvalidArgumentError(`fault rates must be between 0 and 1 (got ${rate})`);
    }
    this.#latencyMs = 0;
    this.setLatency(options.latencyMs ?? 0);
  }

  /** The outcome this key will always have. */
  outcomeFor(idempotencyKey: string): "Paid" | "Failed" {
    const fixed = this.#outcomes[idempotencyKey];
    return fixed ?? derived(idempotencyKey).outcome;
  }

  /** Refuses a question about single calls or keys when only counts are kept. */
  #needCalls(what: string): void {
    if (!this.#keepCalls)
      throw new InvalidArgumentError(`${what} needs the calls, and this simulator was created with keep: "counts"; create it with keep: "calls" (the default)`);
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
    this.#seq += 1;
    if (!this.#keepCalls && this.#logFile === undefined) return;
    const call: ProviderCall = { pid: process.pid, at: new Date().toISOString(), seq: this.#seq, operation, idempotencyKey, result };
    if (this.#keepCalls) this.#log.push(call);
    if (this.#logFile !== undefined) appendFileSync(this.#logFile, `${JSON.stringify(call)}\n`);
  }

  /** True with probability `rate`, from the seeded sequence. */
  #chance(rate: number | undefined): boolean {
    return rate !== undefined && rate > 0 && this.#random() < rate;
  }

  async #delay(signal?: AbortSignal): Promise<void> {
    const spike = this.#chance(this.#randomFaults?.latencySpikeRate) ? (this.#randomFaults?.latencySpikeMs ?? 0) : 0;
    if (this.#latencyMs + spike > 0) await sleep(this.#latencyMs + spike, signal);
  }

  /** Creates the payment at the provider; idempotent by key (a repeat returns the same reference). */
  async createPayment(request: CreatePaymentRequest): Promise<{ readonly providerReference: string }> {
    const key = request.idempotencyKey;
    this.#totals.createPayment += 1;
    if (this.#keepCalls) this.#createCalls.set(key, (this.#createCalls.get(key) ?? 0) + 1);
    await this.#delay();
    const fault = this.#takeFault("createPayment", key);
    if (fault && !fault.afterEffect) {
      this.#record("createPayment", key, "error (injected, before effect)");
      throw new ProviderError("createPayment", `provider refused to create payment ${key} (injected fault)`);
    }
    let created = this.#created.get(key);
    const isNew = created === undefined;
    if (created === undefined) {
      created = { reference: `PRV-${digest(`ref:${key}`).slice(0, 12)}`, amount: request.amount, currency: request.currency };
      this.#created.set(key, created);
    }
    if (fault) {
      this.#record("createPayment", key, "error (injected, after effect)");
      throw new ProviderError("createPayment", `provider timed out creating payment ${key} after creating it (injected fault)`);
    }
    this.#record("createPayment", key, `${isNew ? "created" : "existing"} ${created.reference}`);
    return { providerReference: created.reference };
  }

  /** The payment's final status. Issues the transaction id on the first Paid answer, the same one ever after. */
  async checkStatus(idempotencyKey: string, options: { readonly signal?: AbortSignal } = {}): Promise<PaymentOutcome> {
    const key = idempotencyKey;
    this.#totals.checkStatus += 1;
    if (this.#keepCalls) this.#statusChecks.set(key, (this.#statusChecks.get(key) ?? 0) + 1);
    try {
      await this.#delay(options.signal);
    } catch (reason) {
      this.#record("checkStatus", key, "error (cancelled by the caller)");
      throw reason;
    }
    const injected = this.#takeFault("checkStatus", key);
    const random = this.#chance(this.#randomFaults?.statusFailureRate)
      ? { afterEffect: false }
      : this.#chance(this.#randomFaults?.statusTimeoutAfterSuccessRate)
        ? { afterEffect: true }
        : undefined;
    const fault = injected ?? random;
    if (fault && !fault.afterEffect) {
      this.#record("checkStatus", key, "error (injected, before effect)");
      throw new ProviderError("checkStatus", `provider status check for ${key} failed (injected fault)`);
    }
    if (!this.#created.has(key) && !this.#answerUnknownKeys) {
      this.#record("checkStatus", key, "error (unknown payment)");
      throw new ProviderError("checkStatus", `provider has no payment with idempotency key ${key}`);
    }
    // One hash per check, for the outcome and the id both (the id is the same on every check, so
    // kept per key only to answer issuedTransactionId).
    const fixed = this.#outcomes[key];
    const fromHash = fixed === "Failed" ? undefined : derived(key);
    let outcome: PaymentOutcome;
    if (fromHash !== undefined && (fixed ?? fromHash.outcome) === "Paid") {
      outcome = { status: "Paid", transactionId: fromHash.transactionId };
      if (this.#keepCalls) this.#issued.set(key, fromHash.transactionId);
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

  /** Calls of createPayment for this key (or all keys; per key needs keep: "calls"). */
  createCalls(idempotencyKey?: string): number {
    if (idempotencyKey === undefined) return this.#totals.createPayment;
    this.#needCalls("createCalls(key)");
    return this.#createCalls.get(idempotencyKey) ?? 0;
  }

  /** Payments the provider actually created: at most one per key. */
  creations(): number {
    return this.#created.size;
  }

  /** Calls of checkStatus for this key (or all keys; per key needs keep: "calls"). */
  statusChecks(idempotencyKey?: string): number {
    if (idempotencyKey === undefined) return this.#totals.checkStatus;
    this.#needCalls("statusChecks(key)");
    return this.#statusChecks.get(idempotencyKey) ?? 0;
  }

  /** Per key: createPayment calls (needs keep: "calls"). */
  createCallsByKey(): ReadonlyMap<string, number> {
    this.#needCalls("createCallsByKey()");
    return this.#createCalls;
  }

  /** Per key: checkStatus calls (needs keep: "calls"). */
  statusChecksByKey(): ReadonlyMap<string, number> {
    this.#needCalls("statusChecksByKey()");
    return this.#statusChecks;
  }

  /** The transaction id the provider issued for a key, if any (needs keep: "calls"). */
  issuedTransactionId(idempotencyKey: string): string | undefined {
    this.#needCalls("issuedTransactionId()");
    return this.#issued.get(idempotencyKey);
  }

  /** Every call, in order (needs keep: "calls"). */
  log(): readonly ProviderCall[] {
    this.#needCalls("log()");
    return this.#log;
  }
}
