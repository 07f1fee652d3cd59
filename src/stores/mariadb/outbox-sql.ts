// Every SQL statement of the MariaDB driver, with the same names as the SQLite and PostgreSQL
// drivers' where a statement has a counterpart; where one has none, a one-line comment says why.
// MariaDB 10.6 or later (10.11 is what the tests run on): the claim needs FOR UPDATE SKIP LOCKED
// (10.6), enqueue INSERT … RETURNING (10.5), enqueueMany JSON_TABLE (10.6), and the hand-on an
// UPDATE whose subquery reads the same table (10.3.2). MySQL 8 has neither INSERT … RETURNING nor
// that UPDATE, so it is not supported.
//
// Times are BIGINT epoch milliseconds (UTC), as on SQLite. The clock is the injected one when a
// store has it (its time bound as a parameter), else the database's: NOW_MS, UTC_TIMESTAMP(6) in
// milliseconds (TIMESTAMPDIFF from the epoch, so the session's time zone does not matter, even on
// another library's connection). Invariant kept by every statement, as on the others: a processing
// message's available_at equals its locked_until, so "claimable" is one indexed range.
//
// MariaDB has no partial indexes: the claimable range and each key's unfinished messages are
// indexed through stored generated columns (claim_at, live_key) that are NULL for the other rows.
// Placeholders are `?`, in order; statements go through mysql2's query() (never with
// multipleStatements), which expands an array bound to `IN (?)` into a list.

/** One named migration of the MariaDB store: its statements, run one by one (DDL commits each). */
export interface MariaDbMigration {
  readonly name: string;
  readonly statements: readonly string[];
}

/** An identifier as MariaDB must name it: always backquoted, so a reserved word names a table like any other word. */
export function quoteIdent(name: string): string {
  return `\`${name.replaceAll("`", "``")}\``;
}

/** The database's clock: UTC_TIMESTAMP(6) as whole epoch milliseconds, whatever the session's time zone. */
const NOW_MS = "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)";

/** The table options of every table: InnoDB, and text compared byte for byte (keys are case- and space-sensitive). */
const TABLE_OPTIONS = "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin";

/** The number a key's next holder takes when the key is free: the one its last hand-on remembered, else 1. */
const nextSeqOf = (key: string) => `COALESCE((SELECT n.next_seq FROM outbox_keys n WHERE n.ordering_key = ${key}), 1)`;

/** Whether a keyed message waits behind its key (a holder or a queue), as enqueue decides it. */
const waitsBehind = (key: string) => `EXISTS (SELECT 1 FROM outbox_messages k WHERE k.live_key = ${key} AND k.key_state IN (0, 1))`;

/** A routine's text argument, compared as the tables compare text (utf8mb4, byte by byte); LONGTEXT, so an over-long one reaches the length check. */
const ROUTINE_TEXT = "LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin";

/**
 * wassal_enqueue(type, payload, dedupe_key, ordering_key, headers, destination, available_at_ms, OUT id):
 * the library's enqueue as a stored procedure (outbox-014), for any client or language inside its
 * own transaction. Its limits are the library's (validate.ts); a bad argument raises SQLSTATE
 * 22023 naming it, a dedupe key taken the duplicate-key error (1062). The literals hold no
 * backslash, so the server's sql_mode (NO_BACKSLASH_ESCAPES) cannot change a pattern.
 *
 * The key's turn and the key's state are the store's keyed enqueue (lockKeys, then enqueue's
 * waits and key_seq). A procedure, not a function: a CALLed procedure's statements each read what
 * committed before them (READ COMMITTED), so the read after the key's turn sees a holder that
 * completed while the call waited; a function's statements share the calling statement's
 * snapshot, which `SELECT wassal_enqueue(…) FROM orders` would open before the wait (the message
 * would then wait behind a finished holder for ever). And creating a function that writes is
 * refused on a server with binary logging on unless log_bin_trust_function_creators is set,
 * which would stop store.migrate() there; creating a procedure is not. From a trigger, the
 * procedure's statements belong to the triggering statement: the turn is still taken before the
 * first read, so a row trigger of an INSERT … VALUES is safe, one of an INSERT … SELECT is not.
 */
function enqueueRoutine(): string {
  const bad = (condition: string, message: string) => `  IF ${condition} THEN
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = '${message}';
  END IF;`;
  /** A text argument as checkText takes it: non-empty (not only spaces), bounded, without NUL. */
  const text = (arg: string, max: number, required: boolean) => {
    const wrong = `${arg} REGEXP '^[[:space:]]*$' OR CHAR_LENGTH(${arg}) > ${max}`;
    return [
      bad(
        required ? `${arg} IS NULL OR ${wrong}` : `${arg} IS NOT NULL AND (${wrong})`,
        `wassal enqueue: ${arg} must be a non-empty string of at most ${max} characters`,
      ),
      bad(`LOCATE(CHAR(0 USING utf8mb4), ${arg}) > 0`, `wassal enqueue: ${arg} contains a NUL character (U+0000)`),
    ].join("\n");
  };
  /** Control characters other than tab (validate.ts's CONTROL), NUL included. */
  const control = (expr: string) => `REPLACE(${expr}, CHAR(9 USING utf8mb4), '') REGEXP '[[:cntrl:]]'`;
  const headersRule =
    "wassal enqueue: headers must be a JSON object of at most 64 string values (at most 4096 characters, no control characters) whose distinct names are tokens (1 to 100 letters, digits, !#$%&''*+-.^_`|~)";
  return `CREATE PROCEDURE IF NOT EXISTS wassal_enqueue(
  type            ${ROUTINE_TEXT},
  payload         ${ROUTINE_TEXT},
  dedupe_key      ${ROUTINE_TEXT},
  ordering_key    ${ROUTINE_TEXT},
  headers         ${ROUTINE_TEXT},
  destination     ${ROUTINE_TEXT},
  available_at_ms BIGINT,
  OUT message_id  BIGINT
)
  NOT DETERMINISTIC MODIFIES SQL DATA SQL SECURITY INVOKER
  COMMENT 'Wassal: enqueue in the caller''s transaction; the message id comes back in the last (OUT) argument. Seven positional arguments (MariaDB has no named or default ones): NULL for an absent one. payload and headers are JSON text; available_at_ms is epoch milliseconds (UTC), NULL for now. An ordering key needs a READ COMMITTED session.'
BEGIN
  DECLARE now_ms BIGINT DEFAULT ${NOW_MS};
  DECLARE waits BOOLEAN DEFAULT FALSE;
  DECLARE header_names LONGTEXT CHARACTER SET utf8mb4;
  DECLARE header_name ${ROUTINE_TEXT};
  DECLARE header_value LONGTEXT CHARACTER SET utf8mb4;
  DECLARE i INT DEFAULT 0;
  DECLARE refusal VARCHAR(512) CHARACTER SET utf8mb4;
${text("type", 200, true)}
${bad("payload IS NULL", "wassal enqueue: payload must be JSON text, not NULL (use ''null'' for a JSON null)")}
${bad("NOT JSON_VALID(payload)", "wassal enqueue: payload must be valid JSON text nested at most 31 levels deep (MariaDB''s JSON functions stop at 32)")}
${bad(
  "payload REGEXP REPLACE('(^|[^X])(XX)*Xu0000', 'X', REPEAT(CHAR(92 USING utf8mb4), 2))",
  "wassal enqueue: payload contains a NUL character (U+0000), which no store can hold",
)}
${text("dedupe_key", 1000, false)}
${text("ordering_key", 255, false)}
${text("destination", 255, false)}
${bad(`destination IS NOT NULL AND ${control("destination")}`, "wassal enqueue: destination contains a control character")}
${bad(available(), "wassal enqueue: available_at_ms must be epoch milliseconds (UTC) between the years 1 and 9999, or NULL for now")}
  IF headers IS NOT NULL THEN
${bad("NOT JSON_VALID(headers) OR NOT (JSON_TYPE(headers) <=> 'OBJECT') OR JSON_LENGTH(headers) > 64", headersRule).replace(/^/gm, "  ")}
    SET header_names = JSON_KEYS(headers);
    -- Each name once: JSON_KEYS lists a repeated name once.
${bad("JSON_LENGTH(header_names) <> JSON_LENGTH(headers)", headersRule).replace(/^/gm, "  ")}
    WHILE i < JSON_LENGTH(header_names) DO
      SET header_name = JSON_UNQUOTE(JSON_EXTRACT(header_names, CONCAT('$[', i, ']')));
      SET header_value = JSON_EXTRACT(headers, CONCAT('$.', JSON_QUOTE(header_name)));
      -- A token: (?s) and (?!.) so that a trailing newline does not pass for the end.
${bad(
  `NOT (header_name REGEXP '(?s)^[!#$%&''*+.^_\`|~0-9A-Za-z-]{1,100}(?!.)') OR NOT (JSON_TYPE(header_value) <=> 'STRING') OR CHAR_LENGTH(JSON_UNQUOTE(header_value)) > 4096 OR ${control("JSON_UNQUOTE(header_value)")}`,
  headersRule,
).replace(/^/gm, "    ")}
      SET i = i + 1;
    END WHILE;
    -- No headers are stored as none, as the library stores them.
    IF JSON_LENGTH(headers) = 0 THEN
      SET headers = NULL;
    END IF;
  END IF;
  IF ordering_key IS NOT NULL THEN
    -- The store's rule (checkKeyIsolation), and its words.
    IF @@tx_isolation <> 'READ-COMMITTED' THEN
      SET refusal = CONCAT('wassal enqueue: messages with an ordering key need a READ COMMITTED transaction on MariaDB (this connection''s session is ', @@tx_isolation, '): set the session''s level (SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED) on the connections that enqueue them; MariaDB does not show a level set for the next transaction alone, so the session''s is what is checked');
      SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = refusal;
    END IF;
    -- The key's turn (lockKeys), before the first read: see above.
    INSERT INTO outbox_keys (ordering_key) VALUES (ordering_key) ON DUPLICATE KEY UPDATE next_seq = next_seq;
    SET waits = ${waitsBehind("ordering_key")};
  END IF;
  INSERT INTO outbox_messages (type, dedupe_key, headers, destination, payload, available_at, created_at, ordering_key, key_state, key_seq)
  VALUES (type, dedupe_key, headers, destination, payload, COALESCE(available_at_ms, now_ms), now_ms, ordering_key, waits,
          CASE WHEN ordering_key IS NOT NULL AND NOT waits THEN ${nextSeqOf("ordering_key")} END);
  SET message_id = LAST_INSERT_ID();
END`;
}

