/*
 * Wassal's relay and consumer side, for SPIN (docs/protocol-model.md, part "The relay and the
 * inbox", says what is modelled and how to run it). The second model: model/lease.pml checks the
 * lease protocol itself; this one takes its claim, completion, failure and hand-on as given (each
 * one step, as lease.pml checks them) and follows the messages on: a relay publishes them to a
 * broker, the broker hands them to the consumers, perhaps more than once and in any order, and the
 * consumers apply them through the inbox.
 *
 * Each database statement, or each transaction the code runs as one, is one d_step below, and its
 * comment names the statement in src/stores/{sqlite,postgres,mariadb}/outbox-sql.ts or the code in
 * src/relay/ that it stands for.
 *
 * Built once per variant with -D switches (the test builds each):
 *   (none)                   the relay, the broker and the consumers as the code runs them
 *   -DLIVENESS               a fault budget instead of a claim bound, a FIFO broker, and the progress formula
 *   -DMUTANT_EFFECT_APART, -DMUTANT_NO_KEY_TURN, -DMUTANT_COMPLETE_BEFORE_PUBLISH,
 *   -DMUTANT_ACK_BEFORE_COMMIT, -DMUTANT_NO_LATE
 *                            a known wrong variant each, which SPIN must reject
 *   -DLIVENESS -DMUTANT_SKIP_PASSES_NEXT  an outbox skip that leaves a gap: the progress formula must fail
 *   -DREDRIVE                operators also redrive dead messages (a skipped one takes a new number):
 *                            every assertion holds
 *   -DREDRIVE -DBROKER_DEDUPE  and the broker drops a re-publish of a message with the same number
 *                            (NATS's duplicate window on Nats-Msg-Id, the Redis relay's marker: both
 *                            duplicateId in src/relay/publisher.ts, the id and a keyed message's number)
 *   -DMAXCLAIMS=3 -DKEY_ONLY 3 claims per message instead of 2, on key A's messages alone (message 2
 *                            applied before the run starts): with 3 messages, too many states
 *   -DREDRIVE -DBROKER_DEDUPE -DMUTANT_DEDUPE_BY_ID -DMAXCLAIMS=3 -DKEY_ONLY
 *                            the broker drops a re-publish by the id alone (the relay before duplicateId):
 *                            a message redriven after its key skipped it takes a new number whose
 *                            publish is dropped, so a completion hands key A on past a number no copy
 *                            in the broker carries (model/trails/RELAY_MUTANT_DEDUPE_BY_ID.txt)
 */

/* ---- Bounds ---- */

#define R 2          /* relay slots: two relays, or one relay's two publishes in flight (maxInFlight) */
#define C 2          /* consumer processes of one queue (a durable consumer, a queue, a group), sharing one inbox */
#define M 3          /* messages (outbox rows), ids 0..M-1 in enqueue order */
#define NUMS 3       /* key numbers 0 (none), 1, 2: two keyed messages never need a third */

#ifdef LIVENESS
#ifndef FAULTS
#define FAULTS 2     /* faults a run may have: relay or consumer crashes, pauses past a lease, refused publishes */
#endif
#ifndef OPS
#define OPS 1        /* operator acts a run may have: an outbox skip, an inbox skip */
#endif
#define MAXCLAIMS 255
#define QCAP 8       /* the FIFO broker's room (never reached: a send into a full queue would be an error) */
#else
#ifndef MAXCLAIMS
#define MAXCLAIMS 2  /* claims per message (its lease_token never passes this); crashes and operator acts are unbounded */
#endif
#endif

/*
 * The messages: 0 and 1 share ordering key A (1 waits behind 0, so 0 holds key number 1 and 1 gets
 * its number when its turn comes); 2 has no key, so the consumer applies it by its id alone
 * (store.receive), and 0 and 1 in their key's order (store.receiveInOrder).
 */
#define KEYED(m) ((m) < 2)

/* ---- The producer's database: the rows of outbox_messages (and outbox_keys) ---- */

#define PENDING    0
#define PROCESSING 1
#define PROCESSED  2
#define DEAD       3

