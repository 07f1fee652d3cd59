// The provider simulator: fixed outcomes per key, transaction ids only for Paid and always the
// same one, every call counted, injectable faults and latency.

import { afterEach, describe, expect, it, vi } from "vitest";
import { InvalidArgumentError } from "../../src/outbox/errors.js";
import { join } from "node:path";
import { ProviderError, ProviderSimulator, readProviderLog } from "../../src/payments/provider-simulator.js";
import { tempDir } from "../support/temp.js";
import type { CreatePaymentRequest } from "../../src/payments/types.js";

const request = (idempotencyKey: string): CreatePaymentRequest => ({ idempotencyKey, amount: 1_000, currency: "EUR" });

/** A simulator with one Paid and one Failed key, both already created. */
async function withPayments(): Promise<ProviderSimulator> {
  const provider = new ProviderSimulator({ outcomes: { "key-paid": "Paid", "key-failed": "Failed" } });
  await provider.createPayment(request("key-paid"));
  await provider.createPayment(request("key-failed"));
  return provider;
}

describe("ProviderSimulator", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it("gives each named key its fixed outcome, on every check", async () => {
    const provider = await withPayments();
    expect(provider.outcomeFor("key-paid")).toBe("Paid");
    expect(provider.outcomeFor("key-failed")).toBe("Failed");
    for (let n = 0; n < 3; n += 1) {
      expect((await provider.checkStatus("key-paid")).status).toBe("Paid");
      expect(await provider.checkStatus("key-failed")).toEqual({ status: "Failed" });
    }
  });

  it("issues a transaction id only for Paid, and the same id on every later check", async () => {
    const provider = await withPayments();
    const first = await provider.checkStatus("key-paid");
    const second = await provider.checkStatus("key-paid");
    if (first.status !== "Paid" || second.status !== "Paid") throw new Error("expected Paid");

    expect(first.transactionId).toMatch(/^TXN-[0-9A-F]{16}$/);
    expect(second.transactionId).toBe(first.transactionId);
    expect(provider.issuedTransactionId("key-paid")).toBe(first.transactionId);
    const failed = await provider.checkStatus("key-failed");
    expect(failed).not.toHaveProperty("transactionId");
    expect(provider.issuedTransactionId("key-failed")).toBeUndefined();
  });

  it("issues no transaction id before the first status check", async () => {
    const provider = await withPayments();
    expect(provider.issuedTransactionId("key-paid")).toBeUndefined();
  });

  it("issues different transaction ids for different keys, and the same ids in another simulator", async () => {
    const outcomes = { "key-a": "Paid", "key-b": "Paid" } as const;
    const ids = async () => {
      const provider = new ProviderSimulator({ outcomes });
      await provider.createPayment(request("key-a"));
      await provider.createPayment(request("key-b"));
      return [await provider.checkStatus("key-a"), await provider.checkStatus("key-b")].map((o) => (o.status === "Paid" ? o.transactionId : null));
    };
    const [a, b] = await ids();
    expect(a).not.toBe(b);
    expect(await ids()).toEqual([a, b]);
  });

  it("derives the same outcome for a key it was not told about in every simulator, and uses both outcomes", () => {
    const keys = Array.from({ length: 100 }, (_, n) => `order-${n}`);
    const first = keys.map((key) => new ProviderSimulator().outcomeFor(key));
    const second = keys.map((key) => new ProviderSimulator().outcomeFor(key));
    expect(second).toEqual(first);
    expect(new Set(first)).toEqual(new Set(["Paid", "Failed"]));
  });

  it("lets a named outcome override the derived one", () => {
    const key = Array.from({ length: 100 }, (_, n) => `order-${n}`).find((k) => new ProviderSimulator().outcomeFor(k) === "Paid")!;
    expect(new ProviderSimulator({ outcomes: { [key]: "Failed" } }).outcomeFor(key)).toBe("Failed");
  });

  it("creates a payment once per key: a repeat returns the same reference", async () => {
    const provider = new ProviderSimulator();
    const first = await provider.createPayment(request("key-1"));
    const repeat = await provider.createPayment(request("key-1"));
    const other = await provider.createPayment(request("key-2"));

    expect(first.providerReference).toMatch(/^PRV-[0-9a-f]{12}$/);
    expect(repeat.providerReference).toBe(first.providerReference);
    expect(other.providerReference).not.toBe(first.providerReference);
    expect(provider.creations()).toBe(2);
  });

  it("counts createPayment and checkStatus calls per key and in total", async () => {
    const provider = await withPayments();
    await provider.createPayment(request("key-paid"));
    await provider.checkStatus("key-paid");
    await provider.checkStatus("key-paid");
    await provider.checkStatus("key-failed");

    expect(provider.createCalls("key-paid")).toBe(2);
    expect(provider.createCalls("key-failed")).toBe(1);
    expect(provider.createCalls("never-seen")).toBe(0);
    expect(provider.createCalls()).toBe(3);
    expect(provider.statusChecks("key-paid")).toBe(2);
    expect(provider.statusChecks("key-failed")).toBe(1);
    expect(provider.statusChecks()).toBe(3);
    expect(provider.createCallsByKey()).toEqual(
      new Map([
        ["key-paid", 2],
        ["key-failed", 1],
      ]),
    );
    expect(provider.statusChecksByKey()).toEqual(
      new Map([
        ["key-paid", 2],
        ["key-failed", 1],
      ]),
    );
  });

  it("refuses a status check for a payment it never created, and still counts the call", async () => {
    const provider = new ProviderSimulator();
    await expect(provider.checkStatus("unknown")).rejects.toMatchObject({ name: "ProviderError", code: "PROVIDER_ERROR", operation: "checkStatus" });
    expect(provider.statusChecks("unknown")).toBe(1);
  });

  it("fails the next createPayment before its effect when told to, then works again", async () => {
    const provider = new ProviderSimulator();
    provider.failNext("createPayment");

    await expect(provider.createPayment(request("key-1"))).rejects.toMatchObject({ name: "ProviderError", operation: "createPayment" });
    expect(provider.creations()).toBe(0);
    await expect(provider.checkStatus("key-1")).rejects.toThrow(/no payment/);

    const created = await provider.createPayment(request("key-1"));
    expect(provider.creations()).toBe(1);
    expect(provider.createCalls("key-1")).toBe(2);
    expect(
      provider
        .log()
        .filter((call) => call.operation === "createPayment")
        .map((call) => call.result),
    ).toEqual(["error (injected, before effect)", `created ${created.providerReference}`]);
  });

  it("fails createPayment after its effect when told to: the caller sees an error, the payment exists", async () => {
    const provider = new ProviderSimulator();
    provider.failNext("createPayment", { afterEffect: true });

    await expect(provider.createPayment(request("key-1"))).rejects.toBeInstanceOf(ProviderError);
    expect(provider.creations()).toBe(1);
    await expect(provider.checkStatus("key-1")).resolves.toHaveProperty("status");
    const retried = await provider.createPayment(request("key-1"));
    expect(provider.creations()).toBe(1);
    expect(retried.providerReference).toMatch(/^PRV-/);
  });

  it("fails checkStatus after its effect when told to: the transaction id is issued and kept", async () => {
    const provider = await withPayments();
    provider.failNext("checkStatus", { afterEffect: true });

    await expect(provider.checkStatus("key-paid")).rejects.toBeInstanceOf(ProviderError);
    const issued = provider.issuedTransactionId("key-paid");
    expect(issued).toMatch(/^TXN-/);
    expect(await provider.checkStatus("key-paid")).toEqual({ status: "Paid", transactionId: issued });
  });

  it("fails checkStatus before its effect when told to: no transaction id is issued", async () => {
    const provider = await withPayments();
    provider.failNext("checkStatus");
    await expect(provider.checkStatus("key-paid")).rejects.toBeInstanceOf(ProviderError);
    expect(provider.issuedTransactionId("key-paid")).toBeUndefined();
    expect((await provider.checkStatus("key-paid")).status).toBe("Paid");
  });

  it("limits an injected fault to the named key and to the given number of calls", async () => {
    const provider = await withPayments();
    provider.failNext("checkStatus", { key: "key-paid", times: 2 });

    await expect(provider.checkStatus("key-failed")).resolves.toEqual({ status: "Failed" });
    await expect(provider.checkStatus("key-paid")).rejects.toBeInstanceOf(ProviderError);
    await expect(provider.checkStatus("key-paid")).rejects.toBeInstanceOf(ProviderError);
    await expect(provider.checkStatus("key-paid")).resolves.toMatchObject({ status: "Paid" });
    // A checkStatus fault leaves createPayment alone.
    await expect(provider.createPayment(request("key-new"))).resolves.toHaveProperty("providerReference");
  });

  it("rejects a fault count below one or not whole", () => {
    const provider = new ProviderSimulator();
    for (const times of [0, -1, 1.5]) {
      expect(() => provider.failNext("createPayment", { times })).toThrow(InvalidArgumentError);
    }
  });

  it("logs every call in order with what the caller got back", async () => {
    const provider = await withPayments();
    provider.failNext("checkStatus", { key: "key-failed" });
    await provider.checkStatus("key-paid");
    await provider.checkStatus("key-failed").catch(() => undefined);
    const txn = provider.issuedTransactionId("key-paid");

    expect(provider.log().map(({ seq, operation, idempotencyKey, result }) => [seq, operation, idempotencyKey, result.replace(/PRV-\w+/, "PRV-…")])).toEqual([
      [1, "createPayment", "key-paid", "created PRV-…"],
      [2, "createPayment", "key-failed", "created PRV-…"],
      [3, "checkStatus", "key-paid", `Paid ${txn}`],
      [4, "checkStatus", "key-failed", "error (injected, before effect)"],
    ]);
  });

  it("adds the latency set with setLatency to every call", async () => {
    vi.useFakeTimers();
    const provider = new ProviderSimulator();
    provider.setLatency(250);
    let settled = false;
    const call = provider.createPayment(request("key-1")).then(() => {
      settled = true;
    });

    await vi.advanceTimersByTimeAsync(249);
    expect(settled).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(settled).toBe(true);
    await call;
  });

  it("adds the latency given to the constructor to status checks too", async () => {
    vi.useFakeTimers();
    const provider = new ProviderSimulator({ latencyMs: 100 });
    const created = provider.createPayment(request("key-1"));
    await vi.advanceTimersByTimeAsync(100);
    await created;

    let settled = false;
    const check = provider.checkStatus("key-1").then(() => {
      settled = true;
    });
    await vi.advanceTimersByTimeAsync(99);
    expect(settled).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(settled).toBe(true);
    await check;
  });

  it("answers without waiting when latency is set back to zero", async () => {
    vi.useFakeTimers();
    const provider = new ProviderSimulator({ latencyMs: 1_000 });
    provider.setLatency(0);
    let settled = false;
    const call = provider.createPayment(request("key-1")).then(() => {
      settled = true;
    });
    // Flushes pending promises without moving fake time: a call waiting on a timer stays unsettled.
    await vi.advanceTimersByTimeAsync(0);
    expect(settled).toBe(true);
    expect(vi.getTimerCount()).toBe(0);
    await call;
  });

  it("rejects a negative or non-finite latency", () => {
    const provider = new ProviderSimulator();
    for (const ms of [-1, Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(() => provider.setLatency(ms)).toThrow(InvalidArgumentError);
    }
    expect(() => new ProviderSimulator({ latencyMs: -5 })).toThrow(InvalidArgumentError);
  });
});