/** available_at_ms outside what checkTime accepts (years 1 to 9999, UTC). */
function available(): string {
  return `available_at_ms IS NOT NULL AND (available_at_ms < ${Date.parse("0001-01-01T00:00:00.000Z")} OR available_at_ms > ${Date.UTC(9999, 11, 31, 23, 59, 59, 999)})`;
}

/**
 * The outbox's migrations on MariaDB. MariaDB came after the other stores had reached
 * outbox-013: each table is created in its final form, under the name of the migration that first
 * made it on the others (outbox-001 the messages with the envelope, the key order and the key
 * numbers; outbox-002 the audit trail with refused writes; outbox-008 the inbox; outbox-012 the
 * keys' turns and numbers; outbox-013 the inbox's key order). MariaDB's DDL commits as it goes,
 * so a migration that fails part way leaves its earlier statements done: each statement here is
 * one that a rerun after a fix can follow (CREATE … IF NOT EXISTS). outbox-014 then adds what
 * MariaDB lacked: enqueue in SQL (PostgreSQL's outbox-009), as a stored procedure.
 */
export const OUTBOX_MIGRATIONS: readonly MariaDbMigration[] = [
  {
    name: "outbox-001-create",
    statements: [
      `CREATE TABLE IF NOT EXISTS outbox_messages (
  id            BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
  type          VARCHAR(200) NOT NULL,
  -- Dedupe keys are up to 1000 characters, too long to index whole: unique through their SHA-256.
  dedupe_key    TEXT,
  dedupe_hash   BINARY(32)   AS (UNHEX(SHA2(dedupe_key, 256))) STORED,
  ordering_key  VARCHAR(255),
  key_seq       BIGINT,
  headers       MEDIUMTEXT   CHECK (headers IS NULL OR JSON_TYPE(headers) = 'OBJECT'),
  destination   VARCHAR(255),
  -- JSON text, checked by the library before it is written: no JSON_VALID check here, since
  -- MariaDB's JSON functions refuse nesting deeper than 32 levels, and a payload may nest 100.
  payload       LONGTEXT     NOT NULL,
  status        VARCHAR(10)  NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'processing', 'processed', 'dead')),
  created_at    BIGINT       NOT NULL,
  available_at  BIGINT       NOT NULL,
  locked_by     VARCHAR(200),
  locked_until  BIGINT,
  lease_token   INT          NOT NULL DEFAULT 0,
  attempts      INT          NOT NULL DEFAULT 0,
  last_error    TEXT,
  processed_at  BIGINT,
  -- FIFO per ordering key: 0 may be claimed (no key, or its key's holder), 1 waits behind an
  -- earlier unfinished message of its key, 2 let its key go though dead (skipped).
  key_state     TINYINT      NOT NULL DEFAULT 0 CHECK (key_state IN (0, 1, 2)),
  -- The claimable range (the partial index of the other stores): the due time of a claimable row, else NULL.
  claim_at      BIGINT       AS (CASE WHEN status IN ('pending', 'processing') AND key_state = 0 THEN available_at END) STORED,
  -- A key's unfinished messages (and its dead ones): the key, else NULL, so a key's processed history is not read.
  live_key      VARCHAR(255) AS (CASE WHEN status IN ('pending', 'processing', 'dead') THEN ordering_key END) STORED,
  CONSTRAINT outbox_messages_processing_lease CHECK (status <> 'processing' OR (locked_by IS NOT NULL AND locked_until = available_at)),
  UNIQUE KEY outbox_messages_dedupe (dedupe_hash),
  KEY outbox_messages_claimable (claim_at, id),
  KEY outbox_messages_key (live_key, key_state, id),
  -- Dead messages by when they died (a dead row's available_at), and processed ones by id, for retention.
  KEY outbox_messages_status (status, available_at, id),
  KEY outbox_messages_status_id (status, id)
) ${TABLE_OPTIONS}`,
    ],
  },
  {
    name: "outbox-002-audit",
    statements: [
      `CREATE TABLE IF NOT EXISTS outbox_audit (
  id                    BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
  message_id            BIGINT       NOT NULL,
  lease_token           INT          NOT NULL,
  owner                 VARCHAR(200) NOT NULL,
  action                VARCHAR(10)  NOT NULL CHECK (action IN ('claim', 'complete', 'retry', 'dead', 'release', 'redrive', 'refused')),
  at                    BIGINT       NOT NULL,
  previous_status       VARCHAR(10),
  previous_owner        VARCHAR(200),
  previous_locked_until BIGINT,
  operation             VARCHAR(10)  CHECK (operation IN ('renew', 'complete', 'fail', 'release')),
  KEY outbox_audit_message (message_id, id),
  KEY outbox_audit_at (at)
) ${TABLE_OPTIONS}`,
    ],
  },
  {
    name: "outbox-008-inbox",
    statements: [
      `CREATE TABLE IF NOT EXISTS wassal_inbox (
  source      VARCHAR(255) NOT NULL,
  message_id  VARCHAR(255) NOT NULL,
  received_at BIGINT       NOT NULL,
  PRIMARY KEY (source, message_id),
  KEY wassal_inbox_received (received_at)
) ${TABLE_OPTIONS}`,
    ],
  },
  {
    name: "outbox-012-key-seq",
    statements: [
      // A row per ordering key ever used: its row lock is the key's turn (lockKeys), and next_seq
      // the number its next holder takes when the key is free (1 for a key never handed on).
      `CREATE TABLE IF NOT EXISTS outbox_keys (
  ordering_key VARCHAR(255) NOT NULL PRIMARY KEY,
  next_seq     BIGINT       NOT NULL DEFAULT 1 CHECK (next_seq >= 1)
) ${TABLE_OPTIONS}`,
    ],
  },
  {
    name: "outbox-013-inbox-order",
    statements: [
      `CREATE TABLE IF NOT EXISTS wassal_inbox_keys (
  source       VARCHAR(255) NOT NULL,
  ordering_key VARCHAR(255) NOT NULL,
  applied_seq  BIGINT       NOT NULL DEFAULT 0 CHECK (applied_seq >= 0),
  held_seq     BIGINT,
  held_since   BIGINT,
  CONSTRAINT wassal_inbox_keys_held_after CHECK (held_seq > applied_seq + 1),
  PRIMARY KEY (source, ordering_key),
  KEY wassal_inbox_keys_held (held_since)
) ${TABLE_OPTIONS}`,
    ],
  },
  {
    // enqueue in SQL, for any client, language or trigger inside its own transaction: a stored
    // procedure, the same checks and key order as the library's enqueue (see enqueueRoutine).
    name: "outbox-014-sql-enqueue",
    statements: [enqueueRoutine()],
  },
  {
    // Running workers and relays, each kept alive by its heartbeat: an owner whose alive_until
    // passes is dead, and a peer expires its leases at once instead of waiting for each lease to
    // run out. takes: the message types it claims (a JSON list), NULL for every type.
    name: "outbox-015-owners",
    statements: [
      `CREATE TABLE IF NOT EXISTS outbox_owners (
  name         VARCHAR(200) NOT NULL PRIMARY KEY,
  kind         VARCHAR(50)  NOT NULL,
  takes        MEDIUMTEXT,
  started_at   BIGINT       NOT NULL,
  heartbeat_at BIGINT       NOT NULL,
  alive_until  BIGINT       NOT NULL
) ${TABLE_OPTIONS}`,
    ],
  },
  {
    // Recurring schedules: a cron expression read in a time zone, and the message each tick
    // enqueues. next_at is the next tick to fire (NULL: none left); a scheduler fires it by moving
    // next_at on with a compare-and-set in the transaction that enqueues the tick's message.
    name: "outbox-017-schedules",
    statements: [
      `CREATE TABLE IF NOT EXISTS outbox_schedules (
  name         VARCHAR(200) NOT NULL PRIMARY KEY,
  cron         VARCHAR(200) NOT NULL,
  timezone     VARCHAR(100) NOT NULL,
  backfill_ms  BIGINT       NOT NULL,
  version      INT          NOT NULL DEFAULT 1,
  type         VARCHAR(200) NOT NULL,
  payload      LONGTEXT     NOT NULL,
  headers      MEDIUMTEXT,
  ordering_key VARCHAR(255),
  destination  VARCHAR(255),
  next_at      BIGINT,
  last_tick_at BIGINT,
  created_at   BIGINT       NOT NULL,
  updated_at   BIGINT       NOT NULL,
  KEY outbox_schedules_next (next_at)
) ${TABLE_OPTIONS}`,
    ],
  },
  {
    // Priorities: whole seconds of head start in the claim order. claim_at becomes a claimable row's
    // rank, the due time less the priority (a held lease's end as it is: the lease ends when it
    // ends); a row of priority 0 ranks at its due time, as before. As priority >= 0, every due row
    // ranks at or before now: claim_at is the index's range, and available_at filters out a
    // prioritised message not yet due. Changing a stored column's expression copies the table.
    name: "outbox-018-priority",
    statements: [
      `ALTER TABLE outbox_messages
  ADD COLUMN IF NOT EXISTS priority INT NOT NULL DEFAULT 0 CHECK (priority BETWEEN 0 AND 86400),
  MODIFY claim_at BIGINT AS (CASE WHEN status IN ('pending', 'processing') AND key_state = 0
                                  THEN available_at - CASE WHEN status = 'pending' THEN priority * 1000 ELSE 0 END END) STORED`,
      "ALTER TABLE outbox_schedules ADD COLUMN IF NOT EXISTS priority INT NOT NULL DEFAULT 0 CHECK (priority BETWEEN 0 AND 86400)",
    ],
  },
  {
    // Singletons: at most one message per type and singleton key that no worker has claimed yet
    // (pending with lease_token 0: a retried, released or redriven message has been claimed, so it
    // leaves the index and a newer one may wait). MariaDB has no partial indexes: the stored
    // column waiting_singleton is the key while the message waits unclaimed, else NULL, and a
    // unique index on it allows any number of NULLs.
    name: "outbox-019-singletons",
    statements: [
      `ALTER TABLE outbox_messages
  ADD COLUMN IF NOT EXISTS singleton_key VARCHAR(255),
  ADD COLUMN IF NOT EXISTS waiting_singleton VARCHAR(255) AS (CASE WHEN status = 'pending' AND lease_token = 0 THEN singleton_key END) STORED,
  ADD UNIQUE KEY IF NOT EXISTS outbox_messages_singleton (type, waiting_singleton)`,
      // A row per type and singleton key ever used: its row lock is the singleton's turn
      // (lockSingleton), so that enqueues of one singleton run one at a time. Without it, three
      // inserts of a new singleton at once deadlock on the unique index (each waiting one holds a
      // shared lock on the first one's row, then asks for an exclusive one).
      `CREATE TABLE IF NOT EXISTS outbox_singleton_turns (
  type          VARCHAR(200) NOT NULL,
  singleton_key VARCHAR(255) NOT NULL,
  PRIMARY KEY (type, singleton_key)
) ${TABLE_OPTIONS}`,
    ],
  },
  {
    // Flow control across processes: a type's concurrency limit (leases held at once) and rate
    // limit (claims in any rate_interval_ms). A claim of a limited type locks the type's row, and
    // records each lease it takes in outbox_limit_starts; a lease counts as running while its
    // message is processing under that token with the lease unexpired, and as a start while
    // inside the rate window. Rows that count for neither are deleted by the type's next claim.
    name: "outbox-020-limits",
    statements: [
      `CREATE TABLE IF NOT EXISTS outbox_limits (
  type             VARCHAR(200) NOT NULL PRIMARY KEY,
  concurrency      INT          CHECK (concurrency >= 1),
  rate_count       INT          CHECK (rate_count >= 1),
  rate_interval_ms BIGINT       CHECK (rate_interval_ms >= 1),
  created_at       BIGINT       NOT NULL,
  updated_at       BIGINT       NOT NULL,
  CHECK ((rate_count IS NULL) = (rate_interval_ms IS NULL)),
  CHECK (concurrency IS NOT NULL OR rate_count IS NOT NULL)
) ${TABLE_OPTIONS}`,
      `CREATE TABLE IF NOT EXISTS outbox_limit_starts (
  type        VARCHAR(200) NOT NULL,
  message_id  BIGINT       NOT NULL,
  lease_token INT          NOT NULL,
  started_at  BIGINT       NOT NULL,
  PRIMARY KEY (type, message_id, lease_token)
) ${TABLE_OPTIONS}`,
    ],
  },
  {
    // A cancelled message keeps its row (status 'cancelled', finished at processed_at), as a
    // processed one does, unless the store deletes finished rows. A column's CHECK goes with its
    // definition (DROP CONSTRAINT cannot reach it): the column is redefined, which is idempotent.
    name: "outbox-021-cancelled",
    statements: [
      "ALTER TABLE outbox_messages MODIFY status VARCHAR(10) NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'processing', 'processed', 'dead', 'cancelled'))",
    ],
  },
];

