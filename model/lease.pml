/*
 * Wassal's lease protocol, for SPIN (docs/protocol-model.md says what is modelled and how to run it).
 *
 * Each database statement, or each transaction the drivers run as one, is one d_step below, and
 * its comment names the statement in src/stores/{sqlite,postgres,mariadb}/outbox-sql.ts. A reader
 * checks the step against that SQL: the d_step's first line is the statement's WHERE, the rest
 * its SET. The protocol that sequences the statements is src/outbox/leased-outbox.ts.
 *
 * Built once per variant with -D switches (the test builds each):
 *   (none)                   the protocol as the drivers run it: every assertion holds
 *   -DLIVENESS               a fault budget instead of a claim bound, and the progress formula
 *   -DMUTANT_COMPLETE_NO_TOKEN, -DMUTANT_CLAIM_NO_EXPIRY, -DMUTANT_HANDON_EARLY,
 *   -DMUTANT_RENEW_EXPIRED, -DMUTANT_REFUSED_APART  a known wrong variant each, which SPIN must reject
 *   -DLIVENESS -DMUTANT_ENDLESS_RENEW  a worker that renews for ever: the progress formula must fail
 */

/* ---- Bounds ---- */

#define N 3          /* workers (processes 0..N-1) */
#define M 3          /* messages (rows), ids 0..M-1 in enqueue order */
#define L 2          /* a lease's length, in clock ticks */
#define LIMIT 1      /* the concurrency limit of type X (outbox_limits.concurrency) */

#ifdef LIVENESS
#ifndef FAULTS
#define FAULTS 2     /* how many faults (pauses, crashes, renewals, retries, releases, jumps, reaps) a run may have */
#endif
#ifndef OPS
#define OPS 1        /* how many operator acts (redrive, skip, purge, cancel) a run may have */
#endif
#define MAXCLAIMS 255
#else
#ifndef MAXCLAIMS
#define MAXCLAIMS 2  /* claims per message (its lease_token never passes this); faults and operator acts are unbounded */
#endif
#endif

/*
 * The messages: 0 and 1 share ordering key A, 2 has key B. Messages 0 and 2 are of type X, which
 * has a concurrency limit and is in the worker's keyMovesOnWhenDead (a dead one is skipped at once:
 * "dead-and-skip"); message 1 is of type Y (no limit; a dead one blocks its key until an operator
 * redrives or skips it).
 */
#define KEY_A 0
#define KEY_B 1
#define KEY(m)       ((m) < 2 -> KEY_A : KEY_B)
#define LIMITED(m)   ((m) != 1)
#define SKIPS(m)     ((m) != 1)

/* ---- The rows of outbox_messages ---- */

#define PENDING    0
#define PROCESSING 1
#define PROCESSED  2
#define DEAD       3
#define CANCELLED  4
#define PURGED     5   /* the row deleted (purgeDead) */

byte status[M];
/*
 * Time, relative to now: for a processing row locked_until - now (= available_at - now, the
 * table's CHECK), for a pending row available_at - now; 0 once reached (the clock never runs it
 * below 0). So `locked_until > now` is left > 0 and `available_at <= now` is left == 0.
 */
byte left[M];
byte token[M];     /* lease_token: moved on by each claim, the fence of every lease write */
byte keyState[M];  /* key_state: 0 holds its key (or has none), 1 waits behind its key, 2 skipped */

/* ---- The workers' memory (a worker's lease as the library holds it) ---- */

#define IDLE    0  /* holds no lease */
#define HOLDING 1  /* holds the lease (wm, wtok) and may renew, complete, fail, release it */
#define REFUSED 2  /* MUTANT_REFUSED_APART only: a lease write was refused, its 'refused' row comes next */
#define SKIPPING 3 /* failed dead with "dead-and-skip": the skip's transaction comes next */

byte phase[N];
byte wm[N];        /* the lease's message */
byte wtok[N];      /* the lease's token */

/* ---- Ghost state: what the properties talk about, never read by the protocol ---- */

