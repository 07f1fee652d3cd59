// Input at the edges, on every store: a payload JSON cannot carry faithfully, arguments out of
// every sane range, a missing options object, ids past the 64-bit range, the same lease twice in
// one group. Each is refused with a named error before anything is written, and the same way on
// every store; text that is recorded rather than refused (an error message) is made storable.

import { expect, it } from "vitest";
import { InvalidArgumentError, UnsupportedPayloadError } from "../../src/outbox/errors.js";
import { MAX_PAYLOAD_DEPTH } from "../../src/outbox/payload.js";
import type { ClaimOptions, JsonValue, Lease, RetryDecision } from "../../src/outbox/types.js";
import { MAX_RETRY_DELAY_MS } from "../../src/outbox/validate.js";
import { claimNext, describeEachStore, enqueueMessage, enqueueMessages, finishedStatus, mustGet, useStoreHarness } from "./stores.js";

const LEASE_MS = 1_000;

function nested(depth: number): JsonValue {
  let value: JsonValue = 1;
  for (let n = 0; n < depth; n++) value = [value];
  return value;
}

const cyclic: Record<string, unknown> = { a: { b: {} } };
(cyclic.a as { b: Record<string, unknown> }).b.back = cyclic;

/** Payloads JSON would change on the way (or cannot encode), each with the path the error must name. */
const UNSUPPORTED: readonly [string, unknown, string][] = [
  ["a BigInt", { amount: 10n }, "$.amount"],
  ["a cycle", cyclic, "$.a.b.back"],
  ["NaN", { rate: Number.NaN }, "$.rate"],
  ["Infinity", { list: [1, Number.POSITIVE_INFINITY] }, "$.list[1]"],
  ["-Infinity at the top", Number.NEGATIVE_INFINITY, "$"],
  ["a Date", { when: new Date(0) }, "$.when"],
  ["a Map", { index: new Map([["k", 1]]) }, "$.index"],
  ["a class instance", { thing: new (class Money {})() }, "$.thing"],
  ["a function", { f: () => 1 }, "$.f"],
  ["a symbol value", { s: Symbol("x") }, "$.s"],
  ["a symbol key", { [Symbol("x")]: 1 }, "$"],
  ["undefined in an array", { list: [1, undefined] }, "$.list[1]"],
  // biome-ignore lint/suspicious/noSparseArray: the hole is the input under test
  ["a hole in an array", { list: [1, , 3] }, "$.list[1]"],
  ["undefined itself", undefined, "$"],
  ["a NUL character in a value", { note: "a\u0000b" }, "$.note"],
  ["a NUL character in a key", { "a\u0000b": 1 }, '$["a\\u0000b"]'],
  ["a lone surrogate", { text: "\ud83d" }, "$.text"],
  ["nesting deeper than the limit", nested(MAX_PAYLOAD_DEPTH + 1), `$${"[0]".repeat(MAX_PAYLOAD_DEPTH)}`],
];

describeEachStore("bad input: payloads", (factory) => {
  const ctx = useStoreHarness(factory);

  it.each(UNSUPPORTED)("refuses %s with UnsupportedPayloadError naming its path, and writes nothing", async (_label, payload, path) => {
    const { store, harness } = ctx();
    const attempt = store.transaction(async (tx) => {
      await harness.businessWrite(tx, "order");
      await store.enqueue(tx, { type: "test.message", payload: payload as JsonValue });
    });
    const error = await attempt.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(UnsupportedPayloadError);
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as UnsupportedPayloadError).path).toBe(path);
    expect((error as Error).message).toContain(`at ${path}`);
    expect(await store.listMessages()).toEqual([]);
    expect(await harness.countBusinessRows("order")).toBe(0);
  });

  it("stores what the rule allows and gives it back unchanged: astral characters, a null-prototype object, deep nesting at the limit", async () => {
    const { store } = ctx();
    const bare = Object.assign(Object.create(null) as Record<string, JsonValue>, { k: "v" });
    const payload = { emoji: "😀 وصال", bare, deep: nested(MAX_PAYLOAD_DEPTH - 1), big: Number.MAX_SAFE_INTEGER, tiny: 5e-324 };
    const message = await enqueueMessage(store, { payload });
    expect((await mustGet(store, message.id)).payload).toEqual(JSON.parse(JSON.stringify(payload)));
  });

  it("leaves out a property whose value is undefined, as JSON does (documented)", async () => {
    const { store } = ctx();
    const message = await enqueueMessage(store, { payload: { a: 1, b: undefined } as unknown as JsonValue });
    expect((await mustGet(store, message.id)).payload).toEqual({ a: 1 });
  });
});

