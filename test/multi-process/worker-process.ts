// Starting worker processes (test/fixtures/drain-worker.mjs) and reading what they report, for the
// multi-process tests on SQLite and PostgreSQL. The workers import the built library (dist/), so
// `npm run build` must run first (`npm test` does).

import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

export const ROOT = fileURLToPath(new URL("../../", import.meta.url));
export const WORKER_SCRIPT = join(ROOT, "test", "fixtures", "drain-worker.mjs");

/** Throws when the built file the workers import is missing. */
export function requireBuilt(relativePath: string): void {
  const path = join(ROOT, "dist", relativePath);
  if (!existsSync(path)) throw new Error(`${path} is missing: run \`npm run build\` before these tests (npm test does)`);
}

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

export function startWorker(config: WorkerConfig): WorkerProcess {
  const proc = spawn(process.execPath, [WORKER_SCRIPT, JSON.stringify(config)], { cwd: ROOT, stdio: ["pipe", "pipe", "pipe"] });
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

/** Kills every worker still running (for finally blocks, so a failed test leaves no process behind). */
export function killAll(workers: readonly WorkerProcess[]): void {
  for (const w of workers) {
    if (w.proc.exitCode === null && w.proc.signalCode === null) w.proc.kill("SIGKILL");
  }
}

/** Claims of one message by different tokens must never overlap in [claimedAt, lockedUntil). */
export function overlappingClaims(claims: readonly ClaimRecord[]): string[] {
  const byMessage = new Map<string, ClaimRecord[]>();
  for (const claim of claims) {
    const list = byMessage.get(claim.messageId);
    if (list === undefined) byMessage.set(claim.messageId, [claim]);
    else list.push(claim);
  }
  const problems: string[] = [];
  for (const [messageId, list] of byMessage) {
    for (let i = 0; i < list.length; i += 1) {
      for (let j = i + 1; j < list.length; j += 1) {
        const a = list[i]!;
        const b = list[j]!;
        if (a.token === b.token) {
          problems.push(`message ${messageId}: token ${a.token} issued twice (${a.owner}, ${b.owner})`);
        } else if (a.claimedAt < b.lockedUntil && b.claimedAt < a.lockedUntil) {
          problems.push(`message ${messageId}: ${a.owner}#${a.token} [${a.claimedAt}, ${a.lockedUntil}) overlaps ${b.owner}#${b.token} [${b.claimedAt}, ${b.lockedUntil})`);
        }
      }
    }
  }
  return problems;
}

/** Polls `probe` until it returns true, or fails after `timeoutMs`. */
export async function until(what: string, probe: () => boolean | Promise<boolean>, timeoutMs = 10_000, everyMs = 20): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}
