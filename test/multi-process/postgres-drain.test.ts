// Real parallelism on PostgreSQL: four OS processes, each with its own PostgresOutboxStore (its
// own pool) and no injected clock (lease times come from the database's clock_timestamp()), drain
// one outbox of 20,000 messages through the built library (dist/). Every completion writes a row
// to a business table that has no unique constraint, inside the guarded completion transaction,
// so a message done twice, or by a worker that no longer owned it, would show.
//
// Needs `npm run build` first (`npm test` does it) and a PostgreSQL server (skipped loudly
// without one, fatal under CI).

import { mkdtempSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { overlappingClaims } from "../support/assertions.js";
import { requireBuilt } from "../support/cli.js";
import { freshSchema, postgresAvailable, TEST_DATABASE_URL } from "../support/postgres.js";
import { tempDir } from "../support/temp.js";
import { finalStateProblems, readPgState, seedPostgresOutbox } from "./postgres-outbox.js";
import { expectWorkedInParallel, killAll, startWorker, type WorkerProcess, type WorkerRecord } from "./worker-process.js";

const PG = await postgresAvailable();
// One schema for this file, dropped when it finishes (only named when the server answers).
const SCHEMA = PG ? freshSchema("wassal_mp_drain") : "";
const FILE_TMP = tempDir("wassal-mp-pg-drain-");

beforeAll(() => requireBuilt("stores/postgres/postgres-outbox-store.js"));

describe.runIf(PG)("several worker processes drain one PostgreSQL outbox in parallel", () => {
  const MESSAGES = 20_000;
  const WORKERS = 4;
  const LIMIT = 50;
  const LEASE_MS = 120_000; // far longer than the run: no lease may expire, so none may be lost
  // About 20 s alone; every completion is its own durable commit, so it slows down a lot when the
  // rest of the suite runs beside it. The deadline only stops a hung run: this test is about
  // exactly-once, not speed.
  const DEADLINE_MS = 110_000;

  it(
    `${WORKERS} processes, each with its own pool and the database clock, process each of ${MESSAGES} messages exactly once`,
    async () => {
      const dir = mkdtempSync(join(FILE_TMP, "drain-"));
      const seedStarted = performance.now();
      const ids = await seedPostgresOutbox(SCHEMA, MESSAGES, 4);
      const seedMs = performance.now() - seedStarted;
      expect(ids).toHaveLength(MESSAGES);
      expect(new Set(ids).size).toBe(MESSAGES);

      const workers: { out: string; process: WorkerProcess }[] = [];
      try {
        for (let i = 1; i <= WORKERS; i += 1) {
          const name = `pg-worker-${i}`;
          const out = join(dir, `${name}.json`);
          workers.push({
            out,
            process: startWorker({
              store: "postgres",
              url: TEST_DATABASE_URL,
              schema: SCHEMA,
              applicationName: `wassal-mp-drain-${i}`,
              maxConnections: 3,
              worker: name,
              mode: "drain",
              leaseMs: LEASE_MS,
              limit: LIMIT,
              completeConcurrency: 2,
              out,
              waitForGo: true,
              emptyRoundsToStop: 5,
              deadlineMs: DEADLINE_MS,
            }),
          });
        }
        // A start line: every process has connected its pool before any of them claims.
        await Promise.all(workers.map((w) => w.process.waitFor("ready")));
        for (const w of workers) w.process.proc.stdin!.end("go\n");
        const exits = await Promise.all(workers.map((w) => w.process.exited));
        exits.forEach((exit, i) => {
          const w = workers[i]!;
          expect({ worker: w.process.name, ...exit, stderr: w.process.stderr() }).toEqual({ worker: w.process.name, code: 0, signal: null, stderr: "" });
        });
      } finally {
        killAll(workers.map((w) => w.process));
      }
      const records = workers.map((w) => JSON.parse(readFileSync(w.out, "utf8")) as WorkerRecord);

      // No process failed or retried anything, and no lease was ever lost.
      for (const record of records) {
        expect(record.store).toBe("postgres");
        expect(record.errors, `${record.worker} errors`).toEqual([]);
        expect(record.opErrors, `${record.worker} failed operations`).toEqual([]);
        expect(record.leaseLost, `${record.worker} lease-lost events`).toEqual([]);
        expect(
          record.completions.filter((c) => c.outcome !== "completed"),
          `${record.worker} completions that did not complete`,
        ).toEqual([]);
      }

      // Claims: never more than asked for (the MATERIALIZED CTE's guarantee), and full batches really
      // happened; exactly one claim per message over all processes, token 1, owned by the claimer,
      // lease = leaseMs on the database's clock.
      const allCalls = records.flatMap((r) => r.claimCalls);
      expect(allCalls.filter((c) => c.count > LIMIT)).toEqual([]);
      expect(Math.max(...allCalls.map((c) => c.count))).toBe(LIMIT);
      const fullBatches = allCalls.filter((c) => c.count === LIMIT).length;
      const claims = records.flatMap((r) => r.claims);
      expect(claims).toHaveLength(MESSAGES);
      expect(new Set(claims.map((c) => c.messageId))).toEqual(new Set(ids));
      const claimProblems: string[] = [];
      for (const record of records) {
        for (const claim of record.claims) {
          if (claim.owner !== record.worker || claim.token !== 1 || claim.reclaimedFrom !== null || claim.lockedUntil - claim.claimedAt !== LEASE_MS) {
            claimProblems.push(`${record.worker}: ${JSON.stringify(claim)}`);
          }
        }
      }
      expect(claimProblems).toEqual([]);
      expect(overlappingClaims(claims)).toEqual([]);
      // Each process completed exactly what it claimed, and they all worked, at once.
      expectWorkedInParallel(records);

      // The database: every message processed once (one effects row), by the process whose lease
      // completed it, on the first attempt; no ownership violation.
      const { rows, effects } = await readPgState(SCHEMA);
      expect(rows.map((r) => r.id)).toEqual(ids);
      expect(effects).toHaveLength(MESSAGES);
      expect(finalStateProblems(rows, effects)).toEqual([]);
      const claimedBy = new Map(claims.map((c) => [c.messageId, c.owner]));
      expect(rows.filter((r) => r.attempts !== 1 || r.lease_token !== 1 || r.locked_by !== claimedBy.get(r.id)).map((r) => JSON.stringify(r))).toEqual([]);

      const started = Math.min(...records.map((r) => r.startedAt));
      const finished = Math.max(...records.map((r) => r.finishedAt));
      const rate = Math.round(MESSAGES / ((finished - started) / 1000));
      const split = records.map((r) => `${r.worker} ${r.claims.length}`).join(", ");
      console.info(
        `PostgreSQL parallel drain: ${MESSAGES} messages enqueued in ${Math.round(seedMs)} ms, drained by ${WORKERS} processes in ${finished - started} ms ` +
          `(${rate} messages/s; ${allCalls.length} claim calls, ${fullBatches} of ${LIMIT}); ${split}`,
      );
    },
    DEADLINE_MS + 20_000,
  );
});
