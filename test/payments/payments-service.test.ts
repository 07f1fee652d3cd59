// The Wassal payments domain on SQLite: the idempotent create (payment + reconciliation message in
// one transaction), reconciliation under a lease, and the payments table's own guarantees.

import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { ManualClock } from "../../src/outbox/clock.js";
import { DuplicateMessageError, InvalidArgumentError } from "../../src/outbox/errors.js";
import type { JsonValue, Lease, OutboxMessage } from "../../src/outbox/types.js";
import { IdempotencyConflictError, InvalidPayloadError, PaymentsService, parseReconcilePayload } from "../../src/payments/payments-service.js";
import { ProviderError, ProviderSimulator } from "../../src/payments/provider-simulator.js";
import { RECONCILE_MESSAGE_TYPE, type CreatePaymentRequest, type PaymentsRepository } from "../../src/payments/types.js";
import { SqlitePaymentsRepository } from "../../src/stores/sqlite/payments-repository.js";
import { SqliteOutboxStore, type SqliteTx } from "../../src/stores/sqlite/sqlite-outbox-store.js";
import { tempDir } from "../support/temp.js";

const dir = tempDir("wassal-payments-");
let fileNumber = 0;
const opened: SqliteOutboxStore[] = [];

afterEach(async () => {
  for (const store of opened.splice(0)) await store.close();
});

const START = new Date("2026-01-01T09:00:00.000Z");
const LEASE_MS = 30_000;

/** A fresh database (its own file), the payments tables, a provider and the service. */
async function setup(outcomes: Record<string, "Paid" | "Failed"> = {}) {
  fileNumber += 1;
  const clock = new ManualClock(START);
  const store = new SqliteOutboxStore({ path: join(dir, `payments-${fileNumber}.db`), clock });
  opened.push(store);
  await store.migrate();
  const repository = new SqlitePaymentsRepository(store);
  await repository.migrate();
  const provider = new ProviderSimulator({ outcomes });
  const service = new PaymentsService({ store, repository, provider, clock });
  return { clock, store, repository, provider, service };
}

function countPayments(store: SqliteOutboxStore): number {
  return store.db.prepare("SELECT count(*) FROM payments").pluck().get() as number;
}

const REQUEST: CreatePaymentRequest = { idempotencyKey: "pay-001", amount: 12_500, currency: "EUR" };

