// Every SQL statement of the SQLite driver, with the same names in the same order as the
// PostgreSQL driver's; where one side has no such statement, a one-line comment says why. Times are epoch
// milliseconds (UTC). Invariant kept by every statement here: a processing message's
// available_at equals its locked_until, so "claimable" is one indexed range:
// status IN ('pending','processing') AND available_at <= now, taken in the order of CLAIM_RANK below.

import type { Migration } from "./migrate.js";

/**
 * A claimable row's place in the claim order (outbox-018-priority): a pending message's due time
 * less its priority's head start, a held lease's end as it is. The claimable index is on this
 * expression, written the same way wherever it is used so that SQLite matches it to the index. As
 * priority >= 0, every due row ranks at or before now: `rank <= now` is the index's range, and
 * `available_at <= now` filters out a prioritised message not yet due.
 */
const CLAIM_RANK = "available_at - CASE WHEN status = 'pending' THEN priority * 1000 ELSE 0 END";

/** The singleton index's predicate (outbox-019): a message with a singleton key that no worker has claimed yet. The upsert names it as its conflict target. */
const SINGLETON_WAITING = "WHERE singleton_key IS NOT NULL AND status = 'pending' AND lease_token = 0";

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
  {
    name: "outbox-005-key-order",
    sql: `
-- FIFO per ordering key. key_state: 0 may be claimed (no key, or its key's holder), 1 waits behind
-- an earlier unfinished message of its key, 2 let its key go though dead (skipped). Only key_state 0
-- is in the claimable index, so a claim stays one index range.
ALTER TABLE outbox_messages ADD COLUMN key_state INTEGER NOT NULL DEFAULT 0 CHECK (key_state IN (0, 1, 2));
DROP INDEX outbox_messages_claimable;
CREATE INDEX outbox_messages_claimable ON outbox_messages (available_at, id) WHERE status IN ('pending', 'processing') AND key_state = 0;
-- A key's unfinished messages (and its dead ones), in order: who holds it, who is next.
CREATE INDEX outbox_messages_key ON outbox_messages (ordering_key, id) WHERE ordering_key IS NOT NULL AND status IN ('pending', 'processing', 'dead');
`,
  },
  {
    name: "outbox-006-hand-on",
    // PostgreSQL creates a function here; SQLite needs none: one writer at a time already keeps an
    // enqueue from racing the hand-on, which is the promoteNext statement below.
    sql: "-- (nothing on SQLite)",
  },
  {
    name: "outbox-007-hand-on-wakes",
    // PostgreSQL makes its hand-on notify listeners here; on SQLite other processes hear every
    // commit (commit-watch.ts) and look for a claimable message (newestId below).
    sql: "-- (nothing on SQLite)",
  },
  {
    name: "outbox-008-inbox",
    sql: `
-- The inbox: ids of messages a consumer received, recorded with its effect; a second receive of
-- one changes nothing. received_at orders retention.
CREATE TABLE wassal_inbox (
  source      TEXT    NOT NULL,
  message_id  TEXT    NOT NULL,
  received_at INTEGER NOT NULL,
  PRIMARY KEY (source, message_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX wassal_inbox_received ON wassal_inbox (received_at);
`,
  },
  {
    name: "outbox-010-audit-refused",
    // SQLite cannot change a CHECK constraint in place: the table is rebuilt, its rows and ids kept.
    sql: `
-- A refused write is recorded too: a lease operation whose token was no longer current (action
-- 'refused', the operation in its own column, the holder at that moment in the previous_* columns).
CREATE TABLE outbox_audit_next (
  id                    INTEGER PRIMARY KEY AUTOINCREMENT,
  message_id            INTEGER NOT NULL,
  lease_token           INTEGER NOT NULL,
  owner                 TEXT    NOT NULL,
  action                TEXT    NOT NULL CHECK (action IN ('claim', 'complete', 'retry', 'dead', 'release', 'redrive', 'refused')),
  at                    INTEGER NOT NULL,
  previous_status       TEXT,
  previous_owner        TEXT,
  previous_locked_until INTEGER,
  operation             TEXT    CHECK (operation IN ('renew', 'complete', 'fail', 'release'))
) STRICT;
INSERT INTO outbox_audit_next (id, message_id, lease_token, owner, action, at, previous_status, previous_owner, previous_locked_until)
  SELECT id, message_id, lease_token, owner, action, at, previous_status, previous_owner, previous_locked_until FROM outbox_audit;
-- Ids keep growing from where they were, even when the newest rows had been purged.
INSERT INTO sqlite_sequence (name, seq) SELECT 'outbox_audit_next', 0 WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'outbox_audit_next');
UPDATE sqlite_sequence SET seq = max(seq, coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'outbox_audit'), 0)) WHERE name = 'outbox_audit_next';
DROP TABLE outbox_audit;
ALTER TABLE outbox_audit_next RENAME TO outbox_audit;
CREATE INDEX outbox_audit_message ON outbox_audit (message_id, id);
`,
  },
  {
    name: "outbox-012-key-seq",
    sql: `
-- Each keyed message's place in its key's order (1, 2, 3…), given when it becomes its key's holder:
-- at enqueue when the key is free, else when the hand-on promotes it. A completed holder passes
-- its number + 1 on, a skipped one its own number, so the numbers a consumer sees have no gaps.
-- outbox_keys remembers the next number of a key whose queue emptied (rememberKeySeq), for the
-- key's next enqueue.
ALTER TABLE outbox_messages ADD COLUMN key_seq INTEGER;
-- The key index gains key_state, so that "has the key a holder" (handOn's NOT EXISTS) is the range
-- (key, 0) and "who is next" the first entry of (key, 1): on (ordering_key, id) the first read the
-- key's whole backlog, a row per entry, after every completion (5,089 VM steps for a backlog of 999
-- against 136 now; issue 36).
DROP INDEX outbox_messages_key;
CREATE INDEX outbox_messages_key ON outbox_messages (ordering_key, key_state, id)
  WHERE ordering_key IS NOT NULL AND status IN ('pending', 'processing', 'dead');
CREATE TABLE outbox_keys (
  ordering_key TEXT    PRIMARY KEY,
  next_seq     INTEGER NOT NULL CHECK (next_seq >= 1)
) STRICT, WITHOUT ROWID;
-- Today's holders are each key's first numbered message.
UPDATE outbox_messages SET key_seq = 1
  WHERE ordering_key IS NOT NULL AND key_state = 0 AND status IN ('pending', 'processing', 'dead');
`,
  },
  {
    name: "outbox-013-inbox-order",
    sql: `
-- The inbox in each key's order: per source and ordering key, the last number applied (a relay's
-- messages carry their number in their key's order), and the lowest later number held back while
-- an earlier one is missing, since when.
CREATE TABLE wassal_inbox_keys (
  source       TEXT    NOT NULL,
  ordering_key TEXT    NOT NULL,
  applied_seq  INTEGER NOT NULL DEFAULT 0 CHECK (applied_seq >= 0),
  held_seq     INTEGER CHECK (held_seq > applied_seq + 1),
  held_since   INTEGER,
  PRIMARY KEY (source, ordering_key)
) STRICT, WITHOUT ROWID;
CREATE INDEX wassal_inbox_keys_held ON wassal_inbox_keys (held_since) WHERE held_seq IS NOT NULL;
`,
  },
  {
    name: "outbox-015-owners",
    sql: `
-- Running workers and relays, each kept alive by its heartbeat: an owner whose alive_until passes
-- is dead, and a peer expires its leases at once instead of waiting for each lease to run out.
-- takes: the message types it claims (a JSON list), NULL for every type.
CREATE TABLE outbox_owners (
  name         TEXT    PRIMARY KEY,
  kind         TEXT    NOT NULL,
  takes        TEXT,
  started_at   INTEGER NOT NULL,
  heartbeat_at INTEGER NOT NULL,
  alive_until  INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
`,
  },
  {
    name: "outbox-017-schedules",
    sql: `
-- Recurring schedules: a cron expression read in a time zone, and the message each tick enqueues.
-- next_at is the next tick to fire (NULL: none left); a scheduler fires it by moving next_at on
-- with a compare-and-set in the transaction that enqueues the tick's message.
CREATE TABLE outbox_schedules (
  name         TEXT    PRIMARY KEY,
  cron         TEXT    NOT NULL,
  timezone     TEXT    NOT NULL,
  backfill_ms  INTEGER NOT NULL,
  version      INTEGER NOT NULL DEFAULT 1,
  type         TEXT    NOT NULL,
  payload      TEXT    NOT NULL,
  headers      TEXT,
  ordering_key TEXT,
  destination  TEXT,
  next_at      INTEGER,
  last_tick_at INTEGER,
  created_at   INTEGER NOT NULL,
  updated_at   INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE INDEX outbox_schedules_next ON outbox_schedules (next_at) WHERE next_at IS NOT NULL;
`,
  },
  {
    name: "outbox-018-priority",
    sql: `
-- Priorities: whole seconds of head start in the claim order. A claim takes due messages by their
-- rank, the due time less the priority (a held lease's end is its rank as it is: the lease ends when
-- it ends), so the claimable index is on the rank. A row of priority 0 ranks at its due time, as before.
ALTER TABLE outbox_messages ADD COLUMN priority INTEGER NOT NULL DEFAULT 0 CHECK (priority BETWEEN 0 AND 86400);
ALTER TABLE outbox_schedules ADD COLUMN priority INTEGER NOT NULL DEFAULT 0 CHECK (priority BETWEEN 0 AND 86400);
DROP INDEX outbox_messages_claimable;
CREATE INDEX outbox_messages_claimable ON outbox_messages (${CLAIM_RANK}, id) WHERE status IN ('pending', 'processing') AND key_state = 0;
`,
  },
  {
    name: "outbox-019-singletons",
    sql: `
-- Singletons: at most one message per type and singleton key that no worker has claimed yet
-- (pending with lease_token 0: a retried, released or redriven message has been claimed, so it
-- leaves the index and a newer one may wait). Rows without a singleton key are not in the index.
ALTER TABLE outbox_messages ADD COLUMN singleton_key TEXT;
CREATE UNIQUE INDEX outbox_messages_singleton ON outbox_messages (type, singleton_key) ${SINGLETON_WAITING};
`,
  },
  {
    name: "outbox-020-limits",
    sql: `
-- Flow control across processes: a type's concurrency limit (leases held at once) and rate limit
-- (claims in any rate_interval_ms). A claim of a limited type records each lease it takes in
-- outbox_limit_starts; a lease counts as running while its message is processing under that token
-- with the lease unexpired, and as a start while inside the rate window. Rows that count for
-- neither are deleted by the type's next claim.
CREATE TABLE outbox_limits (
  type             TEXT    PRIMARY KEY,
  concurrency      INTEGER CHECK (concurrency >= 1),
  rate_count       INTEGER CHECK (rate_count >= 1),
  rate_interval_ms INTEGER CHECK (rate_interval_ms >= 1),
  created_at       INTEGER NOT NULL,
  updated_at       INTEGER NOT NULL,
  CHECK ((rate_count IS NULL) = (rate_interval_ms IS NULL)),
  CHECK (concurrency IS NOT NULL OR rate_count IS NOT NULL)
) STRICT, WITHOUT ROWID;
CREATE TABLE outbox_limit_starts (
  type        TEXT    NOT NULL,
  message_id  INTEGER NOT NULL,
  lease_token INTEGER NOT NULL,
  started_at  INTEGER NOT NULL,
  PRIMARY KEY (type, message_id, lease_token)
) STRICT, WITHOUT ROWID;
`,
  },
  {
    name: "outbox-021-cancelled",
    // SQLite cannot change a CHECK constraint in place: the table is rebuilt with every column and
    // index it had after outbox-020, its rows and ids kept (a copy: about a second per million rows).
    // The old table is renamed away first, so the new one is created under its own name (a table
    // renamed into place would keep a quoted name in its schema).
    sql: `
-- A cancelled message keeps its row (status 'cancelled', finished at processed_at), as a processed
-- one does, unless the store deletes finished rows.
ALTER TABLE outbox_messages RENAME TO outbox_messages_old;
CREATE TABLE outbox_messages (
  id            INTEGER PRIMARY KEY AUTOINCREMENT,
  type          TEXT    NOT NULL,
  dedupe_key    TEXT    UNIQUE,
  payload       TEXT    NOT NULL CHECK (json_valid(payload)),
  status        TEXT    NOT NULL DEFAULT 'pending'
                        CHECK (status IN ('pending', 'processing', 'processed', 'dead', 'cancelled')),
  created_at    INTEGER NOT NULL,
  available_at  INTEGER NOT NULL,
  locked_by     TEXT,
  locked_until  INTEGER,
  lease_token   INTEGER NOT NULL DEFAULT 0,
  attempts      INTEGER NOT NULL DEFAULT 0,
  last_error    TEXT,
  processed_at  INTEGER,
  ordering_key  TEXT,
  headers       TEXT    CHECK (headers IS NULL OR json_type(headers) = 'object'),
  destination   TEXT,
  key_state     INTEGER NOT NULL DEFAULT 0 CHECK (key_state IN (0, 1, 2)),
  key_seq       INTEGER,
  priority      INTEGER NOT NULL DEFAULT 0 CHECK (priority BETWEEN 0 AND 86400),
  singleton_key TEXT,
  CHECK (status <> 'processing' OR (locked_by IS NOT NULL AND locked_until = available_at))
) STRICT;
INSERT INTO outbox_messages (id, type, dedupe_key, payload, status, created_at, available_at, locked_by, locked_until, lease_token,
                             attempts, last_error, processed_at, ordering_key, headers, destination, key_state, key_seq, priority, singleton_key)
  SELECT id, type, dedupe_key, payload, status, created_at, available_at, locked_by, locked_until, lease_token,
         attempts, last_error, processed_at, ordering_key, headers, destination, key_state, key_seq, priority, singleton_key
  FROM outbox_messages_old;
-- Ids keep growing from where they were, even when the newest rows had been deleted.
INSERT INTO sqlite_sequence (name, seq) SELECT 'outbox_messages', 0 WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'outbox_messages');
UPDATE sqlite_sequence SET seq = max(seq, coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'outbox_messages_old'), 0)) WHERE name = 'outbox_messages';
DELETE FROM sqlite_sequence WHERE name = 'outbox_messages_old';
-- Its indexes go with it, and are made again on the new table.
DROP TABLE outbox_messages_old;
CREATE INDEX outbox_messages_dead ON outbox_messages (available_at, id) WHERE status = 'dead';
CREATE INDEX outbox_messages_key ON outbox_messages (ordering_key, key_state, id)
  WHERE ordering_key IS NOT NULL AND status IN ('pending', 'processing', 'dead');
CREATE INDEX outbox_messages_claimable ON outbox_messages (${CLAIM_RANK}, id) WHERE status IN ('pending', 'processing') AND key_state = 0;
CREATE UNIQUE INDEX outbox_messages_singleton ON outbox_messages (type, singleton_key) ${SINGLETON_WAITING};
`,
  },
];

