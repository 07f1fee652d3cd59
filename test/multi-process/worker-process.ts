// Starting worker processes (test/fixtures/drain-worker.mjs; the race test's race-worker.mjs too),
// reading what they report, and checks over those reports, for the multi-process tests on SQLite
// and PostgreSQL. The workers import the built library (dist/), so `npm run build` must run first
// (`npm test` does).

import { spawn, type ChildProcess } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { expect } from "vitest";
import { overlappingClaims } from "../support/assertions.js";
import { ROOT } from "../support/cli.js";

export const WORKER_SCRIPT = join(ROOT, "test", "fixtures", "drain-worker.mjs");

// ---------------------------------------------------------------------------------------------
// What a worker process reports.

export interface ClaimRecord {
  messageId: string;
  token: number;
  owner: string;
  claimedAt: number;
  lockedUntil: number;
  reclaimedFrom: string | null;
}

export interface OpErrorRecord {
  op: "claim" | "complete" | "count";
  messageId?: string;
  token?: number;
  code: string | null;
  message: string;
  at: number;
}

export interface WorkerRecord {
  worker: string;
  store: "sqlite" | "postgres";
  pid: number;
  startedAt: number;
  finishedAt: number;
  claims: ClaimRecord[];
  claimCalls: { count: number; startedAt: number; endedAt: number }[];
  completions: { messageId: string; token: number; outcome: string; at: number }[];
  leaseLost: { messageId: string; token: number; operation: string; heldBy: string | null; currentToken: number | null }[];
  errors: { name: string | null; code: string | null; message: string }[];
  opErrors: OpErrorRecord[];
  abandoned: { messageId: string; token: number }[];
  writeLock: { contended: number; waitedMs: number; longestWaitMs: number } | null;
}

interface CommonConfig {
  worker: string;
  mode: "drain" | "claim-and-hang";
  leaseMs: number;
  limit: number;
  out?: string;
  waitForGo?: boolean;
  emptyRoundsToStop?: number;
  deadlineMs?: number;
  completeFirst?: number;
  hangInComplete?: boolean;
  completeConcurrency?: number;
  retryConnectionErrors?: boolean;
  /** Report each claim that came back empty as an "empty-claim" event (drain mode). */
  reportEmptyClaims?: boolean;
}

export interface SqliteWorkerConfig extends CommonConfig {
  store?: "sqlite";
  db: string;
}

export interface PostgresWorkerConfig extends CommonConfig {
  store: "postgres";
  url: string;
  schema: string;
  applicationName?: string;
  maxConnections?: number;
}

export type WorkerConfig = SqliteWorkerConfig | PostgresWorkerConfig;

export type WorkerEvent = { event: string; [key: string]: unknown };

export interface WorkerProcess {
  readonly name: string;
  readonly proc: ChildProcess;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  stderr(): string;
  /** Every stdout event so far, in order. */
  events(): readonly WorkerEvent[];
  /** Resolves with the first stdout event of this kind; rejects if the process exits first or time runs out. */
  waitFor(event: string, timeoutMs?: number): Promise<WorkerEvent>;
}

/** Starts test/fixtures/drain-worker.mjs with `config`. */
export function startWorker(config: WorkerConfig): WorkerProcess {
  return startWorkerScript(WORKER_SCRIPT, config);
}

/**
 * Starts `node <script> <config as JSON>` in the repository root: a worker script that reports
 * JSON lines ({"event": …}) on stdout and reads "go"/"stop" lines on stdin (drain-worker.mjs,
 * race-worker.mjs).
 */