describe("PaymentsService.create", () => {
  it("commits the payment and exactly one reconciliation message together", async () => {
    const { store, repository, provider, service, clock } = await setup();
    const result = await service.create(REQUEST);

    expect(result.created).toBe(true);
    expect(result.payment).toMatchObject({
      idempotencyKey: "pay-001",
      amount: 12_500,
      currency: "EUR",
      status: "Pending",
      transactionId: null,
      createdAt: clock.now(),
      updatedAt: clock.now(),
    });
    expect(result.payment.providerReference).toMatch(/^PRV-/);
    expect(provider.log()).toEqual([{ seq: 1, operation: "createPayment", idempotencyKey: "pay-001", result: result.payment.providerReference }]);
    expect(result.message).toMatchObject({
      type: RECONCILE_MESSAGE_TYPE,
      dedupeKey: "payment.reconcile:pay-001",
      payload: { paymentId: result.payment.id, idempotencyKey: "pay-001" },
      status: "pending",
      attempts: 0,
    });

    expect(await repository.list()).toEqual([result.payment]);
    expect(await store.listMessages()).toEqual([result.message]);
    expect(provider.createCalls("pay-001")).toBe(1);
  });

  it("returns the existing payment for a replayed idempotency key, writing nothing and not calling the provider again", async () => {
    const { store, repository, provider, service, clock } = await setup();
    const first = await service.create(REQUEST);
    clock.advance(60_000);

    const replay = await service.create(REQUEST);
    expect(replay).toEqual({ payment: first.payment, created: false, message: null });
    expect(provider.createCalls("pay-001")).toBe(1);
    expect(provider.creations()).toBe(1);
    expect(await repository.list()).toEqual([first.payment]);
    expect(await store.listMessages()).toEqual([first.message]);
  });

  it("refuses a replayed key that asks for a different amount or currency, writing nothing", async () => {
    const { store, repository, provider, service } = await setup();
    const first = await service.create(REQUEST);

    await expect(service.create({ ...REQUEST, amount: 99_999 })).rejects.toThrow(IdempotencyConflictError);
    await expect(service.create({ ...REQUEST, currency: "USD" })).rejects.toThrow(/already belongs to a payment/);
    expect(provider.createCalls()).toBe(1);
    expect(await repository.list()).toEqual([first.payment]);
    expect(await store.listMessages()).toEqual([first.message]);
  });

  it("creates separate payments and messages for separate keys", async () => {
    const { store, repository, service } = await setup();
    const a = await service.create(REQUEST);
    const b = await service.create({ ...REQUEST, idempotencyKey: "pay-002" });
    expect(a.payment.id).not.toBe(b.payment.id);
    expect((await repository.list()).map((p) => p.idempotencyKey)).toEqual(["pay-001", "pay-002"]);
    expect((await store.listMessages()).map((m) => m.dedupeKey)).toEqual(["payment.reconcile:pay-001", "payment.reconcile:pay-002"]);
  });

  it("leaves no payment row when the enqueue fails after the payment insert, and lets the error through", async () => {
    const { store, repository, provider, service } = await setup();
    // A message already holds the dedupe key the service will use, so its enqueue throws after
    // the payment row was inserted in the same transaction.
    const squatter = await store.transaction((tx) =>
      store.enqueue(tx, { type: RECONCILE_MESSAGE_TYPE, dedupeKey: "payment.reconcile:pay-001", payload: { paymentId: "0", idempotencyKey: "pay-001" } }),
    );

    await expect(service.create(REQUEST)).rejects.toBeInstanceOf(DuplicateMessageError);
    expect(await repository.findByKey("pay-001")).toBeUndefined();
    expect(countPayments(store)).toBe(0);
    expect(await store.listMessages()).toEqual([squatter]);
    // The provider was asked before the transaction began.
    expect(provider.createCalls("pay-001")).toBe(1);

    // Nothing half-written blocks the key: the same failure happens again, not a replay.
    await expect(service.create(REQUEST)).rejects.toBeInstanceOf(DuplicateMessageError);
    expect(countPayments(store)).toBe(0);
  });

  it("never returns another create's uncommitted payment as an existing one", async () => {
    const { store, repository: real, provider, clock } = await setup();
    await store.transaction((tx) =>
      store.enqueue(tx, { type: RECONCILE_MESSAGE_TYPE, dedupeKey: "payment.reconcile:pay-001", payload: { paymentId: "0", idempotencyKey: "pay-001" } }),
    );
    // The same repository, except that its insert waits on a gate inside the transaction, so the
    // first create holds an uncommitted payment row while the second one looks the key up.
    let openGate!: () => void;
    const gate = new Promise<void>((resolve) => (openGate = resolve));
    let signalInserted!: () => void;
    const inserted = new Promise<void>((resolve) => (signalInserted = resolve));
    const repository: PaymentsRepository<SqliteTx> = {
      migrate: () => real.migrate(),
      findByKey: (key) => real.findByKey(key),
      list: () => real.list(),
      recordOutcome: (tx, key, outcome, now) => real.recordOutcome(tx, key, outcome, now),
      insert: async (tx, request) => {
        const payment = await real.insert(tx, request);
        signalInserted();
        await gate;
        return payment;
      },
    };
    const service = new PaymentsService({ store, repository, provider, clock });

    const first = service.create(REQUEST).then(() => "created", (error: unknown) => error);
    await inserted;
    const second = service.create(REQUEST).then((result) => result, (error: unknown) => error);
    openGate();

    // The first create's enqueue hits the taken dedupe key and rolls its payment back; the second
    // must not have answered "already exists" with that vanished row.
    expect(await first).toBeInstanceOf(DuplicateMessageError);
    expect(await second).toBeInstanceOf(DuplicateMessageError);
    expect(countPayments(store)).toBe(0);
  });

  it("writes nothing when the provider refuses to create the payment", async () => {
    const { store, provider, service } = await setup();
    provider.failNext("createPayment");
    await expect(service.create(REQUEST)).rejects.toBeInstanceOf(ProviderError);
    expect(countPayments(store)).toBe(0);
    expect(await store.listMessages()).toEqual([]);

    const retried = await service.create(REQUEST);
    expect(retried.created).toBe(true);
  });

  it.each<[string, Partial<CreatePaymentRequest>, RegExp]>([
    ["an empty idempotency key", { idempotencyKey: "" }, /idempotency key/],
    ["an idempotency key with a space", { idempotencyKey: "pay 1" }, /idempotency key/],
    ["an idempotency key of 101 characters", { idempotencyKey: "k".repeat(101) }, /idempotency key/],
    ["an idempotency key that is not a string", { idempotencyKey: 7 as unknown as string }, /idempotency key/],
    ["a zero amount", { amount: 0 }, /amount/],
    ["a negative amount", { amount: -100 }, /amount/],
    ["a fractional amount", { amount: 12.5 }, /amount/],
    ["an amount beyond the safe integers", { amount: Number.MAX_SAFE_INTEGER + 1 }, /amount/],
    ["an amount given as text", { amount: "12500" as unknown as number }, /amount/],
    ["a lower-case currency", { currency: "eur" }, /currency/],
    ["a four-letter currency", { currency: "EURO" }, /currency/],
    ["an empty currency", { currency: "" }, /currency/],
  ])("rejects %s with InvalidArgumentError naming the input, before calling the provider", async (_label, change, naming) => {
    const { store, provider, service } = await setup();
    const attempt = service.create({ ...REQUEST, ...change });
    await expect(attempt).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(attempt).rejects.toThrow(naming);
    expect(provider.createCalls()).toBe(0);
    expect(countPayments(store)).toBe(0);
    expect(await store.listMessages()).toEqual([]);
  });

  it("accepts the longest valid idempotency key and every allowed character", async () => {
    const { service } = await setup();
    const key = `Ab9._:-${"x".repeat(93)}`;
    expect(key).toHaveLength(100);
    expect((await service.create({ ...REQUEST, idempotencyKey: key })).created).toBe(true);
  });
});

