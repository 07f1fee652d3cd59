// Real parallelism: several OS processes, each with its own SQLite connection and the system
// clock, work one outbox file through the built library (dist/). Then a worker process is
// SIGKILLed mid-batch and another one recovers its messages after the leases expire.
//
// Needs `npm run build` first (`npm test` does it).

import { mkdtempSync, readFileSync } from "node:fs";
import { join } from "node:path";
import Database from "better-sqlite3";
import { beforeAll, describe, expect, it } from "vitest";
import { SqliteOutboxStore } from "../../src/stores/sqlite/sqlite-outbox-store.js";
import { overlappingClaims } from "../support/assertions.js";
import { requireBuilt } from "../support/cli.js";
import { tempDir } from "../support/temp.js";
import { until } from "../support/wait.js";
import { expectTakenOverAfterExpiry, expectWorkedInParallel, startWorker, type ClaimRecord, type WorkerRecord } from "./worker-process.js";

// One folder for the whole file, removed when it finishes (tempDir must be called while the file
// is collected, not inside a test: a hook registered by a running test never runs).
const FILE_TMP = tempDir("wassal-mp-");
const testDir = (name: string) => mkdtempSync(join(FILE_TMP, `${name}-`));

/** Creates an outbox with `count` messages (in transactions of `perTransaction`) and the effects table. */
async function seedOutbox(path: string, count: number, perTransaction: number): Promise<string[]> {
  const store = new SqliteOutboxStore({ path });
  try {
    await store.migrate();
    // The business table: deliberately WITHOUT a unique constraint, so a duplicate effect would show.
    await store.transaction((tx) => {
      tx.exec("CREATE TABLE effects (message_id INTEGER, worker TEXT, token INTEGER)");
    });
    const ids: string[] = [];
    for (let start = 0; start < count; start += perTransaction) {
      await store.transaction(async (tx) => {
        for (let n = start; n < Math.min(count, start + perTransaction); n += 1) {
          const message = await store.enqueue(tx, { type: "test.effect", payload: { n } });
          ids.push(message.id);
        }
      });
    }
    return ids;
  } finally {
    await store.close();
  }
}

interface Row {
  id: number;
  status: string;
  locked_by: string | null;
  locked_until: number | null;
  lease_token: number;
  attempts: number;
  processed_at: number | null;
  last_error: string | null;
}

function readState(path: string): { rows: Row[]; effects: { message_id: number; worker: string; token: number }[] } {
  const db = new Database(path, { readonly: true });
  try {
    return {
      rows: db
        .prepare("SELECT id, status, locked_by, locked_until, lease_token, attempts, processed_at, last_error FROM outbox_messages ORDER BY id")
        .all() as Row[],
      effects: db.prepare("SELECT message_id, worker, token FROM effects ORDER BY message_id, token").all() as {
        message_id: number;
        worker: string;
        token: number;
      }[],
    };
  } finally {
    db.close();
  }
}

beforeAll(() => requireBuilt("stores/sqlite/sqlite-outbox-store.js"));

// ---------------------------------------------------------------------------------------------

