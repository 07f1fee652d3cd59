// Every SQL statement of the PostgreSQL driver, with the same names in the same order as the
// SQLite driver's; where one side has no such statement, a one-line comment says why. `$now` is the
// clock: the injected clock's time when one is given (tests, the lab), else the database's
// clock_timestamp(), so skew between worker machines cannot break a lease. As on SQLite, a
// processing row's available_at equals its locked_until, so "claimable" is one indexed range.

export interface PgMigration {
  readonly name: string;
  readonly sql: string;
}

/** A schema name Wassal accepts: lower-case letters, digits and underscores (checkSchema also refuses PostgreSQL's own). */
export const SCHEMA_PATTERN = /^[a-z_][a-z0-9_]{0,62}$/;

/**
 * An identifier as SQL must name it: always double-quoted, so a reserved word ("select", "user",
 * "order") names a schema like any other word. Schema names are lower-case (SCHEMA_PATTERN), so
 * quoting names the very schema an unquoted name did.
 */
export function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

export function outboxMigrations(schema: string): readonly PgMigration[] {
  const s = quoteIdent(schema);
  return [
    {
      name: "outbox-001-create",
      sql: `
CREATE TABLE ${s}.outbox_messages (
  id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  type          text        NOT NULL,
  dedupe_key    text        UNIQUE,
  payload       jsonb       NOT NULL,
  status        text        NOT NULL DEFAULT 'pending'
                            CHECK (status IN ('pending', 'processing', 'processed', 'dead')),
  created_at    timestamptz NOT NULL,
  available_at  timestamptz NOT NULL,
  locked_by     text,
  locked_until  timestamptz,
  lease_token   integer     NOT NULL DEFAULT 0,
  attempts      integer     NOT NULL DEFAULT 0,
  last_error    text,
  processed_at  timestamptz,
  CONSTRAINT outbox_messages_processing_lease
    CHECK (status <> 'processing' OR (locked_by IS NOT NULL AND locked_until = available_at))
) WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.02);
-- Only claimable rows are indexed, so claiming does not slow down as processed history grows.
CREATE INDEX outbox_messages_claimable ON ${s}.outbox_messages (available_at, id)
  WHERE status IN ('pending', 'processing');
`,
    },
    {
      name: "outbox-002-audit",
      sql: `
-- The audit trail: written only by stores opened with audit enabled.
CREATE TABLE ${s}.outbox_audit (
  id                    bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  message_id            bigint      NOT NULL,
  lease_token           integer     NOT NULL,
  owner                 text        NOT NULL,
  action                text        NOT NULL CHECK (action IN ('claim', 'complete', 'retry', 'dead', 'release', 'redrive')),
  at                    timestamptz NOT NULL,
  previous_status       text,
  previous_owner        text,
  previous_locked_until timestamptz
);
CREATE INDEX outbox_audit_message ON ${s}.outbox_audit (message_id, id);
`,
    },
    {
      name: "outbox-003-dead-index",
      sql: `
-- Dead messages by when they died (a dead row's available_at), for listing them and for retention.
CREATE INDEX outbox_messages_dead ON ${s}.outbox_messages (available_at, id) WHERE status = 'dead';
`,
    },
    {
      name: "outbox-004-envelope",
      sql: `
-- The envelope: an ordering key, string headers (a JSON object) and a destination for a relay.
ALTER TABLE ${s}.outbox_messages
  ADD COLUMN ordering_key text,
  ADD COLUMN headers jsonb CHECK (headers IS NULL OR jsonb_typeof(headers) = 'object'),
  ADD COLUMN destination text;
`,
    },
    {
      name: "outbox-005-key-order",
      sql: `
-- FIFO per ordering key. key_state: 0 may be claimed (no key, or its key's holder), 1 waits behind
-- an earlier unfinished message of its key, 2 let its key go though dead (skipped). Only key_state 0
-- is in the claimable index, so a claim stays one index range.
ALTER TABLE ${s}.outbox_messages ADD COLUMN key_state smallint NOT NULL DEFAULT 0 CHECK (key_state IN (0, 1, 2));
DROP INDEX ${s}.outbox_messages_claimable;
CREATE INDEX outbox_messages_claimable ON ${s}.outbox_messages (available_at, id) WHERE status IN ('pending', 'processing') AND key_state = 0;
-- A key's unfinished messages (and its dead ones), in order: who holds it, who is next.
CREATE INDEX outbox_messages_key ON ${s}.outbox_messages (ordering_key, id)
  WHERE ordering_key IS NOT NULL AND status IN ('pending', 'processing', 'dead');
`,
    },
    {
      name: "outbox-006-hand-on",
      sql: `
-- Hands ordering keys on, their holders done: takes each key's turn (the advisory lock an enqueue
-- to the key takes, until commit), then promotes each key's earliest waiting message. A function,
-- so that the promotion reads with a snapshot taken after the locks (in READ COMMITTED each query
-- of a volatile function takes its own): an enqueue that committed while this waited for its
-- key is seen. Called from the completion statement itself, it costs no round trip of its own.
${handOnFunction(schema, "first")}`,
    },
    {
      name: "outbox-007-hand-on-wakes",
      sql: `
-- A hand-on that promotes a message also notifies the schema's channel, as an enqueue does, so
-- idle workers in other processes claim it at once instead of at their next poll. (PostgreSQL
-- delivers it at commit, once per transaction.)
${handOnFunction(schema, "wakes")}`,
    },
    {
      name: "outbox-008-inbox",
      sql: `
-- The inbox: ids of messages a consumer received, recorded with its effect; a second receive of
-- one changes nothing (and waits for a concurrent first one to commit or roll back).
CREATE TABLE ${s}.wassal_inbox (
  source      text        NOT NULL,
  message_id  text        NOT NULL,
  received_at timestamptz NOT NULL,
  PRIMARY KEY (source, message_id)
);
CREATE INDEX wassal_inbox_received ON ${s}.wassal_inbox (received_at);
`,
    },
    {
      name: "outbox-009-sql-enqueue",
      sql: `
-- enqueue() in SQL, for any client or language inside its own transaction (psql, a trigger, another
-- service): the same checks, key order and wake-up as the library's enqueue. Returns the id.
${enqueueFunction(schema, false)}`,
    },
    {
      name: "outbox-010-audit-refused",
      sql: `
-- A refused write is recorded too: a lease operation whose token was no longer current (action
-- 'refused', the operation in its own column, the holder at that moment in the previous_* columns).
ALTER TABLE ${s}.outbox_audit ADD COLUMN operation text CHECK (operation IN ('renew', 'complete', 'fail', 'release'));
-- NOT VALID: the rows there met the narrower check, so they meet this one; no scan under the lock.
ALTER TABLE ${s}.outbox_audit DROP CONSTRAINT outbox_audit_action_check;
ALTER TABLE ${s}.outbox_audit ADD CONSTRAINT outbox_audit_action_check
  CHECK (action IN ('claim', 'complete', 'retry', 'dead', 'release', 'redrive', 'refused')) NOT VALID;
`,
    },
    {
      name: "outbox-011-dedupe-partial",
      sql: `
-- Dedupe keys unique through a partial index: a message without one (most) has no entry in it. A
-- claim and a completion each change the row's status, which no update can do in place (HOT), so
-- each wrote a new entry for the row's NULL key into the full index: three per message with the
-- insert. Uniqueness is the same, as NULLs never conflicted. Built under the table's lock, once.
-- Measured, no-op batch 100, 1/2/4 processes, 3 interleaved rounds: CPU per message (workers +
-- server) 116/144/229 -> 109/139/189 us.
-- The strongest lock first: building the index takes SHARE, and the DROP then needs ACCESS
-- EXCLUSIVE; a worker's transaction that had read the table (claimMessage's SELECT … FOR UPDATE)
-- and then writes it would deadlock with the upgrade between the two. Taken first, the upgrade waits
-- for such a transaction to end, and the transactions that come after it wait for the upgrade.
LOCK TABLE ${s}.outbox_messages IN ACCESS EXCLUSIVE MODE;
CREATE UNIQUE INDEX outbox_messages_dedupe ON ${s}.outbox_messages (dedupe_key) WHERE dedupe_key IS NOT NULL;
ALTER TABLE ${s}.outbox_messages DROP CONSTRAINT outbox_messages_dedupe_key_key;
`,
    },
    {
      name: "outbox-012-key-seq",
      sql: `
-- Each keyed message's place in its key's order (1, 2, 3…), given when it becomes its key's holder:
-- at enqueue when the key is free, else when the hand-on promotes it. A completed holder passes
-- its number + 1 on, a skipped one its own number, so the numbers a consumer sees have no gaps.
-- outbox_keys remembers the next number of a key whose queue emptied (written by the hand-on only
-- then), for the key's next enqueue. The first statement takes the table's strongest lock at once,
-- so no lock is upgraded while workers run (see outbox-011).
ALTER TABLE ${s}.outbox_messages ADD COLUMN key_seq bigint;
-- The key index gains key_state, so that every keyed question is a probe of a few entries whatever
-- the statistics say: "has the key a holder" is the range (key, 0), "who is next" the first entry
-- of (key, 1), "has it a holder or a queue" (enqueue) the first of (key, 0) or (key, 1). On
-- (ordering_key, id) each read the key's whole backlog, a heap fetch per entry to see its
-- key_state: a relay with 30 keys read 55 to 3,000 rows per message (issue 36). Built under the
-- lock taken above, reading the table once.
DROP INDEX ${s}.outbox_messages_key;
CREATE INDEX outbox_messages_key ON ${s}.outbox_messages (ordering_key, key_state, id)
  WHERE ordering_key IS NOT NULL AND status IN ('pending', 'processing', 'dead');
CREATE TABLE ${s}.outbox_keys (
  ordering_key text   PRIMARY KEY,
  next_seq     bigint NOT NULL CHECK (next_seq >= 1)
);
-- Today's holders are each key's first numbered message.
UPDATE ${s}.outbox_messages SET key_seq = 1
  WHERE ordering_key IS NOT NULL AND key_state = 0 AND status IN ('pending', 'processing', 'dead');
DROP FUNCTION ${s}.wassal_hand_on(text[]);
${handOnFunction(schema, "numbered")}
${enqueueFunction(schema, true)}`,
    },
    {
      name: "outbox-013-inbox-order",
      sql: `
-- The inbox in each key's order: per source and ordering key, the last number applied (a relay's
-- messages carry their number in their key's order), and the lowest later number held back while
-- an earlier one is missing, since when.
CREATE TABLE ${s}.wassal_inbox_keys (
  source       text        NOT NULL,
  ordering_key text        NOT NULL,
  applied_seq  bigint      NOT NULL DEFAULT 0 CHECK (applied_seq >= 0),
  held_seq     bigint      CHECK (held_seq > applied_seq + 1),
  held_since   timestamptz,
  PRIMARY KEY (source, ordering_key)
);
CREATE INDEX wassal_inbox_keys_held ON ${s}.wassal_inbox_keys (held_since) WHERE held_seq IS NOT NULL;
`,
    },
    {
      name: "outbox-015-owners",
      sql: `
-- Running workers and relays, each kept alive by its heartbeat: an owner whose alive_until passes
-- is dead, and a peer expires its leases at once instead of waiting for each lease to run out.
-- takes: the message types it claims (a JSON list), NULL for every type.
CREATE TABLE ${s}.outbox_owners (
  name         text        PRIMARY KEY,
  kind         text        NOT NULL,
  takes        text,
  started_at   timestamptz NOT NULL,
  heartbeat_at timestamptz NOT NULL,
  alive_until  timestamptz NOT NULL
);
`,
    },
    {
      name: "outbox-016-turns-without-circles",
      sql: `
-- The hand-on takes its keys' turns without waiting for one while it holds another (see
-- wassal_hand_on's "turns" version): an app's transaction takes its keys' turns in the order it
-- enqueues, and a completion that held key a while waiting for b, against an app holding b and
-- waiting for a, was a deadlock that aborted one of them.
${handOnFunction(schema, "turns")}`,
    },
    {
      name: "outbox-017-schedules",
      sql: `
-- Recurring schedules: a cron expression read in a time zone, and the message each tick enqueues.
-- next_at is the next tick to fire (NULL: none left); a scheduler fires it by moving next_at on
-- with a compare-and-set in the transaction that enqueues the tick's message.
CREATE TABLE ${s}.outbox_schedules (
  name         text        PRIMARY KEY,
  cron         text        NOT NULL,
  timezone     text        NOT NULL,
  backfill_ms  bigint      NOT NULL,
  version      integer     NOT NULL DEFAULT 1,
  type         text        NOT NULL,
  payload      text        NOT NULL,
  headers      text,
  ordering_key text,
  destination  text,
  next_at      timestamptz,
  last_tick_at timestamptz,
  created_at   timestamptz NOT NULL,
  updated_at   timestamptz NOT NULL
);
CREATE INDEX outbox_schedules_next ON ${s}.outbox_schedules (next_at) WHERE next_at IS NOT NULL;
`,
    },
    {
      name: "outbox-018-priority",
      sql: `
-- Priorities: whole seconds of head start in the claim order. A claim takes due messages by their
-- rank, the due time less the priority (a held lease's end is its rank as it is: the lease ends when
-- it ends), so the claimable index is on the rank. A row of priority 0 ranks at its due time, as before.
ALTER TABLE ${s}.outbox_messages ADD COLUMN priority integer NOT NULL DEFAULT 0 CHECK (priority BETWEEN 0 AND 86400);
ALTER TABLE ${s}.outbox_schedules ADD COLUMN priority integer NOT NULL DEFAULT 0 CHECK (priority BETWEEN 0 AND 86400);
DROP INDEX ${s}.outbox_messages_claimable;
CREATE INDEX outbox_messages_claimable ON ${s}.outbox_messages ((${claimRank("")}), id) WHERE status IN ('pending', 'processing') AND key_state = 0;
`,
    },
    {
      name: "outbox-019-singletons",
      sql: `
-- Singletons: at most one message per type and singleton key that no worker has claimed yet
-- (pending with lease_token 0: a retried, released or redriven message has been claimed, so it
-- leaves the index and a newer one may wait). Rows without a singleton key are not in the index.
ALTER TABLE ${s}.outbox_messages ADD COLUMN singleton_key text;
CREATE UNIQUE INDEX outbox_messages_singleton ON ${s}.outbox_messages (type, singleton_key) ${SINGLETON_WAITING};
`,
    },
    {
      name: "outbox-020-limits",
      sql: `
-- Flow control across processes: a type's concurrency limit (leases held at once) and rate limit
-- (claims in any rate_interval_ms). A claim of a limited type locks the type's row, and records
-- each lease it takes in outbox_limit_starts; a lease counts as running while its message is
-- processing under that token with the lease unexpired, and as a start while inside the rate
-- window. Rows that count for neither are deleted by the type's next claim.
CREATE TABLE ${s}.outbox_limits (
  type             text        PRIMARY KEY,
  concurrency      integer     CHECK (concurrency >= 1),
  rate_count       integer     CHECK (rate_count >= 1),
  rate_interval_ms bigint      CHECK (rate_interval_ms >= 1),
  created_at       timestamptz NOT NULL,
  updated_at       timestamptz NOT NULL,
  CHECK ((rate_count IS NULL) = (rate_interval_ms IS NULL)),
  CHECK (concurrency IS NOT NULL OR rate_count IS NOT NULL)
);
CREATE TABLE ${s}.outbox_limit_starts (
  type        text        NOT NULL,
  message_id  bigint      NOT NULL,
  lease_token integer     NOT NULL,
  started_at  timestamptz NOT NULL,
  PRIMARY KEY (type, message_id, lease_token)
);
`,
    },
    {
      name: "outbox-021-cancelled",
      sql: `
-- A cancelled message keeps its row (status 'cancelled', finished at processed_at), as a processed
-- one does, unless the store deletes finished rows.
ALTER TABLE ${s}.outbox_messages DROP CONSTRAINT outbox_messages_status_check,
  ADD CONSTRAINT outbox_messages_status_check CHECK (status IN ('pending', 'processing', 'processed', 'dead', 'cancelled'));
`,
    },
  ];
}