describeEachStore("bad input: arguments", (factory) => {
  const ctx = useStoreHarness(factory);

  it("refuses text no store can hold (NUL, lone surrogates) in a type, dedupe key or owner", async () => {
    const { store } = ctx();
    for (const message of [
      { type: "a\u0000b", payload: 1 },
      { type: "ok", payload: 1, dedupeKey: "k\u0000" },
      { type: "ok", payload: 1, dedupeKey: "\udc00" },
      { type: "ok", payload: 1, dedupeKey: "" },
    ]) {
      await expect(
        store.transaction((tx) => store.enqueue(tx, message)),
        JSON.stringify(message),
      ).rejects.toBeInstanceOf(InvalidArgumentError);
    }
    await expect(store.claim("worker\u0000a", { limit: 1, leaseMs: LEASE_MS })).rejects.toThrow(/owner contains a NUL character/);
    expect(await store.listMessages()).toEqual([]);
  });

  it("accepts any availableAt from the year 1 to 9999, and null as absent (as for dedupeKey)", async () => {
    const { store } = ctx();
    for (const availableAt of [new Date("1500-06-01T00:00:00Z"), new Date("0001-01-01T00:00:00Z"), new Date("9999-12-31T23:59:59.999Z")]) {
      const message = await enqueueMessage(store, { availableAt });
      expect((await mustGet(store, message.id)).availableAt.toISOString()).toBe(availableAt.toISOString());
    }
    const bare = await store.transaction((tx) =>
      store.enqueue(tx, { type: "ok", payload: 1, dedupeKey: null as unknown as string, availableAt: null as unknown as Date }),
    );
    expect(bare.dedupeKey).toBeNull();
  });

  it("refuses an availableAt outside the years 1 to 9999, and a non-Date", async () => {
    const { store } = ctx();
    for (const availableAt of [new Date(Date.UTC(10000, 0, 1)), new Date(-62_200_000_000_000), "2026-01-01" as unknown as Date]) {
      await expect(
        store.transaction((tx) => store.enqueue(tx, { type: "ok", payload: 1, availableAt })),
        String(availableAt),
      ).rejects.toThrow(/availableAt of a ok message must (lie between the years 1 and 9999|be a valid Date)/);
    }
    expect(await store.listMessages()).toEqual([]);
  });

  it("refuses a retry delay past one year, so the time cannot overflow, and leaves the lease held", async () => {
    const { store } = ctx();
    await enqueueMessage(store);
    const lease = await claimNext(store, "worker-a", LEASE_MS);
    for (const decision of [{ retryInMs: MAX_RETRY_DELAY_MS + 1 }, { retryInMs: 8.64e15 }, { retryInMs: 2 ** 80 }]) {
      await expect(store.fail(lease, new Error("x"), decision), JSON.stringify(decision)).rejects.toThrow(/retryInMs must be a number of milliseconds from 0/);
    }
    const longest = await store.fail(lease, new Error("x"), { retryInMs: MAX_RETRY_DELAY_MS });
    expect(longest.outcome).toBe("retry-scheduled");
    expect((await store.listMessages())[0]?.availableAt.getTime()).toBe((longest as { availableAt: Date }).availableAt.getTime());
  });

  it("refuses a missing or malformed options object with InvalidArgumentError, not a TypeError", async () => {
    const { store } = ctx();
    const message = await enqueueMessage(store);
    await enqueueMessage(store);
    const lease = await claimNext(store, "worker-b", LEASE_MS); // the first message: held, for fail
    const attempts: [string, () => Promise<unknown>][] = [
      ["claim without options", () => store.claim("worker-a", undefined as unknown as ClaimOptions)],
      ["claim with null options", () => store.claim("worker-a", null as unknown as ClaimOptions)],
      ["claimMessage without options", () => store.claimMessage("worker-a", message.id, undefined as unknown as ClaimOptions)],
      ["enqueue without a message", () => store.transaction((tx) => store.enqueue(tx, undefined as never))],
      ["renew without a lease", () => store.renew(undefined as unknown as Lease, LEASE_MS)],
      ["complete without a lease", () => store.complete(undefined as unknown as Lease)],
      ["completeMany without a list", () => store.completeMany(undefined as never)],
      ["completeMany with a null member", () => store.completeMany([null as never])],
      ["fail without a decision", () => store.fail(lease, new Error("x"), undefined as unknown as RetryDecision)],
      ["fail with a null decision", () => store.fail(lease, new Error("x"), null as unknown as RetryDecision)],
      ["redrive with a bad target", () => store.redrive({ messageIds: "1" as unknown as string[] })],
      ["purge with a non-Date", () => store.purgeProcessed("yesterday" as unknown as Date)],
      ["listMessages with an unknown status", () => store.listMessages({ status: ["done" as never] })],
      ["listMessages with a zero limit", () => store.listMessages({ limit: 0 })],
    ];
    for (const [label, attempt] of attempts) {
      await expect(attempt(), label).rejects.toBeInstanceOf(InvalidArgumentError);
    }
    expect(await mustGet(store, message.id)).toMatchObject({ status: "processing", attempts: 1, leaseToken: lease.token });
  });

  it("refuses message ids that are not whole numbers from 1 to 2^63 - 1, the same way on every store", async () => {
    const { store } = ctx();
    const message = await enqueueMessage(store);
    for (const id of ["9223372036854775808", "99999999999999999999", "0", "-1", "01", "1.0", "abc", ""]) {
      await expect(store.getMessage(id), id).rejects.toThrow(/a message id must be a whole number from 1 to 9223372036854775807/);
      await expect(store.claimMessage("worker-a", id, { leaseMs: LEASE_MS }), id).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(store.redrive({ messageIds: [id] }), id).rejects.toBeInstanceOf(InvalidArgumentError);
    }
    expect(await store.getMessage("9223372036854775807")).toBeUndefined(); // the largest id is valid, just absent
    const forged = { ...(await claimNext(store, "worker-a", LEASE_MS)), messageId: "9223372036854775808" };
    await expect(store.complete(forged)).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(await mustGet(store, message.id)).toMatchObject({ status: "processing" });
  });

  it("records an error message no store could hold as storable text instead of failing the fail", async () => {
    const { store } = ctx();
    await enqueueMessage(store);
    const lease = await claimNext(store, "worker-a", LEASE_MS);
    // A NUL, and a cut at 4000 characters that would split the surrogate pair at its end.
    const text = `bad\u0000byte ${"x".repeat(3983)}😀`;
    const failed = await store.fail(lease, new Error(text), "dead");
    expect(failed.outcome).toBe("dead");
    const lastError = (await mustGet(store, lease.messageId)).lastError ?? "";
    expect(lastError.startsWith("Error: bad\ufffdbyte")).toBe(true);
    expect(lastError).toHaveLength(4000);
    expect(lastError.endsWith("\ufffd")).toBe(true);
  });
});