export function startWorkerScript(script: string, config: { readonly worker: string }): WorkerProcess {
  const proc = spawn(process.execPath, [script, JSON.stringify(config)], { cwd: ROOT, stdio: ["pipe", "pipe", "pipe"] });
  let stderr = "";
  proc.stderr!.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  const seen: WorkerEvent[] = [];
  const waiters = new Set<() => void>();
  createInterface({ input: proc.stdout! }).on("line", (line) => {
    try {
      seen.push(JSON.parse(line) as WorkerEvent);
    } catch {
      seen.push({ event: "unparsed", line });
    }
    for (const wake of waiters) wake();
  });
  let exitInfo: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    proc.on("exit", (code, signal) => {
      exitInfo = { code, signal };
      for (const wake of waiters) wake();
      resolve(exitInfo);
    });
  });
  return {
    name: config.worker,
    proc,
    exited,
    stderr: () => stderr,
    events: () => seen,
    waitFor(event, timeoutMs = 20_000) {
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(new Error(`${config.worker}: no "${event}" within ${timeoutMs} ms; stderr: ${stderr}`));
        }, timeoutMs);
        const check = () => {
          const found = seen.find((e) => e.event === event);
          if (found !== undefined || exitInfo !== undefined) {
            clearTimeout(timer);
            waiters.delete(check);
            if (found !== undefined) resolve(found);
            else reject(new Error(`${config.worker} exited (${JSON.stringify(exitInfo)}) before "${event}"; stderr: ${stderr}`));
          }
        };
        waiters.add(check);
        check();
      });
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Checks over what the processes reported.

/**
 * The processes shared the work: each completed exactly what it claimed, each claimed some, and
 * none worked alone (the span from its first claim to its last overlaps another one's). "All at
 * once" would be too strong on a loaded machine: a process the scheduler starts late can begin
 * after the quickest one has finished, and still share the work with the rest.
 */
export function expectWorkedInParallel(records: readonly WorkerRecord[]): void {
  for (const record of records) {
    expect(record.completions.map((c) => `${c.messageId}#${c.token}`).sort()).toEqual(record.claims.map((c) => `${c.messageId}#${c.token}`).sort());
  }
  for (const record of records) expect(record.claims.length, `${record.worker} claims`).toBeGreaterThan(0);
  const spans = records.map((r) => ({
    worker: r.worker,
    first: Math.min(...r.claims.map((c) => c.claimedAt)),
    last: Math.max(...r.claims.map((c) => c.claimedAt)),
  }));
  for (const span of spans) {
    const alongside = spans.filter((other) => other !== span && other.first <= span.last && span.first <= other.last).map((other) => other.worker);
    expect(alongside, `${span.worker} (claims from ${span.first} to ${span.last}) worked alongside another process`).not.toEqual([]);
  }
}

/**
 * The rescuer (`record`) took over exactly the messages a dead owner left unfinished (its claims
 * `unfinished`), each under token 2 and only once the dead owner's lease had run out, and no two
 * leases of a message overlapped (`victimClaims`: every claim the dead owner made).
 */
export function expectTakenOverAfterExpiry(
  record: WorkerRecord,
  deadOwner: string,
  victimClaims: readonly ClaimRecord[],
  unfinished: readonly ClaimRecord[] = victimClaims,
): void {
  const expiry = new Map(unfinished.map((c) => [c.messageId, c.lockedUntil]));
  expect(
    record.claims
      .filter((c) => c.reclaimedFrom !== null)
      .map((c) => c.messageId)
      .sort(),
  ).toEqual([...expiry.keys()].sort());
  const takenOver = record.claims.filter((c) => expiry.has(c.messageId));
  expect(takenOver).toHaveLength(unfinished.length);
  for (const claim of takenOver) {
    expect(claim).toMatchObject({ owner: record.worker, token: 2, reclaimedFrom: deadOwner });
    expect(claim.claimedAt).toBeGreaterThanOrEqual(expiry.get(claim.messageId)!);
  }
  expect(overlappingClaims([...victimClaims, ...record.claims])).toEqual([]);
}

/** Kills every worker still running (for finally blocks, so a failed test leaves no process behind). */
export function killAll(workers: readonly WorkerProcess[]): void {
  for (const w of workers) {
    if (w.proc.exitCode === null && w.proc.signalCode === null) w.proc.kill("SIGKILL");
  }
}