/** Which types a claim takes: every one, only the named ones, or every one but those. */
type ClaimFilter = "all" | "only" | "except";

/** The singleton index's predicate (outbox-019): a message with a singleton key that no worker has claimed yet. The upsert names it as its conflict target. */
const SINGLETON_WAITING = "WHERE singleton_key IS NOT NULL AND status = 'pending' AND lease_token = 0";

/**
 * A claimable row's place in the claim order (outbox-018-priority): a pending message's due time
 * less its priority's head start, a held lease's end as it is, as a timestamp in UTC (AT TIME ZONE
 * with a named zone is immutable, as an index expression must be; timestamptz arithmetic is not).
 * The claimable index is on this expression; a query matches it only when written the same way.
 * As priority >= 0, every due row ranks at or before now: the rank is the index's range, and
 * \`available_at <= now\` filters out a prioritised message not yet due. `alias`: "m." or "".
 */
function claimRank(alias: string): string {
  return `CASE WHEN ${alias}status = 'pending' THEN (${alias}available_at AT TIME ZONE 'UTC') - ${alias}priority * interval '1 second' ELSE ${alias}available_at AT TIME ZONE 'UTC' END`;
}

/**
 * <schema>.enqueue(type, payload, dedupe_key, ordering_key, headers, destination, available_at):
 * the library's enqueue as a function. Its limits are the library's (validate.ts); a bad argument
 * raises invalid_parameter_value (22023) naming it, a dedupe key taken raises unique_violation.
 */
function enqueueFunction(schema: string, numbered: boolean): string {
  const s = quoteIdent(schema);
  const table = `${s}.outbox_messages`;
  const bad = (condition: string, message: string) =>
    `  IF ${condition} THEN\n    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value', MESSAGE = ${message};\n  END IF;`;
  const text = (arg: string, what: string, max: number, required: boolean) =>
    bad(
      `${required ? `${arg} IS NULL OR ` : `${arg} IS NOT NULL AND (`}btrim(${arg}) = '' OR length(${arg}) > ${max}${required ? "" : ")"}`,
      `'wassal enqueue: ${what} must be a non-empty string of at most ${max} characters'`,
    );
  return `CREATE ${numbered ? "OR REPLACE " : ""}FUNCTION ${s}.enqueue(
  type text,
  payload jsonb,
  dedupe_key text DEFAULT NULL,
  ordering_key text DEFAULT NULL,
  headers jsonb DEFAULT NULL,
  destination text DEFAULT NULL,
  available_at timestamptz DEFAULT NULL
) RETURNS bigint LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  new_id bigint;
  now_t timestamptz := clock_timestamp();${numbered ? "\n  waits boolean;" : ""}
BEGIN
${text("enqueue.type", "type", 200, true)}
${bad("enqueue.payload IS NULL", "'wassal enqueue: payload must be JSON (jsonb), not NULL; use ''null''::jsonb for a JSON null'")}
${text("enqueue.dedupe_key", "dedupe_key", 1000, false)}
${text("enqueue.ordering_key", "ordering_key", 255, false)}
${text("enqueue.destination", "destination", 255, false)}
${bad("enqueue.destination ~ '[\\x01-\\x08\\x0a-\\x1f\\x7f]'", "'wassal enqueue: destination contains a control character'")}
${bad(
  "enqueue.headers IS NOT NULL AND (jsonb_typeof(enqueue.headers) <> 'object' OR (SELECT count(*) FROM jsonb_each(enqueue.headers)) > 64 OR EXISTS (SELECT 1 FROM jsonb_each(enqueue.headers) h WHERE jsonb_typeof(h.value) <> 'string' OR h.key !~ '^[!#$%&''*+.^_`|~0-9A-Za-z-]{1,100}$' OR length(h.value #>> '{}') > 4096 OR (h.value #>> '{}') ~ '[\\x01-\\x08\\x0a-\\x1f\\x7f]'))",
  "'wassal enqueue: headers must be a JSON object of at most 64 string values (at most 4096 characters, no control characters) whose names are tokens (letters, digits, !#$%&''*+-.^_`|~)'",
)}
  IF enqueue.ordering_key IS NOT NULL THEN
    -- The key's turn, as the library's enqueue takes it (lockKeys), and the same isolation rule.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
      RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
        MESSAGE = 'wassal enqueue: a message with an ordering key needs a READ COMMITTED transaction (this one is ' || current_setting('transaction_isolation') || ')';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('${schema}:' || enqueue.ordering_key, 0));
  END IF;
${
  numbered
    ? `  waits := enqueue.ordering_key IS NOT NULL AND EXISTS (
    SELECT 1 FROM ${table} k
    WHERE k.ordering_key = enqueue.ordering_key AND k.status IN ('pending', 'processing', 'dead') AND k.key_state IN (0, 1));
  INSERT INTO ${table} (type, dedupe_key, ordering_key, headers, destination, payload, created_at, available_at, key_state, key_seq)
  VALUES (enqueue.type, enqueue.dedupe_key, enqueue.ordering_key, enqueue.headers, enqueue.destination, enqueue.payload, now_t,
          coalesce(enqueue.available_at, now_t), CASE WHEN waits THEN 1 ELSE 0 END,
          CASE WHEN enqueue.ordering_key IS NOT NULL AND NOT waits
               THEN coalesce((SELECT n.next_seq FROM ${s}.outbox_keys n WHERE n.ordering_key = enqueue.ordering_key), 1) END)
  RETURNING id INTO new_id;`
    : `  INSERT INTO ${table} (type, dedupe_key, ordering_key, headers, destination, payload, created_at, available_at, key_state)
  VALUES (enqueue.type, enqueue.dedupe_key, enqueue.ordering_key, enqueue.headers, enqueue.destination, enqueue.payload, now_t,
          coalesce(enqueue.available_at, now_t),
          CASE WHEN enqueue.ordering_key IS NOT NULL AND EXISTS (
            SELECT 1 FROM ${table} k
            WHERE k.ordering_key = enqueue.ordering_key AND k.status IN ('pending', 'processing', 'dead') AND k.key_state IN (0, 1)) THEN 1 ELSE 0 END)
  RETURNING id INTO new_id;`
}
  PERFORM pg_notify('${wakeChannel(schema)}', '');
  RETURN new_id;
