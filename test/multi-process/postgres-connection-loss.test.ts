// Connections lost in the middle of work: worker processes drain a PostgreSQL outbox while the
// test terminates their database connections (pg_terminate_backend on every backend with their
// application name) several times during the run. A worker treats a failed operation on a broken
// connection as retryable (it counts it and goes on; the pool reconnects by itself) and leaves a
// lease whose completion failed to expire. Messages whose claim or completion was cut off are
// reclaimed after their short lease. In the end nothing is lost, nothing is done twice, and every
// business row was written by the message's final owner under its final token.
//
// Needs `npm run build` first (`npm test` does it) and a PostgreSQL server (skipped loudly
// without one, fatal under CI).

import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync } from "node:fs";
import { join } from "node:path";
import pg from "pg";
import { beforeAll, describe, expect, it } from "vitest";
import { overlappingClaims } from "../support/assertions.js";
import { requireBuilt } from "../support/cli.js";
import { freshSchema, postgresAvailable, TEST_DATABASE_URL } from "../support/postgres.js";
import { tempDir } from "../support/temp.js";
import { finalStateProblems, readPgState, seedPostgresOutbox } from "./postgres-outbox.js";
import { killAll, startWorker, type WorkerProcess, type WorkerRecord } from "./worker-process.js";

const PG = await postgresAvailable();
const SCHEMA = PG ? freshSchema("wassal_mp_connloss") : "";
const FILE_TMP = tempDir("wassal-mp-pg-connloss-");

beforeAll(() => requireBuilt("stores/postgres/postgres-outbox-store.js"));