describeEachStore("bad input: the same lease twice in one completeMany", (factory) => {
  const ctx = useStoreHarness(factory);

  it.each([
    ["both with a business write", true, true],
    ["one with and one without", true, false],
    ["both without", false, false],
  ])("is refused before anything is written (%s)", async (_label, firstWrites, secondWrites) => {
    const { store, clock, harness } = ctx();
    await enqueueMessages(store, clock, 2);
    const [a, b] = await store.claim("worker-a", { limit: 2, leaseMs: LEASE_MS });
    const request = (writes: boolean, key: string) => (writes ? { lease: a!, finalize: (tx: unknown) => harness.businessWrite(tx, key) } : { lease: a! });
    await expect(store.completeMany([request(firstWrites, "first"), { lease: b! }, request(secondWrites, "second")])).rejects.toThrow(
      new RegExp(`completeMany was given the lease of message ${a!.messageId} \\(token ${a!.token}\\) twice`),
    );
    expect(await harness.countBusinessRows("first")).toBe(0);
    expect(await harness.countBusinessRows("second")).toBe(0);
    for (const lease of [a!, b!]) expect(await mustGet(store, lease.messageId)).toMatchObject({ status: "processing", leaseToken: lease.token });
    expect((await store.auditTrail()).filter((e) => e.action === "complete")).toEqual([]);
  });
});

describeEachStore("redrive of ids that are not dead", (factory) => {
  const ctx = useStoreHarness(factory);

  it("moves the dead ones and names each other id with its state, or missing; a repeated id counts once", async () => {
    const { store, clock } = ctx();
    const [dead, processing, processed, pending] = await enqueueMessages(store, clock, 4);
    const leases = await store.claim("worker-a", { limit: 3, leaseMs: LEASE_MS });
    await store.fail(leases[0]!, new Error("boom"), "dead");
    await store.complete(leases[2]!);
    const result = await store.redrive({ messageIds: [dead!.id, processing!.id, processed!.id, pending!.id, "9223372036854775807", dead!.id] });
    expect(result).toEqual({
      moved: 1,
      notMoved: [
        { messageId: processing!.id, status: "processing" },
        { messageId: processed!.id, status: finishedStatus(factory) },
        { messageId: pending!.id, status: "pending" },
        { messageId: "9223372036854775807", status: "missing" },
      ],
    });
    expect(await mustGet(store, dead!.id)).toMatchObject({ status: "pending", attempts: 0 });
    expect(await store.redrive({ messageIds: [] })).toEqual({ moved: 0, notMoved: [] });
  });
});
