// The server CPU of the two statements each message costs on PostgreSQL, the claim and the
// completion, with nothing else running: one connection, batches of 100, and the backend's own CPU
// time from the start of each statement to the start of the next (the backend is idle in between,
// waiting for the client), read from /proc/<pid>/schedstat (the scheduler's nanoseconds, where
// /proc/<pid>/stat counts 10 ms ticks). A round still moves by tens of percent on a busy machine;
// the median of several interleaved rounds is steadier than a run's rate. Three subjects, measured
// in interleaved rounds, each round on fresh (analyzed) tables:
// - Wassal: store.claim and store.completeMany through a store whose pool holds one connection
//   (its named prepared statements, as a worker runs them);
// - the equal-work loop's two statements (raw-sql.ts), prepared the same way, on one connection;
// - the same on two connections, the claim on one and the completion on the other, taking turns
//   (never at once): what moving between backends costs, as a worker does that claims on one
//   connection while its group commit runs on another.

import pg from "pg";
import { openOutbox } from "wassal/lab";
import { rawClaimSql, rawGuardedCompleteSql } from "./raw-sql.js";
import { backendCpuUs } from "./server-cpu.js";
import { spread, type Spread } from "./stats.js";

export const STATEMENT_SUBJECTS = ["Wassal", "equal-work loop", "equal-work loop, two connections"] as const;
export type StatementSubject = (typeof STATEMENT_SUBJECTS)[number];

export interface StatementCost {
  readonly subject: StatementSubject;
  /** Backend CPU µs per message, medians over the rounds (every round's figure in samples). */
  readonly claimUs: Spread;
  readonly completeUs: Spread;
  /** The client's wall time per message, from the first claim to the last completion, in µs. */
  readonly wallUs: Spread;
}

const BATCH = 100;

/**
 * One backend's CPU time, each interval charged to the statement that began it: read at the start
 * of every statement, so a statement's tail that the kernel had not yet accounted when it returned
 * is charged to it at the next reading, not lost.
 */
class BackendMeter {
  readonly #pid: number;
  #last: number;
  #open: { us: number } | undefined;

  constructor(pid: number) {
    this.#pid = pid;
    this.#last = this.#read();
  }

  #read(): number {
    const us = backendCpuUs(this.#pid);
    if (us === null) throw new Error(`statements: the CPU time of backend ${this.#pid} cannot be read (is PostgreSQL on this machine?)`);
    return us;
  }

  /** Closes the interval open so far and opens one charged to `into`. */
  mark(into: { us: number } | undefined): void {
    const now = this.#read();
    if (this.#open) this.#open.us += now - this.#last;
    this.#last = now;
    this.#open = into;
  }
}

async function pidOf(client: pg.ClientBase): Promise<number> {
  return (await client.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]?.pid ?? -1;
}

interface Totals {
  claim: { us: number };
  complete: { us: number };
  /** The loop's wall time, connecting and closing left out. */
  wallMs: number;
}

/** Lets a backend's last statement be accounted (a tick at most), then closes its meter. */
async function settle(...meters: BackendMeter[]): Promise<void> {
  await new Promise((resolve) => setTimeout(resolve, 20));
  for (const meter of meters) meter.mark(undefined);
}

/** Claims and completes every message of the table through the Wassal store, one connection. */
async function drainWassal(db: string, schema: string, totals: Totals): Promise<number> {
  const outbox = await openOutbox(db, { schema, maxConnections: 1 });
  try {
    const meter = new BackendMeter(await outbox.store.transaction((tx) => pidOf(tx as pg.ClientBase)));
    let processed = 0;
    const started = performance.now();
    for (;;) {
      meter.mark(totals.claim);
      const leases = await outbox.store.claim("bench-statements", { limit: BATCH, leaseMs: 30_000 });
      if (leases.length === 0) break;
      meter.mark(totals.complete);
      const results = await outbox.store.completeMany(leases.map((lease) => ({ lease })));
      if (results.some((r) => r.outcome !== "completed")) throw new Error("statements: a Wassal completion was refused");
      processed += leases.length;
    }
    totals.wallMs = performance.now() - started;
    await settle(meter);
    return processed;
  } finally {
    await outbox.close();
  }
}

/** The same with the equal-work loop's statements; the completion on a second connection when `two`. */
async function drainEqualWork(db: string, schema: string, two: boolean, totals: Totals): Promise<number> {
  const claimer = new pg.Client({ connectionString: db });
  const completer = two ? new pg.Client({ connectionString: db }) : claimer;
  try {
    await claimer.connect();
    if (two) await completer.connect();
    const claimMeter = new BackendMeter(await pidOf(claimer));
    const completeMeter = two ? new BackendMeter(await pidOf(completer)) : claimMeter;
    const claim = { name: "bench_equal_claim", text: rawClaimSql(schema, true), values: [BATCH] };
    let processed = 0;
    const started = performance.now();
    for (;;) {
      // With two connections each meter is read at its own statements only: its interval runs on
      // through the other backend's statement, while this one is idle.
      claimMeter.mark(totals.claim);
      const { rows } = await claimer.query<{ id: string; lease_token: number }>(claim);
      if (rows.length === 0) break;
      completeMeter.mark(totals.complete);
      const done = await completer.query({
        name: "bench_equal_complete",
        text: rawGuardedCompleteSql(schema),
        values: [rows.map((r) => r.id), rows.map((r) => r.lease_token)],
      });
      if (done.rowCount !== rows.length) throw new Error("statements: an equal-work completion lost a lease");
      processed += rows.length;
    }
    totals.wallMs = performance.now() - started;
    await settle(...new Set([claimMeter, completeMeter]));
    return processed;
  } finally {
    await claimer.end().catch(() => undefined);
    if (two) await completer.end().catch(() => undefined);
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
        const totals: Totals = { claim: { us: 0 }, complete: { us: 0 }, wallMs: 0 };
        const processed =
          subject === "Wassal"
            ? await drainWassal(prepared.db, prepared.schema, totals)
            : await drainEqualWork(prepared.db, prepared.schema, subject !== "equal-work loop", totals);
        if (processed !== messages) throw new Error(`statements: ${subject} processed ${processed} of ${messages} messages`);
        const s = samples.get(subject);
        s?.claim.push(totals.claim.us / processed);
        s?.complete.push(totals.complete.us / processed);
        s?.wall.push((totals.wallMs * 1000) / processed);
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
