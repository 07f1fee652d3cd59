// The payments lab on PostgreSQL: its payments table, and the unguarded write of its BEFORE scenario.
// The payments table on PostgreSQL, in the outbox's schema. As on SQLite, a CHECK makes a
// transaction id present exactly when Paid.

import { createHash } from "node:crypto";
import type {
  CreatePaymentRequest,
  OutcomeRecord,
  Payment,
  PaymentEvent,
  PaymentOutcome,
  PaymentStatus,
  PaymentsRepository,
  StatementLine,
} from "../../payments/types.js";
import type { Finalize } from "../../outbox/types.js";
import { shipMigrations } from "../../stores/migration-guard.js";
import { quoteIdent, type PgMigration } from "../../stores/postgres/outbox-sql.js";
import type { PostgresOutboxStore, PostgresTx } from "../../stores/postgres/postgres-outbox-store.js";

export function paymentsMigrations(schema: string): readonly PgMigration[] {
  const s = quoteIdent(schema);
  return [
    {
      name: "payments-001-create",
      sql: `
CREATE TABLE ${s}.payments (
  id                 bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  idempotency_key    text        NOT NULL UNIQUE,
  amount             bigint      NOT NULL CHECK (amount > 0),
  currency           text        NOT NULL CHECK (length(currency) = 3),
  payment_status     text        NOT NULL DEFAULT 'Pending' CHECK (payment_status IN ('Pending', 'Paid', 'Failed')),
  transaction_id     text,
  provider_reference text        NOT NULL,
  created_at         timestamptz NOT NULL,
  updated_at         timestamptz NOT NULL,
  CONSTRAINT payments_transaction_id_only_when_paid CHECK ((payment_status = 'Paid') = (transaction_id IS NOT NULL) AND coalesce(length(transaction_id), 1) > 0)
);
`,
    },
    {
      name: "payments-002-statement",
      sql: `
CREATE TABLE ${s}.payment_statement (
  seq             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  idempotency_key text        NOT NULL,
  event           text        NOT NULL CHECK (event IN ('payment.created', 'payment.paid', 'payment.refunded')),
  message_id      bigint      NOT NULL UNIQUE,
  applied_by      text        NOT NULL,
  applied_at      timestamptz NOT NULL
);
`,
    },
  ];
}

shipMigrations(paymentsMigrations("wassal"));

interface PaymentRow {
  id: string;
  idempotency_key: string;
  amount: string;
  currency: string;
  payment_status: string;
  transaction_id: string | null;
  provider_reference: string;
  created_at: Date;
  updated_at: Date;
}

interface StatementRow {
  seq: string;
  idempotency_key: string;
  event: string;
  message_id: string;
  applied_by: string;
  applied_at: Date;
}

const COLUMNS = "id, idempotency_key, amount, currency, payment_status, transaction_id, provider_reference, created_at, updated_at";

function paymentsSql(schema: string) {
  const s = quoteIdent(schema);
  const table = `${s}.payments`;
  return {
    findByKey: `SELECT ${COLUMNS} FROM ${table} WHERE idempotency_key = $1`,
    insert: `INSERT INTO ${table} (idempotency_key, amount, currency, provider_reference, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $5)
             ON CONFLICT (idempotency_key) DO NOTHING
             RETURNING ${COLUMNS}`,
    recordOutcome: `UPDATE ${table} SET payment_status = $2, transaction_id = $3, updated_at = $4
                    WHERE idempotency_key = $1 AND payment_status = 'Pending'`,
    /** $1 keys, $2 statuses, $3 transaction ids, $4 times: recordOutcome for many payments in one statement. */
    recordOutcomes: `UPDATE ${table} p SET payment_status = o.status, transaction_id = o.transaction_id, updated_at = o.at
                     FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[]) AS o(idempotency_key, status, transaction_id, at)
                     WHERE p.idempotency_key = o.idempotency_key AND p.payment_status = 'Pending'`,
    list: `SELECT ${COLUMNS} FROM ${table} ORDER BY id`,
    appendStatement: `INSERT INTO ${s}.payment_statement (idempotency_key, event, message_id, applied_by, applied_at)
                      VALUES ($1, $2, $3, $4, $5)
                      ON CONFLICT (message_id) DO NOTHING`,
    statement: `SELECT seq, idempotency_key, event, message_id, applied_by, applied_at FROM ${s}.payment_statement ORDER BY seq`,
  } as const;
}