byte effects[M];   /* business writes committed with a completion (finalize(tx)) */
bool everSkipped[M];  /* skipped at least once (skipKeyHolder): the documented exception to key order */
/*
 * Refused lease writes so far minus 'refused' audit rows so far, kept as one number so that it adds
 * no state while the two stay equal (a refused write and its row commit in the same step).
 */
byte unrecorded;
#ifdef LIVENESS
byte faults = FAULTS;
byte ops = OPS;
bool live[M];      /* the current lease is held by a worker still at work on it (not crashed) */
#endif

/* Audit rows written by the step running now, per message (hidden: scratch, not state). */
hidden byte auditRows[M];
hidden byte statusBefore[M];
hidden byte tokenBefore[M];
hidden byte j;
hidden byte found;

/* ---- Helpers, each the SQL fragment it names ---- */

/* status IN ('pending', 'processing', 'dead'): the rows of the key index (outbox_messages_key) */
#define IN_KEY_INDEX(m) (status[m] == PENDING || status[m] == PROCESSING || status[m] == DEAD)
/* the key's holder: key_state = 0 in the key index */
#define HOLDS(m, k)     (KEY(m) == (k) && IN_KEY_INDEX(m) && keyState[m] == 0)
#define HAS_HOLDER(k)   (HOLDS(0, k) || HOLDS(1, k) || HOLDS(2, k))
#define WAITS(m, k)     (KEY(m) == (k) && IN_KEY_INDEX(m) && keyState[m] == 1)

/* LEASE_HELD / limitUse's running count: type X's leases processing and unexpired */
#define HELD(m)   (LIMITED(m) && status[m] == PROCESSING && left[m] > 0)
#define RUNNING_X (HELD(0) + HELD(1) + HELD(2))

/* claim's WHERE: status IN ('pending', 'processing') AND key_state = 0 AND available_at <= @now */
#ifdef MUTANT_CLAIM_NO_EXPIRY
#define DUE(m) true   /* MUTANT: the claim forgets available_at <= @now (a held lease's end, a retry's due time) */
#else
#define DUE(m) (left[m] == 0)
#endif
#define CLAIMABLE(m) ((status[m] == PENDING || status[m] == PROCESSING) && keyState[m] == 0 && DUE(m) \
                      && token[m] < MAXCLAIMS && (!LIMITED(m) || RUNNING_X < LIMIT))

/* The lease writes' guard: WHERE id = @id AND lease_token = @token AND status = 'processing' */
#define CURRENT(w) (token[wm[w]] == wtok[w] && status[wm[w]] == PROCESSING)

#ifdef LIVENESS
/* a tick that ends a lease whose holder is still at work on it is that holder's pause: a fault */
#define ENDS_LIVE_LEASE ((live[0] && status[0] == PROCESSING && left[0] == 1) || \
                         (live[1] && status[1] == PROCESSING && left[1] == 1) || \
                         (live[2] && status[2] == PROCESSING && left[2] == 1))
#define TICK_OK    (faults > 0 || !ENDS_LIVE_LEASE)
#define FAULT_OK   (faults > 0)
#define SPEND      faults--
#define OP_OK      (ops > 0)
#define SPEND_OP   ops--
#define NOT_LIVE(m) live[m] = false
/* MUTANT (progress): renewals cost no fault, so a worker may renew for ever and never finish */
#ifdef MUTANT_ENDLESS_RENEW
#define RENEW_OK    true
#define RENEW_SPEND skip
#else
#define RENEW_OK    FAULT_OK
#define RENEW_SPEND SPEND
#endif
#else
#define RENEW_OK   true
#define RENEW_SPEND skip
#define TICK_OK    true
#define FAULT_OK   true
#define SPEND      skip
#define OP_OK      true
#define SPEND_OP   skip
#define NOT_LIVE(m) skip
#endif

/*
 * The audit trail (audit: true). Each step writes its audit rows with AUDIT(m); AUDIT_END checks
 * that the step wrote exactly one row for each message whose lease changed (its token or its
 * status moved: claim, complete, retry, dead, release, redrive, cancel) and none for the others
 * (renew, a reap, a skip and a purge change no lease and write no lease row).
 */
#define AUDIT(m) auditRows[m]++