/** A recorded claim (outbox_limit_starts, as s) whose lease is still held: its message processing under its token, the lease unexpired at @now. */
const LEASE_HELD = `EXISTS (SELECT 1 FROM outbox_messages m WHERE m.id = s.message_id AND m.status = 'processing'
                                  AND m.lease_token = s.lease_token AND m.locked_until > @now)`;

/**
 * What a redriven message's key_state becomes: a skipped one (2) rejoins its key's order, behind
 * the key's holder or an earlier skipped message redriven by the same statement (`targeted`), or
 * as the key's holder when there is neither.
 */
const redrivenKeyState = (targeted: string) => `CASE WHEN key_state <> 2 THEN key_state
       WHEN EXISTS (SELECT 1 FROM outbox_messages k WHERE k.ordering_key = outbox_messages.ordering_key AND k.id <> outbox_messages.id
                    AND k.status IN ('pending', 'processing', 'dead') AND k.key_state IN (0, 1))
         OR EXISTS (SELECT 1 FROM outbox_messages k WHERE k.ordering_key = outbox_messages.ordering_key AND k.id < outbox_messages.id
                    AND k.status IN ('pending', 'processing', 'dead') AND k.status = 'dead' AND k.key_state = 2 AND ${targeted}) THEN 1
       ELSE 0 END`;