describe("several worker processes drain one SQLite outbox in parallel", () => {
  const MESSAGES = 4000;
  const WORKERS = 4;
  const LIMIT = 8;
  const LEASE_MS = 30_000;

  it(`${WORKERS} processes process each of ${MESSAGES} messages exactly once, under exclusive leases`, async () => {
    const dir = testDir("drain");
    const dbPath = join(dir, "outbox.db");
    const ids = await seedOutbox(dbPath, MESSAGES, 1000);
    expect(ids).toHaveLength(MESSAGES);

    const workers = Array.from({ length: WORKERS }, (_, i) => {
      const name = `worker-${i + 1}`;
      const out = join(dir, `${name}.json`);
      return {
        out,
        process: startWorker({
          db: dbPath,
          worker: name,
          mode: "drain",
          leaseMs: LEASE_MS,
          limit: LIMIT,
          out,
          waitForGo: true,
          emptyRoundsToStop: 5,
          deadlineMs: 45_000,
        }),
      };
    });
    // A start line: every process has opened its connection before any of them claims.
    await Promise.all(workers.map((w) => w.process.waitFor("ready")));
    for (const w of workers) w.process.proc.stdin!.end("go\n");
    const exits = await Promise.all(workers.map((w) => w.process.exited));

    exits.forEach((exit, i) => {
      const w = workers[i]!;
      expect({ worker: w.process.name, ...exit, stderr: w.process.stderr() }).toEqual({ worker: w.process.name, code: 0, signal: null, stderr: "" });
    });
    const records = workers.map((w) => JSON.parse(readFileSync(w.out, "utf8")) as WorkerRecord);

    // No worker failed: no StoreBusyError or anything else, and no lease was ever lost.
    for (const record of records) {
      expect(record.store).toBe("sqlite");
      expect(record.writeLock, `${record.worker} write-lock figures`).not.toBeNull();
      expect(record.errors, `${record.worker} errors`).toEqual([]);
      expect(record.leaseLost, `${record.worker} lease-lost events`).toEqual([]);
      expect(
        record.completions.every((c) => c.outcome === "completed"),
        `${record.worker} completions`,
      ).toBe(true);
    }

    // Claims: never more than the limit per call (and batching really happened), exactly one
    // claim per message over all processes, token 1, owned by the claimer, lease = leaseMs.
    const allCalls = records.flatMap((r) => r.claimCalls);
    expect(Math.max(...allCalls.map((c) => c.count))).toBe(LIMIT);
    expect(allCalls.every((c) => c.count >= 0 && c.count <= LIMIT)).toBe(true);
    const claims = records.flatMap((r) => r.claims);
    expect(claims).toHaveLength(MESSAGES);
    expect(new Set(claims.map((c) => c.messageId)).size).toBe(MESSAGES);
    expect(new Set(claims.map((c) => c.messageId))).toEqual(new Set(ids));
    for (const record of records) {
      for (const claim of record.claims) {
        expect(claim).toMatchObject({ owner: record.worker, token: 1, reclaimedFrom: null });
        expect(claim.lockedUntil - claim.claimedAt).toBe(LEASE_MS);
      }
    }
    expect(overlappingClaims(claims)).toEqual([]);
    // Each process completed exactly what it claimed, and they all worked, at once.
    expectWorkedInParallel(records);

    // The database: every message processed, once, by the process whose lease completed it.
    const { rows, effects } = readState(dbPath);
    expect(rows).toHaveLength(MESSAGES);
    const claimedBy = new Map(claims.map((c) => [c.messageId, c.owner]));
    for (const row of rows) {
      expect(row).toMatchObject({
        status: "processed",
        attempts: 1,
        lease_token: 1,
        locked_until: null,
        last_error: null,
        locked_by: claimedBy.get(String(row.id)),
      });
      expect(row.processed_at).not.toBeNull();
    }
    expect(effects).toHaveLength(MESSAGES);
    const effectsPerMessage = new Map<number, number>();
    for (const e of effects) effectsPerMessage.set(e.message_id, (effectsPerMessage.get(e.message_id) ?? 0) + 1);
    expect([...effectsPerMessage.values()].every((n) => n === 1)).toBe(true);
    expect(effectsPerMessage.size).toBe(MESSAGES);
    for (const e of effects) expect({ worker: e.worker, token: e.token }).toEqual({ worker: claimedBy.get(String(e.message_id)), token: 1 });

    const split = records
      .map((r) => `${r.worker} ${r.claims.length} (lock waits ${r.writeLock?.contended}, longest ${Math.round(r.writeLock?.longestWaitMs ?? NaN)} ms)`)
      .join("; ");
    console.info(`parallel drain of ${MESSAGES} messages: ${split}`);
  });
});