inline AUDIT_BEGIN() {
  j = 0;
  do
  :: j < M -> auditRows[j] = 0; statusBefore[j] = status[j]; tokenBefore[j] = token[j]; j++
  :: else -> break
  od
}

inline AUDIT_END() {
  j = 0;
  do
  :: j < M ->
     if
     :: status[j] != PURGED && (status[j] != statusBefore[j] || token[j] != tokenBefore[j]) ->
        assert(auditRows[j] == 1)   /* audit: a lease change recorded once */
     :: else ->
        assert(auditRows[j] == 0)   /* audit: nothing recorded that did not happen */
     fi;
     j++
  :: else -> break
  od
}

/*
 * A refused lease write and its 'refused' audit row: each refusal counts one up, each 'refused' row
 * one down. The rows are the refused writes' (not lease changes: AUDIT_END does not count them).
 */
#define REFUSAL      unrecorded++
#define REFUSED_ROW  unrecorded--
/* workers whose refused write's row is still to be written by a later step (MUTANT_REFUSED_APART only) */
#define ROWS_TO_COME ((phase[0] == REFUSED) + (phase[1] == REFUSED) + (phase[2] == REFUSED))

/* What must hold after every step (each step ends with it). */
inline INVARIANTS() {
  AUDIT_END();
  /* audit: every refused write has exactly one 'refused' row (or, in MUTANT_REFUSED_APART, its worker is still to write it) */
  assert(unrecorded == ROWS_TO_COME);
  /* ordering: a key has at most one holder */
  assert(HOLDS(0, KEY_A) + HOLDS(1, KEY_A) + HOLDS(2, KEY_A) <= 1);
  assert(HOLDS(0, KEY_B) + HOLDS(1, KEY_B) + HOLDS(2, KEY_B) <= 1);
  /* progress: no key stranded: a message waiting behind its key has a holder to wait for */
  assert(!(WAITS(0, KEY_A) || WAITS(1, KEY_A) || WAITS(2, KEY_A)) || HAS_HOLDER(KEY_A));
  assert(!(WAITS(0, KEY_B) || WAITS(1, KEY_B) || WAITS(2, KEY_B)) || HAS_HOLDER(KEY_B));
  /* concurrency limit: type X never has more unexpired leases than its limit */
  assert(RUNNING_X <= LIMIT);
  /* fencing: at most one effect per message */
  assert(effects[0] <= 1 && effects[1] <= 1 && effects[2] <= 1)
}

/*
 * handOn (SQLite, MariaDB: handOn; PostgreSQL: wassal_hand_on): if the key has no holder, its
 * earliest waiting message (ORDER BY id LIMIT 1) becomes its holder. Run inside the transaction
 * of every change that can end a holder: a keyed completion, a skip, a cancel of a holder.
 */
inline handOn(k) {
  if
  :: !HAS_HOLDER(k) ->
     found = false;
     j = 0;
     do
     :: j < M && !found && WAITS(j, k) -> keyState[j] = 0; found = true
     :: j < M && !(!found && WAITS(j, k)) -> j++
     :: else -> break
     od
  :: else -> skip
  fi
}

/* The worker's lease forgotten (it finished with it, or lost it, or crashed). */
inline forget(w) {
  phase[w] = IDLE; wm[w] = 0; wtok[w] = 0
}

/*
 * claim / claimMessage (and claimLimited's limitUse for type X): one statement that re-checks
 * claimability and takes the row: status 'processing', locked_by, locked_until = available_at =
 * now + lease, lease_token + 1, attempts + 1; the claim's audit row in the same transaction.
 */
inline claim(w, m) {
  AUDIT_BEGIN();
  /* ordering: no earlier message of its key is unfinished (pending, processing or dead), unless it was skipped */
  assert(!(0 < m && KEY(0) == KEY(m) && IN_KEY_INDEX(0) && !everSkipped[0]));
  assert(!(1 < m && KEY(1) == KEY(m) && IN_KEY_INDEX(1) && !everSkipped[1]));
  /* exclusive lease: a claim never takes a message from under a lease that has not expired */
  assert(!(status[m] == PROCESSING && left[m] > 0));
  status[m] = PROCESSING;
  left[m] = L;
  token[m]++;
  AUDIT(m);
  phase[w] = HOLDING; wm[w] = m; wtok[w] = token[m];
#ifdef LIVENESS
  live[m] = true;
#endif
  INVARIANTS()
}