/** The number a key's next holder takes when the key is free: the one its last hand-on remembered, else 1. */
const nextSeqOf = (key: string) => `coalesce((SELECT n.next_seq FROM outbox_keys n WHERE n.ordering_key = ${key}), 1)`;

/**
 * A redriven message's key_seq: a dead holder keeps its number; a skipped one that rejoins its key
 * as holder takes the key's next number, and one that waits gets its number when its turn comes.
 */
const redrivenKeySeq = (targeted: string) => `CASE WHEN key_state <> 2 THEN key_seq
       WHEN (${redrivenKeyState(targeted)}) = 0 THEN ${nextSeqOf("outbox_messages.ordering_key")}
       ELSE NULL END`;

/** Whether a keyed message waits behind its key (a holder or a queue), as enqueue decides it. */
const waitsBehind = (key: string) => `EXISTS (SELECT 1 FROM outbox_messages k
                      WHERE k.ordering_key = ${key} AND k.status IN ('pending', 'processing', 'dead') AND k.key_state IN (0, 1))`;

const COLUMNS =
  "id, type, dedupe_key, ordering_key, key_seq, headers, destination, priority, singleton_key, payload, status, created_at, available_at, locked_by, locked_until, lease_token, attempts, last_error, processed_at";
/** The columns without payload and headers: a message's state, cheap to read whatever the payload's size. */
const STATE_COLUMNS =
  "id, type, dedupe_key, ordering_key, key_seq, destination, priority, singleton_key, status, created_at, available_at, locked_by, locked_until, lease_token, attempts, last_error, processed_at";
/**
 * What a claim reads back: the columns a claim does not set itself. The rest (status, owner, lease
 * end, processed_at) the claim has just written and the store already knows. Each RETURNING column
 * costs time per row: a one-off timing of this UPDATE over 100-row batches took 11.2 µs of CPU per
 * row returning all thirteen columns, 8.5 µs returning these, 5.0 µs returning the id alone.
 * ClaimedTuple names them in this order: the store reads them as arrays (raw mode).
 */
const CLAIMED_COLUMNS =
  "id, type, dedupe_key, ordering_key, key_seq, headers, destination, priority, singleton_key, payload, created_at, lease_token, attempts, last_error";

/** A browse's filters, each null for none: status, type, ordering key, and the id range of the keyset cursor. */
const PAGE_FILTER = `(@status IS NULL OR status = @status) AND (@type IS NULL OR type = @type) AND (@key IS NULL OR ordering_key = @key)
                     AND (@above IS NULL OR id > @above) AND (@below IS NULL OR id < @below)`;

/**
 * What claim and claimMessage return, read as an array in CLAIMED_COLUMNS' order (the store runs
 * them in raw mode: no object is built per row).
 */
export type ClaimedTuple = readonly [
  id: number,
  type: string,
  dedupeKey: string | null,
  orderingKey: string | null,
  keySeq: number | null,
  /** JSON text of the headers object, or null. */
  headers: string | null,
  destination: string | null,
  priority: number,
  singletonKey: string | null,
  payload: string,
  createdAt: number,
  leaseToken: number,
  attempts: number,
  lastError: string | null,
];

/** What the claimCandidates statements return, read as an array (raw mode), in their column order. */
export type CandidateTuple = readonly [id: number, status: string, lockedBy: string | null, lockedUntil: number | null];