byte status[M];
byte token[M];     /* lease_token: moved on by each claim, the fence of the completion */
bool expired[M];   /* a processing row's lease has ended (locked_until <= now): claimable again */
byte keyState[M];  /* key_state: 0 holds its key (or has none), 1 waits behind its key, 2 skipped */
byte keySeq[M];    /* key_seq: the message's number in its key's order; 0 for none (null) */
#ifdef REDRIVE
byte nextA;        /* outbox_keys.next_seq of key A: written by a hand-on that finds nobody to promote; 0 for no row */
#endif

/* ---- The relays' memory (a publish in hand, as the Worker holds its lease) ---- */

#define R_IDLE      0  /* holds nothing */
#define R_CLAIMED   1  /* holds a lease (rm, rtok) and is publishing the message */
#define R_CONFIRMED 2  /* the broker acknowledged the publish: the completion comes next */
#define R_COMPLETED 3  /* MUTANT_COMPLETE_BEFORE_PUBLISH: completed first, the publish comes next */

byte rphase[R];
byte rm[R];        /* the lease's message */
byte rtok[R];      /* the lease's token */
byte rseq[R];      /* the key number the claim read (key_seq), which the publish carries */

/* ---- The broker ---- */

/*
 * ready[SLOT(m, n)]: copies of message m carrying key number n that the broker holds and has not
 * handed to a consumer (published, or handed back: a consumer crashed, let its ack wait run out,
 * or gave an early message back). A copy carries what the relay read with its claim: the id, the
 * key, and the number (Wassal-Key-Seq, wassal-key-seq, the Redis field seq).
 *
 * For safety the broker is a bag: a consumer may be handed any copy it holds, in any order, so
 * the properties hold whatever order a broker keeps (RabbitMQ's requeue in place, NATS's
 * redelivery after the ack wait, a Redis consumer resuming its pending entries). For progress
 * (LIVENESS) it is one FIFO queue, a copy handed back joining its end (as NATS redelivers): a bag
 * would let the consumers take the same early copy for ever and never the one it waits for.
 */
#define SLOT(m, n) ((m) * NUMS + (n))
byte ready[M * NUMS];
#define COPIES(m) (ready[SLOT(m, 0)] + ready[SLOT(m, 1)] + ready[SLOT(m, 2)])
#ifdef LIVENESS
chan queue = [QCAP] of { byte, byte };
#define PUT(m, n) queue!m,n; ready[SLOT(m, n)]++
#else
#define PUT(m, n) ready[SLOT(m, n)]++
#endif

#ifdef BROKER_DEDUPE
/*
 * The broker's duplicate window (NATS's on Nats-Msg-Id, the Redis relay's SET NX marker), here as
 * long as the run. Both are keyed by duplicateId (src/relay/publisher.ts): the id and a keyed
 * message's number, so a re-publish is dropped only if a copy of the same message with the same
 * number was taken in before.
 */
#ifdef MUTANT_DEDUPE_BY_ID
bool brokerSaw[M];       /* MUTANT: by the id alone (Nats-Msg-Id and the marker were the message id) */
#define SAW(m, n) brokerSaw[m]
#else
bool brokerSaw[M * NUMS];
#define SAW(m, n) brokerSaw[SLOT(m, n)]
#endif
bool numReached[NUMS];   /* ghost: a copy with key A's number n was taken in by the broker */
#define PUBLISH(m, n) if :: !SAW(m, n) -> SAW(m, n) = true; numReached[n] = true; PUT(m, n) :: else -> skip fi
#else
#define PUBLISH(m, n) PUT(m, n)
#endif

/* ---- The consumers' memory (a delivered copy in hand) ---- */

#define C_IDLE   0  /* holds nothing */
#define C_HELD   1  /* holds a copy of cm, unacknowledged; its transaction has not committed */
#define C_DONE   2  /* its transaction committed (applied, or a duplicate): the ack comes next */
#define C_EARLY  3  /* its key waits for an earlier number: the copy goes back to the broker (within the step) */
#define C_APART  4  /* MUTANT_EFFECT_APART: the effect committed; the inbox record comes next */
#define C_TURN   5  /* MUTANT_NO_KEY_TURN: the key's number read without its turn; the rest next */