/*
 * A lease write was refused: its token no longer current (or, for renew, the lease expired). The
 * refused write commits its own 'refused' audit row with it: PostgreSQL's renew, failRetry,
 * failDead, release (auditing) and completeBulkAudited (with its HandOn and Delete forms)
 * insert it for the leases they did not change; SQLite writes it in the same write-lock section,
 * MariaDB in the same transaction; a completion inside a caller's transaction runs holder and the
 * 'refused' audit row in that transaction (PostgreSQL: holderRefused on its client). The worker
 * reports the lease lost from what that same step read, so it forgets the lease here. (Without
 * auditing no row is written, and the lookup is holder, a read that changes nothing.)
 */
inline refused(w) {
  if
  :: token[wm[w]] == wtok[w] -> NOT_LIVE(wm[w])
  :: else -> skip
  fi;
  REFUSAL;
#ifdef MUTANT_REFUSED_APART
  phase[w] = REFUSED   /* MUTANT: the 'refused' row is left to a later transaction, the lease-lost lookup */
#else
  REFUSED_ROW;
  forget(w)
#endif
}

/*
 * reapDeadOwners (deadOwners, then expireLeasesOf): an owner whose heartbeat lapsed (crashed, or
 * paused long enough to miss its beats) has its unexpired leases expired now: locked_until =
 * available_at = now. A worker holds one lease at a time here, so reaping its owner expires one.
 */
inline reap(m) {
  left[m] = 0
}

/*
 * redriveSome / redriveAll (after auditRedriveSome / auditRedriveAll, in one transaction): dead
 * messages back to pending, due now, attempts 0. key_state (redrivenKeyState): a dead holder keeps
 * 0; a skipped one (2) waits (1) if another row of its key holds it or waits, or an earlier skipped
 * message is redriven by the same statement; else it holds its key (0). Every row sees the
 * statement's snapshot (PostgreSQL's rule; the SQLite form names the earlier targeted rows, so
 * it gives the same answer).
 */
#define EVERY 255                 /* target: redriveAll */
hidden byte target;               /* target: one id (redriveSome, unblock --redrive) or EVERY */
hidden byte keyStateSnap[M];
hidden byte newKeyState[M];
hidden byte r;
#define TARGETED(x) (target == EVERY || (x) == target)

inline redrive(t) {
  AUDIT_BEGIN();
  target = t;
  r = 0;
  do
  :: r < M -> keyStateSnap[r] = keyState[r]; newKeyState[r] = keyState[r]; r++
  :: else -> break
  od;
  /* the CASE, for each targeted dead row, on the snapshot */
  r = 0;
  do
  :: r < M ->
     if
     :: statusBefore[r] == DEAD && TARGETED(r) && keyStateSnap[r] == 2 ->
        found = false;
        j = 0;
        do
        :: j < M ->
           if
           :: j != r && KEY(j) == KEY(r) &&
              (((statusBefore[j] == PENDING || statusBefore[j] == PROCESSING || statusBefore[j] == DEAD) && keyStateSnap[j] <= 1) ||
               (statusBefore[j] == DEAD && keyStateSnap[j] == 2 && j < r && TARGETED(j))) -> found = true
           :: else -> skip
           fi;
           j++
        :: else -> break
        od;
        newKeyState[r] = (found -> 1 : 0)
     :: else -> skip
     fi;
     r++
  :: else -> break
  od;
  /* the SET */
  r = 0;
  do
  :: r < M ->
     if
     :: statusBefore[r] == DEAD && TARGETED(r) ->
        status[r] = PENDING; left[r] = 0; keyState[r] = newKeyState[r];
        AUDIT(r)   /* auditRedrive…: one 'redrive' row per moved message */
     :: else -> skip
     fi;
     r++
  :: else -> break
  od;
  INVARIANTS()
}