describe("PaymentsService.reconcile", () => {
  async function claimAll(store: SqliteOutboxStore, owner = "worker-a"): Promise<Lease[]> {
    return store.claim(owner, { limit: 100, leaseMs: LEASE_MS });
  }

  it("records Paid with the provider's transaction id, and Failed with none, when completed under the lease", async () => {
    const { store, repository, provider, service, clock } = await setup({ "pay-paid": "Paid", "pay-failed": "Failed" });
    await service.create({ ...REQUEST, idempotencyKey: "pay-paid" });
    await service.create({ ...REQUEST, idempotencyKey: "pay-failed" });
    const leases = await claimAll(store);
    expect(leases).toHaveLength(2);
    clock.advance(2_000);

    for (const lease of leases) {
      const { finalize } = await service.reconcile(lease.message);
      expect((await store.complete(lease, finalize)).outcome).toBe("completed");
    }

    const paid = await repository.findByKey("pay-paid");
    const failed = await repository.findByKey("pay-failed");
    expect(paid).toMatchObject({ status: "Paid", transactionId: provider.issuedTransactionId("pay-paid"), updatedAt: clock.now() });
    expect(paid?.transactionId).toMatch(/^TXN-/);
    expect(failed).toMatchObject({ status: "Failed", transactionId: null, updatedAt: clock.now() });
    expect(await store.countByStatus()).toEqual({ pending: 0, processing: 0, processed: 2, dead: 0 });
    expect(provider.statusChecks("pay-paid")).toBe(1);
    expect(provider.statusChecks("pay-failed")).toBe(1);
  });

  it("returns the provider's outcome along with the write, and writes nothing until completed", async () => {
    const { store, repository, service } = await setup({ "pay-001": "Paid" });
    await service.create(REQUEST);
    const [lease] = await claimAll(store);

    const { outcome } = await service.reconcile(lease!.message);
    expect(outcome).toMatchObject({ status: "Paid", transactionId: expect.stringMatching(/^TXN-/) });
    expect((await repository.findByKey("pay-001"))?.status).toBe("Pending");
  });

  it("writes no outcome when the lease was lost, and the new holder records the same transaction id", async () => {
    const { store, repository, provider, service, clock } = await setup({ "pay-001": "Paid" });
    await service.create(REQUEST);
    const [stale] = await claimAll(store, "worker-a");
    const slow = await service.reconcile(stale!.message);
    clock.advance(LEASE_MS);
    const [fresh] = await claimAll(store, "worker-b");

    expect((await store.complete(stale!, slow.finalize)).outcome).toBe("lease-lost");
    expect((await repository.findByKey("pay-001"))?.status).toBe("Pending");

    const again = await service.reconcile(fresh!.message);
    expect((await store.complete(fresh!, again.finalize)).outcome).toBe("completed");
    const payment = await repository.findByKey("pay-001");
    expect(payment).toMatchObject({ status: "Paid", transactionId: provider.issuedTransactionId("pay-001") });
    expect(slow.outcome).toEqual(again.outcome);
    expect(provider.statusChecks("pay-001")).toBe(2);
  });

  it("lets a provider error through and leaves the payment Pending and the message held", async () => {
    const { store, repository, provider, service } = await setup();
    await service.create(REQUEST);
    const [lease] = await claimAll(store);
    provider.failNext("checkStatus");

    await expect(service.reconcile(lease!.message)).rejects.toBeInstanceOf(ProviderError);
    expect((await repository.findByKey("pay-001"))?.status).toBe("Pending");
    expect((await store.getMessage(lease!.messageId))?.status).toBe("processing");
  });

  it("refuses a malformed payload with InvalidPayloadError before asking the provider", async () => {
    const { store, provider, service } = await setup();
    await store.transaction((tx) => store.enqueue(tx, { type: RECONCILE_MESSAGE_TYPE, payload: { paymentId: 5, idempotencyKey: "pay-001" } }));
    const [lease] = await claimAll(store);

    await expect(service.reconcile(lease!.message)).rejects.toBeInstanceOf(InvalidPayloadError);
    expect(provider.statusChecks()).toBe(0);
  });
});

