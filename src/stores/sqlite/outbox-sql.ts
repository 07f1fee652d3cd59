// Every SQL statement of the SQLite driver, with the same names in the same order as the
// PostgreSQL driver's; where one side has no such statement, a one-line comment says why. Times are epoch
// milliseconds (UTC). Invariant kept by every statement here: a processing message's
// available_at equals its locked_until, so "claimable" is one indexed range:
// status IN ('pending','processing') AND available_at <= now.

import type { Migration } from "./migrate.js";

export const OUTBOX_MIGRATIONS: readonly Migration[] = [
  {
    name: "outbox-001-create",
    sql: `
CREATE TABLE outbox_messages (
  id            INTEGER PRIMARY KEY AUTOINCREMENT,
  type          TEXT    NOT NULL,
  dedupe_key    TEXT    UNIQUE,
  payload       TEXT    NOT NULL CHECK (json_valid(payload)),
  status        TEXT    NOT NULL DEFAULT 'pending'
                        CHECK (status IN ('pending', 'processing', 'processed', 'dead')),
  created_at    INTEGER NOT NULL,
  available_at  INTEGER NOT NULL,
  locked_by     TEXT,
  locked_until  INTEGER,
  lease_token   INTEGER NOT NULL DEFAULT 0,
  attempts      INTEGER NOT NULL DEFAULT 0,
  last_error    TEXT,
  processed_at  INTEGER,
  CHECK (status <> 'processing' OR (locked_by IS NOT NULL AND locked_until = available_at))
) STRICT;
-- Only claimable rows are indexed, so claiming does not slow down as processed history grows.
CREATE INDEX outbox_messages_claimable ON outbox_messages (available_at, id)
  WHERE status IN ('pending', 'processing');
`,
  },
  {
    name: "outbox-002-audit",
    sql: `
-- The audit trail: written only by stores opened with audit enabled.
CREATE TABLE outbox_audit (
  id                    INTEGER PRIMARY KEY AUTOINCREMENT,
  message_id            INTEGER NOT NULL,
  lease_token           INTEGER NOT NULL,
  owner                 TEXT    NOT NULL,
  action                TEXT    NOT NULL CHECK (action IN ('claim', 'complete', 'retry', 'dead', 'release', 'redrive')),
  at                    INTEGER NOT NULL,
  previous_status       TEXT,
  previous_owner        TEXT,
  previous_locked_until INTEGER
) STRICT;
CREATE INDEX outbox_audit_message ON outbox_audit (message_id, id);
`,
  },
  {
    name: "outbox-003-dead-index",
    sql: `
-- Dead messages by when they died (a dead row's available_at), for listing them and for retention.
CREATE INDEX outbox_messages_dead ON outbox_messages (available_at, id) WHERE status = 'dead';
`,
  },
  {
    name: "outbox-004-envelope",
    sql: `
-- The envelope: an ordering key, string headers (a JSON object) and a destination for a relay.
ALTER TABLE outbox_messages ADD COLUMN ordering_key TEXT;
ALTER TABLE outbox_messages ADD COLUMN headers TEXT CHECK (headers IS NULL OR json_type(headers) = 'object');
ALTER TABLE outbox_messages ADD COLUMN destination TEXT;
`,
  },
];

const COLUMNS =
  "id, type, dedupe_key, ordering_key, headers, destination, payload, status, created_at, available_at, locked_by, locked_until, lease_token, attempts, last_error, processed_at";
/**
 * What a claim reads back: the columns a claim does not set itself. The rest (status, owner, lease
 * end, processed_at) the claim has just written and the store already knows. Each RETURNING column
 * costs time per row: a one-off timing of this UPDATE over 100-row batches took 11.2 µs of CPU per
 * row returning all thirteen columns, 8.5 µs returning these, 5.0 µs returning the id alone.
 */
const CLAIMED_COLUMNS = "id, type, dedupe_key, ordering_key, headers, destination, payload, created_at, lease_token, attempts, last_error";