describe("ProviderSimulator shared log and random faults", () => {
  it("appends every call to the log file as a JSON line that readProviderLog reads back", async () => {
    const file = join(tempDir(), "provider.log");
    const a = new ProviderSimulator({ logFile: file });
    const b = new ProviderSimulator({ logFile: file, answerUnknownKeys: true });
    await a.createPayment(request("key-1"));
    await a.createPayment(request("key-1"));
    await b.checkStatus("key-1");
    const log = readProviderLog(file);
    expect(log.map((c) => [c.operation, c.idempotencyKey, c.result.replace(/PRV-\w+|TXN-\w+/, "…")])).toEqual([
      ["createPayment", "key-1", "created …"],
      ["createPayment", "key-1", "existing …"],
      ["checkStatus", "key-1", b.outcomeFor("key-1") === "Paid" ? "Paid …" : "Failed"],
    ]);
    expect(log.every((c) => c.pid === process.pid)).toBe(true);
  });

  it("injects the same random faults for the same seed, at about the requested rate", async () => {
    const run = async (seed: number) => {
      const provider = new ProviderSimulator({ answerUnknownKeys: true, randomFaults: { seed, statusFailureRate: 0.2, statusTimeoutAfterSuccessRate: 0.1 } });
      const results: string[] = [];
      for (let n = 0; n < 500; n += 1) {
        results.push(
          await provider.checkStatus(`key-${n}`).then(
            () => "ok",
            (e: Error) => (e.message.includes("after it answered") ? "timeout-after" : "failed"),
          ),
        );
      }
      return results;
    };
    const first = await run(7);
    expect(await run(7)).toEqual(first);
    expect(await run(8)).not.toEqual(first);
    const failed = first.filter((r) => r === "failed").length;
    const timedOut = first.filter((r) => r === "timeout-after").length;
    expect(failed).toBeGreaterThan(60);
    expect(failed).toBeLessThan(140);
    expect(timedOut).toBeGreaterThan(20);
    expect(timedOut).toBeLessThan(80);
  });

  it("refuses a fault rate outside 0..1", () => {
    expect(() => new ProviderSimulator({ randomFaults: { seed: 1, statusFailureRate: 1.5 } })).toThrow(InvalidArgumentError);
  });
});

