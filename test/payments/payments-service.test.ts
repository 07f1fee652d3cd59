// The Wassal payments domain on every store: the idempotent create (payment + reconciliation
// message in one transaction), reconciliation under a lease, concurrent creates of one key, and
// the payments table's own guarantees (raw SQL, per store).

import { afterEach, describe, expect, it } from "vitest";
import { ManualClock } from "../../src/outbox/clock.js";
import { DuplicateMessageError, InvalidArgumentError } from "../../src/outbox/errors.js";
import type { OutboxStore } from "../../src/outbox/store.js";
import type { SqliteOutboxStore } from "../../src/stores/sqlite/sqlite-outbox-store.js";
import type { JsonValue, Lease, OutboxMessage } from "../../src/outbox/types.js";
import {
  IdempotencyConflictError,
  InvalidPayloadError,
  PaymentsService,
  parseReconcilePayload,
  type CreatePaymentResult,
  type PaymentProvider,
} from "../../src/payments/payments-service.js";
import { ProviderError, ProviderSimulator } from "../../src/payments/provider-simulator.js";
import { RECONCILE_MESSAGE_TYPE, type CreatePaymentRequest, type PaymentsRepository } from "../../src/payments/types.js";
import {
  closeOpenedStores,
  openPostgresPayments,
  openSqlitePayments,
  paymentsStores,
  postgresSelected,
  sqliteSelected,
  type PaymentsStoreFactory,
} from "./payments-stores.js";

afterEach(closeOpenedStores);

const START = new Date("2026-01-01T09:00:00.000Z");
const LEASE_MS = 30_000;

const REQUEST: CreatePaymentRequest = { idempotencyKey: "pay-001", amount: 12_500, currency: "EUR" };

async function claimAll(store: OutboxStore<unknown>, owner = "worker-a"): Promise<Lease[]> {
  return store.claim(owner, { limit: 100, leaseMs: LEASE_MS });
}

/** Resolves once `parties` callers have arrived; each caller waits for all of them. */
function barrier(parties: number): () => Promise<void> {
  let arrived = 0;
  let release!: () => void;
  const all = new Promise<void>((resolve) => (release = resolve));
  return () => {
    arrived += 1;
    if (arrived === parties) release();
    return all;
  };
}

for (const factory of paymentsStores) {
  describeStore(factory);
}

