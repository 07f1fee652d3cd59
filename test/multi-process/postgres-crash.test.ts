// A worker process SIGKILLed on PostgreSQL: its leases stay on the rows until they expire on the
// database's clock, then another process reclaims the unfinished messages under token 2. A
// completion transaction that was open when the process died is rolled back by the server, so its
// business write never appears. Nothing is lost, nothing is done twice.
//
// Needs `npm run build` first (`npm test` does it) and a PostgreSQL server (skipped loudly
// without one, fatal under CI).

import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { overlappingClaims } from "../support/assertions.js";
import { requireBuilt } from "../support/cli.js";
import { freshSchema, postgresAvailable, TEST_DATABASE_URL, withClient } from "../support/postgres.js";
import { tempDir } from "../support/temp.js";
import { until } from "../support/wait.js";
import { finalStateProblems, readPgState, seedPostgresOutbox } from "./postgres-outbox.js";
import { expectTakenOverAfterExpiry, killAll, startWorker, type ClaimRecord, type WorkerProcess, type WorkerRecord } from "./worker-process.js";

const PG = await postgresAvailable();
// A schema per test (each named while the file is collected, all dropped when it finishes).
const SCHEMAS = PG
  ? { kill: freshSchema("wassal_mp_kill"), live: freshSchema("wassal_mp_live"), open: freshSchema("wassal_mp_opentx") }
  : { kill: "", live: "", open: "" };
const FILE_TMP = tempDir("wassal-mp-pg-crash-");

beforeAll(() => requireBuilt("stores/postgres/postgres-outbox-store.js"));

interface Holding {
  claims: ClaimRecord[];
  completed: { messageId: string; outcome: string }[];
  hangingIn?: { messageId: string; token: number };
}

/** Starts the victim (worker-A), waits until it holds its batch, SIGKILLs it. */
async function killVictim(
  schema: string,
  options: { leaseMs: number; limit: number; completeFirst: number; hangInComplete?: boolean; applicationName: string },
): Promise<Holding> {
  const victim = startWorker({
    store: "postgres",
    url: TEST_DATABASE_URL,
    schema,
    applicationName: options.applicationName,
    maxConnections: 2,
    worker: "worker-A",
    mode: "claim-and-hang",
    leaseMs: options.leaseMs,
    limit: options.limit,
    completeFirst: options.completeFirst,
    hangInComplete: options.hangInComplete ?? false,
  });
  try {
    const holding = (await victim.waitFor("holding")) as unknown as Holding;
    expect(victim.proc.kill("SIGKILL")).toBe(true);
    expect(await victim.exited).toEqual({ code: null, signal: "SIGKILL" });
    return holding;
  } finally {
    killAll([victim]);
  }
}

/** Runs worker-B in drain mode to the end and returns its record. */
async function drainWith(schema: string, out: string, limit: number): Promise<WorkerRecord> {
  let rescuer: WorkerProcess | undefined;
  try {
    rescuer = startWorker({
      store: "postgres",
      url: TEST_DATABASE_URL,
      schema,
      worker: "worker-B",
      mode: "drain",
      leaseMs: 30_000,
      limit,
      out,
      emptyRoundsToStop: 3,
      deadlineMs: 40_000,
    });
    const exit = await rescuer.exited;
    expect({ ...exit, stderr: rescuer.stderr() }).toEqual({ code: 0, signal: null, stderr: "" });
  } finally {
    if (rescuer) killAll([rescuer]);
  }
  const record = JSON.parse(readFileSync(out, "utf8")) as WorkerRecord;
  expect(record.errors).toEqual([]);
  expect(record.opErrors).toEqual([]);
  expect(record.leaseLost).toEqual([]);
  return record;
}

