// A real OS process in the reclaim-versus-completion race, working one outbox through the built
// library (dist/) with the audit trail on (audit: true). One JSON argument:
//
//   { store: "sqlite" | "postgres", db (sqlite file) | url + schema (postgres),
//     role: "completer" | "reclaimer", worker, leaseMs, limit, total, out, deadlineMs,
//     completeConcurrency? (default 1), target? (reclaimer: the completer's name), applicationName? }
//
// Times: SQLite uses the system clock, shared by every process on the machine; PostgreSQL uses the
// database's clock (no clock is injected). Leases are a few milliseconds long, so they expire all
// the time, mostly while the completer is still on its way to complete them.
//
// completer: claims a batch, then completes its leases, `completeConcurrency` at a time, each with
//            a business write (a row in `effects`) in the same transaction; stops once all `total`
//            messages are processed.
// reclaimer: claims (and so reclaims every expired lease it meets) in a loop and never completes;
//            with `target`, every other round it first reads which messages that worker holds
//            right now and reclaims them by name (claimMessage: taken if the lease has expired,
//            "blocked" if not). Stops when the parent writes "stop" on stdin.
//
// Talks to the parent with JSON lines on stdout ({"event":"ready"}); reads "go" and "stop" on
// stdin; writes what it saw to `out` as JSON when it finishes.

import { writeFileSync } from "node:fs";
import { createInterface } from "node:readline";

const config = JSON.parse(process.argv[2] ?? "{}");
const {
  store: storeKind,
  db,
  url,
  schema,
  role,
  worker,
  leaseMs,
  limit,
  total,
  out,
  deadlineMs = 40_000,
  completeConcurrency = 1,
  target = null,
  applicationName,
} = config;

const send = (event) => process.stdout.write(`${JSON.stringify(event)}\n`);

let store;
try {
  if (storeKind === "postgres") {
    const { PostgresOutboxStore } = await import(new URL("../../dist/postgres.js", import.meta.url).href);
    store = await PostgresOutboxStore.connect({
      url,
      schema,
      audit: true,
      maxConnections: completeConcurrency + 1,
      applicationName: applicationName ?? worker,
    });
  } else {
    const { SqliteOutboxStore } = await import(new URL("../../dist/sqlite.js", import.meta.url).href);
    // NORMAL: no flush per commit (durability is not under test; locking is the same).
    store = new SqliteOutboxStore({ path: db, audit: true, synchronous: "NORMAL" });
  }
} catch (error) {
  process.stderr.write(`race-worker ${worker}: cannot open the store (run npm run build first?): ${error?.message ?? error}\n`);
  process.exit(3);
}

/** Every claim this process won: message, token, when (the store's clock) and the expiry. */
const claims = [];
/** Every completion attempt: its lease, its outcome, and when it started and returned (Date.now()). */
const completions = [];
/** Claim calls made, and how many came back empty. */
let claimCalls = 0;
let emptyClaims = 0;
/**
 * claimMessage calls made by name, by outcome. `processed`: the message was processing under the
 * target's lease when read, and processed by the time of the claim, which then took nothing.
 */
const namedClaims = { claimed: 0, blocked: 0, processed: 0, other: 0 };

/** Reads the ids of the messages `owner` holds now (processing), soonest expiry first: outside any transaction. */
let heldBy;
let effect;
if (storeKind === "postgres") {
  const held = `SELECT id::text AS id FROM ${schema}.outbox_messages WHERE status = 'processing' AND locked_by = $1 ORDER BY locked_until LIMIT 5`;
  heldBy = async (owner) => (await store.pool.query(held, [owner])).rows.map((r) => r.id);
  const insert = `INSERT INTO ${schema}.effects (message_id, owner, token) VALUES ($1, $2, $3)`;
  effect = (lease) => async (tx) => {
    await tx.query(insert, [lease.messageId, lease.owner, lease.token]);
  };
} else {
  const { default: Database } = await import("better-sqlite3");
  const reader = new Database(db, { readonly: true, fileMustExist: true });
  const held = reader.prepare("SELECT id FROM outbox_messages WHERE status = 'processing' AND locked_by = ? ORDER BY locked_until LIMIT 5");
  heldBy = async (owner) => held.all(owner).map((r) => String(r.id));
  const insert = store.db.prepare("INSERT INTO effects (message_id, owner, token) VALUES (?, ?, ?)");
  effect = (lease) => (tx) => {
    if (tx !== store.db || !tx.inTransaction) throw new Error("finalize ran outside the store's transaction");
    insert.run(Number(lease.messageId), lease.owner, lease.token);
  };
}