/* skipKeyHolder(key) then handOn, one transaction (LeasedOutbox #skip: unblockKey(key, "skip")) */
inline skipKey(k) {
  AUDIT_BEGIN();
  found = false;
  j = 0;
  do
  :: j < M && !found && HOLDS(j, k) && status[j] == DEAD -> keyState[j] = 2; everSkipped[j] = true; found = true
  :: j < M && !(!found && HOLDS(j, k) && status[j] == DEAD) -> j++
  :: else -> break
  od;
  handOn(k);
  INVARIANTS()
}

/*
 * cancel (after cancelTarget, one transaction): a pending message, or (running: true) a processing
 * one, becomes cancelled; its lease ends there; its audit row; a holder's key handed on.
 */
inline cancel(m) {
  AUDIT_BEGIN();
  status[m] = CANCELLED; left[m] = 0; AUDIT(m);
  if
  :: keyState[m] == 0 -> handOn(KEY(m))
  :: else -> skip
  fi;
  INVARIANTS()
}

/* purgeDead: a dead row goes unless it holds its key (ordering_key IS NULL OR key_state <> 0) */
inline purge(m) {
  AUDIT_BEGIN();
  status[m] = PURGED; left[m] = 0;
  INVARIANTS()
}

proctype worker(byte w) {
end_idle:
  do
  /* claim (claimMessage for one candidate, claim for a batch: a batch is these steps back to back) */
  :: d_step { phase[w] == IDLE && CLAIMABLE(0) -> claim(w, 0) }
  :: d_step { phase[w] == IDLE && CLAIMABLE(1) -> claim(w, 1) }
  :: d_step { phase[w] == IDLE && CLAIMABLE(2) -> claim(w, 2) }

  /* renew: WHERE id AND lease_token = @token AND status = 'processing' AND locked_until > @now */
  :: d_step { phase[w] == HOLDING && RENEW_OK ->
       AUDIT_BEGIN(); RENEW_SPEND;
#ifdef MUTANT_RENEW_EXPIRED
       if  /* MUTANT: renew forgets locked_until > @now, and brings an expired lease back */
       :: CURRENT(w) -> left[wm[w]] = L
#else
       if
       :: CURRENT(w) && left[wm[w]] > 0 -> left[wm[w]] = L
#endif
       :: else -> refused(w)
       fi;
       INVARIANTS() }

  /*
   * complete (completeOne / completeBulk, SQLite and MariaDB then handOn; PostgreSQL
   * completeBulkHandOn): one transaction: the guarded update first; zero rows and the transaction
   * rolls back, the business write never runs; else the business write (finalize(tx)), the audit
   * row and the key's hand-on, committed together.
   */
#ifdef MUTANT_HANDON_EARLY
  /* MUTANT: the hand-on commits in a transaction of its own after the guarded update, before the
     business write; the completion's own transaction may still roll back. */
  :: d_step { phase[w] == HOLDING && CURRENT(w) ->
       AUDIT_BEGIN();
       status[wm[w]] = PROCESSED;   /* seen by the early hand-on's transaction only */
       handOn(KEY(wm[w]));
       status[wm[w]] = PROCESSING;  /* the completion rolled back: its business write threw */
       INVARIANTS() }
#endif
  :: d_step { phase[w] == HOLDING ->
       AUDIT_BEGIN();
       if
#ifdef MUTANT_COMPLETE_NO_TOKEN
       :: status[wm[w]] == PROCESSING ->  /* MUTANT: the completion forgets lease_token = @token */
#else
       :: CURRENT(w) ->
#endif
          /* fencing: the business write commits only with a completion by the current lease holder */
          assert(token[wm[w]] == wtok[w]);
          effects[wm[w]]++;
          status[wm[w]] = PROCESSED; left[wm[w]] = 0;
          AUDIT(wm[w]);
          handOn(KEY(wm[w]));
          NOT_LIVE(wm[w]);
          forget(w)
       :: else -> refused(w)
       fi;
       INVARIANTS() }

  /* failRetry: WHERE id AND lease_token AND status = 'processing'; pending, due now or later */
  :: d_step { phase[w] == HOLDING && FAULT_OK ->
       AUDIT_BEGIN(); SPEND;
       if
       :: CURRENT(w) ->
          status[wm[w]] = PENDING; left[wm[w]] = 0;
          AUDIT(wm[w]); NOT_LIVE(wm[w]); forget(w)
       :: else -> refused(w)
       fi;
       INVARIANTS() }
  :: d_step { phase[w] == HOLDING && FAULT_OK ->
       AUDIT_BEGIN(); SPEND;
       if
       :: CURRENT(w) ->
          status[wm[w]] = PENDING; left[wm[w]] = 1;
          AUDIT(wm[w]); NOT_LIVE(wm[w]); forget(w)
       :: else -> refused(w)
       fi;
       INVARIANTS() }

  /* failDead: WHERE id AND lease_token AND status = 'processing'; dead, holding its key (key_state stays) */
  :: d_step { phase[w] == HOLDING ->
       AUDIT_BEGIN();
       if
       :: CURRENT(w) ->
          status[wm[w]] = DEAD; left[wm[w]] = 0;
          AUDIT(wm[w]); NOT_LIVE(wm[w]);
          if
          :: SKIPS(wm[w]) -> phase[w] = SKIPPING  /* "dead-and-skip": the skip is a second transaction */
          :: else -> forget(w)
          fi
       :: else -> refused(w)
       fi;
       INVARIANTS() }

  /* dead-and-skip's second transaction: skipKeyHolder(key, this id), then handOn (LeasedOutbox #skip) */
  :: d_step { phase[w] == SKIPPING ->
       AUDIT_BEGIN();
       if
       :: HOLDS(wm[w], KEY(wm[w])) && status[wm[w]] == DEAD ->
          keyState[wm[w]] = 2; everSkipped[wm[w]] = true;
          handOn(KEY(wm[w]))
       :: else -> skip   /* someone else skipped or redrove it meanwhile: no row */
       fi;
       forget(w);
       INVARIANTS() }

  /* release: WHERE id AND lease_token AND status = 'processing'; pending, due now, attempts - 1 */
  :: d_step { phase[w] == HOLDING && FAULT_OK ->
       AUDIT_BEGIN(); SPEND;
       if
       :: CURRENT(w) ->
          status[wm[w]] = PENDING; left[wm[w]] = 0;
          AUDIT(wm[w]); NOT_LIVE(wm[w]); forget(w)
       :: else -> refused(w)
       fi;
       INVARIANTS() }

#ifdef MUTANT_REFUSED_APART
  /* MUTANT: the lease-lost lookup as a transaction of its own after the refused write: holder
     (PostgreSQL holderRefused) and its 'refused' row; a crash before it loses the row */
  :: d_step { phase[w] == REFUSED ->
       AUDIT_BEGIN();
       REFUSED_ROW;
       forget(w);
       INVARIANTS() }
#endif

  /* a crash: the process dies and forgets its lease; a pause is this worker not stepping while the clock runs */
  :: d_step { phase[w] != IDLE && FAULT_OK ->
       AUDIT_BEGIN(); SPEND;
       if
       :: phase[w] == HOLDING && CURRENT(w) -> NOT_LIVE(wm[w])
       :: else -> skip
       fi;
       forget(w);
       INVARIANTS() }
  od
}