/** A recorded claim (`starts`, a row of outbox_limit_starts) whose lease is still held at the ? (now): its message processing under its token, the lease unexpired. */
function leaseHeld(starts: string): string {
  return `EXISTS (SELECT 1 FROM outbox_messages m WHERE m.id = ${starts}.message_id AND m.status = 'processing'
                         AND m.lease_token = ${starts}.lease_token AND m.locked_until > ?)`;
}

/**
 * A migration as a script for the mariadb client (wassal migrate --print-sql): each statement ends
 * with `;`, except a stored routine's, whose body holds `;` itself: it goes between DELIMITER lines.
 */
export function migrationScript(statements: readonly string[]): string {
  return statements.map((s) => (/^CREATE (FUNCTION|PROCEDURE)\b/.test(s) ? `DELIMITER //\n${s} //\nDELIMITER ;` : `${s};`)).join("\n");
}

/** What migrate.ts runs around the migrations: its lock, its bookkeeping table. */
export const MIGRATION_SQL = {
  /** ? the lock's name, ? seconds to wait: 1 when taken. Serialises migrations of one database across processes. */
  lock: "SELECT GET_LOCK(?, ?) AS locked",
  /** ? the lock's name. */
  unlock: "SELECT RELEASE_LOCK(?) AS released",
  /** Whether wassal_migrations exists in the connection's database. */
  recordedTable: `SELECT COUNT(*) AS n FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = 'wassal_migrations'`,
  recorded: "SELECT name FROM wassal_migrations",
  createTable: `CREATE TABLE IF NOT EXISTS wassal_migrations (
  name       VARCHAR(255) NOT NULL PRIMARY KEY,
  applied_at BIGINT       NOT NULL
) ${TABLE_OPTIONS}`,
  /** ? the migration's name. */
  record: `INSERT INTO wassal_migrations (name, applied_at) VALUES (?, ${NOW_MS})`,
} as const;