byte cphase[C];
byte cm[C];        /* the message of the copy in hand */
byte cseq[C];      /* the key number the copy carries */
#ifdef MUTANT_NO_KEY_TURN
byte cread[C];     /* the key's applied number as the consumer read it */
#endif
#ifdef MUTANT_EFFECT_APART
bool cnew[C];      /* the copy was the key's next number: the key moves on with the record */
#endif

/* ---- The consumer's database: wassal_inbox and wassal_inbox_keys ---- */

bool inbox[M];     /* the message's id recorded in wassal_inbox (source, message_id) */
byte applied;      /* key A's applied_seq (0: its row is new) */
byte held;         /* key A's held_seq: the lowest number held back; 0 for none (null) */

/* ---- Ghost state: what the properties talk about, never read by the protocol ---- */

byte effects[M];      /* the consumer's effect committed (the handler's writes in the inbox's transaction) */
bool numDone[NUMS];   /* key A's number n applied in its place (outcome "new", not a duplicate) */
bool numPassed[NUMS]; /* key A's number n passed over by an inbox skip (unblockKey(key, "skip")) */
byte givenTo[NUMS];   /* the messages (bit 1: message 0, bit 2: message 1) that took key A's number n */
bool everSkipped[M];  /* skipped in the outbox (skipKeyHolder): its number goes on to the next message */
byte appliedMax;      /* the highest applied_seq so far */
#ifdef LIVENESS
byte faults = FAULTS;
byte ops = OPS;
bool live[M];         /* the current lease's holder is still at work on it (not crashed) */
#endif

hidden byte j;
hidden byte seq;
hidden byte recorded;

/* ---- Helpers ---- */

/* status IN ('pending', 'processing', 'dead'): the rows of the key index */
#define IN_KEY_INDEX(m) (status[m] == PENDING || status[m] == PROCESSING || status[m] == DEAD)
#define HOLDS_A(m)      (KEYED(m) && IN_KEY_INDEX(m) && keyState[m] == 0)
#define WAITS_A(m)      (KEYED(m) && IN_KEY_INDEX(m) && keyState[m] == 1)

/* claim's WHERE: pending, or processing with its lease ended; holding its key (key_state = 0) */
#define CLAIMABLE(m) ((status[m] == PENDING || (status[m] == PROCESSING && expired[m])) && keyState[m] == 0 \
                      && token[m] < MAXCLAIMS)

/* The completion's guard: WHERE id = @id AND lease_token = @token AND status = 'processing' */
#define CURRENT(r) (token[rm[r]] == rtok[r] && status[rm[r]] == PROCESSING)

/* A copy of m in hand of consumer c (delivered, not acknowledged) */
#define IN_HAND(c, m) (cphase[c] != C_IDLE && cm[c] == (m))

/*
 * Not lost: m's effect committed, or a copy of it is in the broker or in a consumer's hands, or
 * it is still in the outbox (pending, processing or dead: a relay will publish it, or an operator
 * sees it dead), or the relay that completed it is about to publish it (MUTANT_COMPLETE_BEFORE_PUBLISH).
 */
#define ABOUT_TO_PUBLISH(m) ((rphase[0] == R_COMPLETED && rm[0] == (m)) || (rphase[1] == R_COMPLETED && rm[1] == (m)))
#define NOT_LOST(m) (effects[m] > 0 || COPIES(m) > 0 || IN_HAND(0, m) || IN_HAND(1, m) || status[m] != PROCESSED \
                     || ABOUT_TO_PUBLISH(m))

#define GIVEN_TWICE(n) (givenTo[n] == 3)

#ifdef LIVENESS
#define FAULT_OK    (faults > 0)
#define SPEND       faults--
#define OP_OK       (ops > 0)
#define SPEND_OP    ops--
#define LIVE(m)     live[m] = true
#define NOT_LIVE(m) live[m] = false
/* a lease whose holder is at work on it ends only if that holder paused past it: a fault */
#define EXPIRE_OK(m) (!live[m] || faults > 0)
#define EXPIRE_SPEND(m) if :: live[m] -> faults--; live[m] = false :: else -> skip fi
#else
#define FAULT_OK    true
#define SPEND       skip
#define OP_OK       true
#define SPEND_OP    skip
#define LIVE(m)     skip
#define NOT_LIVE(m) skip
#define EXPIRE_OK(m) true
#define EXPIRE_SPEND(m) skip
#endif