export const SQL = {
  enqueue: `INSERT INTO outbox_messages (type, dedupe_key, ordering_key, headers, destination, payload, created_at, available_at)
            VALUES (@type, @dedupeKey, @key, @headers, @destination, @payload, @now, @availableAt) RETURNING ${COLUMNS}`,

  /**
   * SQLite has no notifications between processes: in their place (listen on PostgreSQL) a store
   * watches the -wal file, and after another connection's commit reads the newest id, through the
   * primary key, to see whether it enqueued something.
   */
  newestId: `SELECT max(id) FROM outbox_messages`,
  /** Changes whenever another connection commits (this connection's own commits leave it alone). */
  dataVersion: `PRAGMA data_version`,

  // installed: (none) isInstalled lists the file's tables (open-database's listTables)

  /** Candidates, oldest due first; read inside the claim's BEGIN IMMEDIATE, so nobody else can take them. */
  claimCandidates: `SELECT id, status, locked_by, locked_until FROM outbox_messages
                    WHERE status IN ('pending', 'processing') AND available_at <= @now
                    ORDER BY available_at, id LIMIT @limit`,

  /** The claim of a whole batch of candidates (read just before, in the same transaction); re-checks claimability. */
  claim: `UPDATE outbox_messages
              SET status = 'processing', locked_by = @owner, locked_until = @until, available_at = @until,
                  lease_token = lease_token + 1, attempts = attempts + 1
              WHERE id IN (SELECT value FROM json_each(@ids)) AND status IN ('pending', 'processing') AND available_at <= @now
              RETURNING ${CLAIMED_COLUMNS}`,

  // lockHolder: (none) the claim's BEGIN IMMEDIATE already keeps every other writer out

  /** The conditional claim: re-checks claimability, so it can never take a held message. */
  claimMessage: `UPDATE outbox_messages
             SET status = 'processing', locked_by = @owner, locked_until = @until, available_at = @until,
                 lease_token = lease_token + 1, attempts = attempts + 1
             WHERE id = @id AND status IN ('pending', 'processing') AND available_at <= @now
             RETURNING ${CLAIMED_COLUMNS}`,

  holder: `SELECT status, locked_by, locked_until, lease_token FROM outbox_messages WHERE id = @id`,

  renew: `UPDATE outbox_messages SET locked_until = @until, available_at = @until
          WHERE id = @id AND lease_token = @token AND status = 'processing'
          RETURNING locked_until`,

  complete: `UPDATE outbox_messages
             SET status = 'processed', processed_at = @now, locked_until = NULL, last_error = NULL
             WHERE id = @id AND lease_token = @token AND status = 'processing'`,

  /**
   * The guarded update of many completions without business writes, in one statement: @pairs is a
   * JSON array of [id, token]. Returns the leases it completed; the others were lost.
   */
  completeBulk: `UPDATE outbox_messages
                 SET status = 'processed', processed_at = @now, locked_until = NULL, last_error = NULL
                 FROM (SELECT value ->> 0 AS id, value ->> 1 AS token FROM json_each(@pairs)) AS done
                 WHERE outbox_messages.id = done.id AND outbox_messages.lease_token = done.token
                   AND outbox_messages.status = 'processing'
                 RETURNING outbox_messages.id, outbox_messages.lease_token`,

  /** Each completion of a group that carries a business write runs inside one of these. */
  savepoint: "SAVEPOINT wassal_completion",

  // completeInSavepoint: (none) savepoint statements are prepared once each; a round trip costs nothing in-process

  releaseSavepoint: "RELEASE wassal_completion",

  rollbackToSavepoint: "ROLLBACK TO wassal_completion",

  failRetry: `UPDATE outbox_messages
              SET status = 'pending', available_at = @availableAt, locked_by = NULL, locked_until = NULL, last_error = @error
              WHERE id = @id AND lease_token = @token AND status = 'processing'`,

  failDead: `UPDATE outbox_messages
             SET status = 'dead', locked_until = NULL, last_error = @error, available_at = @now
             WHERE id = @id AND lease_token = @token AND status = 'processing'`,

  release: `UPDATE outbox_messages
            SET status = 'pending', available_at = @now, locked_by = NULL, locked_until = NULL,
                attempts = max(attempts - 1, 0)
            WHERE id = @id AND lease_token = @token AND status = 'processing'`,

  audit: `INSERT INTO outbox_audit (message_id, lease_token, owner, action, at, previous_status, previous_owner, previous_locked_until)
          VALUES (@id, @token, @owner, @action, @at, @previousStatus, @previousOwner, @previousLockedUntil)`,

  auditTrail: `SELECT message_id, lease_token, owner, action, at, previous_status, previous_owner, previous_locked_until
               FROM outbox_audit ORDER BY id`,

  // clockNow: (none) times come from the injected clock, read inside the write lock

  getMessage: `SELECT ${COLUMNS} FROM outbox_messages WHERE id = @id`,

  listAll: `SELECT ${COLUMNS} FROM outbox_messages ORDER BY id LIMIT @limit`,

  listByStatus: `SELECT ${COLUMNS} FROM outbox_messages WHERE status IN (SELECT value FROM json_each(@statuses)) ORDER BY id LIMIT @limit`,

  countByStatus: `SELECT status, count(*) AS n FROM outbox_messages GROUP BY status`,

  oldestPending: `SELECT min(created_at) AS oldest FROM outbox_messages WHERE status = 'pending'`,

  leasesByOwner: `SELECT locked_by AS owner, sum(locked_until > @now) AS held, sum(locked_until <= @now) AS expired
                  FROM outbox_messages WHERE status = 'processing' GROUP BY locked_by ORDER BY locked_by`,

  /** Audit rows for a redrive, written before it (same transaction); owner "redrive" marks an operator's act. */
  auditRedriveAll: `INSERT INTO outbox_audit (message_id, lease_token, owner, action, at)
                      SELECT id, lease_token, 'redrive', 'redrive', @now FROM outbox_messages WHERE status = 'dead'`,

  redriveAll: `UPDATE outbox_messages SET status = 'pending', available_at = @now, attempts = 0, locked_by = NULL, locked_until = NULL
               WHERE status = 'dead'`,

  auditRedriveSome: `INSERT INTO outbox_audit (message_id, lease_token, owner, action, at)
                      SELECT id, lease_token, 'redrive', 'redrive', @now FROM outbox_messages
                      WHERE id IN (SELECT value FROM json_each(@ids)) AND status = 'dead'`,

  redriveSome: `UPDATE outbox_messages SET status = 'pending', available_at = @now, attempts = 0, locked_by = NULL, locked_until = NULL
                WHERE id IN (SELECT value FROM json_each(@ids)) AND status = 'dead' RETURNING id`,

  /** One batch of retention: the oldest processed rows first, by id, so the scan stops early. */
  purgeProcessed: `DELETE FROM outbox_messages WHERE id IN (
                     SELECT id FROM outbox_messages WHERE status = 'processed' AND processed_at < @before ORDER BY id LIMIT @limit)`,

  /** One batch of dead rows that died before @before (a dead row's available_at is when it died), by outbox_messages_dead. */
  purgeDead: `DELETE FROM outbox_messages WHERE id IN (
                SELECT id FROM outbox_messages WHERE status = 'dead' AND available_at < @before ORDER BY available_at, id LIMIT @limit)`,

  /** One batch of audit rows written before @before, oldest first. */
  purgeAudit: `DELETE FROM outbox_audit WHERE id IN (SELECT id FROM outbox_audit WHERE at < @before ORDER BY id LIMIT @limit)`,

  schema: `SELECT sql FROM sqlite_schema WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' ORDER BY type = 'index', name`,

  // schemaTables: (none) the one `schema` statement reads every DDL text from sqlite_schema

  unleasedLoadPending: `SELECT ${COLUMNS} FROM outbox_messages WHERE status = 'pending' ORDER BY id`,

  unleasedMarkProcessed: `UPDATE outbox_messages SET status = 'processed', processed_at = @now, locked_until = NULL WHERE id = @id`,
} as const;

/** What claim and claimMessage return (CLAIMED_COLUMNS). */
export interface ClaimedRow {
  id: number;
  type: string;
  dedupe_key: string | null;
  ordering_key: string | null;
  /** JSON text of the headers object, or null. */
  headers: string | null;
  destination: string | null;
  payload: string;
  created_at: number;
  lease_token: number;
  attempts: number;
  last_error: string | null;
}