/** What each connection of the store's pool runs first: see connect.ts. */
export const SESSION_SQL = {
  /**
   * READ COMMITTED (each statement reads what committed before it, which FIFO per key relies on;
   * MariaDB's default REPEATABLE READ would read a key's queue from a snapshot older than the key's
   * turn, and take gap locks), UTC, and with `readOnly` read-only transactions: one statement.
   */
  setup: (readOnly: boolean): string =>
    `SET SESSION tx_isolation = 'READ-COMMITTED', SESSION time_zone = '+00:00'${readOnly ? ", SESSION tx_read_only = 1" : ""}`,
  /** What the session got: checked once when the store connects. */
  check: "SELECT @@SESSION.tx_isolation AS isolation, @@SESSION.tx_read_only AS read_only, @@SESSION.time_zone AS time_zone, VERSION() AS version",
} as const;

/**
 * The JSON columns as plain text: MariaDB marks a column checked by JSON_VALID as JSON, and a
 * client may then parse it (mysql2 does), which would lose the difference between the JSON text
 * "a" and the string a. CONVERT hands back the stored text as it is, in utf8mb4 whatever the
 * connection's character set.
 */
const HEADERS = "CONVERT(headers USING utf8mb4) AS headers";
const PAYLOAD = "CONVERT(payload USING utf8mb4) AS payload";
const COLUMNS = `id, type, dedupe_key, ordering_key, key_seq, ${HEADERS}, destination, priority, singleton_key, ${PAYLOAD}, status, created_at, available_at, locked_by, locked_until, lease_token, attempts, last_error, processed_at`;
/** The columns without payload and headers: a message's state, cheap to read whatever the payload's size. */
const STATE_COLUMNS =
  "id, type, dedupe_key, ordering_key, key_seq, destination, priority, singleton_key, status, created_at, available_at, locked_by, locked_until, lease_token, attempts, last_error, processed_at";
/** What a claim reads back: the columns a claim does not set itself (as on SQLite). */
const CLAIMED_COLUMNS = `id, type, dedupe_key, ordering_key, key_seq, ${HEADERS}, destination, priority, singleton_key, ${PAYLOAD}, created_at, lease_token, attempts, last_error`;
const AUDIT_COLUMNS = "message_id, lease_token, owner, action, at, previous_status, previous_owner, previous_locked_until, operation";

/**
 * What a redriven message's key_state becomes: a skipped one (2) rejoins its key's order, behind
 * the key's holder or an earlier skipped message redriven by the same statement (`targeted`), or
 * as the key's holder when there is neither. Both forms of an earlier redriven row are looked for
 * (as it was, and as this statement left it), whichever the subquery sees.
 */
const redrivenKeyState = (targeted: string) => `CASE WHEN m.key_state <> 2 THEN m.key_state
         WHEN EXISTS (SELECT 1 FROM outbox_messages k WHERE k.live_key = m.ordering_key AND k.id <> m.id AND k.key_state IN (0, 1))
           OR EXISTS (SELECT 1 FROM outbox_messages k WHERE k.live_key = m.ordering_key AND k.id < m.id
                      AND k.status = 'dead' AND k.key_state = 2 AND ${targeted}) THEN 1
         ELSE 0 END`;

/**
 * A redriven message's key_seq: a dead holder keeps its number; a skipped one that rejoins its key
 * as holder takes the key's next number, and one that waits gets its number when its turn comes.
 * Assigned before key_state: MariaDB's UPDATE assigns left to right, each seeing the earlier ones.
 */
const redrivenKeySeq = (targeted: string) => `CASE WHEN m.key_state <> 2 THEN m.key_seq
         WHEN (${redrivenKeyState(targeted)}) = 0 THEN ${nextSeqOf("m.ordering_key")}
         ELSE NULL END`;

/**
 * A value bound as a parameter, as text compared the way the tables compare it (utf8mb4, byte by
 * byte): a literal takes the connection's collation, which would not mix with the columns'.
 */
const BIN = (expr: string) => `CONVERT(${expr} USING utf8mb4) COLLATE utf8mb4_nopad_bin`;

/** A browse's filters, each given twice (null for none): status, type, ordering key, ids above, ids below. */
const PAGE_FILTER = `(? IS NULL OR status = ?) AND (? IS NULL OR type = ?) AND (? IS NULL OR ordering_key = ?)
      AND (? IS NULL OR id > ?) AND (? IS NULL OR id < ?)`;

/**
 * Several keys' turns taken without waiting, for a hand-on of more than one key (see handOn in
 * mariadb-outbox-store.ts). An app's transaction takes its keys' turns in the order it enqueues
 * them, so a hand-on that held one key's turn while it waited for another's could close a circle
 * with it (a deadlock, whose victim may be the app's transaction). InnoDB keeps a row lock until
 * the transaction ends, even after ROLLBACK TO SAVEPOINT or a failed statement, so turns taken
 * cannot be given back: when one is busy, the hand-on's whole transaction is rolled back, the
 * busy turns are waited for one at a time holding nothing (awaitTurn), and the transaction runs
 * again. Outside the statements object on purpose: other stores have no counterparts.
 */
export const TURNS_SQL = {
  /**
   * Params: keys (an array, expanded). The free turns among the keys' rows, row-locked until the
   * transaction ends; a row another transaction holds, or inserted and has not committed, is
   * passed over (SKIP LOCKED), as is a key that has no row.
   */
  takeFree: "SELECT ordering_key FROM outbox_keys WHERE ordering_key IN (?) FOR UPDATE SKIP LOCKED",

  /**
   * The turns of `count` keys takeFree passed over (params: the keys, sorted), as lockKeys takes
   * them (a key without a row gets one) but without waiting: a busy one fails the statement at
   * once with ER_LOCK_WAIT_TIMEOUT (1205).
   */
  takeRest: (count: number): string =>
    `SET STATEMENT innodb_lock_wait_timeout = 0 FOR INSERT INTO outbox_keys (ordering_key) VALUES ${Array.from({ length: count }, () => "(?)").join(", ")}
     ON DUPLICATE KEY UPDATE next_seq = next_seq`,

  /**
   * Params: key. Waits until the key's turn is free, outside any transaction (autocommit): the
   * statement is a transaction of its own that holds the turn only from when it is granted to its
   * end, so the waiter holds nothing while it waits and nothing after.
   */
  awaitTurn: "SELECT ordering_key FROM outbox_keys WHERE ordering_key = ? FOR UPDATE",
} as const;