/* What must hold after every step (each step ends with it). */
inline INVARIANTS() {
  /* exactly once: no message's effect commits twice, whatever the re-publishes, redeliveries and crashes */
  assert(effects[0] <= 1); assert(effects[1] <= 1); assert(effects[2] <= 1);
  /* nothing lost: a completed message reaches the consumer's effect, or a copy is still on its way */
  assert(NOT_LOST(0)); assert(NOT_LOST(1)); assert(NOT_LOST(2));
  /* the key's applied number never goes back */
  assert(applied >= appliedMax);
  appliedMax = applied
}

/*
 * handOn (SQLite, MariaDB: handOn; PostgreSQL: wassal_hand_on(keys, next_seqs)) for key A with the
 * number its next holder takes: if the key has no holder, its earliest waiting message becomes
 * its holder and takes that number (key_seq); if nobody holds or waits, outbox_keys remembers the
 * number for the key's next holder.
 */
inline handOn(next) {
  if
  :: !HOLDS_A(0) && !HOLDS_A(1) && WAITS_A(0) -> keyState[0] = 0; keySeq[0] = next; givenTo[next] = givenTo[next] | 1
  :: !HOLDS_A(0) && !HOLDS_A(1) && !WAITS_A(0) && WAITS_A(1) -> keyState[1] = 0; keySeq[1] = next; givenTo[next] = givenTo[next] | 2
#ifdef REDRIVE
  :: !HOLDS_A(0) && !HOLDS_A(1) && !WAITS_A(0) && !WAITS_A(1) -> nextA = next
#endif
  :: else -> skip
  fi
}

/* The relay's lease forgotten (it finished with it, or lost it, or crashed). */
inline forget(r) {
  rphase[r] = R_IDLE; rm[r] = 0; rtok[r] = 0; rseq[r] = 0
}

/* claim / claimMessage: the row becomes relay r's (processing, lease_token + 1); the relay reads id, key, key_seq */
inline claim(r, m) {
  status[m] = PROCESSING; expired[m] = false; token[m]++; LIVE(m);
  rphase[r] = R_CLAIMED; rm[r] = m; rtok[r] = token[m]; rseq[r] = keySeq[m]
}

/* An effect committed with copy number n, the key's order checked for a keyed message (outcome "new" or "late"). */
#define NEW  0
#define LATE 1
inline EFFECT(m, n, how) {
  effects[m]++;
  if
  :: KEYED(m) && how == NEW ->
     /* key order by number: number n is applied only after n - 1 (or after an inbox skip passed n - 1) */
     assert(n == 1 || numDone[n - 1] || numPassed[n - 1]);
     /* key order end to end: message 1's effect never commits before message 0's, unless message 0 was
        skipped in the outbox (its number went on to message 1) or its number (1) was skipped at the inbox */
     assert(m == 0 || effects[0] > 0 || everSkipped[0] || numPassed[1]);
     numDone[n] = true
  :: KEYED(m) && how == LATE ->
     /* late only for a number given twice (an outbox skip of a message the broker had) or skipped at the inbox */
     assert(GIVEN_TWICE(n) || numPassed[n])
  :: else -> skip
  fi
}

/*
 * Inbox.handle (src/relay/inbox.ts) for the copy consumer c holds: one transaction (store.transaction)
 * with the effect. For a keyed message, receiveInOrder (src/outbox/leased-outbox.ts): inboxKeyTurn
 * (the key's row, locked until commit, and its applied_seq), then by the numbers: a number the key
 * has passed records the id (inboxRecord) and is "late" if the id is new, else a duplicate; a number
 * past the next one is "early" (inboxKeyHeld: held_seq = least(held_seq, n)); the next number records
 * the id and moves the key on (inboxRecord, inboxKeyApplied: applied_seq = n, held_seq kept only if
 * > n + 1), the effect running only if the id was new. For a message without a key, receive
 * (inboxRecord alone). The key's turn and wassal_inbox's primary key serialise two consumers'
 * transactions on one key or one id, so the whole transaction is one step.
 */