const tick = () => new Promise((resolve) => setImmediate(resolve));

function record(lease) {
  if (lease.owner !== worker) throw new Error(`claim returned a lease owned by ${lease.owner}, not ${worker}`);
  claims.push({
    messageId: lease.messageId,
    token: lease.token,
    owner: lease.owner,
    lockedUntil: lease.lockedUntil.getTime(),
    reclaimedFrom: lease.reclaimedFrom,
  });
}

async function claimByName(messageId) {
  const result = await store.claimMessage(worker, messageId, { leaseMs });
  if (result.outcome === "claimed") {
    namedClaims.claimed += 1;
    record(result.lease);
  } else if (result.outcome === "blocked") {
    namedClaims.blocked += 1;
  } else if (result.status === "processed") {
    namedClaims.processed += 1;
  } else {
    namedClaims.other += 1;
  }
}

async function claim() {
  claimCalls += 1;
  const leases = await store.claim(worker, { limit, leaseMs });
  if (leases.length === 0) emptyClaims += 1;
  for (const lease of leases) record(lease);
  return leases;
}

async function complete() {
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    if (Date.now() > deadline) throw new Error(`not all ${total} messages were processed within ${deadlineMs} ms`);
    const leases = await claim();
    let next = 0;
    const runners = Array.from({ length: Math.min(completeConcurrency, leases.length) }, async () => {
      while (next < leases.length) {
        const lease = leases[next];
        next += 1;
        const startedAt = Date.now();
        const result = await store.complete(lease, effect(lease));
        completions.push({
          messageId: lease.messageId,
          token: lease.token,
          lockedUntil: lease.lockedUntil.getTime(),
          outcome: result.outcome,
          startedAt,
          endedAt: Date.now(),
          current: result.outcome === "lease-lost" ? result.current : null,
        });
      }
    });
    await Promise.all(runners);
    if (leases.length === 0) {
      const counts = await store.countByStatus();
      if (counts.processed === total) return;
      await tick();
    }
  }
}

let stopRequested = false;

async function reclaim() {
  const deadline = Date.now() + deadlineMs + 10_000;
  let round = 0;
  while (!stopRequested) {
    if (Date.now() > deadline) throw new Error(`no stop within ${deadlineMs + 10_000} ms`);
    round += 1;
    if (target !== null && round % 2 === 0) {
      // Read, then write: between the two the completer may complete any of these.
      for (const id of await heldBy(target)) await claimByName(id);
    }
    await claim();
    // Let the event loop read stdin (and, on SQLite, give the write lock a chance to change hands).
    await tick();
  }
}

const go = new Promise((resolve) => {
  const lines = createInterface({ input: process.stdin });
  lines.on("line", (line) => {
    if (line.trim() === "go") resolve();
    if (line.trim() === "stop") stopRequested = true;
  });
  lines.on("close", () => {
    stopRequested = true;
    resolve();
  });
});

try {
  send({ event: "ready", pid: process.pid });
  await go;
  const startedAt = Date.now();
  if (role === "completer") await complete();
  else await reclaim();
  const finishedAt = Date.now();
  const writeLock = store.writeLock?.stats ?? null;
  await store.close();
  writeFileSync(
    out,
    JSON.stringify({
      worker,
      role,
      store: storeKind,
      pid: process.pid,
      startedAt,
      finishedAt,
      claimCalls,
      emptyClaims,
      namedClaims,
      claims,
      completions,
      writeLock,
      error: null,
    }),
  );
  process.exit(0);
} catch (error) {
  const text = `${error?.name ?? "Error"}: ${error?.message ?? String(error)}`;
  process.stderr.write(`race-worker ${worker}: ${text}\n`);
  try {
    writeFileSync(
      out,
      JSON.stringify({ worker, role, store: storeKind, pid: process.pid, claimCalls, emptyClaims, namedClaims, claims, completions, error: text }),
    );
  } catch {
    // the parent reports the exit code and stderr
  }
  process.exit(1);
}