END
$fn$;
`;
}

/**
 * wassal_hand_on: created by outbox-006 ("first"); outbox-007 replaces it with one that also wakes
 * listeners ("wakes"); outbox-012 with one that also numbers the message it promotes ("numbered":
 * `next_seqs[i]` is the number the next holder of `keys[i]` takes, or null to take the key's
 * remembered one) and remembers that number in outbox_keys when the key has nobody waiting;
 * outbox-016 with one that takes several keys' turns without waiting for one while it holds
 * another ("turns").
 */
function handOnFunction(schema: string, version: "first" | "wakes" | "numbered" | "turns"): string {
  const s = quoteIdent(schema);
  const table = `${s}.outbox_messages`;
  const wake =
    version === "first"
      ? ""
      : `
  IF promoted > 0 THEN
    PERFORM pg_notify('${wakeChannel(schema)}', '');
  END IF;`;
  if (version === "first" || version === "wakes") {
    return `CREATE ${version === "wakes" ? "OR REPLACE " : ""}FUNCTION ${s}.wassal_hand_on(keys text[]) RETURNS integer LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  k text;
  promoted integer;
BEGIN
  FOR k IN SELECT DISTINCT x FROM unnest(keys) AS x WHERE x IS NOT NULL ORDER BY x LOOP
    PERFORM pg_advisory_xact_lock(hashtextextended('${schema}:' || k, 0));
  END LOOP;
  -- Only a key without a holder is handed on: calling this after any change is safe (it settles).
  UPDATE ${table} SET key_state = 0
  WHERE id IN (SELECT (SELECT w.id FROM ${table} w
                       WHERE w.ordering_key = k2 AND w.status IN ('pending', 'processing', 'dead') AND w.key_state = 1
                       ORDER BY w.id LIMIT 1)
               FROM unnest(keys) AS k2
               WHERE NOT EXISTS (SELECT 1 FROM ${table} h
                                 WHERE h.ordering_key = k2 AND h.status IN ('pending', 'processing', 'dead') AND h.key_state = 0));
  GET DIAGNOSTICS promoted = ROW_COUNT;${wake}
  RETURN promoted;