/*
 * The clock, and reapDeadOwners (deadOwners, then expireLeasesOf: an owner whose heartbeat lapsed
 * has its unexpired leases expired now). A worker that pauses long enough to miss heartbeats is
 * reaped as a crashed one is.
 */
proctype clock() {
end_clock:
  do
  /* a tick: time moves on by one */
  :: d_step { TICK_OK ->
       AUDIT_BEGIN();
#ifdef LIVENESS
       if
       :: ENDS_LIVE_LEASE -> faults--   /* the holder paused past its lease */
       :: else -> skip
       fi;
#endif
       j = 0;
       do
       :: j < M -> if :: left[j] > 0 -> left[j]-- :: else -> skip fi; j++
       :: else -> break
       od;
       INVARIANTS() }
  /* a jump: time leaps past every lease and every retry's due time */
  :: d_step { FAULT_OK -> SPEND; AUDIT_BEGIN();
       j = 0;
       do
       :: j < M -> left[j] = 0; j++
       :: else -> break
       od;
       INVARIANTS() }
  /* reapDeadOwners of worker 0, 1 or 2: expireLeasesOf sets locked_until = available_at = now */
  :: d_step { FAULT_OK && status[0] == PROCESSING && left[0] > 0 -> SPEND; AUDIT_BEGIN(); reap(0); INVARIANTS() }
  :: d_step { FAULT_OK && status[1] == PROCESSING && left[1] > 0 -> SPEND; AUDIT_BEGIN(); reap(1); INVARIANTS() }
  :: d_step { FAULT_OK && status[2] == PROCESSING && left[2] > 0 -> SPEND; AUDIT_BEGIN(); reap(2); INVARIANTS() }
  od
}