describe("a worker process killed mid-batch loses its messages only to lease expiry", () => {
  it("SIGKILL with leases held: after expiry another process reclaims them (token 2) and nothing is lost", async () => {
    const dir = testDir("kill");
    const dbPath = join(dir, "outbox.db");
    const TOTAL = 60;
    const BATCH = 10;
    const DONE_BEFORE_KILL = 3;
    const SHORT_LEASE_MS = 300;
    const ids = await seedOutbox(dbPath, TOTAL, 30);

    const victim = startWorker({
      db: dbPath,
      worker: "worker-A",
      mode: "claim-and-hang",
      leaseMs: SHORT_LEASE_MS,
      limit: BATCH,
      completeFirst: DONE_BEFORE_KILL,
    });
    const holding = (await victim.waitFor("holding")) as unknown as { claims: ClaimRecord[]; completed: { messageId: string; outcome: string }[] };
    expect(victim.proc.kill("SIGKILL")).toBe(true);
    expect(await victim.exited).toEqual({ code: null, signal: "SIGKILL" });

    expect(holding.claims).toHaveLength(BATCH);
    expect(holding.completed).toHaveLength(DONE_BEFORE_KILL);
    expect(holding.completed.every((c) => c.outcome === "completed")).toBe(true);
    const completedByVictim = new Set(holding.completed.map((c) => c.messageId));
    const heldByVictim = holding.claims.filter((c) => !completedByVictim.has(c.messageId));
    expect(heldByVictim).toHaveLength(BATCH - DONE_BEFORE_KILL);
    const victimLease = new Map(holding.claims.map((c) => [c.messageId, c]));

    // Right after the kill: the batch is still on the rows, nothing was lost or released.
    const afterKill = readState(dbPath);
    expect(
      afterKill.rows
        .filter((r) => r.status === "processed")
        .map((r) => String(r.id))
        .sort(),
    ).toEqual([...completedByVictim].sort());
    const processing = afterKill.rows.filter((r) => r.status === "processing");
    expect(processing.map((r) => String(r.id)).sort()).toEqual(heldByVictim.map((c) => c.messageId).sort());
    for (const row of processing)
      expect(row).toMatchObject({ locked_by: "worker-A", lease_token: 1, attempts: 1, locked_until: victimLease.get(String(row.id))!.lockedUntil });
    expect(afterKill.rows.filter((r) => r.status === "pending")).toHaveLength(TOTAL - BATCH);
    expect(afterKill.effects).toHaveLength(DONE_BEFORE_KILL);

    // Wait (polling the database, with a deadline) until every lease the dead process held has expired.
    await until("the killed worker's leases to expire", () => {
      const db = new Database(dbPath, { readonly: true });
      try {
        const live = db.prepare("SELECT count(*) FROM outbox_messages WHERE status = 'processing' AND locked_until > ?").pluck().get(Date.now()) as number;
        return live === 0;
      } finally {
        db.close();
      }
    });
    expect(Date.now()).toBeGreaterThanOrEqual(Math.max(...heldByVictim.map((c) => c.lockedUntil)));

    const out = join(dir, "worker-B.json");
    const rescuer = startWorker({ db: dbPath, worker: "worker-B", mode: "drain", leaseMs: 30_000, limit: 8, out, emptyRoundsToStop: 3 });
    const exit = await rescuer.exited;
    expect({ ...exit, stderr: rescuer.stderr() }).toEqual({ code: 0, signal: null, stderr: "" });
    const record = JSON.parse(readFileSync(out, "utf8")) as WorkerRecord;
    expect(record.errors).toEqual([]);
    expect(record.leaseLost).toEqual([]);

    // The rescuer took over exactly the dead worker's unfinished messages, with token 2, after expiry.
    expectTakenOverAfterExpiry(record, "worker-A", holding.claims, heldByVictim);
    expect(record.claims).toHaveLength(TOTAL - DONE_BEFORE_KILL);

    // Nothing lost, nothing done twice.
    const { rows, effects } = readState(dbPath);
    expect(rows.map((r) => String(r.id))).toEqual(ids);
    const held = new Set(heldByVictim.map((c) => c.messageId));
    for (const row of rows) {
      const id = String(row.id);
      const expected = completedByVictim.has(id)
        ? { locked_by: "worker-A", lease_token: 1, attempts: 1 }
        : held.has(id)
          ? { locked_by: "worker-B", lease_token: 2, attempts: 2 }
          : { locked_by: "worker-B", lease_token: 1, attempts: 1 };
      expect({ id, status: row.status, locked_by: row.locked_by, lease_token: row.lease_token, attempts: row.attempts }).toEqual({
        id,
        status: "processed",
        ...expected,
      });
    }
    expect(effects).toHaveLength(TOTAL);
    expect(new Set(effects.map((e) => e.message_id)).size).toBe(TOTAL);
    for (const e of effects) {
      const id = String(e.message_id);
      expect({ id, worker: e.worker, token: e.token }).toEqual({
        id,
        worker: completedByVictim.has(id) ? "worker-A" : "worker-B",
        token: held.has(id) ? 2 : 1,
      });
    }
  });

  it("a process started while the dead owner's leases are live does not take them before they expire", async () => {
    const dir = testDir("live");
    const dbPath = join(dir, "outbox.db");
    const TOTAL = 30;
    const BATCH = 6;
    const LEASE_MS = 3000;
    await seedOutbox(dbPath, TOTAL, TOTAL);

    const victim = startWorker({ db: dbPath, worker: "worker-A", mode: "claim-and-hang", leaseMs: LEASE_MS, limit: BATCH });
    const holding = (await victim.waitFor("holding")) as unknown as { claims: ClaimRecord[] };
    victim.proc.kill("SIGKILL");
    expect((await victim.exited).signal).toBe("SIGKILL");
    expect(holding.claims).toHaveLength(BATCH);
    const expiry = new Map(holding.claims.map((c) => [c.messageId, c.lockedUntil]));
    const firstExpiry = Math.min(...expiry.values());

    // Started at once: it drains the pending messages and keeps polling while the leases are live.
    const out = join(dir, "worker-B.json");
    const rescuer = startWorker({ db: dbPath, worker: "worker-B", mode: "drain", leaseMs: 30_000, limit: 4, out, emptyRoundsToStop: 3 });
    const exit = await rescuer.exited;
    expect({ ...exit, stderr: rescuer.stderr() }).toEqual({ code: 0, signal: null, stderr: "" });
    const record = JSON.parse(readFileSync(out, "utf8")) as WorkerRecord;
    expect(record.errors).toEqual([]);

    // It was really claiming while the dead owner's leases were still live...
    expect(Math.min(...record.claimCalls.map((c) => c.startedAt))).toBeLessThan(firstExpiry);
    // ...yet it took none of those messages before its lease ran out.
    expectTakenOverAfterExpiry(record, "worker-A", holding.claims);

    const { rows, effects } = readState(dbPath);
    expect(rows.every((r) => r.status === "processed" && r.locked_by === "worker-B")).toBe(true);
    expect(effects).toHaveLength(TOTAL);
    expect(new Set(effects.map((e) => e.message_id)).size).toBe(TOTAL);
  });
});