inline handle(c) {
  seq = cseq[c];
  if
  :: KEYED(cm[c]) ->
     if
#ifdef MUTANT_NO_LATE
     :: seq <= applied ->   /* MUTANT: a number the key has passed is a duplicate, whatever its id */
        cphase[c] = C_DONE
#else
     :: seq <= applied ->
        if
        :: !inbox[cm[c]] ->
#ifdef MUTANT_EFFECT_APART
           cnew[c] = false; cphase[c] = C_APART; EFFECT(cm[c], seq, LATE)
#else
           inbox[cm[c]] = true; EFFECT(cm[c], seq, LATE); cphase[c] = C_DONE
#endif
        :: else -> cphase[c] = C_DONE
        fi
#endif
     :: seq > applied + 1 ->
        if
        :: held == 0 || seq < held -> held = seq
        :: else -> skip
        fi;
        cphase[c] = C_EARLY
     :: seq == applied + 1 ->
        recorded = !inbox[cm[c]];
#ifdef MUTANT_EFFECT_APART
        if
        :: recorded -> cnew[c] = true; cphase[c] = C_APART; EFFECT(cm[c], seq, NEW)
        :: else ->
           applied = seq;
           if :: held != 0 && held <= seq + 1 -> held = 0 :: else -> skip fi;
           cphase[c] = C_DONE
        fi
#else
        inbox[cm[c]] = true;
        applied = seq;
        if :: held != 0 && held <= seq + 1 -> held = 0 :: else -> skip fi;
        if :: recorded -> EFFECT(cm[c], seq, NEW) :: else -> skip fi;
        cphase[c] = C_DONE
#endif
     fi
  :: else ->
     if
     :: !inbox[cm[c]] ->
#ifdef MUTANT_EFFECT_APART
        cnew[c] = false; cphase[c] = C_APART; EFFECT(cm[c], 0, NEW)
#else
        inbox[cm[c]] = true; EFFECT(cm[c], 0, NEW); cphase[c] = C_DONE
#endif
     :: else -> cphase[c] = C_DONE
     fi
  fi;
  seq = 0; recorded = 0
}

/*
 * An early message handed back (deliver's giveBack: NATS nak, RabbitMQ reject with requeue; NATS and
 * Redis park it first, in the consumer's hands, which the broker's bag already allows for). Taken
 * with the transaction's step: a crash between the commit and the hand-back gives the broker the
 * copy back all the same.
 */
inline giveBackEarly(c) {
  if
  :: cphase[c] == C_EARLY -> PUT(cm[c], cseq[c]); cphase[c] = C_IDLE; cm[c] = 0; cseq[c] = 0
  :: else -> skip
  fi
}

#ifdef MUTANT_NO_KEY_TURN
/*
 * MUTANT: receiveInOrder reads the key's applied_seq with a plain SELECT instead of taking its
 * turn (inboxKeyTurn's locking upsert): the read is one step; the rest of the transaction (the id,
 * the effect, the key's update, the commit) is the next, and decides on the number it read. Its
 * statements still see the rows as they are then: wassal_inbox's primary key makes a second insert
 * of an id wait for the first and find it, and inboxKeyApplied / inboxKeyHeld update the key's row
 * as it is (READ COMMITTED re-reads a row it waited for); a held_seq that breaks the CHECK
 * (held_seq > applied_seq + 1) fails the statement and rolls the transaction back.
 */
inline handleRest(c) {
  seq = cseq[c];
  if
  :: seq <= cread[c] ->
     if
     :: !inbox[cm[c]] -> inbox[cm[c]] = true; EFFECT(cm[c], seq, LATE)
     :: else -> skip
     fi;
     cphase[c] = C_DONE
  :: seq > cread[c] + 1 ->
     if
     :: (held == 0 || seq < held) && seq > applied + 1 -> held = seq; cphase[c] = C_EARLY
     :: (held == 0 || seq < held) && seq <= applied + 1 -> cphase[c] = C_HELD  /* the CHECK fails: rolled back */
     :: else -> cphase[c] = C_EARLY
     fi
  :: seq == cread[c] + 1 ->
     recorded = !inbox[cm[c]];
     inbox[cm[c]] = true;
     applied = seq;
     if :: held != 0 && held <= seq + 1 -> held = 0 :: else -> skip fi;
     if :: recorded -> EFFECT(cm[c], seq, NEW) :: else -> skip fi;
     cphase[c] = C_DONE
  fi;
  cread[c] = 0; seq = 0; recorded = 0
}
#endif