/* Operators: outbox redrive, outbox unblock --skip / --redrive, purgeDead, outbox cancel [--running]. */
proctype operator() {
end_operator:
  do
  :: d_step { OP_OK && status[0] == DEAD -> SPEND_OP; redrive(0) }
  :: d_step { OP_OK && status[1] == DEAD -> SPEND_OP; redrive(1) }
  :: d_step { OP_OK && status[2] == DEAD -> SPEND_OP; redrive(2) }
  :: d_step { OP_OK && (status[0] == DEAD) + (status[1] == DEAD) + (status[2] == DEAD) > 1 -> SPEND_OP; redrive(EVERY) }
  :: d_step { OP_OK && ((HOLDS(0, KEY_A) && status[0] == DEAD) || (HOLDS(1, KEY_A) && status[1] == DEAD)) -> SPEND_OP; skipKey(KEY_A) }
  :: d_step { OP_OK && HOLDS(2, KEY_B) && status[2] == DEAD -> SPEND_OP; skipKey(KEY_B) }
  :: d_step { OP_OK && status[0] == DEAD && keyState[0] != 0 -> SPEND_OP; purge(0) }
  :: d_step { OP_OK && status[1] == DEAD && keyState[1] != 0 -> SPEND_OP; purge(1) }
  :: d_step { OP_OK && status[2] == DEAD && keyState[2] != 0 -> SPEND_OP; purge(2) }
  :: d_step { OP_OK && (status[0] == PENDING || status[0] == PROCESSING) -> SPEND_OP; cancel(0) }
  :: d_step { OP_OK && (status[1] == PENDING || status[1] == PROCESSING) -> SPEND_OP; cancel(1) }
  :: d_step { OP_OK && (status[2] == PENDING || status[2] == PROCESSING) -> SPEND_OP; cancel(2) }
  od
}

/*
 * The start: three messages enqueued (enqueue): 0 holds key A, 1 waits behind it (key_state 1),
 * 2 holds key B; all pending and due. Then the workers, the clock and the operator start.
 * (Enqueues during the run are not modelled.)
 */
init {
  atomic {
    keyState[1] = 1;
    run worker(0); run worker(1); run worker(2);
    run clock();
    run operator()
  }
}

#ifdef LIVENESS
/*
 * Progress: every message ends processed, dead, cancelled or purged, or waits behind a dead holder
 * of its key (a blocked key, listed by blockedKeys until an operator acts: by design).
 */
#define FINAL(m)   (status[m] == PROCESSED || status[m] == DEAD || status[m] == CANCELLED || status[m] == PURGED)
/* (written out per key: SPIN's ltl parser reads -> as implication, so KEY() cannot be used here) */
#define DEAD_HOLDS_A ((status[0] == DEAD && keyState[0] == 0) || (status[1] == DEAD && keyState[1] == 0))
#define BLOCKED_A(m) (status[m] == PENDING && keyState[m] == 1 && DEAD_HOLDS_A)
#define SETTLED(m) (FINAL(m) || BLOCKED_A(m))
ltl progress { <> [] (SETTLED(0) && SETTLED(1) && FINAL(2)) }
#endif
