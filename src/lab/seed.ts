// The six payments of the Session 15 lab: four end Paid, two Failed, decided by the provider.

import type { CreatePaymentRequest } from "../payments/types.js";

export interface SeedPayment extends CreatePaymentRequest {
  readonly outcome: "Paid" | "Failed";
}

export const SESSION_15_PAYMENTS: readonly SeedPayment[] = [
  { idempotencyKey: "PAY-001", amount: 12500, currency: "EUR", outcome: "Paid" },
  { idempotencyKey: "PAY-002", amount: 4999, currency: "EUR", outcome: "Paid" },
  { idempotencyKey: "PAY-003", amount: 250000, currency: "USD", outcome: "Failed" },
  { idempotencyKey: "PAY-004", amount: 1800, currency: "EUR", outcome: "Paid" },
  { idempotencyKey: "PAY-005", amount: 7350, currency: "GBP", outcome: "Paid" },
  { idempotencyKey: "PAY-006", amount: 99900, currency: "USD", outcome: "Failed" },
];

export const SESSION_15_OUTCOMES: Readonly<Record<string, "Paid" | "Failed">> = Object.fromEntries(
  SESSION_15_PAYMENTS.map((p) => [p.idempotencyKey, p.outcome]),
);