export const SQL = {
  /**
   * A keyed message waits (key_state 1) when its key already has a holder or a queue; else it holds
   * its key, numbered as the key's next.
   */
  enqueue: `INSERT INTO outbox_messages (type, dedupe_key, ordering_key, headers, destination, payload, created_at, available_at, priority, key_state, key_seq)
            SELECT @type, @dedupeKey, @key, @headers, @destination, @payload, @now, @availableAt, @priority, w.waits,
                   CASE WHEN @key IS NOT NULL AND NOT w.waits THEN ${nextSeqOf("@key")} END
            FROM (SELECT @key IS NOT NULL AND ${waitsBehind("@key")} AS waits) AS w
            RETURNING ${COLUMNS}`,

  /**
   * As enqueue, with `?` placeholders in order, for another library's raw SQL inside its own
   * transaction: type, dedupe key, headers, destination, payload, now, available at, priority, key.
   */
  enqueueForeign: `INSERT INTO outbox_messages (type, dedupe_key, headers, destination, payload, created_at, available_at, priority, ordering_key, key_state, key_seq)
            SELECT ?, ?, ?, ?, ?, ?, ?, ?, w.k, w.waits, CASE WHEN w.k IS NOT NULL AND NOT w.waits THEN ${nextSeqOf("w.k")} END
            FROM (SELECT g.k, g.k IS NOT NULL AND ${waitsBehind("g.k")} AS waits FROM (SELECT ? AS k) AS g) AS w
            RETURNING ${COLUMNS}`,

  /**
   * A message with a singleton key, `?` placeholders (for this store and another library's raw SQL
   * alike): type, headers, destination, payload, now, available at, priority, singleton key, key,
   * then debounce five times (1: the waiting message takes this one's payload, headers,
   * destination, priority and due time; 0: it stays as it is). Inserted, or the message of its type and singleton key
   * that waits unclaimed returned instead (upsert on outbox_messages_singleton), if it has the same
   * ordering key: with another, no row comes back, and the store refuses the enqueue.
   */
  enqueueSingleton: `INSERT INTO outbox_messages (type, headers, destination, payload, created_at, available_at, priority, singleton_key, ordering_key, key_state, key_seq)
            SELECT ?, ?, ?, ?, ?, ?, ?, ?, w.k, w.waits, CASE WHEN w.k IS NOT NULL AND NOT w.waits THEN ${nextSeqOf("w.k")} END
            FROM (SELECT g.k, g.k IS NOT NULL AND ${waitsBehind("g.k")} AS waits FROM (SELECT ? AS k) AS g) AS w
            WHERE true
            ON CONFLICT (type, singleton_key) ${SINGLETON_WAITING}
            DO UPDATE SET payload = iif(?, excluded.payload, payload), headers = iif(?, excluded.headers, headers),
                          destination = iif(?, excluded.destination, destination), priority = iif(?, excluded.priority, priority),
                          available_at = iif(?, excluded.available_at, available_at)
            WHERE ordering_key IS excluded.ordering_key
            RETURNING ${COLUMNS}`,

  // lockSingleton: (none) BEGIN IMMEDIATE already serialises every writer: enqueueSingleton's upsert decides alone
  // waitingSingleton: (none) enqueueSingleton's upsert finds the waiting message itself (ON CONFLICT on the singleton index)
  // lockWaitingSingleton: (none) as waitingSingleton; SQLite locks the whole database for a writer anyway
  // enqueueSingletonFirst: (none) enqueueSingleton serves both: without a debounce its DO UPDATE writes nothing new (SQLite has no row locks to avoid)
  // debounceSingleton: (none) as waitingSingleton: the upsert's DO UPDATE debounces

  /**
   * Many messages in one statement, in list order (json_each's key: the array index), so ids
   * ascend in that order. `?` placeholders, so that another library's raw SQL can run it too: now,
   * now, then a JSON array with one array per message: [type, dedupe key, key, headers (JSON text),
   * destination, payload (JSON text), available at (epoch ms, or null for now), waits behind an
   * earlier message of the list with its key (0 or 1), priority]. Statement-atomic: a refused row leaves
   * none. Measured against a loop of the cached enqueue statement, 100 messages per transaction,
   * CPU time of the inserts alone (synchronous NORMAL, median of 5 runs of 300 transactions): 7.6
   * µs per message here, 13.0 for the loop, and 32 for the loop inside the savepoint it would need
   * to undo the list's earlier rows when a later one is refused.
   */
  enqueueMany: `INSERT INTO outbox_messages (type, dedupe_key, ordering_key, headers, destination, payload, created_at, available_at, priority, key_state, key_seq)
            SELECT g.v ->> 0, g.v ->> 1, g.k, g.v ->> 3, g.v ->> 4, g.v ->> 5, ?, coalesce(g.v ->> 6, ?), g.v ->> 8, g.waits,
                   CASE WHEN g.k IS NOT NULL AND NOT g.waits THEN ${nextSeqOf("g.k")} END
            FROM (SELECT m.key AS n, m.value AS v, m.value ->> 2 AS k,
                         m.value ->> 2 IS NOT NULL AND (m.value ->> 7 OR ${waitsBehind("m.value ->> 2")}) AS waits
                  FROM json_each(?) AS m) AS g
            ORDER BY g.n
            RETURNING ${COLUMNS}`,

  /** Which of the dedupe keys in ? (a JSON array) is taken: after enqueueMany was refused for one, since SQLite's error does not say. */
  takenDedupeKey: `SELECT dedupe_key FROM outbox_messages WHERE dedupe_key IN (SELECT value FROM json_each(?)) LIMIT 1`,

  /**
   * SQLite has no notifications between processes: in their place (listen on PostgreSQL) a store
   * watches the wake file and the -wal file (commit-watch.ts), and after another connection's
   * commit reads the newest id, through the primary key, to see whether it enqueued something,
   * and whether a message is claimable now, through the claimable index's first row (a
   * completion may have handed a key on).
   */
  // listen: (none) SQLite has no LISTEN: newestId, read after the wake file or the -wal file changes, stands in for it
  newestId: `SELECT max(id) AS newest,
                    EXISTS (SELECT 1 FROM outbox_messages WHERE status IN ('pending', 'processing') AND key_state = 0
                                   AND ${CLAIM_RANK} <= @now AND available_at <= @now) AS due
             FROM outbox_messages`,
  /** Changes whenever another connection commits (this connection's own commits leave it alone). */
  dataVersion: `PRAGMA data_version`,

  // installed: (none) isInstalled lists the file's tables (open-database's listTables)

  // tableBytes: (none) SQLite keeps no plan between statements' runs that a growing table could outdate

  /** Candidates, first in the claim order (CLAIM_RANK); read inside the claim's BEGIN IMMEDIATE, so nobody else can take them. */
  claimCandidates: `SELECT id, status, locked_by, locked_until FROM outbox_messages
                    WHERE status IN ('pending', 'processing') AND key_state = 0 AND ${CLAIM_RANK} <= @now AND available_at <= @now
                    ORDER BY ${CLAIM_RANK}, id LIMIT @limit`,

  /** As claimCandidates, of the types in @types (a JSON array) only: a worker claims the types it handles. */
  claimCandidatesOfTypes: `SELECT id, status, locked_by, locked_until FROM outbox_messages
                    WHERE status IN ('pending', 'processing') AND key_state = 0 AND ${CLAIM_RANK} <= @now AND available_at <= @now
                      AND type IN (SELECT value FROM json_each(@types))
                    ORDER BY ${CLAIM_RANK}, id LIMIT @limit`,

  /** As claimCandidates, of every type but those in @types (a JSON array): the claim of the unlimited types when some are limited. */
  claimCandidatesExceptTypes: `SELECT id, status, locked_by, locked_until FROM outbox_messages
                    WHERE status IN ('pending', 'processing') AND key_state = 0 AND ${CLAIM_RANK} <= @now AND available_at <= @now
                      AND type NOT IN (SELECT value FROM json_each(@types))
                    ORDER BY ${CLAIM_RANK}, id LIMIT @limit`,

  /** The claim of a whole batch of candidates (read just before, in the same transaction); re-checks claimability. */
  // claimOfTypes: (none) claimCandidatesOfTypes picks the candidates of some types; the one claim statement then takes them
  // claimLarge: (none) one claim statement takes any number of candidates (an id list in JSON); PostgreSQL switches plans past a limit
  // claimLargeOfTypes: (none) as claimLarge
  // claimExceptTypes: (none) claimCandidatesExceptTypes picks the candidates of the unlimited types; the one claim statement then takes them
  // claimLargeExceptTypes: (none) as claimLarge
  // claimOfLimit: (none) SQLite keeps no plan between runs to protect: a bound limit costs nothing
  claim: `UPDATE outbox_messages
              SET status = 'processing', locked_by = @owner, locked_until = @until, available_at = @until,
                  lease_token = lease_token + 1, attempts = attempts + 1
              WHERE id IN (SELECT value FROM json_each(@ids)) AND status IN ('pending', 'processing') AND key_state = 0 AND available_at <= @now
              RETURNING ${CLAIMED_COLUMNS}`,

  // claimedRows: (none) the claim's UPDATE … RETURNING hands the claimed rows back itself (MariaDB reads them back)
  // lockHolder: (none) the claim's BEGIN IMMEDIATE already keeps every other writer out

  /** The conditional claim: re-checks claimability, so it can never take a held message. */
  claimMessage: `UPDATE outbox_messages
             SET status = 'processing', locked_by = @owner, locked_until = @until, available_at = @until,
                 lease_token = lease_token + 1, attempts = attempts + 1
             WHERE id = @id AND status IN ('pending', 'processing') AND key_state = 0 AND available_at <= @now
             RETURNING ${CLAIMED_COLUMNS}`,

  // foreignGuard: (none) a foreign transaction on SQLite is a better-sqlite3 connection whose inTransaction the library checks itself
  // foreignGuardRelease: (none) as foreignGuard
  // lockKey: (none) BEGIN IMMEDIATE already serialises every writer; no key needs a lock of its own
  holder: `SELECT status, locked_by, locked_until, lease_token, key_state FROM outbox_messages WHERE id = @id`,

  // holderRefused: (none) the store reads the holder and writes the audit row with two statements inside its write lock

  // lockKeys: (none) BEGIN IMMEDIATE already serialises every writer, enqueues and completions alike

  /**
   * Hands a key on: its earliest waiting message takes it over, if the key has no holder (so it is
   * safe after any change: it settles). PostgreSQL: wassal_hand_on.
   */
  handOn: `UPDATE outbox_messages SET key_state = 0, key_seq = coalesce(@nextSeq, ${nextSeqOf("@key")})
                WHERE id = (SELECT id FROM outbox_messages
                            WHERE ordering_key = @key AND status IN ('pending', 'processing', 'dead') AND key_state = 1
                            ORDER BY id LIMIT 1)
                  AND NOT EXISTS (SELECT 1 FROM outbox_messages h
                                  WHERE h.ordering_key = @key AND h.status IN ('pending', 'processing', 'dead') AND h.key_state = 0)`,

  /**
   * After a hand-on that found nobody waiting: the key remembers the number its next holder takes
   * (@nextSeq), for its next enqueue; unless it still has a holder or a queue.
   */
  rememberKeySeq: `INSERT INTO outbox_keys (ordering_key, next_seq)
                   SELECT @key, @nextSeq WHERE NOT ${waitsBehind("@key")}
                   ON CONFLICT (ordering_key) DO UPDATE SET next_seq = excluded.next_seq`,

  /** rememberKeySeq for the keys of a group commit in one statement: @turns is a JSON array of [key, next number]. */
  rememberKeySeqs: `INSERT INTO outbox_keys (ordering_key, next_seq)
                    SELECT t.value ->> 0, t.value ->> 1 FROM json_each(@turns) AS t WHERE NOT ${waitsBehind("t.value ->> 0")}
                    ON CONFLICT (ordering_key) DO UPDATE SET next_seq = excluded.next_seq`,

  /** Extends a lease still held: an expired one stays expired (its holder may still finish with it until someone reclaims it). */
  renew: `UPDATE outbox_messages SET locked_until = @until, available_at = @until
          WHERE id = @id AND lease_token = @token AND status = 'processing' AND locked_until > @now
          RETURNING locked_until`,

  complete: `UPDATE outbox_messages
             SET status = 'processed', processed_at = @now, locked_until = NULL, last_error = NULL
             WHERE id = @id AND lease_token = @token AND status = 'processing'`,

  /** As complete, the row deleted (onComplete "delete"). */
  completeDelete: `DELETE FROM outbox_messages WHERE id = @id AND lease_token = @token AND status = 'processing'`,

  /**
   * The guarded update of many completions without business writes, in one statement: @pairs is a
   * JSON array of [id, token]. Returns the leases it completed; the others were lost.
   */
  // completeBulkHandOn: (none) completeBulk is followed by handOn in the same write-locked transaction, at no round-trip cost
  // completeBulkHandOnDelete: (none) as completeBulkHandOn
  // completeBulkAudited: (none) a refused lease's holder and 'refused' row are written by the store, in the completion's transaction
  // completeBulkDeleteAudited: (none) as completeBulkAudited
  // completeBulkHandOnAudited: (none) as completeBulkAudited
  // completeBulkHandOnDeleteAudited: (none) as completeBulkAudited
  // completeBulkLock: (none) completeBulk's RETURNING says which leases it completed (MariaDB locks and reads them first)
  completeBulk: `UPDATE outbox_messages
                 SET status = 'processed', processed_at = @now, locked_until = NULL, last_error = NULL
                 FROM (SELECT value ->> 0 AS id, value ->> 1 AS token FROM json_each(@pairs)) AS done
                 WHERE outbox_messages.id = done.id AND outbox_messages.lease_token = done.token
                   AND outbox_messages.status = 'processing'
                 RETURNING outbox_messages.id, outbox_messages.lease_token`,

  /** As completeBulk, the rows deleted (onComplete "delete"). */
  completeBulkDelete: `DELETE FROM outbox_messages
                       WHERE status = 'processing'
                         AND id IN (SELECT value ->> 0 FROM json_each(@pairs))
                         AND (id, lease_token) IN (SELECT value ->> 0, value ->> 1 FROM json_each(@pairs))
                       RETURNING id, lease_token`,

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

  audit: `INSERT INTO outbox_audit (message_id, lease_token, owner, action, at, previous_status, previous_owner, previous_locked_until, operation)
          VALUES (@id, @token, @owner, @action, @at, @previousStatus, @previousOwner, @previousLockedUntil, @operation)`,

  auditTrail: `SELECT message_id, lease_token, owner, action, at, previous_status, previous_owner, previous_locked_until, operation
               FROM outbox_audit ORDER BY id`,

  auditTrailOf: `SELECT message_id, lease_token, owner, action, at, previous_status, previous_owner, previous_locked_until, operation
                 FROM outbox_audit WHERE message_id = @id ORDER BY id`,

  // clockNow: (none) times come from the injected clock, read inside the write lock

  getMessage: `SELECT ${COLUMNS} FROM outbox_messages WHERE id = @id`,

  getMessageState: `SELECT ${STATE_COLUMNS} FROM outbox_messages WHERE id = @id`,

  /** @id, @max characters to keep (null: all): the payload and headers as their stored JSON text. */
  getMessageText: `SELECT ${STATE_COLUMNS},
                     CASE WHEN @max IS NULL THEN payload ELSE substr(payload, 1, @max) END AS payload_text, octet_length(payload) AS payload_bytes,
                     CASE WHEN @max IS NULL THEN coalesce(headers, '{}') ELSE substr(coalesce(headers, '{}'), 1, @max) END AS headers_text,
                     octet_length(coalesce(headers, '{}')) AS headers_bytes
                   FROM outbox_messages WHERE id = @id`,

  listStatesAll: `SELECT ${STATE_COLUMNS} FROM outbox_messages ORDER BY id LIMIT @limit`,

  listStatesByStatus: `SELECT ${STATE_COLUMNS} FROM outbox_messages WHERE status IN (SELECT value FROM json_each(@statuses)) ORDER BY id LIMIT @limit`,

  listAll: `SELECT ${COLUMNS} FROM outbox_messages ORDER BY id LIMIT @limit`,

  /** One page of a browse, ids ascending: each filter (@status, @type, @key, @above, @below) null for none. */
  pageAscending: `SELECT ${STATE_COLUMNS} FROM outbox_messages WHERE ${PAGE_FILTER} ORDER BY id LIMIT @limit`,

  /** As pageAscending, ids descending (the newest first). */
  pageDescending: `SELECT ${STATE_COLUMNS} FROM outbox_messages WHERE ${PAGE_FILTER} ORDER BY id DESC LIMIT @limit`,

  /** Messages whose id, dedupe key or ordering key is the text searched for (by the primary key, the dedupe key's index and, for unfinished messages, the key's). */
  findMessages: `SELECT ${COLUMNS} FROM outbox_messages WHERE id IN (
                   SELECT id FROM outbox_messages WHERE id = @id
                   UNION SELECT id FROM outbox_messages WHERE dedupe_key = @text
                   UNION SELECT id FROM outbox_messages WHERE ordering_key = @text)
                 ORDER BY id LIMIT @limit`,

  listByStatus: `SELECT ${COLUMNS} FROM outbox_messages WHERE status IN (SELECT value FROM json_each(@statuses)) ORDER BY id LIMIT @limit`,

  countByStatus: `SELECT status, count(*) AS n FROM outbox_messages GROUP BY status`,

  /** @limit: pending messages per type, the most numerous first. */
  pendingByType: `SELECT type, count(*) AS n FROM outbox_messages WHERE status = 'pending' GROUP BY type ORDER BY n DESC, type LIMIT @limit`,

  /** Each remembered key's next number, in key order, the keys after @after (null: from the first), at most @limit. */
  keySequences: `SELECT ordering_key AS key, next_seq AS nextSeq FROM outbox_keys
                 WHERE @after IS NULL OR ordering_key > @after ORDER BY ordering_key LIMIT @limit`,

  /** Sets keys' next numbers (@turns: a JSON array of [key, next number]), never lowering one: a moved key goes on from its place. */
  carryKeySequences: `INSERT INTO outbox_keys (ordering_key, next_seq)
                      SELECT t.value ->> 0, t.value ->> 1 FROM json_each(@turns) AS t WHERE true
                      ON CONFLICT (ordering_key) DO UPDATE SET next_seq = max(next_seq, excluded.next_seq)`,

  oldestPending: `SELECT min(created_at) AS oldest FROM outbox_messages WHERE status = 'pending'`,

  /** The owner's heartbeat (started_at kept; alive_until never shortened: see the PostgreSQL store's). */
  heartbeat: `INSERT INTO outbox_owners (name, kind, takes, started_at, heartbeat_at, alive_until)
              VALUES (@owner, @kind, @takes, @now, @now, @until)
              ON CONFLICT (name) DO UPDATE SET kind = excluded.kind, takes = excluded.takes,
                heartbeat_at = excluded.heartbeat_at, alive_until = max(outbox_owners.alive_until, excluded.alive_until)`,

  /** The owners whose heartbeat stopped. */
  deadOwners: `SELECT name FROM outbox_owners WHERE alive_until <= @now ORDER BY name`,

  /** @owners (a JSON list): their rows dropped. */
  deleteOwners: `DELETE FROM outbox_owners WHERE name IN (SELECT value FROM json_each(@owners))`,

  /**
   * @owners (a JSON list): their unexpired leases expired now, as a lease that ran out (claimable
   * at once; the next claim gives a new token and counts an attempt, as for any expired lease).
   */
  expireLeasesOf: `UPDATE outbox_messages SET locked_until = @now, available_at = @now
                   WHERE status = 'processing' AND locked_by IN (SELECT value FROM json_each(@owners)) AND locked_until > @now
                   RETURNING locked_by AS owner`,

  /** A schedule upserted: its next tick kept unless its cron or timezone changed. */
  putSchedule: `INSERT INTO outbox_schedules (name, cron, timezone, backfill_ms, type, payload, headers, ordering_key, destination, priority, next_at, created_at, updated_at)
                VALUES (@name, @cron, @timezone, @backfillMs, @type, @payload, @headers, @key, @destination, @priority, @nextAt, @now, @now)
                ON CONFLICT (name) DO UPDATE SET
                  next_at = CASE WHEN outbox_schedules.cron = excluded.cron AND outbox_schedules.timezone = excluded.timezone
                                 THEN outbox_schedules.next_at ELSE excluded.next_at END,
                  cron = excluded.cron, timezone = excluded.timezone, backfill_ms = excluded.backfill_ms, type = excluded.type,
                  payload = excluded.payload, headers = excluded.headers, ordering_key = excluded.ordering_key,
                  destination = excluded.destination, priority = excluded.priority, updated_at = excluded.updated_at, version = outbox_schedules.version + 1
                RETURNING *`,

  // getSchedule: (none) putSchedule returns the row it wrote (RETURNING)

  removeSchedule: `DELETE FROM outbox_schedules WHERE name = @name`,

  putLimit: `INSERT INTO outbox_limits (type, concurrency, rate_count, rate_interval_ms, created_at, updated_at)
             VALUES (@type, @concurrency, @rateCount, @rateIntervalMs, @now, @now)
             ON CONFLICT (type) DO UPDATE SET concurrency = excluded.concurrency, rate_count = excluded.rate_count,
               rate_interval_ms = excluded.rate_interval_ms, updated_at = excluded.updated_at
             RETURNING *`,
  /**
   * The type's leases held that no limited claim recorded (taken before the limit, or by a store
   * that had not yet seen it), recorded as claimed at 0: they count as running, never as starts.
   * Read through the claimable index's range past now (leases in flight, messages due later).
   */
  seedLimitStarts: `INSERT OR IGNORE INTO outbox_limit_starts (type, message_id, lease_token, started_at)
                    SELECT type, id, lease_token, 0 FROM outbox_messages
                    WHERE status IN ('pending', 'processing') AND key_state = 0 AND ${CLAIM_RANK} > @now
                      AND status = 'processing' AND type = @type AND locked_until > @now`,
  /** When a limit is set: the claims recorded before it count no longer as starts (the rate counts from now), only as running while held. */
  resetLimitStarts: `UPDATE outbox_limit_starts SET started_at = 0 WHERE type = @type`,
  removeLimit: `DELETE FROM outbox_limits WHERE type = @type`,
  removeLimitStarts: `DELETE FROM outbox_limit_starts WHERE type = @type`,
  listLimits: `SELECT * FROM outbox_limits ORDER BY type`,
  /** A type's limit, read inside the claim's BEGIN IMMEDIATE (no other writer counts or claims meanwhile). */
  // lockLimit: (none) the claim's BEGIN IMMEDIATE already keeps every other claimer out; limitOf reads the limit
  limitOf: `SELECT * FROM outbox_limits WHERE type = @type`,
  /** Drops a type's recorded claims that count for neither limit: lease no longer held, claimed at or before @windowStart. */
  pruneLimitStarts: `DELETE FROM outbox_limit_starts AS s WHERE type = @type AND started_at <= @windowStart AND NOT ${LEASE_HELD}`,
  /** A type's leases still held, and its claims after @windowStart. */
  limitUse: `SELECT coalesce(sum(${LEASE_HELD}), 0) AS running, coalesce(sum(started_at > @windowStart), 0) AS started
             FROM outbox_limit_starts AS s WHERE type = @type`,
  /** Records the claims a limited claim took: @leases is a JSON list of [message id, lease token]. */
  addLimitStarts: `INSERT INTO outbox_limit_starts (type, message_id, lease_token, started_at)
                   SELECT @type, value ->> 0, value ->> 1, @now FROM json_each(@leases)`,

  listSchedules: `SELECT * FROM outbox_schedules ORDER BY name`,

  nextSchedules: `SELECT * FROM outbox_schedules WHERE next_at IS NOT NULL ORDER BY next_at, name LIMIT @limit`,

  /** The compare-and-set that fires (or skips) a schedule's tick @from, of the schedule's @version. */
  advanceSchedule: `UPDATE outbox_schedules SET next_at = @to, last_tick_at = CASE WHEN @fired = 1 THEN @from ELSE last_tick_at END
                    WHERE name = @name AND version = @version AND next_at = @from`,

  signOff: `DELETE FROM outbox_owners WHERE name = @owner`,

  listOwners: `SELECT name AS owner, kind, takes, started_at, heartbeat_at, alive_until FROM outbox_owners ORDER BY name`,

  leasesByOwner: `SELECT locked_by AS owner, sum(locked_until > @now) AS held, sum(locked_until <= @now) AS expired
                  FROM outbox_messages WHERE status = 'processing' GROUP BY locked_by ORDER BY locked_by`,

  /** Audit rows for a redrive, written before it (same transaction); owner "redrive" marks an operator's act. */
  auditRedriveAll: `INSERT INTO outbox_audit (message_id, lease_token, owner, action, at)
                      SELECT id, lease_token, 'redrive', 'redrive', @now FROM outbox_messages WHERE status = 'dead'`,

  /** A skipped message (key_state 2) comes back behind its key's holder if the key has one, else as its holder. */
  redriveAll: `UPDATE outbox_messages SET status = 'pending', available_at = @now, attempts = 0, locked_by = NULL, locked_until = NULL,
                 key_state = ${redrivenKeyState("1")}, key_seq = ${redrivenKeySeq("1")}
               WHERE status = 'dead'`,

  auditRedriveSome: `INSERT INTO outbox_audit (message_id, lease_token, owner, action, at)
                      SELECT id, lease_token, 'redrive', 'redrive', @now FROM outbox_messages
                      WHERE id IN (SELECT value FROM json_each(@ids)) AND status = 'dead'`,

  redriveSome: `UPDATE outbox_messages SET status = 'pending', available_at = @now, attempts = 0, locked_by = NULL, locked_until = NULL,
                  key_state = ${redrivenKeyState("k.id IN (SELECT value FROM json_each(@ids))")},
                  key_seq = ${redrivenKeySeq("k.id IN (SELECT value FROM json_each(@ids))")}
                WHERE id IN (SELECT value FROM json_each(@ids)) AND status = 'dead' RETURNING id`,

  // keysOfDead: (none) BEGIN IMMEDIATE already keeps enqueues of the same keys out while a redrive decides
  // lockDead: (none) redriveSome's RETURNING says which messages moved (MariaDB locks and reads them first)

  /** Dead messages that hold their key (blocking the messages behind it), oldest death first, with how many wait. */
  blockedKeys: `SELECT m.ordering_key AS key, m.id, m.type, m.last_error, m.available_at AS died_at,
                       (SELECT count(*) FROM outbox_messages w
                        WHERE w.ordering_key = m.ordering_key AND w.status IN ('pending', 'processing', 'dead') AND w.key_state = 1) AS waiting
                FROM outbox_messages m
                WHERE m.status = 'dead' AND m.ordering_key IS NOT NULL AND m.key_state = 0
                ORDER BY m.available_at, m.id LIMIT @limit`,

  /** The dead message holding @key, if any (the status IN term lets the planner use outbox_messages_key). */
  deadHolder: `SELECT id FROM outbox_messages
               WHERE ordering_key = @key AND status IN ('pending', 'processing', 'dead') AND status = 'dead' AND key_state = 0
               ORDER BY id LIMIT 1`,

  /** Skips the dead message holding @key (only @id when given): it stays dead, and lets its key move on (key_state 2). */
  skipKeyHolder: `UPDATE outbox_messages SET key_state = 2
                  WHERE id = (SELECT id FROM outbox_messages
                              WHERE ordering_key = @key AND status IN ('pending', 'processing', 'dead') AND status = 'dead' AND key_state = 0
                              ORDER BY id LIMIT 1)
                    AND (@id IS NULL OR id = @id)
                  RETURNING id, key_seq`,

  // cancelKey: (none) BEGIN IMMEDIATE already serialises every writer: no key's turn to take before cancelTarget

  /** What a cancel reads first, inside its write lock: the message's holder, type, key and place in its key. */
  cancelTarget: `SELECT status, locked_by, locked_until, lease_token, key_state, type, ordering_key, key_seq FROM outbox_messages WHERE id = @id`,

  /**
   * Cancels the message if it is pending, or (@running = 1) processing: it becomes cancelled,
   * finished now, locked_by naming the cancel. A claim that won first left it processing: without
   * @running nothing changes. A running one's lease ends here: its holder's every write is refused.
   */
  cancel: `UPDATE outbox_messages SET status = 'cancelled', locked_by = @owner, locked_until = NULL, processed_at = @now
           WHERE id = @id AND (status = 'pending' OR (@running = 1 AND status = 'processing'))`,
  /** As cancel, the row deleted (onComplete "delete"). */
  cancelDelete: `DELETE FROM outbox_messages WHERE id = @id AND (status = 'pending' OR (@running = 1 AND status = 'processing'))`,

  /** One batch of retention: the oldest processed and cancelled rows first, by id, so the scan stops early. */
  purgeProcessed: `DELETE FROM outbox_messages WHERE id IN (
                     SELECT id FROM outbox_messages WHERE status IN ('processed', 'cancelled') AND processed_at < @before ORDER BY id LIMIT @limit)`,

  /**
   * One batch of dead rows that died before @before (a dead row's available_at is when it died), by
   * outbox_messages_dead. A dead message that blocks its ordering key stays until redriven or skipped.
   */
  purgeDead: `DELETE FROM outbox_messages WHERE id IN (
                SELECT id FROM outbox_messages WHERE status = 'dead' AND available_at < @before AND (ordering_key IS NULL OR key_state <> 0)
                ORDER BY available_at, id LIMIT @limit)`,

  /** One batch of audit rows written before @before, oldest first. */
  purgeAudit: `DELETE FROM outbox_audit WHERE id IN (SELECT id FROM outbox_audit WHERE at < @before ORDER BY id LIMIT @limit)`,

  /** One batch of inbox ids received before @before, oldest first. */
  purgeInbox: `DELETE FROM wassal_inbox WHERE (source, message_id) IN (
                 SELECT source, message_id FROM wassal_inbox WHERE received_at < @before ORDER BY received_at LIMIT @limit)`,

  /** Records a received id; changes nothing (0 rows) when it was recorded before. */
  inboxRecord: `INSERT INTO wassal_inbox (source, message_id, received_at) VALUES (@source, @id, @now) ON CONFLICT DO NOTHING`,

  /** The key's turn at the inbox (the write lock already serialises it; made at 0 when new): its last applied number. */
  inboxKeyTurn: `INSERT INTO wassal_inbox_keys (source, ordering_key) VALUES (@source, @key)
                 ON CONFLICT (source, ordering_key) DO UPDATE SET applied_seq = applied_seq
                 RETURNING applied_seq`,

  /** The key moves on to @seq; a number held back stays held only if a gap remains before it. */
  inboxKeyApplied: `UPDATE wassal_inbox_keys
                    SET applied_seq = @seq, held_seq = CASE WHEN held_seq > @seq + 1 THEN held_seq END,
                        held_since = CASE WHEN held_seq > @seq + 1 THEN held_since END
                    WHERE source = @source AND ordering_key = @key`,

  /** A number held back: the lowest held, and since when. */
  inboxKeyHeld: `UPDATE wassal_inbox_keys SET held_seq = min(coalesce(held_seq, @seq), @seq), held_since = coalesce(held_since, @now)
                 WHERE source = @source AND ordering_key = @key`,

  /** Keys holding a message back, longest waiting first (of @source, or all when null). */
  inboxBlockedKeys: `SELECT source, ordering_key AS key, applied_seq AS applied, held_seq AS held, held_since FROM wassal_inbox_keys
                     WHERE held_seq IS NOT NULL AND (@source IS NULL OR source = @source)
                     ORDER BY held_since LIMIT @limit`,

  /** What a skip of the key's gap starts from: its last applied number, when it holds a number back. */
  inboxKeyHeldNow: `SELECT applied_seq FROM wassal_inbox_keys WHERE source = @source AND ordering_key = @key AND held_seq IS NOT NULL`,

  /** The key's applied number moves to just before its lowest held one (inboxKeyHeldNow read first, in the same lock). */
  inboxSkipGap: `UPDATE wassal_inbox_keys SET applied_seq = held_seq - 1, held_seq = NULL, held_since = NULL
                 WHERE source = @source AND ordering_key = @key AND held_seq IS NOT NULL
                 RETURNING applied_seq`,

  schema: `SELECT sql FROM sqlite_schema WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' ORDER BY type = 'index', name`,

  // schemaTables: (none) the one `schema` statement reads every DDL text from sqlite_schema
  // schemaName: (none) SQLite has no schemas to name
  // schemaColumns: (none) as schemaTables: the DDL text is kept whole
  // schemaConstraints: (none) as schemaTables
  // schemaIndexes: (none) as schemaTables
} as const;