function describeStore(factory: PaymentsStoreFactory): void {
  const STORE = factory.name;

  /** A fresh database (a file or a schema of its own), the payments tables, a provider and the service. */
  async function setup(outcomes: Record<string, "Paid" | "Failed"> = {}) {
    const clock = new ManualClock(START);
    const database = await factory.create(clock);
    const { store, repository } = database;
    const provider = new ProviderSimulator({ outcomes });
    const service = new PaymentsService({ store, repository, provider, clock });
    return { clock, store, repository, provider, service, database, countPayments: () => database.countPayments() };
  }

  describe(`${STORE} store: PaymentsService.create`, () => {
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
      expect(provider.log()).toEqual([
        expect.objectContaining({
          seq: 1,
          pid: process.pid,
          operation: "createPayment",
          idempotencyKey: "pay-001",
          result: `created ${result.payment.providerReference}`,
        }),
      ]);
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
      const { store, repository, provider, service, countPayments } = await setup();
      // A message already holds the dedupe key the service will use, so its enqueue throws after
      // the payment row was inserted in the same transaction.
      const squatter = await store.transaction((tx) =>
        store.enqueue(tx, { type: RECONCILE_MESSAGE_TYPE, dedupeKey: "payment.reconcile:pay-001", payload: { paymentId: "0", idempotencyKey: "pay-001" } }),
      );

      await expect(service.create(REQUEST)).rejects.toBeInstanceOf(DuplicateMessageError);
      expect(await repository.findByKey("pay-001")).toBeUndefined();
      expect(await countPayments()).toBe(0);
      expect(await store.listMessages()).toEqual([squatter]);
      // The provider was asked before the transaction began.
      expect(provider.createCalls("pay-001")).toBe(1);

      // Nothing half-written blocks the key: the same failure happens again, not a replay.
      await expect(service.create(REQUEST)).rejects.toBeInstanceOf(DuplicateMessageError);
      expect(await countPayments()).toBe(0);
    });

    it("never returns another create's uncommitted payment as an existing one", async () => {
      const { store, repository: real, provider, clock, countPayments } = await setup();
      await store.transaction((tx) =>
        store.enqueue(tx, { type: RECONCILE_MESSAGE_TYPE, dedupeKey: "payment.reconcile:pay-001", payload: { paymentId: "0", idempotencyKey: "pay-001" } }),
      );
      // The same repository, except that its insert waits on a gate inside the transaction, so the
      // first create holds an uncommitted payment row while the second one looks the key up.
      let openGate!: () => void;
      const gate = new Promise<void>((resolve) => (openGate = resolve));
      let signalInserted!: () => void;
      const inserted = new Promise<void>((resolve) => (signalInserted = resolve));
      const repository: PaymentsRepository<unknown> = {
        migrate: () => real.migrate(),
        findByKey: (key) => real.findByKey(key),
        list: () => real.list(),
        recordOutcome: (tx, key, outcome, now) => real.recordOutcome(tx, key, outcome, now),
        recordOutcomes: (tx, records) => real.recordOutcomes(tx, records),
        appendStatement: (tx, line) => real.appendStatement(tx, line),
        statement: () => real.statement(),
        insert: async (tx, request) => {
          const payment = await real.insert(tx, request);
          signalInserted();
          await gate;
          return payment;
        },
      };
      const service = new PaymentsService({ store, repository, provider, clock });

      const first = service.create(REQUEST).then(
        () => "created",
        (error: unknown) => error,
      );
      await inserted;
      const second = service.create(REQUEST).then(
        (result) => result,
        (error: unknown) => error,
      );
      openGate();

      // The first create's enqueue hits the taken dedupe key and rolls its payment back; the second
      // must not have answered "already exists" with that vanished row.
      expect(await first).toBeInstanceOf(DuplicateMessageError);
      expect(await second).toBeInstanceOf(DuplicateMessageError);
      expect(await countPayments()).toBe(0);
    });

    it("writes nothing when the provider refuses to create the payment", async () => {
      const { store, provider, service, countPayments } = await setup();
      provider.failNext("createPayment");
      await expect(service.create(REQUEST)).rejects.toBeInstanceOf(ProviderError);
      expect(await countPayments()).toBe(0);
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
      const { store, provider, service, countPayments } = await setup();
      const attempt = service.create({ ...REQUEST, ...change });
      await expect(attempt).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(attempt).rejects.toThrow(naming);
      expect(provider.createCalls()).toBe(0);
      expect(await countPayments()).toBe(0);
      expect(await store.listMessages()).toEqual([]);
    });

    it("accepts the longest valid idempotency key and every allowed character", async () => {
      const { service } = await setup();
      const key = `Ab9._:-${"x".repeat(93)}`;
      expect(key).toHaveLength(100);
      expect((await service.create({ ...REQUEST, idempotencyKey: key })).created).toBe(true);
    });
  });

  describe(`${STORE} store: PaymentsService.reconcile`, () => {
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
      expect(await store.countByStatus()).toEqual({ pending: 0, processing: 0, processed: 2, dead: 0, cancelled: 0 });
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

  describe(`${STORE} store: concurrent creates of one key`, () => {
    it("two application instances creating one new key at once get the same payment; one row, one message, one creation at the provider", async () => {
      const { clock, database, repository, store, countPayments } = await setup();
      const provider = new ProviderSimulator();
      // Each create looks the key up (finding nothing) before it calls the provider; holding both
      // at the provider until both have arrived makes both go on to insert the same new key.
      const bothLookedUp = barrier(2);
      const racingProvider: PaymentProvider = {
        createPayment: async (request) => {
          await bothLookedUp();
          return provider.createPayment(request);
        },
        checkStatus: (key) => provider.checkStatus(key),
      };
      // Two separate connections, as two application instances would have.
      const a = await database.connect();
      const b = await database.connect();
      const serviceA = new PaymentsService({ store: a.store, repository: a.repository, provider: racingProvider, clock });
      const serviceB = new PaymentsService({ store: b.store, repository: b.repository, provider: racingProvider, clock });

      const results = await Promise.all([serviceA.create(REQUEST), serviceB.create(REQUEST)]);

      // Both really raced: both passed the lookup and asked the provider.
      expect(provider.createCalls("pay-001")).toBe(2);
      expect(provider.creations()).toBe(1);
      expect(results.map((r) => r.created).sort()).toEqual([false, true]);
      const winner = results.find((r) => r.created) as CreatePaymentResult;
      const loser = results.find((r) => !r.created) as CreatePaymentResult;
      expect(loser.payment).toEqual(winner.payment);
      expect(loser.message).toBeNull();
      expect(winner.message).toMatchObject({ dedupeKey: "payment.reconcile:pay-001", payload: { paymentId: winner.payment.id, idempotencyKey: "pay-001" } });

      expect(await countPayments()).toBe(1);
      expect(await repository.list()).toEqual([winner.payment]);
      expect(await store.listMessages()).toEqual([winner.message]);
    });
  });

  describe(`${STORE} store: the payments table under the service`, () => {
    it("refuses a Paid outcome with an empty transaction id, rolling the completion back with it", async () => {
      const { store, repository, service } = await setup({ "pay-001": "Paid" });
      await service.create(REQUEST);
      const [lease] = await claimAll(store);

      const fake = store.complete(lease!, async (tx) => {
        await repository.recordOutcome(tx, "pay-001", { status: "Paid", transactionId: "" }, START);
      });
      await expect(fake).rejects.toMatchObject(factory.checkViolation);
      expect(await repository.findByKey("pay-001")).toMatchObject({ status: "Pending", transactionId: null });
      expect(await store.getMessage(lease!.messageId)).toMatchObject({
        status: "processing",
        lockedBy: "worker-a",
        leaseToken: lease!.token,
        processedAt: null,
      });

      // The lease still holds: the real outcome completes under it.
      const { finalize } = await service.reconcile(lease!.message);
      expect((await store.complete(lease!, finalize)).outcome).toBe("completed");
      expect((await repository.findByKey("pay-001"))?.transactionId).toMatch(/^TXN-/);
    });

    it("records an outcome only once: a second outcome for a settled payment changes nothing", async () => {
      const { store, repository, service, clock } = await setup({ "pay-001": "Paid" });
      await service.create(REQUEST);
      const [lease] = await claimAll(store);
      const { finalize } = await service.reconcile(lease!.message);
      expect((await store.complete(lease!, finalize)).outcome).toBe("completed");
      const settled = await repository.findByKey("pay-001");
      expect(settled?.status).toBe("Paid");

      clock.advance(1_000);
      const changed = await store.transaction((tx) => repository.recordOutcome(tx, "pay-001", { status: "Failed" }, clock.now()));
      expect(changed).toBe(false);
      expect(await repository.findByKey("pay-001")).toEqual(settled);
      // An unknown key changes nothing either.
      expect(await store.transaction((tx) => repository.recordOutcome(tx, "pay-404", { status: "Failed" }, clock.now()))).toBe(false);
    });

    it("records many outcomes in one call, moving only the Pending payments it names", async () => {
      const { store, repository, service, clock } = await setup({ "pay-001": "Paid", "pay-002": "Failed" });
      await service.create(REQUEST);
      await service.create({ ...REQUEST, idempotencyKey: "pay-002" });
      await service.create({ ...REQUEST, idempotencyKey: "pay-003" });
      await store.transaction((tx) => repository.recordOutcome(tx, "pay-003", { status: "Failed" }, clock.now()));
      clock.advance(1_000);
      const changed = await store.transaction((tx) =>
        repository.recordOutcomes(tx, [
          { idempotencyKey: "pay-001", outcome: { status: "Paid", transactionId: "txn-1" }, now: clock.now() },
          { idempotencyKey: "pay-002", outcome: { status: "Failed" }, now: clock.now() },
          { idempotencyKey: "pay-003", outcome: { status: "Paid", transactionId: "txn-3" }, now: clock.now() }, // already settled
          { idempotencyKey: "pay-404", outcome: { status: "Failed" }, now: clock.now() }, // unknown
        ]),
      );
      expect(changed).toBe(2);
      expect(await repository.findByKey("pay-001")).toMatchObject({ status: "Paid", transactionId: "txn-1", updatedAt: clock.now() });
      expect(await repository.findByKey("pay-002")).toMatchObject({ status: "Failed", transactionId: null });
      expect(await repository.findByKey("pay-003")).toMatchObject({ status: "Failed", transactionId: null });
      expect(await store.transaction((tx) => repository.recordOutcomes(tx, []))).toBe(0);
    });
  });
}

describe("parseReconcilePayload", () => {
  function messageWith(payload: JsonValue): OutboxMessage {
    return {
      id: "17",
      type: RECONCILE_MESSAGE_TYPE,
      dedupeKey: null,
      key: null,
      keySeq: null,
      headers: {},
      destination: null,
      priority: 0,
      singletonKey: null,
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

function countRows(store: SqliteOutboxStore): number {
  return store.db.prepare("SELECT count(*) FROM payments").pluck().get() as number;
}

describe.skipIf(!sqliteSelected)("sqlite store: payments table (raw SQL)", () => {
  const INSERT = `INSERT INTO payments (idempotency_key, amount, currency, payment_status, transaction_id, provider_reference, created_at, updated_at)
                  VALUES (?, ?, ?, ?, ?, 'PRV-raw', 0, 0)`;

  it("refuses Paid without a transaction id", async () => {
    const { store } = await openSqlitePayments(new ManualClock(START));
    expect(() => store.db.prepare(INSERT).run("raw-paid", 100, "EUR", "Paid", null)).toThrow(expect.objectContaining({ code: "SQLITE_CONSTRAINT_CHECK" }));
    expect(countRows(store)).toBe(0);
  });

  it("refuses Paid with an empty transaction id", async () => {
    const { store } = await openSqlitePayments(new ManualClock(START));
    expect(() => store.db.prepare(INSERT).run("raw-empty", 100, "EUR", "Paid", "")).toThrow(expect.objectContaining({ code: "SQLITE_CONSTRAINT_CHECK" }));
    expect(countRows(store)).toBe(0);
  });

  it("refuses a transaction id on a payment that is not Paid", async () => {
    const { store } = await openSqlitePayments(new ManualClock(START));
    for (const status of ["Pending", "Failed"]) {
      expect(() => store.db.prepare(INSERT).run(`raw-${status}`, 100, "EUR", status, "TXN-FAKE")).toThrow(
        expect.objectContaining({ code: "SQLITE_CONSTRAINT_CHECK" }),
      );
    }
    expect(countRows(store)).toBe(0);
  });

  it("accepts Paid with a transaction id, and Pending or Failed without one", async () => {
    const { store } = await openSqlitePayments(new ManualClock(START));
    store.db.prepare(INSERT).run("raw-paid", 100, "EUR", "Paid", "TXN-REAL");
    store.db.prepare(INSERT).run("raw-pending", 100, "EUR", "Pending", null);
    store.db.prepare(INSERT).run("raw-failed", 100, "EUR", "Failed", null);
    expect(countRows(store)).toBe(3);
  });

  it("refuses an unknown status, a non-positive amount and a duplicate idempotency key", async () => {
    const { store } = await openSqlitePayments(new ManualClock(START));
    expect(() => store.db.prepare(INSERT).run("raw-1", 100, "EUR", "Refunded", null)).toThrow(expect.objectContaining({ code: "SQLITE_CONSTRAINT_CHECK" }));
    expect(() => store.db.prepare(INSERT).run("raw-2", 0, "EUR", "Pending", null)).toThrow(expect.objectContaining({ code: "SQLITE_CONSTRAINT_CHECK" }));
    store.db.prepare(INSERT).run("raw-3", 100, "EUR", "Pending", null);
    expect(() => store.db.prepare(INSERT).run("raw-3", 100, "EUR", "Pending", null)).toThrow(expect.objectContaining({ code: "SQLITE_CONSTRAINT_UNIQUE" }));
    expect(countRows(store)).toBe(1);
  });

  it("refuses an update that makes a payment Paid without a transaction id, or gives a Failed one an id", async () => {
    const { store } = await openSqlitePayments(new ManualClock(START));
    store.db.prepare(INSERT).run("raw-pending", 100, "EUR", "Pending", null);
    const update = store.db.prepare("UPDATE payments SET payment_status = ?, transaction_id = ? WHERE idempotency_key = 'raw-pending'");
    for (const [status, txn] of [
      ["Paid", null],
      ["Paid", ""],
      ["Failed", "TXN-FAKE"],
    ] as const) {
      expect(() => update.run(status, txn), `${status} ${String(txn)}`).toThrow(expect.objectContaining({ code: "SQLITE_CONSTRAINT_CHECK" }));
    }
    expect(store.db.prepare("SELECT payment_status, transaction_id FROM payments").all()).toEqual([{ payment_status: "Pending", transaction_id: null }]);
  });
});

describe.skipIf(!postgresSelected)("postgres store: payments table (raw SQL)", () => {
  type Db = Awaited<ReturnType<typeof openPostgresPayments>>;
  const CHECK_VIOLATION = "23514";
  const TXN_CHECK = "payments_transaction_id_only_when_paid";

  function insert(db: Db, key: string, amount: number, currency: string, status: string, transactionId: string | null) {
    return db.store.pool.query(
      `INSERT INTO ${db.schema}.payments (idempotency_key, amount, currency, payment_status, transaction_id, provider_reference, created_at, updated_at)
       VALUES ($1, $2, $3, $4, $5, 'PRV-raw', now(), now())`,
      [key, amount, currency, status, transactionId],
    );
  }

  async function open(): Promise<Db> {
    return openPostgresPayments(new ManualClock(START));
  }

  it("refuses Paid without a transaction id", async () => {
    const db = await open();
    await expect(insert(db, "raw-paid", 100, "EUR", "Paid", null)).rejects.toMatchObject({ code: CHECK_VIOLATION, constraint: TXN_CHECK });
    expect(await db.countPayments()).toBe(0);
  });

  it("refuses Paid with an empty transaction id", async () => {
    const db = await open();
    await expect(insert(db, "raw-empty", 100, "EUR", "Paid", "")).rejects.toMatchObject({ code: CHECK_VIOLATION, constraint: TXN_CHECK });
    expect(await db.countPayments()).toBe(0);
  });

  it("refuses a transaction id on a payment that is not Paid", async () => {
    const db = await open();
    for (const status of ["Pending", "Failed"]) {
      await expect(insert(db, `raw-${status}`, 100, "EUR", status, "TXN-FAKE"), status).rejects.toMatchObject({ code: CHECK_VIOLATION, constraint: TXN_CHECK });
    }
    expect(await db.countPayments()).toBe(0);
  });

  it("accepts Paid with a transaction id, and Pending or Failed without one", async () => {
    const db = await open();
    await insert(db, "raw-paid", 100, "EUR", "Paid", "TXN-REAL");
    await insert(db, "raw-pending", 100, "EUR", "Pending", null);
    await insert(db, "raw-failed", 100, "EUR", "Failed", null);
    expect(await db.countPayments()).toBe(3);
  });

  it("refuses an unknown status, a non-positive amount, a currency not of three letters and a duplicate idempotency key", async () => {
    const db = await open();
    await expect(insert(db, "raw-1", 100, "EUR", "Refunded", null)).rejects.toMatchObject({
      code: CHECK_VIOLATION,
      constraint: "payments_payment_status_check",
    });
    await expect(insert(db, "raw-2", 0, "EUR", "Pending", null)).rejects.toMatchObject({ code: CHECK_VIOLATION, constraint: "payments_amount_check" });
    await expect(insert(db, "raw-3", 100, "EURO", "Pending", null)).rejects.toMatchObject({ code: CHECK_VIOLATION, constraint: "payments_currency_check" });
    await insert(db, "raw-4", 100, "EUR", "Pending", null);
    await expect(insert(db, "raw-4", 100, "EUR", "Pending", null)).rejects.toMatchObject({ code: "23505", constraint: "payments_idempotency_key_key" });
    expect(await db.countPayments()).toBe(1);
  });

  it("refuses an update that makes a payment Paid without a transaction id, or gives a Failed one an id", async () => {
    const db = await open();
    await insert(db, "raw-pending", 100, "EUR", "Pending", null);
    const update = (status: string, transactionId: string | null) =>
      db.store.pool.query(`UPDATE ${db.schema}.payments SET payment_status = $1, transaction_id = $2 WHERE idempotency_key = 'raw-pending'`, [
        status,
        transactionId,
      ]);
    for (const [status, txn] of [
      ["Paid", null],
      ["Paid", ""],
      ["Failed", "TXN-FAKE"],
    ] as const) {
      await expect(update(status, txn), `${status} ${String(txn)}`).rejects.toMatchObject({ code: CHECK_VIOLATION, constraint: TXN_CHECK });
    }
    expect((await db.store.pool.query(`SELECT payment_status, transaction_id FROM ${db.schema}.payments`)).rows).toEqual([
      { payment_status: "Pending", transaction_id: null },
    ]);
  });
});