describe.runIf(PG)("worker processes survive their PostgreSQL connections being terminated mid-work", () => {
  const MESSAGES = 3000;
  const WORKERS = 3;
  const LIMIT = 10;
  const LEASE_MS = 1500;
  /** Terminate the workers' connections when this share of the messages is processed. */
  const KILL_AT = [0.1, 0.25, 0.4, 0.55, 0.7];

  it("pg_terminate_backend during the run: failed operations are retried, cut-off leases are reclaimed after expiry, nothing is lost or done twice", async () => {
    const dir = mkdtempSync(join(FILE_TMP, "connloss-"));
    // One application name shared by the workers' pools only, so the test terminates nothing else.
    const appName = `wassal_mp_connloss_${randomBytes(4).toString("hex")}`;
    const ids = await seedPostgresOutbox(SCHEMA, MESSAGES, 2);
    expect(ids).toHaveLength(MESSAGES);

    const workers: { out: string; process: WorkerProcess }[] = [];
    const kills: { processedBefore: number; terminated: number }[] = [];
    const started = Date.now();
    const admin = new pg.Client({ connectionString: TEST_DATABASE_URL, application_name: "wassal-test-killer" });
    await admin.connect();
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
            applicationName: appName,
            maxConnections: 2,
            worker: name,
            mode: "drain",
            leaseMs: LEASE_MS,
            limit: LIMIT,
            out,
            waitForGo: true,
            emptyRoundsToStop: 5,
            deadlineMs: 50_000,
            retryConnectionErrors: true,
          }),
        });
      }
      await Promise.all(workers.map((w) => w.process.waitFor("ready")));
      let allExited = false;
      const exits = Promise.all(workers.map((w) => w.process.exited)).then((values) => {
        allExited = true;
        return values;
      });
      for (const w of workers) w.process.proc.stdin!.end("go\n");

      // The killer: poll progress; at each threshold, terminate every backend of the workers.
      // It stops when the thresholds are used up or the workers are gone (their own deadline bounds the run).
      while (!allExited && kills.length < KILL_AT.length) {
        const processed = (await admin.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${SCHEMA}.outbox_messages WHERE status = 'processed'`)).rows[0]!.n;
        if (processed >= KILL_AT[kills.length]! * MESSAGES) {
          const { rows } = await admin.query<{ terminated: boolean }>(
            "SELECT pg_terminate_backend(pid) AS terminated FROM pg_stat_activity WHERE application_name = $1",
            [appName],
          );
          kills.push({ processedBefore: processed, terminated: rows.filter((r) => r.terminated).length });
        } else {
          await new Promise((resolve) => setTimeout(resolve, 15));
        }
      }
      const exitValues = await exits;
      exitValues.forEach((exit, i) => {
        const w = workers[i]!;
        // A worker must survive its connections being terminated: a failed operation is retried, and
        // no 'error' event of a pg client may go unhandled (that would crash the process).
        expect({ worker: w.process.name, ...exit, stderr: w.process.stderr() }, `${w.process.name} must survive losing its connections`).toEqual({
          worker: w.process.name,
          code: 0,
          signal: null,
          stderr: "",
        });
      });
    } finally {
      killAll(workers.map((w) => w.process));
      await admin.end();
    }
    const elapsed = Date.now() - started;
    const records = workers.map((w) => JSON.parse(readFileSync(w.out, "utf8")) as WorkerRecord);

    // The test really cut connections in the middle of the run, and the workers really saw it.
    expect(kills).toHaveLength(KILL_AT.length);
    for (const kill of kills) {
      expect(kill.terminated, `backends terminated at ${kill.processedBefore} processed`).toBeGreaterThan(0);
      expect(kill.processedBefore, "terminated before the work was done").toBeLessThan(MESSAGES);
    }
    const opErrors = records.flatMap((r) => r.opErrors.map((e) => ({ worker: r.worker, ...e })));
    expect(opErrors.length, "operations that failed on a terminated connection").toBeGreaterThan(0);
    // Only broken connections were retried; nothing else went wrong.
    for (const record of records) expect(record.errors, `${record.worker} errors`).toEqual([]);

    // Claims were never larger than asked, and no two live leases of one message ever overlapped
    // on the database's clock (a cut-off lease was reclaimed only after it expired).
    const allCalls = records.flatMap((r) => r.claimCalls);
    expect(allCalls.filter((c) => c.count > LIMIT)).toEqual([]);
    const claims = records.flatMap((r) => r.claims);
    expect(overlappingClaims(claims)).toEqual([]);

    // Nothing lost, nothing done twice: every message processed, exactly one effects row each,
    // written by the row's final owner under its final token; every claim counted as an attempt.
    const { rows, effects } = await readPgState(SCHEMA);
    expect(rows.map((r) => r.id)).toEqual(ids);
    expect(finalStateProblems(rows, effects)).toEqual([]);
    expect(effects).toHaveLength(MESSAGES);
    expect(rows.filter((r) => r.attempts !== r.lease_token).map((r) => JSON.stringify(r))).toEqual([]);

    // A lease whose completion was cut off either committed after all (the reply was lost) or was
    // rolled back; then its message was reclaimed later, under a newer token, after it expired.
    const byId = new Map(rows.map((r) => [r.id, r]));
    const abandoned = records.flatMap((r) => r.abandoned.map((a) => ({ worker: r.worker, ...a })));
    const reclaimedAfterCut = abandoned.filter((a) => byId.get(a.messageId)!.lease_token > a.token);
    for (const a of abandoned) {
      const row = byId.get(a.messageId)!;
      const committedAnyway = row.lease_token === a.token && row.locked_by === a.worker;
      expect(committedAnyway || row.lease_token > a.token, `message ${a.messageId} after ${a.worker}#${a.token} was cut off`).toBe(true);
    }
    const claimOf = new Map(claims.map((c) => [`${c.messageId}#${c.token}`, c]));
    for (const a of reclaimedAfterCut) {
      const cut = claimOf.get(`${a.messageId}#${a.token}`)!;
      const next = claimOf.get(`${a.messageId}#${a.token + 1}`);
      if (next !== undefined) {
        expect(next.reclaimedFrom).toBe(a.worker);
        expect(next.claimedAt).toBeGreaterThanOrEqual(cut.lockedUntil);
      }
    }

    const leaseLost = records.flatMap((r) => r.leaseLost);
    const reclaims = claims.filter((c) => c.reclaimedFrom !== null).length;
    const byOp = (op: string) => opErrors.filter((e) => e.op === op).length;
    console.info(
      `PostgreSQL connection loss: ${MESSAGES} messages, ${WORKERS} processes, ${elapsed} ms; ${kills.length} kills terminated ` +
        `${kills.map((k) => `${k.terminated}@${k.processedBefore}`).join(", ")} backends; ${opErrors.length} failed operations ` +
        `(claim ${byOp("claim")}, complete ${byOp("complete")}, count ${byOp("count")}); ${abandoned.length} completions cut off, ` +
        `${reclaimedAfterCut.length} of them reclaimed; ${reclaims} reclaims in all; ${leaseLost.length} lease-lost; ` +
        `messages with token > 1: ${rows.filter((r) => r.lease_token > 1).length}`,
    );
  });
});