describe("parseReconcilePayload", () => {
  function messageWith(payload: JsonValue): OutboxMessage {
    return {
      id: "17",
      type: RECONCILE_MESSAGE_TYPE,
      dedupeKey: null,
      payload,
      status: "processing",
      createdAt: START,
      availableAt: START,
      lockedBy: "worker-a",
      lockedUntil: START,
      leaseToken: 1,
      attempts: 1,
      lastError: null,
      processedAt: null,
    };
  }

  it("reads the payment id and idempotency key of a well-formed payload", () => {
    expect(parseReconcilePayload(messageWith({ paymentId: "3", idempotencyKey: "pay-003" }))).toEqual({ paymentId: "3", idempotencyKey: "pay-003" });
  });

  it.each<[string, JsonValue]>([
    ["null", null],
    ["a string", "pay-001"],
    ["a number", 42],
    ["an array", [{ paymentId: "1", idempotencyKey: "pay-001" }]],
    ["an empty object", {}],
    ["a numeric paymentId", { paymentId: 1, idempotencyKey: "pay-001" }],
    ["a missing idempotencyKey", { paymentId: "1" }],
    ["an empty idempotencyKey", { paymentId: "1", idempotencyKey: "" }],
    ["a null idempotencyKey", { paymentId: "1", idempotencyKey: null }],
  ])("rejects %s with InvalidPayloadError naming the message", (_label, payload) => {
    const parse = () => parseReconcilePayload(messageWith(payload));
    expect(parse).toThrow(InvalidPayloadError);
    expect(parse).toThrow(/message 17 has an invalid payment\.reconcile payload/);
  });
});

describe("payments table", () => {
  const INSERT = `INSERT INTO payments (idempotency_key, amount, currency, payment_status, transaction_id, provider_reference, created_at, updated_at)
                  VALUES (?, ?, ?, ?, ?, 'PRV-raw', 0, 0)`;

  it("refuses Paid without a transaction id", async () => {
    const { store } = await setup();
    expect(() => store.db.prepare(INSERT).run("raw-paid", 100, "EUR", "Paid", null)).toThrow(expect.objectContaining({ code: "SQLITE_CONSTRAINT_CHECK" }));
    expect(countPayments(store)).toBe(0);
  });

  it("refuses Paid with an empty transaction id", async () => {
    const { store } = await setup();
    expect(() => store.db.prepare(INSERT).run("raw-empty", 100, "EUR", "Paid", "")).toThrow(expect.objectContaining({ code: "SQLITE_CONSTRAINT_CHECK" }));
    expect(countPayments(store)).toBe(0);
  });

  it("refuses a transaction id on a payment that is not Paid", async () => {
    const { store } = await setup();
    for (const status of ["Pending", "Failed"]) {
      expect(() => store.db.prepare(INSERT).run(`raw-${status}`, 100, "EUR", status, "TXN-FAKE")).toThrow(expect.objectContaining({ code: "SQLITE_CONSTRAINT_CHECK" }));
    }
    expect(countPayments(store)).toBe(0);
  });

  it("accepts Paid with a transaction id, and Pending or Failed without one", async () => {
    const { store } = await setup();
    store.db.prepare(INSERT).run("raw-paid", 100, "EUR", "Paid", "TXN-REAL");
    store.db.prepare(INSERT).run("raw-pending", 100, "EUR", "Pending", null);
    store.db.prepare(INSERT).run("raw-failed", 100, "EUR", "Failed", null);
    expect(countPayments(store)).toBe(3);
  });

  it("refuses an unknown status, a non-positive amount and a duplicate idempotency key", async () => {
    const { store } = await setup();
    expect(() => store.db.prepare(INSERT).run("raw-1", 100, "EUR", "Refunded", null)).toThrow(expect.objectContaining({ code: "SQLITE_CONSTRAINT_CHECK" }));
    expect(() => store.db.prepare(INSERT).run("raw-2", 0, "EUR", "Pending", null)).toThrow(expect.objectContaining({ code: "SQLITE_CONSTRAINT_CHECK" }));
    store.db.prepare(INSERT).run("raw-3", 100, "EUR", "Pending", null);
    expect(() => store.db.prepare(INSERT).run("raw-3", 100, "EUR", "Pending", null)).toThrow(expect.objectContaining({ code: "SQLITE_CONSTRAINT_UNIQUE" }));
    expect(countPayments(store)).toBe(1);
  });
});