function toPayment(row: PaymentRow): Payment {
  return {
    id: String(row.id),
    idempotencyKey: row.idempotency_key,
    amount: Number(row.amount),
    currency: row.currency,
    status: row.payment_status as PaymentStatus,
    transactionId: row.transaction_id,
    providerReference: row.provider_reference,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

export class PostgresPaymentsRepository implements PaymentsRepository<PostgresTx> {
  readonly #store: PostgresOutboxStore;
  readonly #sql: ReturnType<typeof paymentsSql>;
  readonly #recordOutcomesName: string;

  constructor(store: PostgresOutboxStore) {
    this.#store = store;
    this.#sql = paymentsSql(store.schema);
    this.#recordOutcomesName = `wassal_payments_${createHash("sha1").update(this.#sql.recordOutcomes).digest("hex").slice(0, 16)}`;
  }

  async migrate(): Promise<void> {
    await this.#store.applyMigrations(paymentsMigrations(this.#store.schema));
  }

  async findByKey(idempotencyKey: string): Promise<Payment | undefined> {
    const row = (await this.#store.pool.query<PaymentRow>(this.#sql.findByKey, [idempotencyKey])).rows[0];
    return row === undefined ? undefined : toPayment(row);
  }

  async insert(tx: PostgresTx, request: CreatePaymentRequest & { providerReference: string; now: Date }): Promise<Payment | undefined> {
    const row = (
      await tx.query<PaymentRow>(this.#sql.insert, [request.idempotencyKey, request.amount, request.currency, request.providerReference, request.now])
    ).rows[0];
    return row === undefined ? undefined : toPayment(row);
  }

  async recordOutcome(tx: PostgresTx, idempotencyKey: string, outcome: PaymentOutcome, now: Date): Promise<boolean> {
    const result = await tx.query(this.#sql.recordOutcome, [idempotencyKey, outcome.status, outcome.status === "Paid" ? outcome.transactionId : null, now]);
    return result.rowCount === 1;
  }

  async recordOutcomes(tx: PostgresTx, records: readonly OutcomeRecord[]): Promise<number> {
    if (records.length === 0) return 0;
    const result = await tx.query({
      name: this.#recordOutcomesName, // prepared once per connection: the workers' hot path
      text: this.#sql.recordOutcomes,
      values: [
        records.map((r) => r.idempotencyKey),
        records.map((r) => r.outcome.status),
        records.map((r) => (r.outcome.status === "Paid" ? r.outcome.transactionId : null)),
        records.map((r) => r.now),
      ],
    });
    return result.rowCount ?? 0;
  }

  async list(): Promise<Payment[]> {
    return (await this.#store.pool.query<PaymentRow>(this.#sql.list)).rows.map(toPayment);
  }

  async appendStatement(tx: PostgresTx, line: Omit<StatementLine, "seq">): Promise<boolean> {
    const result = await tx.query(this.#sql.appendStatement, [line.idempotencyKey, line.event, line.messageId, line.appliedBy, line.appliedAt]);
    return result.rowCount === 1;
  }

  async statement(): Promise<StatementLine[]> {
    return (await this.#store.pool.query<StatementRow>(this.#sql.statement)).rows.map((row) => ({
      seq: Number(row.seq),
      idempotencyKey: row.idempotency_key,
      event: row.event as PaymentEvent,
      messageId: row.message_id,
      appliedBy: row.applied_by,
      appliedAt: row.applied_at,
    }));
  }
}

/** Marks a message processed whoever holds it, after running `finalize`: the race that leases prevent (the lab's BEFORE scenario). */
export async function markProcessedUnleased(store: PostgresOutboxStore, messageId: string, at: Date, finalize?: Finalize<PostgresTx>): Promise<void> {
  await store.transaction(async (tx) => {
    if (finalize) await finalize(tx);
    await tx.query(`UPDATE ${quoteIdent(store.schema)}.outbox_messages SET status = 'processed', processed_at = $1, locked_until = NULL WHERE id = $2`, [
      at,
      messageId,
    ]);
  });
}