END
$fn$;
`;
  }
  // Pinned plans. PL/pgSQL keeps the plans of its statements per session, made on the table as it
  // was then (a new, small table: sequential scans, hash joins), and PostgreSQL makes new ones only
  // when the table's statistics change (ANALYZE; never, with autovacuum off); with statistics from
  // a freshly loaded table it chose to walk the primary key from its oldest row for each key
  // (3,000 rows per message, issue 36). The SET clauses, which hold during the call only, leave
  // each statement one plan: a probe of the key index per key, and lookups by primary key. jit =
  // off: a disabled node that is the only way costs 1e10 in the planner's sums and would cross
  // jit_above_cost, compiling the statement at every call (113 ms per call, measured).
  const turn = (key: string) => `hashtextextended('${schema}:' || ${key}, 0)`;
  const takeTurns =
    version === "turns"
      ? `  -- One key: its turn is waited for, holding no other. Several: an app's transaction takes its
  -- keys' turns in the order it enqueues them, so waiting for one while holding another could
  -- close a circle with it (a deadlock). They are taken all at once or not at all: try each; when
  -- one is busy, give back those taken (a subtransaction's rollback releases its locks), wait for
  -- the busy one alone, give it back, and try all again.
  SELECT array_agg(DISTINCT x ORDER BY x) INTO turns FROM unnest(keys) AS x WHERE x IS NOT NULL;
  IF cardinality(turns) = 1 THEN
    PERFORM pg_advisory_xact_lock(${turn("turns[1]")});
  ELSIF cardinality(turns) > 1 THEN
    LOOP
      busy := NULL;
      BEGIN
        FOREACH k IN ARRAY turns LOOP
          IF NOT pg_try_advisory_xact_lock(${turn("k")}) THEN
            busy := k;
            RAISE EXCEPTION USING ERRCODE = 'lock_not_available';
          END IF;
        END LOOP;
      EXCEPTION WHEN lock_not_available THEN
        NULL;
      END;
      EXIT WHEN busy IS NULL;
      BEGIN
        PERFORM pg_advisory_xact_lock(${turn("busy")});
        RAISE EXCEPTION USING ERRCODE = 'lock_not_available';
      EXCEPTION WHEN lock_not_available THEN
        NULL;
      END;
    END LOOP;
  END IF;`
      : `  FOR k IN SELECT DISTINCT x FROM unnest(keys) AS x WHERE x IS NOT NULL ORDER BY x LOOP
    PERFORM pg_advisory_xact_lock(${turn("k")});
  END LOOP;`;
  return `CREATE ${version === "turns" ? "OR REPLACE " : ""}FUNCTION ${s}.wassal_hand_on(keys text[], next_seqs bigint[] DEFAULT NULL) RETURNS integer LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS $fn$
DECLARE
  k text;
  promoted integer;${version === "turns" ? "\n  turns text[];\n  busy text;" : ""}
BEGIN
${takeTurns}
  -- Each key's first entry in the key index: its holder (0), else its earliest waiting message (1),
  -- else a skipped one or another key's; only a waiting message of the key is promoted, so a key
  -- that still has a holder is left alone and calling this after any change is safe (it settles).
  -- The ids as an array, not a join: a join offers the primary key read whole in id order as a path.
  UPDATE ${table} m
  SET key_state = 0,
      key_seq = coalesce((SELECT max(u.s) FROM unnest(keys, next_seqs) AS u(k, s) WHERE u.k = m.ordering_key),
                         (SELECT n.next_seq FROM ${s}.outbox_keys n WHERE n.ordering_key = m.ordering_key), 1)
  WHERE m.id = ANY (ARRAY(
          SELECT (SELECT CASE WHEN f.ordering_key = k2 AND f.key_state = 1 THEN f.id END
                  FROM ${table} f
                  WHERE f.ordering_key >= k2 AND f.ordering_key IS NOT NULL AND f.status IN ('pending', 'processing', 'dead')
                  ORDER BY f.ordering_key, f.key_state, f.id LIMIT 1)
          FROM unnest(keys) AS k2))
    AND m.key_state = 1;
  GET DIAGNOSTICS promoted = ROW_COUNT;
  -- A key with nobody to hand on to remembers the number its next holder takes.
  INSERT INTO ${s}.outbox_keys (ordering_key, next_seq)
  SELECT u.k, max(u.s) FROM unnest(keys, next_seqs) AS u(k, s)
  WHERE u.k IS NOT NULL AND u.s IS NOT NULL
    AND NOT EXISTS (SELECT 1 FROM ${table} w
                    WHERE w.ordering_key = u.k AND w.status IN ('pending', 'processing', 'dead') AND w.key_state IN (0, 1))
  GROUP BY u.k
  ON CONFLICT (ordering_key) DO UPDATE SET next_seq = excluded.next_seq;${wake}
  RETURN promoted;
END
$fn$;
`;
}

const COLUMNS =
  "id, type, dedupe_key, ordering_key, key_seq, headers, destination, priority, singleton_key, payload, status, created_at, available_at, locked_by, locked_until, lease_token, attempts, last_error, processed_at";
/** The columns without payload and headers: a message's state, cheap to read whatever the payload's size. */
const STATE_COLUMNS =
  "id, type, dedupe_key, ordering_key, key_seq, destination, priority, singleton_key, status, created_at, available_at, locked_by, locked_until, lease_token, attempts, last_error, processed_at";
const M_COLUMNS = COLUMNS.split(", ")
  .map((c) => `m.${c}`)
  .join(", ");
/**
 * What a redriven message's key_state becomes: a skipped one (2) rejoins its key's order, behind
 * the key's holder or an earlier skipped message redriven by the same statement (`targeted`), or
 * as the key's holder when there is neither. (Every row of one statement sees the same snapshot,
 * so the earlier redriven ones must be named, not seen.)
 */
const redrivenKeyState = (table: string, targeted: string) => `CASE WHEN m.key_state <> 2 THEN m.key_state
       WHEN EXISTS (SELECT 1 FROM ${table} k WHERE k.ordering_key = m.ordering_key AND k.id <> m.id
                    AND ((k.status IN ('pending', 'processing', 'dead') AND k.key_state IN (0, 1))
                         OR (k.status = 'dead' AND k.key_state = 2 AND k.id < m.id AND ${targeted}))) THEN 1
       ELSE 0 END`;
/**
 * A redriven message's key_seq: a dead holder keeps its number; a skipped one that rejoins its key
 * as holder takes the key's next number, and one that waits gets its number when its turn comes.
 */
const redrivenKeySeq = (schema: string, targeted: string) => `CASE WHEN m.key_state <> 2 THEN m.key_seq
       WHEN (${redrivenKeyState(`${quoteIdent(schema)}.outbox_messages`, targeted)}) = 0 THEN ${nextSeqOf(schema, "m.ordering_key")}
       ELSE NULL END`;
/** The number a key's next holder takes when the key is free: the one its last hand-on remembered, else 1. */
const nextSeqOf = (schema: string, key: string) => `coalesce((SELECT n.next_seq FROM ${quoteIdent(schema)}.outbox_keys n WHERE n.ordering_key = ${key}), 1)`;
/**
 * The clock, evaluated once per statement. $1 is always the injected time or null.
 * Tried in the claim and the bulk completion, and not kept: no CTE, the expression
 * coalesce($1::timestamptz, statement_timestamp()) written where the time is used. On one
 * connection it cost 2.4 µs less backend CPU per message in the claim and 0.8 in the completion
 * (18.9 → 16.5 and 9.9 → 9.1 µs; batches of 100, 7 interleaved rounds of 50,000, CPU from the
 * backend's /proc schedstat), but real workers did not show it: 3 interleaved rounds of 100,000
 * messages, server CPU per message 39.4 → 40.2 µs with 1 process, 58.0 → 56.9 with 4 (medians).
 * Not worth a second kind of time in the SQL (a statement's start, not its clock).
 */
const CLOCK = "clock AS MATERIALIZED (SELECT coalesce($1::timestamptz, clock_timestamp()) AS t)";
/**
 * CLOCK for the claim. `asked` is read by nothing: it names $2 (the limit) so that the form with
 * the limit written in still has a $2, and takes the same values as the form that binds it.
 */
const CLAIM_CLOCK = "clock AS MATERIALIZED (SELECT coalesce($1::timestamptz, clock_timestamp()) AS t, $2::int AS asked)";
const LEASE = "clock.t + $LEASE * interval '1 millisecond'";
/**
 * 'processing', as a value the planner does not see, where a statement joins many rows of the
 * table by id (the bulk completion). Statistics taken while no message was processing (a quiet
 * table, a fresh one) say no row is, so with the constant the planner expected one row from a
 * scan filtered on status, put that scan outside a nested loop, and compared every processing row
 * with every lease of the group instead of looking each lease up by its key. 4 processes at
 * concurrency 1,000 over 20,000 messages (groups of 500) spent 1.1 s per completion, 1.8–3.4 k
 * msg/s and 460–930 µs of server CPU per message; with this, 9.2–9.6 k msg/s and 88–93 µs. Over
 * 100,000 messages, 14 k → 21 k msg/s and 85 → 49 µs with 4 processes, 24 k → 28 k and 42 → 31 µs
 * with 1 (2 alternated rounds). Unknown, the value is estimated from the column's number of distinct
 * values, and each id is looked up (or, on a small table, the table read once and hashed).
 */
const PROCESSING = "(SELECT 'processing'::text)";
/**
 * A timestamp as whole epoch milliseconds (a float8, which pg hands over as a number), truncated as
 * a JS Date would truncate it. The hot statements return times this way: pg's timestamp parser
 * showed in the worker's CPU profile at several microseconds per value.
 */
const EPOCH_MS = (column: string) => `floor(extract(epoch FROM ${column}) * 1000)::float8`;

/** The LISTEN/NOTIFY channel of a schema's outbox (at most 63 bytes, as PostgreSQL requires). */
export function wakeChannel(schema: string): string {
  return `wassal_${schema}`.slice(0, 63);
}

/** A browse's filters ($1 status, $2 type, $3 ordering key, $4 above, $5 below), each null for none. */
const PAGE_FILTER = `($1::text IS NULL OR status = $1::text) AND ($2::text IS NULL OR type = $2::text) AND ($3::text IS NULL OR ordering_key = $3::text)
      AND ($4::bigint IS NULL OR id > $4::bigint) AND ($5::bigint IS NULL OR id < $5::bigint)`;

export function outboxSql(schema: string) {
  const s = quoteIdent(schema);
  const table = `${s}.outbox_messages`;
  const audit = `${s}.outbox_audit`;
  const AUDIT_COLUMNS = "message_id, lease_token, owner, action, at, previous_status, previous_owner, previous_locked_until";
  /** A recorded claim (outbox_limit_starts, as st) whose lease is still held at `now`: its message processing under its token, the lease unexpired. */
  const leaseHeld = (now: string) => `EXISTS (SELECT 1 FROM ${table} m WHERE m.id = st.message_id AND m.status = 'processing'
                                             AND m.lease_token = st.lease_token AND m.locked_until > ${now})`;
  /**
   * $1 now, $2 ids, $3 tokens, $4 owners, $5 audit?: many guarded completions in one statement
   * (for completions without business writes, which cannot fail one by one); with `handOn`, the
   * completed messages' ordering keys are handed on by the same statement (wassal_hand_on).
   */
  // The due bound is a scalar subquery, not a join with clock: as an initplan's value it bounds
  // the claimable index's range. As a join filter it did not, and a claim that found fewer due rows
  // than its limit read every not-yet-due entry, each lease held and each scheduled message: 49 ms
  // per claim behind 60,000 scheduled messages (EXPLAIN ANALYZE), against a few index pages now.
  //
  // The UPDATE joins the candidates to the table by id. A prepared claim keeps the plan it chose
  // when it was first kept (its generic plan), and PostgreSQL makes a new one only when the
  // table's statistics change (ANALYZE, which autovacuum runs; never, with autovacuum off), so a
  // kept plan must stay right as the table grows. Planned with few due rows, the join alone looks
  // each candidate up by key, at any size of the table: the store keeps plans of it for claims of
  // up to 100. A large limit against a table not much larger made the planner hash the candidates
  // and read the whole table: a claim of 1,000 from 100,000 pending messages 71.7 ms (EXPLAIN
  // ANALYZE) against 24.3 with `byIds`, which also names the claimed rows as an array of their
  // ids, looked up by key once the table has statistics (batch 500 on 20,000 messages ran 10–24 %
  // faster in the benchmark). But a plan of it made while the table was new and small read the
  // whole table, the array a filter, and a kept one went on doing so as the table grew: a claim of
  // 1 message behind 3,000 processed ones cost the server 474–581 µs against 266–336 with the
  // join alone (a throwaway loop of enqueue, claim with a limit of 10 or 200, complete, on one
  // connection, 3,000 rounds; autovacuum off), and the benchmark's enqueue → start p50 from
  // another process rose by about 0.5 ms. So the store sends the `byIds` form only for claims of
  // more than 100, unnamed, planned at every call: about 0.45 ms of the server's CPU per claim,
  // whatever it finds, so at most 4.5 µs per message when it fills its limit. A worker with more
  // than 100 free slots on a quiet queue pays it at every claim: a claim of 1 message with a limit
  // of 200 cost the server 918 µs against 375 before either change (the same loop, one run each),
  // the price of never keeping a plan that reads the whole table. (Also tried: the ids as
  // `unnest(ARRAY(…))`, guessed at 10 rows: planned on a new table, it hashed them and read the
  // whole table too, 659–776 µs.)
  //
  // `limit`: the limit written into the statement, or null for $2. Written in, the planner knows it,
  // so the generic plan of the prepared claim is the custom one and PostgreSQL keeps it; with $2 it
  // guesses a tenth of the range, costs that plan higher than any custom one, and so plans the
  // claim again at every call: about 0.45 ms of the server's CPU per claim here (EXPLAIN EXECUTE
  // on a worker's connection: planning 0.47–0.83 ms, execution 0.50–0.85, a claim of 10). Claim
  // and completeMany on one connection (15,000 messages, the backend's CPU from /proc schedstat,
  // 3 rounds, the claim planned every time against its generic plan): batch 10 117.9–125.8 →
  // 70.1–79.6 µs per message, batch 100 35.1–38.1 → 30.8–37.8 (no clear change). $2 is still bound (the clock CTE
  // names it), so both forms take the same values. (A first trial, plan_cache_mode set through
  // PGOPTIONS, showed no gain: the store's connections never had it, pg_prepared_statements still
  // counted only custom plans.) Not done instead: forcing the generic plan on the store's
  // connections, which would force it on every statement an application runs through them.
  //
  // `filter`: every type, only the types in $6 (text[]), or every type but those.
  const claimSql = (filter: ClaimFilter, limit: number | null, byIds = false) => `WITH ${CLAIM_CLOCK},
      candidates AS MATERIALIZED (
        SELECT m.id, m.status AS old_status, m.locked_by AS old_owner, m.locked_until AS old_locked_until, m.available_at AS old_available_at
        FROM ${table} m
        WHERE m.status IN ('pending', 'processing') AND m.key_state = 0 AND (${claimRank("m.")}) <= (SELECT t AT TIME ZONE 'UTC' FROM clock)
          AND m.available_at <= (SELECT t FROM clock)${filter === "only" ? " AND m.type = ANY($6::text[])" : filter === "except" ? " AND m.type <> ALL($6::text[])" : ""}
        ORDER BY ${claimRank("m.")}, m.id
        LIMIT ${limit ?? "$2"}
        FOR UPDATE OF m SKIP LOCKED
      ),
      claimed AS (
        UPDATE ${table} m
        SET status = 'processing', locked_by = $3,
            locked_until = ${LEASE.replace("$LEASE", "$4")}, available_at = ${LEASE.replace("$LEASE", "$4")},
            lease_token = m.lease_token + 1, attempts = m.attempts + 1
        FROM candidates c, clock
        WHERE m.id = c.id${byIds ? " AND m.id = ANY (ARRAY(SELECT id FROM candidates))" : ""}
        RETURNING ${M_COLUMNS}, c.old_status, c.old_owner, c.old_locked_until, c.old_available_at, clock.t AS now
      ),
      audited AS (
        INSERT INTO ${audit} (${AUDIT_COLUMNS})
        SELECT id, lease_token, locked_by, 'claim', now, old_status, old_owner, old_locked_until FROM claimed WHERE $5::boolean
      )
      SELECT id, type, dedupe_key, ordering_key, key_seq, headers, destination, priority, singleton_key, payload, lease_token, attempts, last_error,
             ${EPOCH_MS("created_at")} AS created_ms, ${EPOCH_MS("locked_until")} AS until_ms,
             ${EPOCH_MS("old_available_at")} - CASE WHEN old_status = 'pending' THEN priority * 1000 ELSE 0 END AS old_rank_ms, ${EPOCH_MS("now")} AS now_ms,
             CASE WHEN old_status = 'processing' THEN old_owner END AS reclaimed_from
      FROM claimed`;
  /**
   * What a refused lease write records when auditing, in its own statement: `lost` (a CTE of id,
   * token, owner) names the leases the guarded write did not change; `held` reads each one's
   * holder, and `refused` writes its 'refused' audit row. FOR SHARE: under READ COMMITTED a row
   * changed since the statement's snapshot (the reclaim the guarded write waited for, which made
   * it stale) is read as committed, not as the snapshot saw it; FOR KEY SHARE would not do that,
   * as a reclaim changes no key (test/stores/postgres-refusal-holder.test.ts). It waits for an
   * update still open on the row. Data-modifying, so `refused` runs whether read or not.
   */
  const refusedSql = (operation: string) => `,
      held AS (SELECT m.id, m.status, m.locked_by, m.locked_until, m.lease_token, m.key_state
               FROM ${table} m JOIN lost ON m.id = lost.id FOR SHARE OF m),
      refused AS (
        INSERT INTO ${audit} (${AUDIT_COLUMNS}, operation)
        SELECT lost.id, lost.token, lost.owner, 'refused', clock.t, held.status, held.locked_by, held.locked_until, '${operation}'
        FROM clock, lost LEFT JOIN held ON held.id = lost.id)`;
  /** The holder `held` read, as the columns a refused write's statement returns (null when the message was gone). */
  const HELD_COLUMNS =
    "held.status AS held_status, held.locked_by AS held_by, held.locked_until AS held_until, held.lease_token AS held_token, held.key_state AS held_key_state";
  // `remove`: the completed rows are deleted instead of kept as processed (the store's onComplete
  // "delete"), in the same statement, guarded the same way. `audited`: the leases it did not
  // complete are recorded as refused in the same statement (refusedSql) and come back too
  // (refused true), with their holders.
  const completeBulkSql = (handOn: boolean, remove: boolean, audited = false) => `WITH ${CLOCK},
      wanted AS (SELECT * FROM unnest($2::bigint[], $3::int[], $4::text[]) AS w(id, token, owner)),
      done AS (
        ${
          remove
            ? `DELETE FROM ${table} m USING clock, wanted w`
            : `UPDATE ${table} m SET status = 'processed', processed_at = clock.t, locked_until = NULL, last_error = NULL
        FROM clock, wanted w`
        }
        WHERE m.id = w.id AND m.lease_token = w.token AND m.status = ${PROCESSING}
        RETURNING m.id, m.ordering_key, m.key_seq, w.token, w.owner, clock.t AS now),
      audited AS (INSERT INTO ${audit} (message_id, lease_token, owner, action, at) SELECT id, token, owner, 'complete', now FROM done WHERE $5::boolean)${
        handOn
          ? `,
      handed AS (SELECT ${s}.wassal_hand_on(array_agg(ordering_key), array_agg(key_seq + 1)) AS promoted FROM done)`
          : ""
      }${
        audited
          ? `,
      lost AS (SELECT w.id, w.token, w.owner FROM wanted w WHERE NOT EXISTS (SELECT 1 FROM done WHERE done.id = w.id))${refusedSql("complete")}
      SELECT done.id::text AS id, done.token, ${EPOCH_MS("done.now")} AS now_ms, false AS refused, NULL::text AS held_status, NULL::text AS held_by,
             NULL::timestamptz AS held_until, NULL::int AS held_token, NULL::smallint AS held_key_state
      FROM done${handOn ? ", handed" : ""}
      UNION ALL
      SELECT lost.id::text, lost.token, ${EPOCH_MS("clock.t")}, true, ${HELD_COLUMNS}
      FROM clock, lost LEFT JOIN held ON held.id = lost.id`
          : `
      SELECT done.id::text AS id, done.token, ${EPOCH_MS("done.now")} AS now_ms FROM done${handOn ? ", handed" : ""}`
      }`;
  const channel = wakeChannel(schema);
  /** The singleton enqueues (enqueueSingleton, enqueueSingletonFirst): enqueue's insert with the singleton key, and what a waiting one makes it do. */
  const singletonSql = (onConflict: string) => `WITH ${CLOCK},
      turn AS (SELECT $6::text IS NOT NULL AND EXISTS (
                 SELECT 1 FROM ${table} k
                 WHERE k.ordering_key = $6 AND k.status IN ('pending', 'processing', 'dead') AND k.key_state IN (0, 1)) AS waits),
      inserted AS (
        INSERT INTO ${table} AS m (type, dedupe_key, ordering_key, headers, destination, payload, created_at, available_at, priority, key_state, key_seq, singleton_key)
        SELECT $2, $3, $6, $7::jsonb, $8, $4::jsonb, clock.t, coalesce(clock.t + $11::bigint * interval '1 millisecond', $5::timestamptz, clock.t), $9::integer,
               CASE WHEN turn.waits THEN 1 ELSE 0 END,
               CASE WHEN $6::text IS NOT NULL AND NOT turn.waits THEN ${nextSeqOf(schema, "$6")} END,
               $10::text
        FROM clock, turn
        ON CONFLICT (type, singleton_key) ${SINGLETON_WAITING}
        ${onConflict}
        RETURNING ${M_COLUMNS})
      SELECT inserted.*, pg_notify('${channel}', '')::text AS notified FROM inserted`;
  return {
    /**
     * $1 now, $2 type, $3 dedupe key, $4 payload, $5 available at (null: now), $6 ordering key,
     * $7 headers (JSON text or null), $8 destination, $9 priority. Also notifies the schema's channel:
     * PostgreSQL delivers it only if the transaction commits, once per transaction.
     */
    enqueue: `WITH ${CLOCK},
      turn AS (SELECT $6::text IS NOT NULL AND EXISTS (
                 SELECT 1 FROM ${table} k
                 WHERE k.ordering_key = $6 AND k.status IN ('pending', 'processing', 'dead') AND k.key_state IN (0, 1)) AS waits),
      inserted AS (
        INSERT INTO ${table} (type, dedupe_key, ordering_key, headers, destination, payload, created_at, available_at, priority, key_state, key_seq)
        SELECT $2, $3, $6, $7::jsonb, $8, $4::jsonb, clock.t, coalesce($5::timestamptz, clock.t), $9::integer,
               CASE WHEN turn.waits THEN 1 ELSE 0 END,
               CASE WHEN $6::text IS NOT NULL AND NOT turn.waits THEN ${nextSeqOf(schema, "$6")} END
        FROM clock, turn
        RETURNING ${COLUMNS})
      SELECT inserted.*, pg_notify('${channel}', '')::text AS notified FROM inserted`,

    /**
     * enqueue for a message with a singleton key and a debounce: $1 … $9 as enqueue's ($3, the
     * dedupe key, null), $10 singleton key, $11 debounce ms (this message is due that long after
     * now). Inserted, or the message of its type and singleton key that waits unclaimed takes its
     * payload, headers, destination, priority and due time instead (upsert on
     * outbox_messages_singleton), if it has the same ordering key: with another, no row comes back,
     * and the store refuses the enqueue. A claim of the waiting one at the same moment makes the
     * insert go ahead (PostgreSQL checks the conflict again on the row as committed).
     */
    enqueueSingleton: singletonSql(`DO UPDATE SET payload = excluded.payload, headers = excluded.headers, destination = excluded.destination,
                      priority = excluded.priority, available_at = excluded.available_at
          WHERE m.ordering_key IS NOT DISTINCT FROM excluded.ordering_key`),

    /**
     * enqueueSingleton without a debounce ($11 null): a waiting message of its type and singleton
     * key makes it insert nothing and return no row (DO NOTHING: the waiting row is neither
     * written nor locked, so claims do not pass over it while the joining transaction is open).
     * The store then reads the waiting one (waitingSingleton).
     */
    enqueueSingletonFirst: singletonSql("DO NOTHING"),

    /** $1 type, $2 singleton key: the message of that type and singleton key that waits unclaimed, read without a lock. */
    waitingSingleton: `SELECT ${COLUMNS} FROM ${table} WHERE type = $1 AND singleton_key = $2 AND status = 'pending' AND lease_token = 0`,

    // lockSingleton: (none) enqueueSingleton's INSERT … ON CONFLICT waits for a concurrent insert of the singleton and then updates it
    // lockWaitingSingleton: (none) enqueueSingleton's DO UPDATE locks the row it debounces itself
    // debounceSingleton: (none) enqueueSingleton's upsert debounces the waiting message itself (DO UPDATE)

    // enqueueForeign: (none) another library's transaction runs enqueue itself, its $n turned into ? where the library needs them

    /**
     * $1 now, $2 a JSON array with one array per message: [type, dedupe key, key, headers (an
     * object or null), destination, payload, available at (ISO text, or null for now), waits behind
     * an earlier message of the list with its key (boolean), priority]. One statement, in list order (ORDER BY
     * the ordinality), so the identity ids ascend in that order. A JSON parameter rather than
     * arrays, so that any library's raw SQL can bind it (enqueueManyIn). Notifies once.
     */
    enqueueMany: `WITH ${CLOCK},
      inserted AS (
        INSERT INTO ${table} (type, dedupe_key, ordering_key, headers, destination, payload, created_at, available_at, priority, key_state, key_seq)
        SELECT g.m ->> 0, g.m ->> 1, g.k, nullif(g.m -> 3, 'null'::jsonb), g.m ->> 4, g.m -> 5, clock.t, coalesce((g.m ->> 6)::timestamptz, clock.t), (g.m ->> 8)::integer,
               CASE WHEN g.waits THEN 1 ELSE 0 END,
               CASE WHEN g.k IS NOT NULL AND NOT g.waits THEN ${nextSeqOf(schema, "g.k")} END
        FROM (SELECT e.m, e.n, e.m ->> 2 AS k,
                     e.m ->> 2 IS NOT NULL AND ((e.m ->> 7)::boolean OR EXISTS (
                       SELECT 1 FROM ${table} k
                       WHERE k.ordering_key = e.m ->> 2 AND k.status IN ('pending', 'processing', 'dead') AND k.key_state IN (0, 1))) AS waits
              FROM jsonb_array_elements($2::jsonb) WITH ORDINALITY AS e(m, n)) AS g, clock
        ORDER BY g.n
        RETURNING ${COLUMNS})
      SELECT inserted.*, (SELECT pg_notify('${channel}', ''))::text AS notified FROM inserted`,

    /**
     * $1 dedupe keys: which is taken, read on a connection of the pool when the unique violation's
     * detail did not say (a library dropped it) and the caller's transaction is aborted: it sees
     * committed messages only.
     */
    takenDedupeKey: `SELECT dedupe_key FROM ${table} WHERE dedupe_key = ANY($1::text[]) LIMIT 1`,

    // newestId: (none) LISTEN/NOTIFY tells other processes of new messages itself
    // dataVersion: (none) as newestId
    listen: `LISTEN ${channel}`,

    /** $1 the qualified table name. */
    installed: "SELECT to_regclass($1) IS NOT NULL AS installed",

    /** $1 the qualified table name: its size on disk now (the main fork's file, not its statistics), for the plan generations. */
    tableBytes: "SELECT pg_relation_size($1::regclass)::float8 AS bytes",

    // claimCandidates: (none) the claim picks its candidates itself, in one statement, with FOR UPDATE SKIP LOCKED
    // claimCandidatesOfTypes: (none) as claimCandidates (claimOfTypes)
    // claimCandidatesExceptTypes: (none) as claimCandidates (claimExceptTypes)

    /**
     * $1 now, $2 limit, $3 owner, $4 lease ms. One statement: the MATERIALIZED CTE locks at most
     * $2 rows (SKIP LOCKED passes over rows another claimer or completer holds) and the UPDATE
     * joins exactly those. The `WHERE id IN (subquery)` form can be re-planned to run the
     * subquery per row and claim more than asked, so it is not used.
     */
    claim: claimSql("all", null),

    /** As claim, of the types in $6 (text[]) only: a worker claims the types it handles. */
    claimOfTypes: claimSql("only", null),

    /**
     * As claim, of every type but those in $6 (text[]): the claim of the unlimited types when some
     * are limited (limits.ts). Run unnamed, planned at every call: it is not the plain path.
     */
    claimExceptTypes: claimSql("except", null),

    /**
     * claim and claimOfTypes for a large limit: the claimed rows also named as an array of their
     * ids, so that they are looked up by key where the join alone would hash the candidates and
     * read the table. Only for a statement planned at every call (unnamed): a kept plan of it made
     * on a new, small table reads the whole table as the table grows (see claimSql).
     */
    claimLarge: claimSql("all", null, true),
    claimLargeOfTypes: claimSql("only", null, true),
    claimLargeExceptTypes: claimSql("except", null, true),

    /** claim or claimOfTypes with `limit` (which $2 must equal) written into the statement. */
    claimOfLimit(limit: number, ofTypes: boolean): string {
      if (!Number.isSafeInteger(limit) || limit < 1) throw new RangeError(`a claim's limit must be a positive integer, not ${limit}`);
      return claimSql(ofTypes ? "only" : "all", limit);
    },

    /** $1 now, $2 type: the type's limit, its row locked until the limited claim's transaction ends, and the time (no row: no limit). */
    lockLimit: `SELECT type, concurrency, rate_count, rate_interval_ms, created_at, updated_at, coalesce($1::timestamptz, clock_timestamp()) AS now
      FROM ${s}.outbox_limits WHERE type = $2 FOR UPDATE`,
    // limitOf: (none) lockLimit reads the limit and locks its row

    /**
     * $1 type, $2 now: the type's leases held that no limited claim recorded (taken before the
     * limit, or by a store that had not yet seen it), recorded as claimed at -infinity: they count
     * as running, never as starts. Read through the claimable index's range past now.
     */
    seedLimitStarts: `INSERT INTO ${s}.outbox_limit_starts (type, message_id, lease_token, started_at)
      SELECT m.type, m.id, m.lease_token, '-infinity' FROM ${table} m
      WHERE m.status IN ('pending', 'processing') AND m.key_state = 0 AND (${claimRank("m.")}) > ($2::timestamptz AT TIME ZONE 'UTC')
        AND m.status = 'processing' AND m.type = $1 AND m.locked_until > $2
      ON CONFLICT DO NOTHING`,

    /** $1 type, $2 window start, $3 now: drops the type's recorded claims that count for neither limit. */
    pruneLimitStarts: `DELETE FROM ${s}.outbox_limit_starts st WHERE st.type = $1 AND st.started_at <= $2 AND NOT ${leaseHeld("$3")}`,
    /** $1 type, $2 window start, $3 now: the type's leases still held, and its claims after the window's start. */
    limitUse: `SELECT count(*) FILTER (WHERE ${leaseHeld("$3")}) AS running, count(*) FILTER (WHERE st.started_at > $2) AS started
      FROM ${s}.outbox_limit_starts st WHERE st.type = $1`,
    /** $1 type, $2 claim time, $3 message ids, $4 lease tokens: records a limited claim's leases. */
    addLimitStarts: `INSERT INTO ${s}.outbox_limit_starts (type, message_id, lease_token, started_at)
      SELECT $1, l.id, l.token, $2 FROM unnest($3::bigint[], $4::int[]) AS l(id, token)`,

    // claimedRows: (none) the claim's UPDATE … RETURNING hands the claimed rows back itself (MariaDB reads them back)

    /** $1 now, $2 id: the message's holder, row-locked for the rest of the transaction. */
    lockHolder: `WITH ${CLOCK}
      SELECT m.status, m.locked_by, m.locked_until, m.lease_token, m.key_state, m.available_at <= clock.t AS due, clock.t AS now
      FROM ${table} m, clock WHERE m.id = $2 FOR UPDATE OF m`,

    /** $1 now, $2 id, $3 owner, $4 lease ms: the conditional claim of one message. */
    claimMessage: `WITH ${CLOCK}
      UPDATE ${table} m
      SET status = 'processing', locked_by = $3,
          locked_until = ${LEASE.replace("$LEASE", "$4")}, available_at = ${LEASE.replace("$LEASE", "$4")},
          lease_token = m.lease_token + 1, attempts = m.attempts + 1
      FROM clock
      WHERE m.id = $2 AND m.status IN ('pending', 'processing') AND m.key_state = 0 AND m.available_at <= clock.t
      RETURNING ${M_COLUMNS}`,

    holder: `SELECT status, locked_by, locked_until, lease_token, key_state FROM ${table} WHERE id = $1`,

    /** $1 now, $2 id, $3 token, $4 owner, $5 operation: the holder, as holder, and the refused write recorded in the audit trail. */
    holderRefused: `WITH ${CLOCK},
      h AS (SELECT status, locked_by, locked_until, lease_token, key_state FROM ${table} WHERE id = $2),
      audited AS (
        INSERT INTO ${audit} (${AUDIT_COLUMNS}, operation)
        SELECT $2, $3, $4, 'refused', clock.t, h.status, h.locked_by, h.locked_until, $5 FROM clock LEFT JOIN h ON true)
      SELECT h.status, h.locked_by, h.locked_until, h.lease_token, h.key_state, clock.t AS now FROM clock LEFT JOIN h ON true`,

    /**
     * $1 the keys (sorted, so two transactions never wait for each other in a circle): one
     * transaction at a time per key, until commit, for enqueues and for completions that hand a
     * key on. Without it a message enqueued while its key's holder completes could commit as
     * waiting after the completion looked for whom to promote, and wait forever.
     */
    /**
     * What an enqueue through another library's transaction runs first, then releases at once:
     * outside a transaction block (a client handed back after COMMIT, whichever protocol it
     * speaks) a savepoint is an error (25P01), so the enqueue is refused before it writes. Nothing
     * is written inside it, so it takes no subtransaction id.
     */
    foreignGuard: "SAVEPOINT wassal_enqueue_guard",
    foreignGuardRelease: "RELEASE SAVEPOINT wassal_enqueue_guard",

    /** $1 the ordering key: its turn, as lockKeys takes it, with a text parameter (some libraries cannot bind arrays). */
    lockKey: `SELECT current_setting('transaction_isolation') AS isolation,
      pg_advisory_xact_lock(hashtextextended('${schema}:' || $1::text, 0))::text AS locked`,

    lockKeys: `SELECT current_setting('transaction_isolation') AS isolation,
      (SELECT count(pg_advisory_xact_lock(hashtextextended('${schema}:' || k, 0))) FROM unnest($1::text[]) AS k) AS locked`,

    /**
     * $1 keys, $2 the number each one's next holder takes (or nulls): hands them on (see wassal_hand_on
     * in the migrations): their turns taken, each one's next message promoted and numbered.
     */
    handOn: `SELECT ${s}.wassal_hand_on($1::text[], $2::bigint[])`,

    // rememberKeySeq: (none) wassal_hand_on remembers a key's next number itself
    // rememberKeySeqs: (none) as rememberKeySeq

    /**
     * $1 now, $2 id, $3 token, $4 lease ms, $5 owner, $6 audit?. Extends a lease still held: an
     * expired one stays expired. A refusal comes back with the holder (locked_until null), and,
     * when auditing, is recorded (refusedSql).
     */
    renew: `WITH ${CLOCK},
      changed AS (
        UPDATE ${table} m SET locked_until = ${LEASE.replace("$LEASE", "$4")}, available_at = ${LEASE.replace("$LEASE", "$4")}
        FROM clock
        WHERE m.id = $2 AND m.lease_token = $3 AND m.status = 'processing' AND m.locked_until > clock.t
        RETURNING m.locked_until),
      lost AS (SELECT $2::bigint AS id, $3::int AS token, $5::text AS owner WHERE $6::boolean AND NOT EXISTS (SELECT 1 FROM changed))${refusedSql("renew")}
      SELECT changed.locked_until, clock.t AS now, ${HELD_COLUMNS} FROM clock LEFT JOIN changed ON true LEFT JOIN held ON true`,

    /** $1 now, $2 id, $3 token. Row-locks the message until the transaction ends. */
    complete: `WITH ${CLOCK}
      UPDATE ${table} m SET status = 'processed', processed_at = clock.t, locked_until = NULL, last_error = NULL
      FROM clock
      WHERE m.id = $2 AND m.lease_token = $3 AND m.status = 'processing'
      RETURNING clock.t AS now`,

    /** As complete, the row deleted (onComplete "delete"). */
    completeDelete: `WITH ${CLOCK}
      DELETE FROM ${table} m USING clock
      WHERE m.id = $2 AND m.lease_token = $3 AND m.status = 'processing'
      RETURNING clock.t AS now`,

    /**
     * $1 now, $2 ids, $3 tokens, $4 owners, $5 audit?: many guarded completions in one statement
     * (for completions without business writes, which cannot fail one by one).
     */
    completeBulk: completeBulkSql(false, false),

    /** As completeBulk, the rows deleted (onComplete "delete"). */
    completeBulkDelete: completeBulkSql(false, true),

    // completeBulkLock: (none) the bulk completion's RETURNING says which leases it completed (MariaDB locks and reads them first)

    /** As completeBulk, and the completed messages' ordering keys handed on in the same statement (wassal_hand_on). */
    completeBulkHandOn: completeBulkSql(true, false),

    /** As completeBulkHandOn, the rows deleted (onComplete "delete"). */
    completeBulkHandOnDelete: completeBulkSql(true, true),

    /**
     * The four above when auditing: each also records the leases it did not complete as refused,
     * in the same statement, and returns them (with now_ms, and their holders).
     */
    completeBulkAudited: completeBulkSql(false, false, true),
    completeBulkDeleteAudited: completeBulkSql(false, true, true),
    completeBulkHandOnAudited: completeBulkSql(true, false, true),
    completeBulkHandOnDeleteAudited: completeBulkSql(true, true, true),

    // savepoint: (none) completeInSavepoint opens the savepoint in the same round trip as the guarded update

    /**
     * The guarded completion of one member of a group that carries business writes, opening its
     * savepoint (and releasing the previous member's) in the same round trip. Sent without
     * parameters, so that the statements can share one query; the values inlined are checked
     * integers (checked here) and a timestamp.
     */
    completeInSavepoint: (release: boolean, now: Date | null, id: string | null, token: number, remove: boolean): string => {
      // A null id (one no message can have) still opens the savepoint, so the next member can release it.
      if ((id !== null && !/^[1-9][0-9]{0,18}$/.test(id)) || !Number.isSafeInteger(token))
        throw new Error(`completeInSavepoint: bad id ${id} or token ${token}`);
      const clock = now === null ? "clock_timestamp()" : `'${now.toISOString()}'::timestamptz`;
      const guard = `WHERE id = ${id ?? "NULL"} AND lease_token = ${token} AND status = 'processing'`;
      return `${release ? "RELEASE SAVEPOINT wassal_completion; " : ""}SAVEPOINT wassal_completion;
        ${
          remove
            ? `DELETE FROM ${table} ${guard} RETURNING ${EPOCH_MS(clock)} AS now_ms`
            : `UPDATE ${table} SET status = 'processed', processed_at = ${clock}, locked_until = NULL, last_error = NULL
        ${guard}
        RETURNING ${EPOCH_MS("processed_at")} AS now_ms`
        }`;
    },

    // releaseSavepoint: (none) completeInSavepoint releases the previous member's savepoint in the same round trip

    /** A member's business write threw: undo it alone (the savepoint stays open until released or committed). */
    rollbackToSavepoint: "ROLLBACK TO SAVEPOINT wassal_completion",

    /** $1 now, $2 id, $3 token, $4 error, $5 delay ms, $6 owner, $7 audit?; a refusal as renew's. */
    failRetry: `WITH ${CLOCK},
      changed AS (
        UPDATE ${table} m
        SET status = 'pending', available_at = clock.t + $5 * interval '1 millisecond', locked_by = NULL, locked_until = NULL, last_error = $4
        FROM clock
        WHERE m.id = $2 AND m.lease_token = $3 AND m.status = 'processing'
        RETURNING m.id, m.available_at, clock.t AS now),
      audited AS (INSERT INTO ${audit} (message_id, lease_token, owner, action, at) SELECT id, $3, $6, 'retry', now FROM changed WHERE $7::boolean),
      lost AS (SELECT $2::bigint AS id, $3::int AS token, $6::text AS owner WHERE $7::boolean AND NOT EXISTS (SELECT 1 FROM changed))${refusedSql("fail")}
      SELECT changed.id IS NOT NULL AS changed, changed.available_at, clock.t AS now, ${HELD_COLUMNS}
      FROM clock LEFT JOIN changed ON true LEFT JOIN held ON true`,

    /** $1 now, $2 id, $3 token, $4 error, $5 owner, $6 audit?; a refusal as renew's. */
    failDead: `WITH ${CLOCK},
      changed AS (
        UPDATE ${table} m SET status = 'dead', locked_until = NULL, last_error = $4, available_at = clock.t
        FROM clock
        WHERE m.id = $2 AND m.lease_token = $3 AND m.status = 'processing'
        RETURNING m.id, clock.t AS now),
      audited AS (INSERT INTO ${audit} (message_id, lease_token, owner, action, at) SELECT id, $3, $5, 'dead', now FROM changed WHERE $6::boolean),
      lost AS (SELECT $2::bigint AS id, $3::int AS token, $5::text AS owner WHERE $6::boolean AND NOT EXISTS (SELECT 1 FROM changed))${refusedSql("fail")}
      SELECT changed.id IS NOT NULL AS changed, clock.t AS available_at, clock.t AS now, ${HELD_COLUMNS}
      FROM clock LEFT JOIN changed ON true LEFT JOIN held ON true`,

    /** $1 now, $2 id, $3 token, $4 owner, $5 audit?; a refusal as renew's. */
    release: `WITH ${CLOCK},
      changed AS (
        UPDATE ${table} m
        SET status = 'pending', available_at = clock.t, locked_by = NULL, locked_until = NULL, attempts = greatest(m.attempts - 1, 0)
        FROM clock
        WHERE m.id = $2 AND m.lease_token = $3 AND m.status = 'processing'
        RETURNING m.id, clock.t AS now),
      audited AS (INSERT INTO ${audit} (message_id, lease_token, owner, action, at) SELECT id, $3, $4, 'release', now FROM changed WHERE $5::boolean),
      lost AS (SELECT $2::bigint AS id, $3::int AS token, $4::text AS owner WHERE $5::boolean AND NOT EXISTS (SELECT 1 FROM changed))${refusedSql("release")}
      SELECT changed.id IS NOT NULL AS changed, clock.t AS now, ${HELD_COLUMNS} FROM clock LEFT JOIN changed ON true LEFT JOIN held ON true`,

    /** $1 id, $2 token, $3 owner, $4 action, $5 at, $6 previous status, $7 previous owner, $8 previous expiry. */
    audit: `INSERT INTO ${audit} (${AUDIT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,

    auditTrail: `SELECT ${AUDIT_COLUMNS}, operation FROM ${audit} ORDER BY id`,

    /** $1 id: one message's audit rows, oldest first. */
    auditTrailOf: `SELECT ${AUDIT_COLUMNS}, operation FROM ${audit} WHERE message_id = $1 ORDER BY id`,

    clockNow: "SELECT coalesce($1::timestamptz, clock_timestamp()) AS now",

    getMessage: `SELECT ${COLUMNS} FROM ${table} WHERE id = $1`,

    getMessageState: `SELECT ${STATE_COLUMNS} FROM ${table} WHERE id = $1`,

    /**
     * $1 id, $2 characters to keep (null: all): the payload and headers as jsonb's text, each
     * converted once. OFFSET 0 keeps the planner from inlining the subqueries, which would convert
     * a payload once per use (a 10 MB payload: 400 ms against 200 ms for the one conversion).
     */
    getMessageText: `SELECT ${STATE_COLUMNS},
        coalesce(left(p.t, $2::int), p.t) AS payload_text, octet_length(p.t) AS payload_bytes,
        coalesce(left(h.t, $2::int), h.t) AS headers_text, octet_length(h.t) AS headers_bytes
      FROM ${table}, LATERAL (SELECT payload::text AS t OFFSET 0) p, LATERAL (SELECT coalesce(headers::text, '{}') AS t OFFSET 0) h
      WHERE id = $1`,

    listStatesAll: `SELECT ${STATE_COLUMNS} FROM ${table} ORDER BY id LIMIT $1`,

    listStatesByStatus: `SELECT ${STATE_COLUMNS} FROM ${table} WHERE status = ANY($2::text[]) ORDER BY id LIMIT $1`,

    listAll: `SELECT ${COLUMNS} FROM ${table} ORDER BY id LIMIT $1`,

    /** $1 status, $2 type, $3 ordering key, $4 ids above, $5 ids below (each null: any), $6 limit: one page of a browse, ids ascending. */
    pageAscending: `SELECT ${STATE_COLUMNS} FROM ${table} WHERE ${PAGE_FILTER} ORDER BY id LIMIT $6`,

    /** As pageAscending, ids descending (the newest first). */
    pageDescending: `SELECT ${STATE_COLUMNS} FROM ${table} WHERE ${PAGE_FILTER} ORDER BY id DESC LIMIT $6`,

    /** $1 id (or null), $2 text, $3 limit: messages whose id, dedupe key or ordering key is the text searched for. */
    findMessages: `SELECT ${COLUMNS} FROM ${table} WHERE id IN (
        SELECT id FROM ${table} WHERE id = $1::bigint
        UNION SELECT id FROM ${table} WHERE dedupe_key = $2
        UNION SELECT id FROM ${table} WHERE ordering_key = $2)
      ORDER BY id LIMIT $3`,

    listByStatus: `SELECT ${COLUMNS} FROM ${table} WHERE status = ANY($2::text[]) ORDER BY id LIMIT $1`,

    countByStatus: `SELECT status, count(*)::int AS n FROM ${table} GROUP BY status`,

    /** $1 limit: pending messages per type, the most numerous first. */
    pendingByType: `SELECT type, count(*)::int AS n FROM ${table} WHERE status = 'pending' GROUP BY type ORDER BY n DESC, type LIMIT $1`,

    /** $1 after (null: from the first key), $2 limit: each remembered key's next number, in key order. */
    keySequences: `SELECT ordering_key AS key, next_seq::float8 AS "nextSeq" FROM ${s}.outbox_keys
                   WHERE $1::text IS NULL OR ordering_key > $1 ORDER BY ordering_key LIMIT $2`,

    /** $1 keys, $2 next numbers: sets keys' next numbers, never lowering one (a moved key goes on from its place). */
    carryKeySequences: `INSERT INTO ${s}.outbox_keys AS k (ordering_key, next_seq)
                        SELECT * FROM unnest($1::text[], $2::bigint[])
                        ON CONFLICT (ordering_key) DO UPDATE SET next_seq = greatest(k.next_seq, excluded.next_seq)`,

    oldestPending: `SELECT min(created_at) AS oldest FROM ${table} WHERE status = 'pending'`,

    /**
     * $1 now, $2 owner, $3 kind, $4 takes (JSON text or null), $5 alive ms: the owner's heartbeat
     * (started_at kept; alive_until never shortened, so processes sharing a name with shorter
     * settings cannot make a live one look dead).
     */
    heartbeat: `WITH ${CLOCK}
      INSERT INTO ${s}.outbox_owners AS o (name, kind, takes, started_at, heartbeat_at, alive_until)
      SELECT $2, $3, $4, clock.t, clock.t, clock.t + $5 * interval '1 millisecond' FROM clock
      ON CONFLICT (name) DO UPDATE SET kind = excluded.kind, takes = excluded.takes,
        heartbeat_at = excluded.heartbeat_at, alive_until = GREATEST(o.alive_until, excluded.alive_until)
      RETURNING heartbeat_at AS now, heartbeat_at + $5 * interval '1 millisecond' AS alive_until`,

    /** $1 now: the owners whose heartbeat stopped, deleted (row-locked until the transaction ends), and the time. */
    deadOwners: `WITH ${CLOCK},
      dead AS (DELETE FROM ${s}.outbox_owners o USING clock WHERE o.alive_until <= clock.t RETURNING o.name)
      SELECT (SELECT coalesce(array_agg(name ORDER BY name), '{}') FROM dead) AS names, clock.t AS now FROM clock`,

    // deleteOwners: (none) deadOwners deletes the rows it finds itself (DELETE … RETURNING)

    /**
     * $1 now, $2 owners: their unexpired leases expired now, as a lease that ran out (claimable at
     * once; the next claim gives a new token and counts an attempt, as it does for any expired lease).
     */
    expireLeasesOf: `WITH ${CLOCK}
      UPDATE ${table} m SET locked_until = clock.t, available_at = clock.t
      FROM clock
      WHERE m.status = 'processing' AND m.locked_by = ANY($2::text[]) AND m.locked_until > clock.t
      RETURNING m.locked_by AS owner`,

    /**
     * $1 now, $2 name, $3 cron, $4 timezone, $5 backfill ms, $6 type, $7 payload, $8 headers, $9
     * ordering key, $10 destination, $11 next tick, $12 priority: a schedule upserted, its next tick kept unless
     * its cron or timezone changed.
     */
    putSchedule: `WITH ${CLOCK}
      INSERT INTO ${s}.outbox_schedules AS o (name, cron, timezone, backfill_ms, type, payload, headers, ordering_key, destination, next_at, priority, created_at, updated_at)
      SELECT $2::text, $3::text, $4::text, $5::bigint, $6::text, $7::text, $8::text, $9::text, $10::text, $11::timestamptz, $12::integer, clock.t, clock.t FROM clock
      ON CONFLICT (name) DO UPDATE SET
        next_at = CASE WHEN o.cron = excluded.cron AND o.timezone = excluded.timezone THEN o.next_at ELSE excluded.next_at END,
        cron = excluded.cron, timezone = excluded.timezone, backfill_ms = excluded.backfill_ms, type = excluded.type,
        payload = excluded.payload, headers = excluded.headers, ordering_key = excluded.ordering_key,
        destination = excluded.destination, priority = excluded.priority, updated_at = excluded.updated_at, version = o.version + 1
      RETURNING o.*`,

    // getSchedule: (none) putSchedule returns the row it wrote (RETURNING)

    /** $1 name. */
    removeSchedule: `DELETE FROM ${s}.outbox_schedules WHERE name = $1`,

    listSchedules: `SELECT * FROM ${s}.outbox_schedules ORDER BY name`,

    /** $1 now, $2 type, $3 concurrency, $4 rate count, $5 rate interval ms: a type's limit upserted. */
    putLimit: `WITH ${CLOCK}
      INSERT INTO ${s}.outbox_limits AS o (type, concurrency, rate_count, rate_interval_ms, created_at, updated_at)
      SELECT $2::text, $3::integer, $4::integer, $5::bigint, clock.t, clock.t FROM clock
      ON CONFLICT (type) DO UPDATE SET concurrency = excluded.concurrency, rate_count = excluded.rate_count,
        rate_interval_ms = excluded.rate_interval_ms, updated_at = excluded.updated_at
      RETURNING o.*`,
    /** $1 type. When a limit is set (after its row): the claims recorded before it count no longer as starts (the rate counts from now), only as running while held. */
    resetLimitStarts: `UPDATE ${s}.outbox_limit_starts SET started_at = '-infinity' WHERE type = $1`,
    /** $1 type: the limit and its recorded claims. */
    removeLimit: `WITH starts AS (DELETE FROM ${s}.outbox_limit_starts WHERE type = $1) DELETE FROM ${s}.outbox_limits WHERE type = $1`,
    // removeLimitStarts: (none) removeLimit deletes the recorded claims in the same statement
    listLimits: `SELECT * FROM ${s}.outbox_limits ORDER BY type`,

    /** $1 now, $2 limit: the time, and the schedules with a next tick, earliest first (none: one row of nulls). */
    nextSchedules: `WITH ${CLOCK}
      SELECT clock.t AS now, n.* FROM clock
      LEFT JOIN LATERAL (SELECT * FROM ${s}.outbox_schedules WHERE next_at IS NOT NULL ORDER BY next_at, name LIMIT $2) n ON true
      ORDER BY n.next_at, n.name`,

    /** $1 name, $2 from, $3 to, $4 fired, $5 version: the compare-and-set that fires (or skips) a schedule's tick $2, of its version $5. */
    advanceSchedule: `UPDATE ${s}.outbox_schedules SET next_at = $3::timestamptz, last_tick_at = CASE WHEN $4::boolean THEN $2::timestamptz ELSE last_tick_at END
      WHERE name = $1 AND version = $5::integer AND next_at = $2::timestamptz`,

    /** $1 owner. */
    signOff: `DELETE FROM ${s}.outbox_owners WHERE name = $1`,

    listOwners: `SELECT name AS owner, kind, takes, started_at, heartbeat_at, alive_until FROM ${s}.outbox_owners ORDER BY name`,

    /** $1 now. */
    leasesByOwner: `WITH ${CLOCK}
      SELECT m.locked_by AS owner, count(*) FILTER (WHERE m.locked_until > clock.t)::int AS held,
             count(*) FILTER (WHERE m.locked_until <= clock.t)::int AS expired
      FROM ${table} m, clock WHERE m.status = 'processing' GROUP BY m.locked_by ORDER BY m.locked_by`,

    // auditRedriveAll: (none) each redrive statement writes its audit rows itself (a CTE), in one round trip

    /** $1 now, $2 audit?. Owner "redrive" marks an operator's act in the audit trail. */
    redriveAll: `WITH ${CLOCK},
      moved AS (
        UPDATE ${table} m SET status = 'pending', available_at = clock.t, attempts = 0, locked_by = NULL, locked_until = NULL,
          key_state = ${redrivenKeyState(table, "true")}, key_seq = ${redrivenKeySeq(schema, "true")}
        FROM clock WHERE m.status = 'dead' RETURNING m.id, m.lease_token, clock.t AS now),
      audited AS (INSERT INTO ${audit} (message_id, lease_token, owner, action, at) SELECT id, lease_token, 'redrive', 'redrive', now FROM moved WHERE $2::boolean)
      SELECT count(*)::int AS moved FROM moved`,

    // auditRedriveSome: (none) as auditRedriveAll

    // lockDead: (none) redriveSome's RETURNING says which messages moved (MariaDB locks and reads them first)

    /** $1 now, $2 audit?, $3 ids: the ids that moved. */
    redriveSome: `WITH ${CLOCK},
      moved AS (
        UPDATE ${table} m SET status = 'pending', available_at = clock.t, attempts = 0, locked_by = NULL, locked_until = NULL,
          key_state = ${redrivenKeyState(table, "k.id = ANY($3::bigint[])")}, key_seq = ${redrivenKeySeq(schema, "k.id = ANY($3::bigint[])")}
        FROM clock WHERE m.status = 'dead' AND m.id = ANY($3::bigint[]) RETURNING m.id, m.lease_token, clock.t AS now),
      audited AS (INSERT INTO ${audit} (message_id, lease_token, owner, action, at) SELECT id, lease_token, 'redrive', 'redrive', now FROM moved WHERE $2::boolean)
      SELECT id::text AS id FROM moved`,

    /**
     * $1 ids, or null for every dead message: the keys of the keyed dead messages among them,
     * sorted, for lockKeys before a redrive decides whether each rejoins its key as holder or behind
     * one (a skip of any of them waits for the same locks).
     */
    keysOfDead: `SELECT DISTINCT ordering_key AS key FROM ${table}
      WHERE status = 'dead' AND ordering_key IS NOT NULL AND ($1::bigint[] IS NULL OR id = ANY($1::bigint[]))
      ORDER BY 1`,

    /** $1 limit: dead messages that hold their key (blocking the messages behind it), oldest death first, with how many wait. */
    blockedKeys: `SELECT m.ordering_key AS key, m.id::text AS id, m.type, m.last_error, m.available_at AS died_at,
             (SELECT count(*)::int FROM ${table} w
              WHERE w.ordering_key = m.ordering_key AND w.status IN ('pending', 'processing', 'dead') AND w.key_state = 1) AS waiting
      FROM ${table} m
      WHERE m.status = 'dead' AND m.ordering_key IS NOT NULL AND m.key_state = 0
      ORDER BY m.available_at, m.id LIMIT $1`,

    /** $1 key: the dead message holding it, if any. */
    deadHolder: `SELECT id::text AS id FROM ${table} WHERE ordering_key = $1 AND status = 'dead' AND key_state = 0 ORDER BY id LIMIT 1`,

    /**
     * $1 key, $2 message id or null: skips the dead message holding the key (only that message when
     * named); it stays dead and lets its key move on (key_state 2). The outer conditions are checked
     * again on the row as it is when locked: a redrive that committed meanwhile wins.
     */
    skipKeyHolder: `UPDATE ${table} SET key_state = 2
      WHERE id = (SELECT id FROM ${table} WHERE ordering_key = $1 AND status = 'dead' AND key_state = 0 ORDER BY id LIMIT 1)
        AND ($2::bigint IS NULL OR id = $2::bigint) AND status = 'dead' AND key_state = 0
      RETURNING id::text AS id, key_seq`,

    /** $1 id: the message's ordering key and key state, read without a lock (a message's key never changes), so a cancel can take the key's turn first. */
    cancelKey: `SELECT ordering_key, key_state FROM ${table} WHERE id = $1`,

    /** $1 now, $2 id: what a cancel reads, row-locked for the rest of its transaction (a claim waits, or skips it). */
    cancelTarget: `WITH ${CLOCK}
      SELECT m.status, m.locked_by, m.locked_until, m.lease_token, m.key_state, m.type, m.ordering_key, m.key_seq, clock.t AS now
      FROM ${table} m, clock WHERE m.id = $2 FOR UPDATE OF m`,

    /**
     * $1 id, $2 running, $3 owner, $4 now (cancelTarget's): cancels the message if it is pending,
     * or ($2) processing: it becomes cancelled, finished at $4, locked_by naming the cancel. A
     * running one's lease ends here: its holder's every write is refused.
     */
    cancel: `UPDATE ${table} SET status = 'cancelled', locked_by = $3, locked_until = NULL, processed_at = $4
      WHERE id = $1 AND (status = 'pending' OR ($2::boolean AND status = 'processing'))`,
    /** $1 id, $2 running: as cancel, the row deleted (onComplete "delete"). */
    cancelDelete: `DELETE FROM ${table} WHERE id = $1 AND (status = 'pending' OR ($2::boolean AND status = 'processing'))`,

    /** $1 cutoff, $2 batch size: one short batch of retention (processed and cancelled rows), oldest ids first. */
    purgeProcessed: `WITH batch AS MATERIALIZED (
        SELECT id FROM ${table} WHERE status IN ('processed', 'cancelled') AND processed_at < $1 ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED)
      DELETE FROM ${table} m USING batch WHERE m.id = batch.id`,

    /**
     * $1 cutoff, $2 batch size: dead rows that died before $1 (a dead row's available_at is when it
     * died). A dead message that blocks its ordering key stays until redriven or skipped.
     */
    purgeDead: `WITH batch AS MATERIALIZED (
        SELECT id FROM ${table} WHERE status = 'dead' AND available_at < $1 AND (ordering_key IS NULL OR key_state <> 0)
        ORDER BY available_at, id LIMIT $2 FOR UPDATE SKIP LOCKED)
      DELETE FROM ${table} m USING batch WHERE m.id = batch.id`,

    /** $1 cutoff, $2 batch size: audit rows written before $1, oldest first. */
    purgeAudit: `WITH batch AS MATERIALIZED (SELECT id FROM ${audit} WHERE at < $1 ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED)
      DELETE FROM ${audit} a USING batch WHERE a.id = batch.id`,

    /** $1 cutoff, $2 batch size: inbox ids received before $1, oldest first. */
    purgeInbox: `WITH batch AS MATERIALIZED (
        SELECT source, message_id FROM ${s}.wassal_inbox WHERE received_at < $1 ORDER BY received_at LIMIT $2 FOR UPDATE SKIP LOCKED)
      DELETE FROM ${s}.wassal_inbox i USING batch WHERE i.source = batch.source AND i.message_id = batch.message_id`,

    /** $1 now, $2 source, $3 id: records a received id; no row when it was recorded before. */
    inboxRecord: `INSERT INTO ${s}.wassal_inbox (source, message_id, received_at) VALUES ($2, $3, coalesce($1::timestamptz, clock_timestamp()))
      ON CONFLICT DO NOTHING`,

    /**
     * $1 source, $2 key: the key's turn at the inbox (its row locked until commit; made at 0 when
     * new) and its last applied number. The no-op update is what takes the lock when the row exists.
     */
    inboxKeyTurn: `INSERT INTO ${s}.wassal_inbox_keys (source, ordering_key) VALUES ($1, $2)
      ON CONFLICT (source, ordering_key) DO UPDATE SET applied_seq = wassal_inbox_keys.applied_seq
      RETURNING applied_seq::float8 AS applied`,

    /** $1 source, $2 key, $3 the number applied: the key moves on; a number held back stays held only if a gap remains before it. */
    inboxKeyApplied: `UPDATE ${s}.wassal_inbox_keys
      SET applied_seq = $3::bigint, held_seq = CASE WHEN held_seq > $3::bigint + 1 THEN held_seq END,
          held_since = CASE WHEN held_seq > $3::bigint + 1 THEN held_since END
      WHERE source = $1 AND ordering_key = $2`,

    /** $1 source, $2 key, $3 a number held back, $4 now: the lowest held, and since when. */
    inboxKeyHeld: `UPDATE ${s}.wassal_inbox_keys
      SET held_seq = least(coalesce(held_seq, $3::bigint), $3::bigint), held_since = coalesce(held_since, $4::timestamptz, clock_timestamp())
      WHERE source = $1 AND ordering_key = $2`,

    /** $1 source or null, $2 limit: keys holding a message back, longest waiting first. */
    inboxBlockedKeys: `SELECT source, ordering_key AS key, applied_seq::float8 AS applied, held_seq::float8 AS held, held_since
      FROM ${s}.wassal_inbox_keys
      WHERE held_seq IS NOT NULL AND ($1::text IS NULL OR source = $1)
      ORDER BY held_since LIMIT $2`,

    // inboxKeyHeldNow: (none) inboxSkipGap reads the key's last applied number itself, in its own statement

    /** $1 source, $2 key: the key's applied number moves to just before its lowest held one; the numbers skipped. */
    inboxSkipGap: `WITH before AS (
        SELECT applied_seq FROM ${s}.wassal_inbox_keys WHERE source = $1 AND ordering_key = $2 AND held_seq IS NOT NULL FOR UPDATE)
      UPDATE ${s}.wassal_inbox_keys k
      SET applied_seq = k.held_seq - 1, held_seq = NULL, held_since = NULL
      FROM before
      WHERE k.source = $1 AND k.ordering_key = $2 AND k.held_seq IS NOT NULL
      RETURNING (before.applied_seq + 1)::float8 AS skipped_from, k.applied_seq::float8 AS skipped_to`,

    // schema: (none) PostgreSQL keeps no DDL text: schemaTables to schemaIndexes rebuild it from the catalogue

    /** describeSchema's catalogue reads: $1 the schema (tables, indexes) or the qualified table name (columns, constraints). */
    schemaTables: "SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY table_name",
    /** The schema's name as PostgreSQL writes it in DDL (quoted only where it must be). */
    schemaName: "SELECT quote_ident($1) AS name",

    schemaColumns: `SELECT a.attname AS column_name, format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull AS not_null,
             pg_get_expr(d.adbin, d.adrelid) AS default
      FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
      WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`,

    schemaConstraints: "SELECT pg_get_constraintdef(oid) AS def FROM pg_constraint WHERE conrelid = $1::regclass ORDER BY contype, conname",

    schemaIndexes: "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND indexname NOT LIKE '%_pkey' AND indexname NOT LIKE '%_key' ORDER BY indexname",
  } as const;
}

export type OutboxSql = ReturnType<typeof outboxSql>;

/** What the claim returns per row: the columns a claim does not set itself, and its times in epoch ms. */
export interface PgClaimedRow {
  id: string;
  type: string;
  dedupe_key: string | null;
  ordering_key: string | null;
  /** A bigint: pg hands it over as text. */
  key_seq: string | null;
  /** The parsed jsonb headers object, or null. */
  headers: Record<string, string> | null;
  destination: string | null;
  priority: number;
  singleton_key: string | null;
  payload: unknown;
  lease_token: number;
  attempts: number;
  last_error: string | null;
  created_ms: number;
  until_ms: number;
  /** The row's place in the claim order before the claim (claimRank), in epoch milliseconds. */
  old_rank_ms: number;
  now_ms: number;
  reclaimed_from: string | null;
}
