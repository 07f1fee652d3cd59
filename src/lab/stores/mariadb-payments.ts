// The payments lab on MariaDB: its payments table, and the unguarded write of its BEFORE scenario.
// The payments table in the outbox's database. As on the other stores, a CHECK makes a
// transaction id present exactly when Paid. Times are milliseconds since the epoch, as in the
// outbox's own tables, so no session time zone can shift them.

import type { ResultSetHeader, RowDataPacket } from "mysql2/promise";
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
import type { MariaDbOutboxStore, MariaDbTx } from "../../stores/mariadb/mariadb-outbox-store.js";
import type { MariaDbMigration } from "../../stores/mariadb/outbox-sql.js";

export const PAYMENTS_MIGRATIONS: readonly MariaDbMigration[] = [
  {
    name: "payments-001-create",
    statements: [
      `CREATE TABLE payments (
  id                 BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
  idempotency_key    VARCHAR(255) NOT NULL,
  amount             BIGINT       NOT NULL CHECK (amount > 0),
  currency           CHAR(3)      NOT NULL CHECK (CHAR_LENGTH(currency) = 3),
  payment_status     VARCHAR(7)   NOT NULL DEFAULT 'Pending' CHECK (payment_status IN ('Pending', 'Paid', 'Failed')),
  transaction_id     VARCHAR(255) NULL,
  provider_reference VARCHAR(255) NOT NULL,
  created_at         BIGINT       NOT NULL,
  updated_at         BIGINT       NOT NULL,
  UNIQUE KEY payments_idempotency_key (idempotency_key),
  CONSTRAINT payments_transaction_id_only_when_paid CHECK ((payment_status = 'Paid') = (transaction_id IS NOT NULL) AND COALESCE(CHAR_LENGTH(transaction_id), 1) > 0)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
    ],
  },
  {
    name: "payments-002-statement",
    statements: [
      `CREATE TABLE payment_statement (
  seq             BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
  idempotency_key VARCHAR(255) NOT NULL,
  event           VARCHAR(32)  NOT NULL CHECK (event IN ('payment.created', 'payment.paid', 'payment.refunded')),
  message_id      BIGINT       NOT NULL,
  applied_by      VARCHAR(255) NOT NULL,
  applied_at      BIGINT       NOT NULL,
  UNIQUE KEY payment_statement_message_id (message_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
    ],
  },
];

shipMigrations(PAYMENTS_MIGRATIONS);

interface PaymentRow extends RowDataPacket {
  id: string | number;
  idempotency_key: string;
  amount: string | number;
  currency: string;
  payment_status: string;
  transaction_id: string | null;
  provider_reference: string;
  created_at: string | number;
  updated_at: string | number;
}

interface StatementRow extends RowDataPacket {
  seq: string | number;
  idempotency_key: string;
  event: string;
  message_id: string | number;
  applied_by: string;
  applied_at: string | number;
}

const COLUMNS = "id, idempotency_key, amount, currency, payment_status, transaction_id, provider_reference, created_at, updated_at";

/** MariaDB's ER_DUP_ENTRY: a unique key refused the row (the statement alone is rolled back, not the transaction). */
function isDuplicateEntry(error: unknown): boolean {
  return typeof error === "object" && error !== null && (error as { errno?: unknown }).errno === 1062;
}

const SQL = {
  findByKey: `SELECT ${COLUMNS} FROM payments WHERE idempotency_key = ?`,
  insert: `INSERT INTO payments (idempotency_key, amount, currency, provider_reference, created_at, updated_at)
           VALUES (?, ?, ?, ?, ?, ?)
           RETURNING ${COLUMNS}`,
  recordOutcome: `UPDATE payments SET payment_status = ?, transaction_id = ?, updated_at = ?
                  WHERE idempotency_key = ? AND payment_status = 'Pending'`,
  /** One JSON array of [key, status, transaction id, at ms] rows: recordOutcome for many payments in one statement. */
  recordOutcomes: `UPDATE payments p
                   JOIN JSON_TABLE(?, '$[*]' COLUMNS (
                     idempotency_key VARCHAR(255) PATH '$[0]',
                     status          VARCHAR(7)   PATH '$[1]',
                     transaction_id  VARCHAR(255) PATH '$[2]',
                     at              BIGINT       PATH '$[3]')) o ON p.idempotency_key = o.idempotency_key
                   SET p.payment_status = o.status, p.transaction_id = o.transaction_id, p.updated_at = o.at
                   WHERE p.payment_status = 'Pending'`,
  list: `SELECT ${COLUMNS} FROM payments ORDER BY id`,
  appendStatement: `INSERT INTO payment_statement (idempotency_key, event, message_id, applied_by, applied_at) VALUES (?, ?, ?, ?, ?)`,
  statement: "SELECT seq, idempotency_key, event, message_id, applied_by, applied_at FROM payment_statement ORDER BY seq",
} as const;

function toPayment(row: PaymentRow): Payment {
  return {
    id: String(row.id),
    idempotencyKey: row.idempotency_key,
    amount: Number(row.amount),
    currency: row.currency,
    status: row.payment_status as PaymentStatus,
    transactionId: row.transaction_id,
    providerReference: row.provider_reference,
    createdAt: new Date(Number(row.created_at)),
    updatedAt: new Date(Number(row.updated_at)),
  };
}

export class MariaDbPaymentsRepository implements PaymentsRepository<MariaDbTx> {
  readonly #store: MariaDbOutboxStore;

  constructor(store: MariaDbOutboxStore) {
    this.#store = store;
  }

  async migrate(): Promise<void> {
    await this.#store.applyMigrations(PAYMENTS_MIGRATIONS);
  }

  async findByKey(idempotencyKey: string): Promise<Payment | undefined> {
    const [rows] = await this.#store.pool.query<PaymentRow[]>(SQL.findByKey, [idempotencyKey]);
    const row = rows[0];
    return row === undefined ? undefined : toPayment(row);
  }

  async insert(tx: MariaDbTx, request: CreatePaymentRequest & { providerReference: string; now: Date }): Promise<Payment | undefined> {
    const at = request.now.getTime();
    try {
      const [rows] = await tx.query<PaymentRow[]>(SQL.insert, [request.idempotencyKey, request.amount, request.currency, request.providerReference, at, at]);
      const row = rows[0];
      return row === undefined ? undefined : toPayment(row);
    } catch (error) {
      if (isDuplicateEntry(error)) return undefined;
      throw error;
    }
  }

  async recordOutcome(tx: MariaDbTx, idempotencyKey: string, outcome: PaymentOutcome, now: Date): Promise<boolean> {
    const [result] = await tx.query<ResultSetHeader>(SQL.recordOutcome, [
      outcome.status,
      outcome.status === "Paid" ? outcome.transactionId : null,
      now.getTime(),
      idempotencyKey,
    ]);
    return result.affectedRows === 1;
  }

  async recordOutcomes(tx: MariaDbTx, records: readonly OutcomeRecord[]): Promise<number> {
    if (records.length === 0) return 0;
    const rows = records.map((r) => [r.idempotencyKey, r.outcome.status, r.outcome.status === "Paid" ? r.outcome.transactionId : null, r.now.getTime()]);
    const [result] = await tx.query<ResultSetHeader>(SQL.recordOutcomes, [JSON.stringify(rows)]);
    return result.affectedRows;
  }

  async list(): Promise<Payment[]> {
    const [rows] = await this.#store.pool.query<PaymentRow[]>(SQL.list);
    return rows.map(toPayment);
  }

  async appendStatement(tx: MariaDbTx, line: Omit<StatementLine, "seq">): Promise<boolean> {
    try {
      await tx.query(SQL.appendStatement, [line.idempotencyKey, line.event, line.messageId, line.appliedBy, line.appliedAt.getTime()]);
      return true;
    } catch (error) {
      if (isDuplicateEntry(error)) return false;
      throw error;
    }
  }

  async statement(): Promise<StatementLine[]> {
    const [rows] = await this.#store.pool.query<StatementRow[]>(SQL.statement);
    return rows.map((row) => ({
      seq: Number(row.seq),
      idempotencyKey: row.idempotency_key,
      event: row.event as PaymentEvent,
      messageId: String(row.message_id),
      appliedBy: row.applied_by,
      appliedAt: new Date(Number(row.applied_at)),
    }));
  }
}

/** Marks a message processed whoever holds it, after running `finalize`: the race that leases prevent (the lab's BEFORE scenario). */
export async function markProcessedUnleased(store: MariaDbOutboxStore, messageId: string, at: Date, finalize?: Finalize<MariaDbTx>): Promise<void> {
  await store.transaction(async (tx) => {
    if (finalize) await finalize(tx);
    await tx.query("UPDATE outbox_messages SET status = 'processed', processed_at = ?, locked_until = NULL WHERE id = ?", [at.getTime(), messageId]);
  });
}