describe('ProviderSimulator with keep: "counts" (a long-running worker\'s)', () => {
  const keys = Array.from({ length: 40 }, (_, n) => `key-${n}`);

  it("answers every key as a simulator keeping the calls does, transaction ids included, and counts the calls", async () => {
    const calls = new ProviderSimulator({ answerUnknownKeys: true, outcomes: { "key-0": "Paid", "key-1": "Failed" } });
    const counts = new ProviderSimulator({ answerUnknownKeys: true, outcomes: { "key-0": "Paid", "key-1": "Failed" }, keep: "counts" });
    for (const key of keys) {
      const expected = await calls.checkStatus(key);
      expect(await counts.checkStatus(key)).toEqual(expected);
      expect(await counts.checkStatus(key)).toEqual(expected); // the same id on a later check
    }
    const answers = await Promise.all(keys.map((key) => counts.checkStatus(key)));
    expect(new Set(answers.map((a) => a.status))).toEqual(new Set(["Paid", "Failed"]));
    await counts.createPayment(request("key-new"));
    expect(counts.statusChecks()).toBe(keys.length * 3);
    expect(counts.createCalls()).toBe(1);
    expect(counts.creations()).toBe(1);
  });

  it("refuses questions about single calls or keys, saying how to keep them", async () => {
    const provider = new ProviderSimulator({ answerUnknownKeys: true, keep: "counts" });
    await provider.checkStatus("key-1");
    for (const ask of [
      () => provider.log(),
      () => provider.statusChecks("key-1"),
      () => provider.createCalls("key-1"),
      () => provider.statusChecksByKey(),
      () => provider.createCallsByKey(),
      () => provider.issuedTransactionId("key-1"),
    ]) {
      expect(ask).toThrow(InvalidArgumentError);
      expect(ask).toThrow(/keep: "counts".*keep: "calls"/);
    }
  });

  it("still appends every call to the log file, numbered in order", async () => {
    const file = join(tempDir(), "provider.log");
    const provider = new ProviderSimulator({ answerUnknownKeys: true, keep: "counts", logFile: file });
    provider.failNext("checkStatus", { key: "key-2" });
    for (const key of ["key-1", "key-2", "key-3"]) await provider.checkStatus(key).catch(() => undefined);
    const log = readProviderLog(file);
    expect(log.map((c) => [c.seq, c.idempotencyKey])).toEqual([
      [1, "key-1"],
      [2, "key-2"],
      [3, "key-3"],
    ]);
    expect(log[1]?.result).toBe("error (injected, before effect)");
  });

  it("refuses a keep that is neither calls nor counts", () => {
    expect(() => new ProviderSimulator({ keep: "all" as "calls" })).toThrow(/keep must be "calls" or "counts" \(got "all"\)/);
  });
});