/*
 * A relay (src/relay/relay.ts: a Worker whose handler publishes): claims a message, publishes it,
 * and once the broker acknowledged it completes it under its token; any number of these at once.
 */
proctype relay(byte r) {
end_idle:
  do
  :: d_step { rphase[r] == R_IDLE && CLAIMABLE(0) -> claim(r, 0); INVARIANTS() }
  :: d_step { rphase[r] == R_IDLE && CLAIMABLE(1) -> claim(r, 1); INVARIANTS() }
  :: d_step { rphase[r] == R_IDLE && CLAIMABLE(2) -> claim(r, 2); INVARIANTS() }

#ifndef MUTANT_COMPLETE_BEFORE_PUBLISH
  /*
   * publisher.publish(outgoing(message)) and the broker's acknowledgement (NATS PubAck, the AMQP
   * confirm, XADD, a 2xx): the broker holds a copy. A relay paused past its lease publishes all the
   * same (the publish was on its way), so a message may reach the broker once per claim.
   */
  :: d_step { rphase[r] == R_CLAIMED ->
       PUBLISH(rm[r], rseq[r]);
       rphase[r] = R_CONFIRMED; INVARIANTS() }

  /*
   * complete (the Worker's group commit: completeBulk, with handOn; PostgreSQL completeBulkHandOn):
   * WHERE id AND lease_token = @token AND status = 'processing'; processed, and key A handed on
   * with the number + 1 (wassal_hand_on(keys, key_seq + 1)). Refused: the message is someone
   * else's now, and stays published (the broker has it twice once the other relay publishes too).
   */
  :: d_step { rphase[r] == R_CONFIRMED ->
       if
       :: CURRENT(r) ->
#ifdef BROKER_DEDUPE
          /* the number the key hands on past reached the broker (so the consumer sees no gap) */
          assert(!KEYED(rm[r]) || numReached[rseq[r]]);
#endif
          status[rm[r]] = PROCESSED; expired[rm[r]] = false; NOT_LIVE(rm[r]);
          if :: KEYED(rm[r]) -> handOn(keySeq[rm[r]] + 1) :: else -> skip fi
       :: else -> skip
       fi;
       forget(r); INVARIANTS() }
#else
  /* MUTANT: the relay completes (and hands the key on) before it publishes; the publish is the next step */
  :: d_step { rphase[r] == R_CLAIMED ->
       if
       :: CURRENT(r) ->
          status[rm[r]] = PROCESSED; expired[rm[r]] = false; NOT_LIVE(rm[r]);
          if :: KEYED(rm[r]) -> handOn(keySeq[rm[r]] + 1) :: else -> skip fi;
          rphase[r] = R_COMPLETED
       :: else -> forget(r)
       fi;
       INVARIANTS() }
  :: d_step { rphase[r] == R_COMPLETED ->
       PUBLISH(rm[r], rseq[r]);
       forget(r); INVARIANTS() }
#endif

  /*
   * The broker refused it for good (PermanentPublishError: too large, a 4xx), or its failures used
   * up the retries: failDead (WHERE id AND lease_token AND status = 'processing'): dead, still
   * holding its key.
   */
  :: d_step { rphase[r] == R_CLAIMED && FAULT_OK ->
       SPEND;
       if
       :: CURRENT(r) -> status[rm[r]] = DEAD; expired[rm[r]] = false; NOT_LIVE(rm[r])
       :: else -> skip
       fi;
       forget(r); INVARIANTS() }

  /* a crash: the process dies and forgets its lease, which ends later (reapDeadOwners, or its time) */
  :: d_step { rphase[r] != R_IDLE && FAULT_OK ->
       SPEND; forget(r); INVARIANTS() }
  od
}

/*
 * Leases end: a relay paused past its lease (a fault in the progress run), or one that crashed
 * (its owner reaped by reapDeadOwners, or its time ran out). The row becomes claimable again.
 */