export const SQL = {
  /**
   * Params: type, dedupe key, headers (JSON text or null), destination, payload (JSON text),
   * available at (ms, or null for now), now (ms, or null for the database's clock), ordering key.
   * A keyed message waits (key_state 1) when its key already has a holder or a queue; else it holds
   * its key, numbered as the key's next. The key's turn is taken first (lockKeys), so what the
   * EXISTS reads (READ COMMITTED: what committed before this statement) is the key as it is.
   */
  enqueue: `INSERT INTO outbox_messages (type, dedupe_key, headers, destination, payload, available_at, priority, created_at, ordering_key, key_state, key_seq)
      SELECT ?, ?, ?, ?, ?, COALESCE(?, w.now), ?, w.now, w.k, w.waits, CASE WHEN w.k IS NOT NULL AND NOT w.waits THEN ${nextSeqOf("w.k")} END
      FROM (SELECT c.now, g.k, g.k IS NOT NULL AND ${waitsBehind("g.k")} AS waits
            FROM (SELECT COALESCE(?, ${NOW_MS}) AS now) AS c, (SELECT ${BIN("?")} AS k) AS g) AS w
      RETURNING ${COLUMNS}`,

  /** Params: type, singleton key. Its turn: its row in outbox_singleton_turns, made when new, row-locked until the transaction ends. */
  lockSingleton: "INSERT INTO outbox_singleton_turns (type, singleton_key) VALUES (?, ?) ON DUPLICATE KEY UPDATE type = type",

  /** Params: type, singleton key. The message of that type and singleton key that waits unclaimed, if there is one, read without a lock (a join). */
  waitingSingleton: "SELECT id, ordering_key FROM outbox_messages WHERE type = ? AND waiting_singleton = ?",

  /** As waitingSingleton, row-locked for the rest of the transaction (a claim waits, or skips it): a debounce rewrites it. */
  lockWaitingSingleton: "SELECT id, ordering_key FROM outbox_messages WHERE type = ? AND waiting_singleton = ? FOR UPDATE",

  // enqueueSingletonFirst: (none) the singleton's turn (lockSingleton) keeps other enqueues of it out: a read, then an update or an insert

  /** Params: payload, headers, destination, priority, now (ms or null), debounce ms, id: a waiting singleton message debounced. */
  debounceSingleton: `UPDATE outbox_messages SET payload = ?, headers = ?, destination = ?, priority = ?, available_at = COALESCE(?, ${NOW_MS}) + ?
      WHERE id = ? AND waiting_singleton IS NOT NULL`,

  /**
   * As enqueue, for a message with a singleton key (its waiting one not found): params type,
   * headers, destination, payload, available at (ms or null), debounce ms (0 for none), priority,
   * singleton key, now (ms or null), key. A message written at the same moment by another
   * transaction makes it fail on outbox_messages_singleton (1062): the store looks again.
   */
  enqueueSingleton: `INSERT INTO outbox_messages (type, headers, destination, payload, available_at, priority, singleton_key, created_at, ordering_key, key_state, key_seq)
      SELECT ?, ?, ?, ?, COALESCE(?, w.now) + ?, ?, ?, w.now, w.k, w.waits, CASE WHEN w.k IS NOT NULL AND NOT w.waits THEN ${nextSeqOf("w.k")} END
      FROM (SELECT c.now, g.k, g.k IS NOT NULL AND ${waitsBehind("g.k")} AS waits
            FROM (SELECT COALESCE(?, ${NOW_MS}) AS now) AS c, (SELECT ${BIN("?")} AS k) AS g) AS w
      RETURNING ${COLUMNS}`,

  // enqueueForeign: (none) enqueue's `?` placeholders are what another library's raw SQL on MariaDB takes: the same statement runs

  /**
   * Params: now (ms or null), then a JSON array with one array per message: [type, dedupe key,
   * key, headers (JSON text or null), destination, payload (JSON text), available at (ms or
   * null), waits behind an earlier message of the list with its key (0 or 1), priority]. One statement, in
   * list order (JSON_TABLE's ordinality), so the ids ascend in that order. Statement-atomic: a
   * refused row leaves none.
   */
  enqueueMany: `INSERT INTO outbox_messages (type, dedupe_key, ordering_key, headers, destination, payload, created_at, available_at, priority, key_state, key_seq)
      SELECT g.type, g.dedupe_key, g.k, g.headers, g.destination, g.payload, g.now, COALESCE(g.available_at, g.now), g.priority, g.waits,
             CASE WHEN g.k IS NOT NULL AND NOT g.waits THEN ${nextSeqOf("g.k")} END
      FROM (SELECT j.n, j.type, j.dedupe_key, j.k, j.headers, j.destination, j.payload, j.available_at, j.priority, c.now,
                   j.k IS NOT NULL AND (j.listed = 1 OR ${waitsBehind("j.k")}) AS waits
            FROM (SELECT COALESCE(?, ${NOW_MS}) AS now) AS c,
                 JSON_TABLE(?, '$[*]' COLUMNS (
                   n            FOR ORDINALITY,
                   type         VARCHAR(200) CHARACTER SET utf8mb4 PATH '$[0]',
                   dedupe_key   TEXT CHARACTER SET utf8mb4 PATH '$[1]',
                   k            VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin PATH '$[2]',
                   headers      MEDIUMTEXT CHARACTER SET utf8mb4 PATH '$[3]',
                   destination  VARCHAR(255) CHARACTER SET utf8mb4 PATH '$[4]',
                   payload      LONGTEXT CHARACTER SET utf8mb4 PATH '$[5]',
                   available_at BIGINT PATH '$[6]',
                   listed       INT PATH '$[7]',
                   priority     INT PATH '$[8]')) AS j) AS g
      ORDER BY g.n
      RETURNING ${COLUMNS}`,

  /**
   * Which of the dedupe keys in ? (a JSON array) is taken: after enqueueMany was refused for one,
   * since MariaDB's error names the key's hash, not the key. Read through the caller's transaction,
   * still open (MariaDB undoes the refused statement alone), so it sees the transaction's own rows.
   */
  takenDedupeKey: `SELECT m.dedupe_key FROM outbox_messages m
      WHERE m.dedupe_hash IN (SELECT UNHEX(SHA2(j.k, 256)) FROM JSON_TABLE(?, '$[*]' COLUMNS (k TEXT CHARACTER SET utf8mb4 PATH '$')) AS j)
      LIMIT 1`,

  // newestId: (none) MariaDB has no cross-process wake-ups: other processes' workers find new messages by polling
  // dataVersion: (none) as newestId
  // listen: (none) MariaDB has no LISTEN/NOTIFY: onNewMessages wakes only this process's listeners

  installed: `SELECT COUNT(*) AS n FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = 'outbox_messages'`,

  // tableBytes: (none) statements are not prepared on the server, so no kept plan can outlive the table's growth

  /**
   * Params: now, now, limit. Candidates, first in the claim order (claim_at, outbox-018), row-locked (SKIP LOCKED passes over rows
   * another claimer or completer holds) until the claim's transaction ends: the claimable index's
   * range. Their state before the claim, for the audit trail and the lease's reclaimedFrom.
   */
  claimCandidates: `SELECT id, status, locked_by, locked_until FROM outbox_messages
      WHERE claim_at <= ? AND available_at <= ? ORDER BY claim_at, id LIMIT ? FOR UPDATE SKIP LOCKED`,

  /** As claimCandidates, of the types in ? (an array, expanded) only: params now, now, types, limit. */
  claimCandidatesOfTypes: `SELECT id, status, locked_by, locked_until FROM outbox_messages
      WHERE claim_at <= ? AND available_at <= ? AND type IN (?) ORDER BY claim_at, id LIMIT ? FOR UPDATE SKIP LOCKED`,

  /** As claimCandidates, of every type but those in ? (an array, expanded): the claim of the unlimited types when some are limited. Params now, now, types, limit. */
  claimCandidatesExceptTypes: `SELECT id, status, locked_by, locked_until FROM outbox_messages
      WHERE claim_at <= ? AND available_at <= ? AND type NOT IN (?) ORDER BY claim_at, id LIMIT ? FOR UPDATE SKIP LOCKED`,

  /**
   * Params: owner, lease end, lease end, ids (an array, expanded), now. The claim of the candidates
   * just locked; re-checks claimability. MariaDB has no UPDATE … RETURNING: claimedRows reads them back.
   */
  claim: `UPDATE outbox_messages
      SET status = 'processing', locked_by = ?, locked_until = ?, available_at = ?, lease_token = lease_token + 1, attempts = attempts + 1
      WHERE id IN (?) AND status IN ('pending', 'processing') AND key_state = 0 AND available_at <= ?`,

  // claimOfTypes: (none) claimCandidatesOfTypes picks the candidates of some types; the one claim statement then takes them
  // claimLarge: (none) one claim statement takes any number of candidates; PostgreSQL switches plans past a limit
  // claimLargeOfTypes: (none) as claimLarge
  // claimExceptTypes: (none) claimCandidatesExceptTypes picks the candidates of the unlimited types; the one claim statement then takes them
  // claimLargeExceptTypes: (none) as claimLarge
  // claimOfLimit: (none) statements are not prepared on the server: a bound limit keeps no plan

  /** Params: ids (an array, expanded). What the claim wrote, read back in its transaction (its rows still locked). */
  claimedRows: `SELECT ${CLAIMED_COLUMNS} FROM outbox_messages WHERE id IN (?)`,

  /** Params: id. The message's holder, row-locked for the rest of the transaction (claimMessage). */
  lockHolder: "SELECT status, locked_by, locked_until, lease_token, key_state FROM outbox_messages WHERE id = ? FOR UPDATE",

  /** Params: owner, lease end, lease end, id, now. The conditional claim: re-checks claimability. */
  claimMessage: `UPDATE outbox_messages
      SET status = 'processing', locked_by = ?, locked_until = ?, available_at = ?, lease_token = lease_token + 1, attempts = attempts + 1
      WHERE id = ? AND status IN ('pending', 'processing') AND key_state = 0 AND available_at <= ?`,

  /** Params: id. */
  holder: "SELECT status, locked_by, locked_until, lease_token, key_state FROM outbox_messages WHERE id = ?",

  // holderRefused: (none) the store reads the holder and writes the audit row with two statements in one transaction

  /**
   * Another library's transaction, before an enqueue through it: whether a transaction is open
   * (outside one, the insert would commit alone) and at which isolation level (a keyed message
   * needs READ COMMITTED, as on PostgreSQL).
   */
  foreignGuard: "SELECT @@in_transaction AS open, @@tx_isolation AS isolation",

  // foreignGuardRelease: (none) foreignGuard only reads: there is no savepoint to release

  /** Params: one ordering key. Its turn, as lockKeys takes it, for another library's raw SQL. */
  lockKey: "INSERT INTO outbox_keys (ordering_key) VALUES (?) ON DUPLICATE KEY UPDATE next_seq = next_seq",

  /**
   * The turns of `count` keys (params: the keys, sorted, so two transactions never wait for each
   * other in a circle): each key's row in outbox_keys, made when new, row-locked until the
   * transaction ends. One transaction at a time per key, for enqueues, hand-ons, skips and
   * redrives; without it a message enqueued while its key's holder completes could commit as
   * waiting after the completion looked for whom to promote, and wait forever.
   */
  lockKeys: (count: number): string =>
    `INSERT INTO outbox_keys (ordering_key) VALUES ${Array.from({ length: count }, () => "(?)").join(", ")} ON DUPLICATE KEY UPDATE next_seq = next_seq`,

  /**
   * Params: next number (or null: the key's remembered one), key, key, key. Hands a key on (its
   * turn taken): its earliest waiting message takes it over, if the key has no holder (so it is
   * safe after any change: it settles).
   */
  handOn: `UPDATE outbox_messages
      SET key_seq = COALESCE(?, ${nextSeqOf("?")}), key_state = 0
      WHERE id = (SELECT w.id FROM outbox_messages w WHERE w.live_key = ? AND w.key_state = 1 ORDER BY w.id LIMIT 1)
        AND NOT EXISTS (SELECT 1 FROM outbox_messages h WHERE h.live_key = ? AND h.key_state = 0)`,

  /**
   * Params: next number, key, key. After a hand-on that found nobody waiting: the key remembers
   * the number its next holder takes, for its next enqueue; unless it still has a holder or a queue.
   * (The key's row exists: lockKeys made it.)
   */
  rememberKeySeq: `UPDATE outbox_keys SET next_seq = ? WHERE ordering_key = ? AND NOT ${waitsBehind("?")}`,

  // rememberKeySeqs: (none) rememberKeySeq runs once per key, in the transaction that holds the keys' turns

  /** Params: lease end, lease end, id, token, now. Extends a lease still held: an expired one stays expired. */
  renew: `UPDATE outbox_messages SET locked_until = ?, available_at = ?
      WHERE id = ? AND lease_token = ? AND status = 'processing' AND locked_until > ?`,

  /** Params: now, id, token. Row-locks the message until the transaction ends. */
  complete: `UPDATE outbox_messages SET status = 'processed', processed_at = ?, locked_until = NULL, last_error = NULL
      WHERE id = ? AND lease_token = ? AND status = 'processing'`,

  /** Params: id, token. As complete, the row deleted (onComplete "delete"). */
  completeDelete: `DELETE FROM outbox_messages WHERE id = ? AND lease_token = ? AND status = 'processing'`,

  /**
   * Params: ids (an array, expanded). A group's rows that are processing, row-locked, with their
   * tokens: the leases among them whose token is current are the ones completeBulk completes (and
   * knows it did: MariaDB has no UPDATE … RETURNING).
   */
  completeBulkLock: `SELECT id, lease_token FROM outbox_messages WHERE id IN (?) AND status = 'processing' FOR UPDATE`,

  /** Params: now, ids (an array, expanded): the group's current leases, locked by completeBulkLock. */
  completeBulk: `UPDATE outbox_messages SET status = 'processed', processed_at = ?, locked_until = NULL, last_error = NULL
      WHERE id IN (?) AND status = 'processing'`,

  /** Params: ids (an array, expanded). As completeBulk, the rows deleted (onComplete "delete"). */
  completeBulkDelete: `DELETE FROM outbox_messages WHERE id IN (?) AND status = 'processing'`,

  // completeBulkHandOn: (none) completeBulk is followed by handOn in the same transaction
  // completeBulkHandOnDelete: (none) as completeBulkHandOn
  // completeBulkAudited: (none) a refused lease's holder and 'refused' row are written by the store, in the completion's transaction
  // completeBulkDeleteAudited: (none) as completeBulkAudited
  // completeBulkHandOnAudited: (none) as completeBulkAudited
  // completeBulkHandOnDeleteAudited: (none) as completeBulkAudited

  /** Each completion of a group that carries a business write runs inside one of these. */
  savepoint: "SAVEPOINT wassal_completion",

  // completeInSavepoint: (none) mysql2 sends one statement per query (no multipleStatements): the savepoint is a statement of its own

  releaseSavepoint: "RELEASE SAVEPOINT wassal_completion",

  rollbackToSavepoint: "ROLLBACK TO SAVEPOINT wassal_completion",

  /** Params: available at, error, id, token. */
  failRetry: `UPDATE outbox_messages
      SET status = 'pending', available_at = ?, locked_by = NULL, locked_until = NULL, last_error = ?
      WHERE id = ? AND lease_token = ? AND status = 'processing'`,

  /** Params: error, now, id, token. */
  failDead: `UPDATE outbox_messages SET status = 'dead', locked_until = NULL, last_error = ?, available_at = ?
      WHERE id = ? AND lease_token = ? AND status = 'processing'`,

  /** Params: now, id, token. */
  release: `UPDATE outbox_messages
      SET status = 'pending', available_at = ?, locked_by = NULL, locked_until = NULL, attempts = GREATEST(attempts - 1, 0)
      WHERE id = ? AND lease_token = ? AND status = 'processing'`,

  /** Params: the rows, as an array of arrays in AUDIT_COLUMNS' order (mysql2 expands `VALUES ?`). */
  audit: `INSERT INTO outbox_audit (${AUDIT_COLUMNS}) VALUES ?`,

  auditTrail: `SELECT ${AUDIT_COLUMNS} FROM outbox_audit ORDER BY id`,

  /** Params: message id. One message's audit rows, oldest first. */
  auditTrailOf: `SELECT ${AUDIT_COLUMNS} FROM outbox_audit WHERE message_id = ? ORDER BY id`,

  /** Params: the injected time (ms) or null: the time a step uses, the database's when no clock is injected. */
  clockNow: `SELECT COALESCE(?, ${NOW_MS}) AS now`,

  getMessage: `SELECT ${COLUMNS} FROM outbox_messages WHERE id = ?`,

  getMessageState: `SELECT ${STATE_COLUMNS} FROM outbox_messages WHERE id = ?`,

  /** Params: characters to keep (null: all), the same again, id: the payload and headers as their stored JSON text. */
  getMessageText: `SELECT ${STATE_COLUMNS},
        COALESCE(LEFT(payload, ?), payload) AS payload_text, OCTET_LENGTH(payload) AS payload_bytes,
        COALESCE(LEFT(COALESCE(headers, '{}'), ?), COALESCE(headers, '{}')) AS headers_text, OCTET_LENGTH(COALESCE(headers, '{}')) AS headers_bytes
      FROM outbox_messages WHERE id = ?`,

  /** Params: limit. */
  listStatesAll: `SELECT ${STATE_COLUMNS} FROM outbox_messages ORDER BY id LIMIT ?`,

  /** Params: statuses (an array, expanded), limit. */
  listStatesByStatus: `SELECT ${STATE_COLUMNS} FROM outbox_messages WHERE status IN (?) ORDER BY id LIMIT ?`,

  listAll: `SELECT ${COLUMNS} FROM outbox_messages ORDER BY id LIMIT ?`,

  /** Params: status, status, type, type, key, key, above, above, below, below (each pair null for any), limit: one page of a browse, ids ascending. */
  pageAscending: `SELECT ${STATE_COLUMNS} FROM outbox_messages WHERE ${PAGE_FILTER} ORDER BY id LIMIT ?`,

  /** As pageAscending, ids descending (the newest first). */
  pageDescending: `SELECT ${STATE_COLUMNS} FROM outbox_messages WHERE ${PAGE_FILTER} ORDER BY id DESC LIMIT ?`,

  /**
   * Params: id (or null), text, text, limit: messages whose id, dedupe key (through its hash's
   * index) or ordering key is the text searched for.
   */
  findMessages: `SELECT ${COLUMNS} FROM outbox_messages WHERE id IN (
        SELECT id FROM outbox_messages WHERE id = ?
        UNION SELECT id FROM outbox_messages WHERE dedupe_hash = UNHEX(SHA2(?, 256))
        UNION SELECT id FROM outbox_messages WHERE ordering_key = ?)
      ORDER BY id LIMIT ?`,

  listByStatus: `SELECT ${COLUMNS} FROM outbox_messages WHERE status IN (?) ORDER BY id LIMIT ?`,

  countByStatus: "SELECT status, COUNT(*) AS n FROM outbox_messages GROUP BY status",

  /** Params: limit. Pending messages per type, the most numerous first. */
  pendingByType: "SELECT type, COUNT(*) AS n FROM outbox_messages WHERE status = 'pending' GROUP BY type ORDER BY n DESC, type LIMIT ?",

  /** Params: after, after (null: from the first key), limit. Each remembered key's next number, in key order. */
  keySequences: "SELECT ordering_key, next_seq FROM outbox_keys WHERE ? IS NULL OR ordering_key > ? ORDER BY ordering_key LIMIT ?",

  /** Sets `count` keys' next numbers (params: key, next number, …), never lowering one: a moved key goes on from its place. */
  carryKeySequences: (count: number) =>
    `INSERT INTO outbox_keys (ordering_key, next_seq) VALUES ${Array.from({ length: count }, () => "(?, ?)").join(", ")}
     ON DUPLICATE KEY UPDATE next_seq = GREATEST(next_seq, VALUES(next_seq))`,

  oldestPending: "SELECT MIN(created_at) AS oldest FROM outbox_messages WHERE status = 'pending'",

  /** Params: owner, kind, takes (JSON text or null), now, now, alive until. The owner's heartbeat (started_at kept). */
  heartbeat: `INSERT INTO outbox_owners (name, kind, takes, started_at, heartbeat_at, alive_until) VALUES (?, ?, ?, ?, ?, ?)
      ON DUPLICATE KEY UPDATE kind = VALUES(kind), takes = VALUES(takes), heartbeat_at = VALUES(heartbeat_at), alive_until = GREATEST(alive_until, VALUES(alive_until))`,

  /** Params: now. The owners whose heartbeat stopped, row-locked until the transaction ends. */
  deadOwners: "SELECT name FROM outbox_owners WHERE alive_until <= ? ORDER BY name FOR UPDATE",

  /** Params: owners (an array, expanded): their rows dropped. */
  deleteOwners: "DELETE FROM outbox_owners WHERE name IN (?)",

  /**
   * Params: now, now, owner, now: its unexpired leases expired now, as a lease that ran out
   * (claimable at once; the next claim gives a new token and counts an attempt, as for any expired
   * lease). One owner per statement, its affected rows the count (MariaDB's UPDATE returns no rows).
   */
  expireLeasesOf: `UPDATE outbox_messages SET locked_until = ?, available_at = ?
      WHERE status = 'processing' AND locked_by = ? AND locked_until > ?`,

  /** Params: owner. */
  signOff: "DELETE FROM outbox_owners WHERE name = ?",

  listOwners: "SELECT name AS owner, kind, takes, started_at, heartbeat_at, alive_until FROM outbox_owners ORDER BY name",

  /**
   * Params: name, cron, timezone, backfill ms, type, payload, headers, ordering key, destination,
   * next tick, now, now: a schedule upserted, its next tick kept unless its cron or timezone
   * changed (next_at is set first: MariaDB's assignments see the ones before them).
   */
  putSchedule: `INSERT INTO outbox_schedules (name, cron, timezone, backfill_ms, type, payload, headers, ordering_key, destination, priority, next_at, created_at, updated_at)
      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
      ON DUPLICATE KEY UPDATE
        next_at = IF(cron = VALUES(cron) AND timezone = VALUES(timezone), next_at, VALUES(next_at)),
        cron = VALUES(cron), timezone = VALUES(timezone), backfill_ms = VALUES(backfill_ms), type = VALUES(type),
        payload = VALUES(payload), headers = VALUES(headers), ordering_key = VALUES(ordering_key),
        destination = VALUES(destination), priority = VALUES(priority), updated_at = VALUES(updated_at), version = version + 1`,

  /** Params: name. */
  getSchedule: "SELECT * FROM outbox_schedules WHERE name = ?",

  /** Params: name. */
  removeSchedule: "DELETE FROM outbox_schedules WHERE name = ?",

  listSchedules: "SELECT * FROM outbox_schedules ORDER BY name",

  /** Params: type, concurrency, rate count, rate interval ms, now, now: a type's limit upserted. */
  putLimit: `INSERT INTO outbox_limits (type, concurrency, rate_count, rate_interval_ms, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)
      ON DUPLICATE KEY UPDATE concurrency = VALUES(concurrency), rate_count = VALUES(rate_count),
        rate_interval_ms = VALUES(rate_interval_ms), updated_at = VALUES(updated_at)`,
  /**
   * Params: now, type, now: the type's leases held that no limited claim recorded (taken before the
   * limit, or by a store that had not yet seen it), recorded as claimed at 0: they count as
   * running, never as starts. Read through the claimable index's range past now (claim_at).
   */
  seedLimitStarts: `INSERT IGNORE INTO outbox_limit_starts (type, message_id, lease_token, started_at)
      SELECT type, id, lease_token, 0 FROM outbox_messages WHERE claim_at > ? AND status = 'processing' AND type = ? AND locked_until > ?`,
  /** Params: type. When a limit is set: the claims recorded before it count no longer as starts (the rate counts from now), only as running while held. */
  resetLimitStarts: "UPDATE outbox_limit_starts SET started_at = 0 WHERE type = ?",
  /** Params: type. */
  removeLimit: "DELETE FROM outbox_limits WHERE type = ?",
  /** Params: type. */
  removeLimitStarts: "DELETE FROM outbox_limit_starts WHERE type = ?",
  listLimits: "SELECT * FROM outbox_limits ORDER BY type",
  /** Params: type: the type's limit (the row as putLimit wrote it). */
  limitOf: "SELECT * FROM outbox_limits WHERE type = ?",
  /** Params: type: the type's limit, its row locked until the limited claim's transaction ends (no row: no limit). */
  lockLimit: "SELECT * FROM outbox_limits WHERE type = ? FOR UPDATE",
  /** Params: type, window start, now: drops the type's recorded claims that count for neither limit. */
  pruneLimitStarts: `DELETE FROM outbox_limit_starts WHERE type = ? AND started_at <= ? AND NOT ${leaseHeld("outbox_limit_starts")}`,
  /** Params: now, window start, type: the type's leases still held, and its claims after the window's start. */
  limitUse: `SELECT COALESCE(SUM(${leaseHeld("st")}), 0) AS running, COALESCE(SUM(st.started_at > ?), 0) AS started
      FROM outbox_limit_starts st WHERE st.type = ?`,
  /** Params: type, claim time, leases (JSON: a list of [message id, lease token]): records a limited claim's leases. */
  addLimitStarts: `INSERT INTO outbox_limit_starts (type, message_id, lease_token, started_at)
      SELECT ?, l.id, l.token, ? FROM JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$[0]', token INT PATH '$[1]')) AS l`,

  /** Params: limit. */
  nextSchedules: "SELECT * FROM outbox_schedules WHERE next_at IS NOT NULL ORDER BY next_at, name LIMIT ?",

  /** Params: to, fired, from, name, version, from: the compare-and-set that fires (or skips) a schedule's tick, of its version. */
  advanceSchedule: "UPDATE outbox_schedules SET next_at = ?, last_tick_at = IF(?, ?, last_tick_at) WHERE name = ? AND version = ? AND next_at = ?",

  /** Params: now, now. */
  leasesByOwner: `SELECT locked_by AS owner, CAST(SUM(locked_until > ?) AS SIGNED) AS held, CAST(SUM(locked_until <= ?) AS SIGNED) AS expired
      FROM outbox_messages WHERE status = 'processing' GROUP BY locked_by ORDER BY locked_by`,

  /** Params: now. Audit rows for a redrive of every dead message, written before it (same transaction); owner "redrive" marks an operator's act. */
  auditRedriveAll: `INSERT INTO outbox_audit (message_id, lease_token, owner, action, at)
      SELECT id, lease_token, 'redrive', 'redrive', ? FROM outbox_messages WHERE status = 'dead'`,

  /** Params: now. A skipped message (key_state 2) comes back behind its key's holder if the key has one, else as its holder. */
  redriveAll: `UPDATE outbox_messages m
      SET m.key_seq = ${redrivenKeySeq("1")},
          m.key_state = ${redrivenKeyState("1")},
          m.status = 'pending', m.available_at = ?, m.attempts = 0, m.locked_by = NULL, m.locked_until = NULL
      WHERE m.status = 'dead'`,

  /** Params: now, ids (an array, expanded). */
  auditRedriveSome: `INSERT INTO outbox_audit (message_id, lease_token, owner, action, at)
      SELECT id, lease_token, 'redrive', 'redrive', ? FROM outbox_messages WHERE id IN (?) AND status = 'dead'`,

  /** Params: ids (an array, expanded): the dead messages among them, row-locked: the ones redriveSome moves. */
  lockDead: "SELECT id FROM outbox_messages WHERE id IN (?) AND status = 'dead' FOR UPDATE",

  /** Params: ids, ids (each an array, expanded), now, ids. */
  redriveSome: `UPDATE outbox_messages m
      SET m.key_seq = ${redrivenKeySeq("k.id IN (?)")},
          m.key_state = ${redrivenKeyState("k.id IN (?)")},
          m.status = 'pending', m.available_at = ?, m.attempts = 0, m.locked_by = NULL, m.locked_until = NULL
      WHERE m.id IN (?) AND m.status = 'dead'`,

  /**
   * Params: 1 for every dead message (else 0), ids (an array, expanded; [0] with 1): the keys of
   * the keyed dead messages among them, sorted, for lockKeys before a redrive decides whether each
   * rejoins its key as holder or behind one.
   */
  keysOfDead: `SELECT DISTINCT ordering_key FROM outbox_messages WHERE status = 'dead' AND ordering_key IS NOT NULL AND (? = 1 OR id IN (?)) ORDER BY 1`,

  /** Params: limit. Dead messages that hold their key (blocking the messages behind it), oldest death first, with how many wait. */
  blockedKeys: `SELECT m.ordering_key, m.id, m.type, m.last_error, m.available_at AS died_at,
             (SELECT COUNT(*) FROM outbox_messages w WHERE w.live_key = m.ordering_key AND w.key_state = 1) AS waiting
      FROM outbox_messages m
      WHERE m.status = 'dead' AND m.ordering_key IS NOT NULL AND m.key_state = 0
      ORDER BY m.available_at, m.id LIMIT ?`,

  /** Params: key. The dead message holding it, if any, and its number in its key's order. */
  deadHolder: "SELECT id, key_seq FROM outbox_messages WHERE live_key = ? AND key_state = 0 AND status = 'dead' ORDER BY id LIMIT 1",

  /**
   * Params: id (the dead holder deadHolder found, in the same transaction, after the key's turn:
   * nothing else changes a key's holder meanwhile). It stays dead and lets its key move on (key_state 2).
   */
  skipKeyHolder: "UPDATE outbox_messages SET key_state = 2 WHERE id = ? AND status = 'dead' AND key_state = 0",

  /** Params: id. The message's ordering key and key state, read without a lock (a message's key never changes), so a cancel can take the key's turn first. */
  cancelKey: "SELECT ordering_key, key_state FROM outbox_messages WHERE id = ?",

  /** Params: id. What a cancel reads, row-locked for the rest of its transaction (a claim waits, or skips it). */
  cancelTarget: "SELECT status, locked_by, locked_until, lease_token, key_state, type, ordering_key, key_seq FROM outbox_messages WHERE id = ? FOR UPDATE",

  /**
   * Params: owner, now, id, running (1 or 0). Cancels the message if it is pending, or (running)
   * processing: it becomes cancelled, finished now, locked_by naming the cancel. A running one's
   * lease ends here: its holder's every write is refused.
   */
  cancel: `UPDATE outbox_messages SET status = 'cancelled', locked_by = ?, locked_until = NULL, processed_at = ?
      WHERE id = ? AND (status = 'pending' OR (? = 1 AND status = 'processing'))`,
  /** Params: id, running (1 or 0). As cancel, the row deleted (onComplete "delete"). */
  cancelDelete: "DELETE FROM outbox_messages WHERE id = ? AND (status = 'pending' OR (? = 1 AND status = 'processing'))",

  /** Params: cutoff, batch size. One batch of retention: the oldest processed and cancelled rows first, by id. */
  purgeProcessed: "DELETE FROM outbox_messages WHERE status IN ('processed', 'cancelled') AND processed_at < ? ORDER BY id LIMIT ?",

  /**
   * Params: cutoff, batch size. Dead rows that died before the cutoff (a dead row's available_at
   * is when it died). A dead message that blocks its ordering key stays until redriven or skipped.
   */
  purgeDead: `DELETE FROM outbox_messages WHERE status = 'dead' AND available_at < ? AND (ordering_key IS NULL OR key_state <> 0)
      ORDER BY available_at, id LIMIT ?`,

  /** Params: cutoff, batch size. */
  purgeAudit: "DELETE FROM outbox_audit WHERE at < ? ORDER BY id LIMIT ?",

  /** Params: cutoff, batch size. */
  purgeInbox: "DELETE FROM wassal_inbox WHERE received_at < ? ORDER BY received_at LIMIT ?",

  /**
   * Params: source, id, now (or null). Records a received id; no row inserted when it was
   * recorded before (IGNORE: the columns hold any valid source and id, so only the duplicate is
   * ignored). A second receive waits for a concurrent first one to commit or roll back.
   */
  inboxRecord: `INSERT IGNORE INTO wassal_inbox (source, message_id, received_at) VALUES (?, ?, COALESCE(?, ${NOW_MS}))`,

  /**
   * Params: source, key. The key's turn at the inbox (its row locked until commit; made at 0 when
   * new) and its last applied number. The no-op update is what takes the lock when the row exists.
   */
  inboxKeyTurn: `INSERT INTO wassal_inbox_keys (source, ordering_key) VALUES (?, ?)
      ON DUPLICATE KEY UPDATE applied_seq = applied_seq
      RETURNING applied_seq`,

  /**
   * Params: seq, seq, seq, source, key. The key moves on; a number held back stays held only if a
   * gap remains before it. held_since first: MariaDB assigns left to right, each seeing the earlier ones.
   */
  inboxKeyApplied: `UPDATE wassal_inbox_keys
      SET held_since = CASE WHEN held_seq > ? + 1 THEN held_since END,
          held_seq = CASE WHEN held_seq > ? + 1 THEN held_seq END,
          applied_seq = ?
      WHERE source = ? AND ordering_key = ?`,

  /** Params: now (or null), seq, seq, source, key. A number held back: the lowest held, and since when. */
  inboxKeyHeld: `UPDATE wassal_inbox_keys
      SET held_since = COALESCE(held_since, ?, ${NOW_MS}), held_seq = LEAST(COALESCE(held_seq, ?), ?)
      WHERE source = ? AND ordering_key = ?`,

  /** Params: source (or null), source, limit. Keys holding a message back, longest waiting first. */
  inboxBlockedKeys: `SELECT source, ordering_key, applied_seq AS applied, held_seq AS held, held_since FROM wassal_inbox_keys
      WHERE held_seq IS NOT NULL AND (? IS NULL OR source = ?)
      ORDER BY held_since LIMIT ?`,

  /** Params: source, key. What a skip of the key's gap starts from, row-locked: its last applied and lowest held numbers. */
  inboxKeyHeldNow: `SELECT applied_seq, held_seq FROM wassal_inbox_keys WHERE source = ? AND ordering_key = ? AND held_seq IS NOT NULL FOR UPDATE`,

  /** Params: source, key. The key's applied number moves to just before its lowest held one (inboxKeyHeldNow read first). */
  inboxSkipGap: `UPDATE wassal_inbox_keys SET applied_seq = held_seq - 1, held_seq = NULL, held_since = NULL
      WHERE source = ? AND ordering_key = ? AND held_seq IS NOT NULL`,

  /** The database's tables of Wassal's, for describeSchema (a database may hold the app's tables too). */
  schemaTables: `SELECT table_name AS name FROM information_schema.tables
      WHERE table_schema = DATABASE() AND (table_name LIKE 'outbox\\_%' OR table_name LIKE 'wassal\\_%')
      ORDER BY table_name`,

  /** One table's DDL, as MariaDB writes it. */
  schema: (table: string): string => `SHOW CREATE TABLE ${quoteIdent(table)}`,

  // schemaName: (none) the tables are those of the connection's database, named without it
  // schemaColumns: (none) SHOW CREATE TABLE (schema) gives each table's DDL whole
  // schemaConstraints: (none) as schemaColumns
  // schemaIndexes: (none) as schemaColumns
} as const;

/** What claimedRows returns (CLAIMED_COLUMNS). */
export interface MariaDbClaimedRow {
  id: number | string;
  type: string;
  dedupe_key: string | null;
  ordering_key: string | null;
  key_seq: number | null;
  /** JSON text of the headers object, or null. */
  headers: string | null;
  destination: string | null;
  priority: number;
  singleton_key: string | null;
  payload: string;
  created_at: number;
  lease_token: number;
  attempts: number;
  last_error: string | null;
}
