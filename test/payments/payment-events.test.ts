// A payment's lifecycle events and the statement consumer, on every store: publishing (with or
// without the payment as ordering key, once per payment and event), applying an event as one
// statement line committed with the guarded completion (never twice, never under a lost lease),
// and refusing a malformed event.

import { afterEach, describe, expect, it } from "vitest";
import { ManualClock } from "../../src/outbox/clock.js";
import { DuplicateMessageError } from "../../src/outbox/errors.js";
import { processLease } from "../../src/outbox/process-lease.js";
import type { OutboxMessage } from "../../src/outbox/types.js";
import { PaymentEvents, parsePaymentEvent } from "../../src/payments/payment-events.js";
import { InvalidPayloadError } from "../../src/payments/payments-service.js";
import { closeOpenedStores, paymentsStores } from "./payments-stores.js";

afterEach(closeOpenedStores);

const START = new Date("2026-01-01T09:00:00.000Z");
const LEASE_MS = 30_000;

const message = (type: string, payload: unknown): OutboxMessage => ({ id: "7", type, payload }) as unknown as OutboxMessage;

describe("parsePaymentEvent", () => {
  it("reads a well-formed event", () => {
    expect(parsePaymentEvent(message("payment.paid", { idempotencyKey: "PAY-1", event: "payment.paid" }))).toEqual({
      idempotencyKey: "PAY-1",
      event: "payment.paid",
    });
  });

  it.each([
    ["another type", "payment.reconcile", { idempotencyKey: "PAY-1", event: "payment.paid" }, "the type is not one of"],
    ["a payload that is not an object", "payment.paid", ["PAY-1"], "expected an object"],
    ["no idempotency key", "payment.paid", { event: "payment.paid" }, "expected a string idempotencyKey"],
    ["an event that is not the type", "payment.paid", { idempotencyKey: "PAY-1", event: "payment.refunded" }, 'event "payment.paid"'],
  ])("refuses %s with InvalidPayloadError (unrecoverable: the message should die)", (_name, type, payload, text) => {
    const error = (() => {
      try {
        parsePaymentEvent(message(type, payload));
      } catch (caught) {
        return caught;
      }
      return undefined;
    })();
    expect(error).toBeInstanceOf(InvalidPayloadError);
    expect((error as Error).message).toContain(text);
    expect((error as Error).message).toContain("message 7");
  });
});

for (const factory of paymentsStores) {
  describe(`payment events on ${factory.name}`, () => {
    it("publishes with the payment as ordering key only when asked, once per payment and event", async () => {
      const clock = new ManualClock(START);
      const db = await factory.create(clock);
      const plain = new PaymentEvents({ store: db.store, repository: db.repository, clock });
      const keyed = new PaymentEvents({ store: db.store, repository: db.repository, clock, orderByPayment: true });
      const a = await db.store.transaction((tx) => plain.publish(tx, "PAY-1", "payment.created"));
      const b = await db.store.transaction((tx) => keyed.publish(tx, "PAY-2", "payment.created"));
      expect(a).toMatchObject({ type: "payment.created", key: null, payload: { idempotencyKey: "PAY-1", event: "payment.created" } });
      expect(b).toMatchObject({ type: "payment.created", key: "PAY-2", dedupeKey: "payment.created:PAY-2" });
      await expect(db.store.transaction((tx) => keyed.publish(tx, "PAY-2", "payment.created"))).rejects.toBeInstanceOf(DuplicateMessageError);
    });

    it("applies an event as one statement line with the guarded completion, and a lost lease writes none", async () => {
      const clock = new ManualClock(START);
      const db = await factory.create(clock);
      const events = new PaymentEvents({ store: db.store, repository: db.repository, clock, orderByPayment: true });
      await db.store.transaction(async (tx) => {
        await events.publish(tx, "PAY-1", "payment.created");
        await events.publish(tx, "PAY-1", "payment.paid");
      });
      const handler = events.statementHandler();

      const [first] = await db.store.claim("worker-a", { limit: 10, leaseMs: LEASE_MS });
      expect(first?.message.type).toBe("payment.created");
      const done = await processLease(db.store, first!, handler, clock);
      expect(done.result.outcome).toBe("completed");
      expect(done.summary).toBe('statement line "payment.created"');

      // The next event's lease expires and moves to worker-b: worker-a's late result writes nothing.
      const [second] = await db.store.claim("worker-a", { limit: 10, leaseMs: 500 });
      expect(second?.message.type).toBe("payment.paid");
      clock.advance(600);
      const [taken] = await db.store.claim("worker-b", { limit: 10, leaseMs: LEASE_MS });
      expect(taken?.messageId).toBe(second?.messageId);
      const late = await processLease(db.store, second!, handler, clock);
      expect(late.result.outcome).toBe("lease-lost");
      expect(await db.repository.statement()).toHaveLength(1);

      await processLease(db.store, taken!, handler, clock);
      const lines = await db.repository.statement();
      expect(lines.map((l) => [l.idempotencyKey, l.event, l.appliedBy])).toEqual([
        ["PAY-1", "payment.created", "worker-a"],
        ["PAY-1", "payment.paid", "worker-b"],
      ]);
      expect(lines.map((l) => l.seq)).toEqual([...lines.map((l) => l.seq)].sort((x, y) => x - y));
      expect(lines[1]?.appliedAt).toEqual(clock.now());
    });

    it("keeps at most one statement line per message", async () => {
      const clock = new ManualClock(START);
      const db = await factory.create(clock);
      const line = { idempotencyKey: "PAY-1", event: "payment.paid" as const, messageId: "41", appliedBy: "w", appliedAt: START };
      expect(await db.store.transaction((tx) => db.repository.appendStatement(tx, line))).toBe(true);
      expect(await db.store.transaction((tx) => db.repository.appendStatement(tx, { ...line, appliedBy: "other" }))).toBe(false);
      expect((await db.repository.statement()).map((l) => l.appliedBy)).toEqual(["w"]);
    });
  });
}