proctype leases() {
end_leases:
  do
  :: d_step { status[0] == PROCESSING && !expired[0] && EXPIRE_OK(0) -> EXPIRE_SPEND(0); expired[0] = true; INVARIANTS() }
  :: d_step { status[1] == PROCESSING && !expired[1] && EXPIRE_OK(1) -> EXPIRE_SPEND(1); expired[1] = true; INVARIANTS() }
  :: d_step { status[2] == PROCESSING && !expired[2] && EXPIRE_OK(2) -> EXPIRE_SPEND(2); expired[2] = true; INVARIANTS() }
  od
}

/* the broker hands consumer c a copy of m with number n (unacknowledged: it comes again unless c acks it) */
#define TAKE(m, n) d_step { cphase[c] == C_IDLE && ready[SLOT(m, n)] > 0 -> \
                     ready[SLOT(m, n)]--; cm[c] = m; cseq[c] = n; cphase[c] = C_HELD; INVARIANTS() }

/*
 * A consumer (src/relay/deliver.ts: deliver, as NatsConsumer, RabbitMqConsumer and
 * RedisStreamsConsumer call it): takes a copy from the broker, applies it through the inbox, and
 * acknowledges it after the commit; an early one goes back to the broker.
 */
proctype consumer(byte c) {
end_idle:
  do
#ifdef LIVENESS
  :: d_step { cphase[c] == C_IDLE && len(queue) > 0 ->
       queue?cm[c],cseq[c]; ready[SLOT(cm[c], cseq[c])]--; cphase[c] = C_HELD; INVARIANTS() }
#else
  :: TAKE(0, 1)
  :: TAKE(0, 2)
  :: TAKE(1, 1)
  :: TAKE(1, 2)
  :: TAKE(2, 0)
#endif

  /* Inbox.handle: its one transaction, committed (a transaction rolled back is a step not taken) */
#ifdef MUTANT_NO_KEY_TURN
  :: d_step { cphase[c] == C_HELD && KEYED(cm[c]) -> cread[c] = applied; cphase[c] = C_TURN; INVARIANTS() }
  :: d_step { cphase[c] == C_TURN -> handleRest(c); giveBackEarly(c); INVARIANTS() }
  :: d_step { cphase[c] == C_HELD && !KEYED(cm[c]) -> handle(c); INVARIANTS() }
#else
  :: d_step { cphase[c] == C_HELD -> handle(c); giveBackEarly(c); INVARIANTS() }
#endif

#ifdef MUTANT_EFFECT_APART
  /* MUTANT: the effect committed in a transaction of its own; the id (and the key's number) now, in a second one */
  :: d_step { cphase[c] == C_APART ->
       inbox[cm[c]] = true;
       if
       :: cnew[c] ->
          applied = cseq[c];
          if :: held != 0 && held <= applied + 1 -> held = 0 :: else -> skip fi
       :: else -> skip
       fi;
       cnew[c] = false; cphase[c] = C_DONE; INVARIANTS() }
#endif

  /* broker.ack() after the commit: the copy is gone */
  :: d_step { cphase[c] == C_DONE ->
       /* acknowledged only once its effect committed (applied now, or before: a duplicate) */
       assert(effects[cm[c]] > 0);
       cphase[c] = C_IDLE; cm[c] = 0; cseq[c] = 0; INVARIANTS() }

  /*
   * A crash (or a lost connection, or stop() past its grace) with a copy in hand: its open
   * transaction rolls back, nothing is acknowledged, and the broker delivers the copy again (after
   * its ack wait). After the commit and before the ack, the copy comes again all the same.
   */
  :: d_step { cphase[c] != C_IDLE && FAULT_OK ->
       SPEND;
#ifdef MUTANT_ACK_BEFORE_COMMIT
       skip;   /* MUTANT: the copy was acknowledged when it was delivered (auto-ack): nothing comes again */
#else
       PUT(cm[c], cseq[c]);
#endif
       cphase[c] = C_IDLE; cm[c] = 0; cseq[c] = 0;
#ifdef MUTANT_EFFECT_APART
       cnew[c] = false;
#endif
#ifdef MUTANT_NO_KEY_TURN
       cread[c] = 0;
#endif
       INVARIANTS() }
  od
}

