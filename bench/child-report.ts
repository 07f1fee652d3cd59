// What every bench child process shares: "ready" on stdout, the wait for "go" on stdin, and the
// last line it prints, a JSON report with the CPU time the process spent from "go" to its end.
// CPU comes from process.cpuUsage() (getrusage of the whole process: every thread, so the V8
// garbage collector's helper threads and libuv's pool too, in µs). Startup, connecting and
// anything else before "go" are left out, as the parent's clock leaves them out; so is a warm-up run
// (warm-child.ts), which ends before "ready".

let started: NodeJS.CpuUsage | undefined;
/** While warm-child.ts runs a script on its warm-up store: no "ready", no wait for "go", no report. */
let warmingUp = false;
/** What the warm-up processed (reported as warmedUp with the run's figures), undefined without one. */
let warmedUp: number | undefined;

/** warm-child.ts only: the script that runs next is the untimed warm-up (true) or the measured run (false). */
export function setWarmingUp(on: boolean): void {
  warmingUp = on;
}

/** The SQLite store's write-lock figures (SqliteOutboxStore.writeLock.stats), or undefined on PostgreSQL. */
interface LockStats {
  readonly heldMs: number;
  readonly committingMs: number;
  readonly heldOnCpuMs: number;
  readonly heldRunnableMs: number;
  readonly waitedMs: number;
  readonly contended: number;
}

interface LockFigures {
  lockHeldMs: number;
  lockCommitMs: number;
  lockWaitedMs: number;
  /** Of the held time, this process on a CPU, and its thread waiting for one (null: not Linux). */
  lockOnCpuMs: number | null;
  lockRunnableMs: number | null;
}

/**
 * How long this process held SQLite's write lock (and waited for it) from "go" on, and where the
 * held time went (WriteLock.measureHolding): call with the store right after readyThenGo; the
 * returned function reads the figures for the report.
 */
export function writeLockSince(store: object): () => LockFigures | Record<string, never> {
  const lock = (store as { writeLock?: { stats: LockStats; measureHolding(): boolean } }).writeLock;
  if (lock === undefined) return () => ({});
  const { stats } = lock;
  const measured = lock.measureHolding();
  const start = { ...stats };
  return () => ({
    lockHeldMs: stats.heldMs - start.heldMs,
    lockCommitMs: stats.committingMs - start.committingMs,
    lockWaitedMs: stats.waitedMs - start.waitedMs,
    lockOnCpuMs: measured ? stats.heldOnCpuMs - start.heldOnCpuMs : null,
    lockRunnableMs: measured ? stats.heldRunnableMs - start.heldRunnableMs : null,
  });
}

/** Prints "ready", waits for "go" on stdin, then starts counting CPU time. */
export async function readyThenGo(): Promise<void> {
  if (warmingUp) return;
  process.stdout.write("ready\n");
  await new Promise<void>((resolve) => process.stdin.once("data", () => resolve()));
  started = process.cpuUsage();
}

/** The report line (during a warm-up, nothing: its count goes into the run's line as warmedUp): what the child did, its peak RSS, and its user and system CPU µs since "go". */
export function report(fields: { processed: number } & Record<string, unknown>): void {
  if (warmingUp) {
    warmedUp = (warmedUp ?? 0) + fields.processed;
    return;
  }
  const cpu = process.cpuUsage(started);
  process.stdout.write(
    `${JSON.stringify({ ...fields, ...(warmedUp === undefined ? {} : { warmedUp }), maxRssMb: Math.round(process.resourceUsage().maxRSS / 1024), cpuUserUs: cpu.user, cpuSystemUs: cpu.system })}\n`,
  );
}
