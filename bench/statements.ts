// The server CPU of the two statements each message costs on PostgreSQL, the claim and the
// completion, with nothing else running: one connection, batches of 100, and the backend's own CPU
// time around each statement, read from /proc/<pid>/schedstat (the scheduler's nanoseconds, where
// /proc/<pid>/stat counts 10 ms ticks). Noise on the machine moves a run's rate by tens of percent;
// this moves by a few, so a change to a statement shows here first. Three subjects, measured in
// interleaved rounds, each round on fresh tables:
// - Wassal: store.claim and store.completeMany through a store whose pool holds one connection
//   (its named prepared statements, as a worker runs them);
// - the equal-work loop's two statements (raw-sql.ts), prepared the same way, on one connection;
// - the same on two connections, the claim on one and the completion on the other, taking turns
//   (never at once): what moving between backends costs, as a worker does that claims on one
//   connection while its group commit runs on another.

import { readFileSync } from "node:fs";
import pg from "pg";
import { openOutbox } from "wassal/lab";
import { rawClaimSql, rawGuardedCompleteSql } from "./raw-sql.js";
import { spread, type Spread } from "./stats.js";

export const STATEMENT_SUBJECTS = ["Wassal", "equal-work loop", "equal-work loop, two connections"] as const;
export type StatementSubject = (typeof STATEMENT_SUBJECTS)[number];

export interface StatementCost {
  readonly subject: StatementSubject;
  /** Backend CPU µs per message, medians over the rounds (every round's figure in samples). */
  readonly claimUs: Spread;
  readonly completeUs: Spread;
  /** The client's wall time per message, claim to completion, in µs. */
  readonly wallUs: Spread;
}

const BATCH = 100;

/** A backend's CPU time so far in µs, or null when its process is not visible from here. */
function backendCpuUs(pid: number): number | null {
  try {
    return Number(readFileSync(`/proc/${pid}/schedstat`, "utf8").split(" ")[0]) / 1000;
  } catch {
    return null;
  }
}

/** Runs `statement` and adds the CPU the backend spent meanwhile to `into`. */
async function timed<T>(pid: number, into: { us: number }, statement: () => Promise<T>): Promise<T> {
  const before = backendCpuUs(pid);
  const value = await statement();
  const after = backendCpuUs(pid);
  if (before === null || after === null) throw new Error(`statements: the CPU time of backend ${pid} cannot be read (is PostgreSQL on this machine?)`);
  into.us += after - before;
  return value;
}

async function pidOf(client: pg.ClientBase): Promise<number> {
  return (await client.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]?.pid ?? -1;
}

interface Totals {
  claim: { us: number };
  complete: { us: number };
}

/** Claims and completes every message of the table through the Wassal store, one connection. */
async function drainWassal(db: string, schema: string, totals: Totals): Promise<number> {
  const outbox = await openOutbox(db, { schema, maxConnections: 1 });
  try {
    const pid = await outbox.store.transaction((tx) => pidOf(tx as pg.ClientBase));
    let processed = 0;
    for (;;) {
      const leases = await timed(pid, totals.claim, () => outbox.store.claim("bench-statements", { limit: BATCH, leaseMs: 30_000 }));
      if (leases.length === 0) return processed;
      const results = await timed(pid, totals.complete, () => outbox.store.completeMany(leases.map((lease) => ({ lease }))));
      if (results.some((r) => r.outcome !== "completed")) throw new Error("statements: a Wassal completion was refused");
      processed += leases.length;
    }
  } finally {
    await outbox.close();
  }
}

/** The same with the equal-work loop's statements; the completion on a second connection when `two`. */
async function drainEqualWork(db: string, schema: string, two: boolean, totals: Totals): Promise<number> {
  const claimer = new pg.Client({ connectionString: db });
  const completer = two ? new pg.Client({ connectionString: db }) : claimer;
  await claimer.connect();
  try {
    if (two) await completer.connect();
    const claimPid = await pidOf(claimer);
    const completePid = await pidOf(completer);
    const claim = { name: "bench_equal_claim", text: rawClaimSql(schema, true), values: [BATCH] };
    let processed = 0;
    for (;;) {
      const { rows } = await timed(claimPid, totals.claim, () => claimer.query<{ id: string; lease_token: number }>(claim));
      if (rows.length === 0) return processed;
      const done = await timed(completePid, totals.complete, () =>
        completer.query({
          name: "bench_equal_complete",
          text: rawGuardedCompleteSql(schema),
          values: [rows.map((r) => r.id), rows.map((r) => r.lease_token)],
        }),
      );
      if (done.rowCount !== rows.length) throw new Error("statements: an equal-work completion lost a lease");
      processed += rows.length;
    }
  } finally {
    await claimer.end();
    if (two) await completer.end();
  }
}

/**
 * `rounds` rounds of the three subjects in turn, each on a table `prepare` fills with `messages`
 * pending messages (and `cleanup` drops); the figures are per message.
 */
export async function statementCosts(
  rounds: number,
  messages: number,
  prepare: () => Promise<{ db: string; schema: string; cleanup: () => Promise<void> }>,
): Promise<StatementCost[]> {
  const samples = new Map(STATEMENT_SUBJECTS.map((s) => [s, { claim: [] as number[], complete: [] as number[], wall: [] as number[] }]));
  for (let round = 1; round <= rounds; round += 1) {
    for (const subject of STATEMENT_SUBJECTS) {
      const prepared = await prepare();
      try {
        const totals: Totals = { claim: { us: 0 }, complete: { us: 0 } };
        const started = performance.now();
        const processed =
          subject === "Wassal"
            ? await drainWassal(prepared.db, prepared.schema, totals)
            : await drainEqualWork(prepared.db, prepared.schema, subject !== "equal-work loop", totals);
        const wallUs = (performance.now() - started) * 1000;
        if (processed !== messages) throw new Error(`statements: ${subject} processed ${processed} of ${messages} messages`);
        const s = samples.get(subject);
        s?.claim.push(totals.claim.us / processed);
        s?.complete.push(totals.complete.us / processed);
        s?.wall.push(wallUs / processed);
      } finally {
        await prepared.cleanup();
      }
      process.stderr.write(`statements: round ${round}/${rounds}, ${subject} done\n`);
    }
  }
  return STATEMENT_SUBJECTS.map((subject) => {
    const s = samples.get(subject) ?? { claim: [], complete: [], wall: [] };
    return { subject, claimUs: spread(s.claim), completeUs: spread(s.complete), wallUs: spread(s.wall) };
  });
}