/** Live leases on the database's clock. */
async function liveLeases(schema: string): Promise<number> {
  return withClient(
    async (client) =>
      (
        await client.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM ${schema}.outbox_messages WHERE status = 'processing' AND locked_until > clock_timestamp()`,
        )
      ).rows[0]!.n,
  );
}

async function databaseNow(): Promise<number> {
  return withClient(async (client) => (await client.query<{ now: Date }>("SELECT clock_timestamp() AS now")).rows[0]!.now.getTime());
}

describe.runIf(PG)("a worker process killed mid-batch on PostgreSQL loses its messages only to lease expiry", () => {
  it("SIGKILL with leases held: after expiry on the database clock another process reclaims them (token 2) and nothing is lost", async () => {
    const schema = SCHEMAS.kill;
    const dir = mkdtempSync(join(FILE_TMP, "kill-"));
    const TOTAL = 60;
    const BATCH = 10;
    const DONE_BEFORE_KILL = 3;
    const SHORT_LEASE_MS = 1000;
    const ids = await seedPostgresOutbox(schema, TOTAL);

    const holding = await killVictim(schema, {
      leaseMs: SHORT_LEASE_MS,
      limit: BATCH,
      completeFirst: DONE_BEFORE_KILL,
      applicationName: `wassal_mp_kill_${randomBytes(4).toString("hex")}`,
    });
    expect(holding.claims).toHaveLength(BATCH);
    for (const claim of holding.claims) {
      expect(claim).toMatchObject({ owner: "worker-A", token: 1, reclaimedFrom: null });
      expect(claim.lockedUntil - claim.claimedAt).toBe(SHORT_LEASE_MS);
    }
    expect(holding.completed).toHaveLength(DONE_BEFORE_KILL);
    expect(holding.completed.every((c) => c.outcome === "completed")).toBe(true);
    const completedByVictim = new Set(holding.completed.map((c) => c.messageId));
    const heldByVictim = holding.claims.filter((c) => !completedByVictim.has(c.messageId));
    expect(heldByVictim).toHaveLength(BATCH - DONE_BEFORE_KILL);
    const victimLease = new Map(holding.claims.map((c) => [c.messageId, c]));

    // Right after the kill: the batch is still on the rows, nothing was lost or released.
    const afterKill = await readPgState(schema);
    expect(
      afterKill.rows
        .filter((r) => r.status === "processed")
        .map((r) => r.id)
        .sort(),
    ).toEqual([...completedByVictim].sort());
    const processing = afterKill.rows.filter((r) => r.status === "processing");
    expect(processing.map((r) => r.id).sort()).toEqual(heldByVictim.map((c) => c.messageId).sort());
    for (const row of processing) {
      expect(row).toMatchObject({ locked_by: "worker-A", lease_token: 1, attempts: 1 });
      expect(row.locked_until?.getTime()).toBe(victimLease.get(row.id)!.lockedUntil);
    }
    expect(afterKill.rows.filter((r) => r.status === "pending")).toHaveLength(TOTAL - BATCH);
    expect(afterKill.effects).toHaveLength(DONE_BEFORE_KILL);

    // Poll the database (with a deadline) until every lease the dead process held has expired.
    await until("the killed worker's leases to expire", async () => (await liveLeases(schema)) === 0);
    expect(await databaseNow()).toBeGreaterThanOrEqual(Math.max(...heldByVictim.map((c) => c.lockedUntil)));

    const record = await drainWith(schema, join(dir, "worker-B.json"), 8);

    // The rescuer took over exactly the dead worker's unfinished messages, with token 2, after expiry.
    expectTakenOverAfterExpiry(record, "worker-A", holding.claims, heldByVictim);
    expect(record.claims).toHaveLength(TOTAL - DONE_BEFORE_KILL);

    // Nothing lost, nothing done twice, every effect by the message's final owner and token.
    const { rows, effects } = await readPgState(schema);
    expect(rows.map((r) => r.id)).toEqual(ids);
    expect(finalStateProblems(rows, effects)).toEqual([]);
    expect(effects).toHaveLength(TOTAL);
    const held = new Set(heldByVictim.map((c) => c.messageId));
    for (const row of rows) {
      const expected = completedByVictim.has(row.id)
        ? { locked_by: "worker-A", lease_token: 1, attempts: 1 }
        : held.has(row.id)
          ? { locked_by: "worker-B", lease_token: 2, attempts: 2 }
          : { locked_by: "worker-B", lease_token: 1, attempts: 1 };
      expect({ id: row.id, status: row.status, locked_by: row.locked_by, lease_token: row.lease_token, attempts: row.attempts }).toEqual({
        id: row.id,
        status: "processed",
        ...expected,
      });
    }
  });

  it("a process started while the dead owner's leases are live does not take them before they expire on the database clock", async () => {
    const schema = SCHEMAS.live;
    const dir = mkdtempSync(join(FILE_TMP, "live-"));
    const TOTAL = 30;
    const BATCH = 6;
    // Leases of 10 minutes: live until the test ends them (below), whatever the machine's speed.
    const LEASE_MS = 600_000;
    await seedPostgresOutbox(schema, TOTAL);

    const holding = await killVictim(schema, {
      leaseMs: LEASE_MS,
      limit: BATCH,
      completeFirst: 0,
      applicationName: `wassal_mp_live_${randomBytes(4).toString("hex")}`,
    });
    expect(holding.claims).toHaveLength(BATCH);

    // Started at once: it drains the pending messages, then keeps polling while the leases are live.
    const out = join(dir, "worker-B.json");
    const rescuer = startWorker({
      store: "postgres",
      url: TEST_DATABASE_URL,
      schema,
      worker: "worker-B",
      mode: "drain",
      leaseMs: 30_000,
      limit: 4,
      out,
      emptyRoundsToStop: 3,
      deadlineMs: 50_000,
      reportEmptyClaims: true,
    });
    let expiry: Map<string, number>;
    try {
      // It has taken every pending message and then found nothing claimable, three times, while
      // every lease of the dead owner was live: it took none of them.
      await until("worker-B's third empty claim", () => {
        if (rescuer.proc.exitCode !== null) throw new Error(`worker-B exited early: ${rescuer.stderr()}`);
        return rescuer.events().filter((e) => e.event === "empty-claim").length >= 3;
      });
      const live = await readPgState(schema);
      expect(live.rows.filter((r) => r.status === "pending")).toEqual([]);
      expect(
        live.rows
          .filter((r) => r.status === "processing")
          .map((r) => ({ id: r.id, locked_by: r.locked_by, lease_token: r.lease_token }))
          .sort((x, y) => x.id.localeCompare(y.id)),
      ).toEqual(holding.claims.map((c) => ({ id: c.messageId, locked_by: "worker-A", lease_token: 1 })).sort((x, y) => x.id.localeCompare(y.id)));
      // Time passes, as a manual clock would make it: the dead owner's leases end now on the database's clock
      // (a processing row's available_at is its lease's end too).
      expiry = await withClient(async (client) => {
        const ended = await client.query<{ id: string; locked_until: Date }>(
          `WITH now AS (SELECT clock_timestamp() AS at)
           UPDATE ${schema}.outbox_messages SET locked_until = now.at, available_at = now.at FROM now
           WHERE status = 'processing' AND locked_by = 'worker-A' RETURNING id::text AS id, locked_until`,
        );
        return new Map(ended.rows.map((r) => [r.id, r.locked_until.getTime()]));
      });
      expect([...expiry.keys()].sort()).toEqual(holding.claims.map((c) => c.messageId).sort());
      const exit = await rescuer.exited;
      expect({ ...exit, stderr: rescuer.stderr() }).toEqual({ code: 0, signal: null, stderr: "" });
    } finally {
      killAll([rescuer]);
    }
    const record = JSON.parse(readFileSync(out, "utf8")) as WorkerRecord;
    expect(record.errors).toEqual([]);
    expect(record.opErrors).toEqual([]);
    expect(record.leaseLost).toEqual([]);

    // It took the dead owner's messages over (token 2) only once their leases had ended.
    expectTakenOverAfterExpiry(
      record,
      "worker-A",
      holding.claims.map((c) => ({ ...c, lockedUntil: expiry.get(c.messageId)! })),
    );

    const { rows, effects } = await readPgState(schema);
    expect(rows).toHaveLength(TOTAL);
    expect(rows.filter((r) => r.locked_by !== "worker-B")).toEqual([]);
    expect(finalStateProblems(rows, effects)).toEqual([]);
    expect(effects).toHaveLength(TOTAL);
  });

  it("SIGKILL inside an open completion transaction: the server rolls it back (no business row), the row lock goes, the message is reclaimed after expiry", async () => {
    const schema = SCHEMAS.open;
    const dir = mkdtempSync(join(FILE_TMP, "opentx-"));
    const TOTAL = 20;
    const BATCH = 5;
    const DONE_BEFORE_KILL = 2;
    const SHORT_LEASE_MS = 1000;
    const appName = `wassal_mp_opentx_${randomBytes(4).toString("hex")}`;
    const ids = await seedPostgresOutbox(schema, TOTAL);

    const holding = await killVictim(schema, {
      leaseMs: SHORT_LEASE_MS,
      limit: BATCH,
      completeFirst: DONE_BEFORE_KILL,
      hangInComplete: true,
      applicationName: appName,
    });
    expect(holding.claims).toHaveLength(BATCH);
    expect(holding.completed.map((c) => c.outcome)).toEqual(Array(DONE_BEFORE_KILL).fill("completed"));
    const hanging = holding.hangingIn!;
    expect(hanging.token).toBe(1);
    const completedByVictim = new Set(holding.completed.map((c) => c.messageId));
    expect(completedByVictim.has(hanging.messageId)).toBe(false);

    // The server notices the dead client and ends its backend, rolling the open transaction back.
    await until("the killed worker's backends to end", () =>
      withClient(
        async (client) =>
          (await client.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1", [appName])).rows[0]!.n === 0,
      ),
    );
    const afterKill = await readPgState(schema);
    // Only the committed completions left a business row; the open one's insert is gone.
    expect(afterKill.effects.map((e) => e.message_id).sort()).toEqual([...completedByVictim].sort());
    const row = afterKill.rows.find((r) => r.id === hanging.messageId)!;
    expect(row).toMatchObject({ status: "processing", locked_by: "worker-A", lease_token: 1, attempts: 1 });

    await until("the killed worker's leases to expire", async () => (await liveLeases(schema)) === 0);
    const record = await drainWith(schema, join(dir, "worker-B.json"), 8);
    const heldByVictim = holding.claims.filter((c) => !completedByVictim.has(c.messageId));
    expect(
      record.claims
        .filter((c) => c.reclaimedFrom !== null)
        .map((c) => c.messageId)
        .sort(),
    ).toEqual(heldByVictim.map((c) => c.messageId).sort());
    expect(record.claims.filter((c) => c.messageId === hanging.messageId)).toMatchObject([{ owner: "worker-B", token: 2, reclaimedFrom: "worker-A" }]);
    expect(overlappingClaims([...holding.claims, ...record.claims])).toEqual([]);

    const final = await readPgState(schema);
    expect(final.rows.map((r) => r.id)).toEqual(ids);
    expect(finalStateProblems(final.rows, final.effects)).toEqual([]);
    expect(final.effects).toHaveLength(TOTAL);
    expect(final.effects.filter((e) => e.message_id === hanging.messageId)).toEqual([{ message_id: hanging.messageId, worker: "worker-B", token: 2 }]);
  });
});