#ifdef MUTANT_SKIP_PASSES_NEXT
#define SKIP_PASSES(m) (keySeq[m] + 1)  /* MUTANT: a skipped holder passes its number + 1 on, as a completed one does */
#else
#define SKIP_PASSES(m) keySeq[m]        /* its own number: it was never published, as far as the outbox knows */
#endif

#ifdef REDRIVE
/*
 * redriveSome (after auditRedriveSome, one transaction): a dead message back to pending. A dead
 * holder keeps its key and its number; a skipped one (redrivenKeyState, redrivenKeySeq) waits,
 * without a number, if its key has a holder or a waiting message, else holds it with the number
 * outbox_keys remembers (else 1).
 */
inline redrive(m) {
  status[m] = PENDING;
  if
  :: KEYED(m) && keyState[m] == 2 && (HOLDS_A(1 - m) || WAITS_A(1 - m)) -> keyState[m] = 1; keySeq[m] = 0
  :: KEYED(m) && keyState[m] == 2 && !(HOLDS_A(1 - m) || WAITS_A(1 - m)) ->
     keyState[m] = 0; keySeq[m] = (nextA == 0 -> 1 : nextA);
     givenTo[keySeq[m]] = givenTo[keySeq[m]] | (m + 1)
  :: else -> skip
  fi
}
#endif

/*
 * Operators: outbox unblock --skip (skipKeyHolder + handOn with the skipped holder's own number,
 * LeasedOutbox #skip), inbox unblock --skip (inboxSkipGap: applied_seq = held_seq - 1, nothing
 * held), and with REDRIVE outbox redrive. (Cancel is lease.pml's; not modelled here.)
 */
proctype operator() {
end_operator:
  do
  :: d_step { OP_OK && HOLDS_A(0) && status[0] == DEAD ->
       SPEND_OP; keyState[0] = 2; everSkipped[0] = true; handOn(SKIP_PASSES(0)); INVARIANTS() }
  :: d_step { OP_OK && HOLDS_A(1) && status[1] == DEAD ->
       SPEND_OP; keyState[1] = 2; everSkipped[1] = true; handOn(SKIP_PASSES(1)); INVARIANTS() }
  :: d_step { OP_OK && held != 0 ->
       SPEND_OP;
       j = applied + 1;
       do
       :: j < held -> numPassed[j] = true; j++
       :: else -> break
       od;
       applied = held - 1; held = 0; j = 0;
       INVARIANTS() }
#ifdef REDRIVE
  :: d_step { OP_OK && status[0] == DEAD -> SPEND_OP; redrive(0); INVARIANTS() }
  :: d_step { OP_OK && status[1] == DEAD -> SPEND_OP; redrive(1); INVARIANTS() }
  :: d_step { OP_OK && status[2] == DEAD -> SPEND_OP; redrive(2); INVARIANTS() }
#endif
  od
}

/*
 * The start: three messages enqueued (enqueue): 0 holds key A with number 1 (the key is free),
 * 1 waits behind it (key_state 1, no number yet), 2 has no key; all pending. Then the relays, the
 * leases' clock, the consumers and the operator start. (Enqueues during the run are not modelled.)
 */
init {
  atomic {
    keySeq[0] = 1; givenTo[1] = 1;
    keyState[1] = 1;
#ifdef KEY_ONLY
    /* a smaller run: message 2 (no key) was published and applied before it starts; only key A's messages move */
    status[2] = PROCESSED; inbox[2] = true; effects[2] = 1;
#endif
    run relay(0); run relay(1);
    run leases();
    run consumer(0); run consumer(1);
    run operator()
  }
}

#ifdef LIVENESS
/*
 * Progress: every message's effect is applied, or it is dead in the outbox (visible, for an
 * operator), or it waits behind its key's dead holder (a blocked key, by design).
 */
#define BLOCKED_1 (status[1] == PENDING && keyState[1] == 1 && status[0] == DEAD && keyState[0] == 0)
#define SETTLED(m) (effects[m] == 1 || status[m] == DEAD)
ltl progress { <> [] (SETTLED(0) && (SETTLED(1) || BLOCKED_1) && SETTLED(2)) }
#endif
