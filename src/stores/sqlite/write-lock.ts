// Write transactions on one better-sqlite3 connection. better-sqlite3 is synchronous and its
// busy handler blocks the event loop, so the connection waits there only briefly (busy_timeout,
// 2 ms by default) and then retries BEGIN IMMEDIATE asynchronously with backoff and jitter. A
// mutex keeps the connection's async transactions from interleaving.

import { AsyncLocalStorage } from "node:async_hooks";
import { closeSync, openSync, readSync } from "node:fs";
import type Database from "better-sqlite3";
import { sqliteDriver } from "./driver.js";
import { StoreBusyError, StoreReadOnlyError, WassalError } from "../../outbox/errors.js";

function isBusy(error: unknown): boolean {
  const code = (error as { code?: unknown }).code;
  return typeof code === "string" && (code === "SQLITE_BUSY" || code.startsWith("SQLITE_BUSY_") || code === "SQLITE_LOCKED");
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * The longest wait between two tries of BEGIN IMMEDIATE (doubling from 1 ms, ±50 % jitter). A
 * waiter that has backed off to 50 ms (the cap before) leaves the lock free for most of that wait
 * once it is released. The bench's SQLite NORMAL workers, 100,000 messages, 3 alternated rounds
 * (`--sections throughput --no-peers --processes 2,4`), medians in msg/s with 2 / 4 processes:
 * busy_timeout 10 ms with a 50 ms cap (before): batch 100 45,747 / 40,134, batch 500 47,155 /
 * 45,544; busy_timeout 0 with this cap: 48,006 / 45,475 and 61,031 / 61,445. Then busy_timeout
 * 0 / 2 / 10 ms, all with this cap, 3 more rounds: batch 100 61,946 / 50,693 / 51,748 (2
 * processes) and 46,373 / 55,116 / 42,662 (4), batch 500 64,644 / 57,212 / 53,947 and 54,728 /
 * 59,468 / 61,707: the rounds overlap (2 is the default for the latency it keeps, see
 * busyTimeoutMs). Tried too: waking a waiter when the -wal file changes (fs.watch). The waiters
 * woke while the holder was still committing and took the CPU it needed, and its COMMIT took 3–4
 * times as long (4 processes, batch 100: 32,586–47,801 msg/s).
 */
const MAX_RETRY_DELAY_MS = 4;

export interface WriteLockStats {
  /** Transactions that had to wait for another connection's write lock. */
  contended: number;
  /** Total time spent waiting, in milliseconds. */
  waitedMs: number;
  /** The longest single wait, in milliseconds. */
  longestWaitMs: number;
  /** Write transactions this connection ran (committed or rolled back). */
  transactions: number;
  /**
   * Total time this connection held the write lock, from BEGIN IMMEDIATE's return to COMMIT's or
   * ROLLBACK's, in milliseconds. Over all connections and the wall time, it says how busy the
   * file's one writer was: near 100 %, more processes cannot write faster. An upper bound: COMMIT
   * returns after SQLite has released the lock and run any checkpoint the commit set off (with 4
   * processes the connections' totals came to 119 % of a run).
   */
  heldMs: number;
  /**
   * Of heldMs, the time spent in COMMIT (successful ones), in milliseconds. The lock is held for
   * certain from BEGIN IMMEDIATE's return until COMMIT is called, so heldMs - committingMs is a
   * lower bound of the time it was held, as heldMs is an upper one: COMMIT writes the transaction
   * under the lock, then returns after releasing it and running any checkpoint it set off.
   */
  committingMs: number;
  /**
   * Counted only after measureHolding() (else 0): of heldMs, the CPU time this process spent
   * (process.cpuUsage(): every thread, user and system), in milliseconds.
   */
  heldOnCpuMs: number;
  /**
   * Counted only after measureHolding() (else 0): of heldMs, the time this connection's thread
   * was ready to run but waiting for a core (Linux's run_delay, /proc/thread-self/schedstat), in
   * milliseconds. What is left of heldMs is time it could not run: a flush to disk, a page read.
   */
  heldRunnableMs: number;
}

/**
 * This thread's time waiting for a core (ns), from /proc/thread-self/schedstat: "<on cpu ns>
 * <waiting on a run queue ns> <timeslices>". One read at offset 0 of a file kept open, about
 * 2.5 µs. The run queue wait is added up when the thread gets a core, so a read from the running
 * thread is exact; its on-CPU time is brought up to date only at the scheduler's ticks, which is
 * why the CPU time comes from process.cpuUsage() instead.
 */
class RunQueueClock {
  readonly #fd: number;
  readonly #buffer = Buffer.alloc(96);

  private constructor(fd: number) {
    this.#fd = fd;
  }

  /** Undefined where the file is missing (not Linux) or unreadable. */
  static open(): RunQueueClock | undefined {
    let clock: RunQueueClock | undefined;
    try {
      clock = new RunQueueClock(openSync("/proc/thread-self/schedstat", "r"));
      if (Number.isFinite(clock.waitedNs())) return clock;
    } catch {
      // Not Linux, or not readable: below.
    }
    clock?.close();
    return undefined;
  }

  waitedNs(): number {
    const length = readSync(this.#fd, this.#buffer, 0, this.#buffer.length, 0);
    return Number(this.#buffer.toString("latin1", 0, length).split(" ")[1]);
  }

  close(): void {
    closeSync(this.#fd);
  }
}

/** Where the holding started: the process's CPU (µs) and the thread's run queue wait (ns). */
interface HoldingStart {
  readonly cpuUs: number;
  readonly runnableNs: number;
}

export class WriteLock {
  readonly #db: Database.Database;
  readonly #maxWaitMs: number;
  #tail: Promise<unknown> = Promise.resolve();
  /**
   * Carries, through the work of a run() transaction and everything it awaits, that
   * transaction's own token (a fresh object each time).
   */
  readonly #inside = new AsyncLocalStorage<object>();
  /** The token of the run() transaction whose work is running now, if any. */
  #current: object | undefined;
  readonly stats: WriteLockStats = {
    contended: 0,
    waitedMs: 0,
    longestWaitMs: 0,
    transactions: 0,
    heldMs: 0,
    committingMs: 0,
    heldOnCpuMs: 0,
    heldRunnableMs: 0,
  };
  /** When the lock now held was taken (performance.now()). */
  #heldSince = 0;
  /** Set by measureHolding(): the clock of the thread's waits for a core, and where the current holding started. */
  #runQueue: RunQueueClock | undefined;
  #holdingStart: HoldingStart | undefined;

  constructor(db: Database.Database, maxWaitMs: number) {
    this.#db = db;
    this.#maxWaitMs = maxWaitMs;
  }

  /**
   * From now on, splits the time the lock is held (stats.heldOnCpuMs, stats.heldRunnableMs): what
   * the bench shows of why holding it takes longer with more processes than cores. Costs two
   * getrusage calls and two small reads per transaction (about 3 µs, the first two inside the held
   * time), so it is off unless asked for. False where the thread's scheduler figures cannot be
   * read (not Linux): nothing is then counted. A kernel built without scheduler statistics reads
   * 0 for the wait: heldRunnableMs then stays 0.
   */
  measureHolding(): boolean {
    this.#runQueue ??= RunQueueClock.open();
    return this.#runQueue !== undefined;
  }

  /** Stops measureHolding()'s counting and closes its file. */
  stopMeasuringHolding(): void {
    this.#runQueue?.close();
    this.#runQueue = undefined;
    this.#holdingStart = undefined;
  }

  /** Runs `work` inside BEGIN IMMEDIATE … COMMIT, or rolls back and rethrows. */
  run<T>(work: () => T | Promise<T>): Promise<T> {
    return this.#queue(work, true);
  }

  /**
   * run() for work that is synchronous through and through (the driver's own statements: claims,
   * bulk completions, failures). Nothing else of this process can run while it does, so a plain
   * flag marks "inside" for it, not AsyncLocalStorage. On Node 20, the first AsyncLocalStorage.run
   * turns on promise hooks for the whole process, and every promise pays for them after that: in
   * a profile of a no-op worker they were 4 % of its CPU, and 11 % of the payments worker's.
   * Work that awaits (a caller's transaction, a group commit's business writes) still goes
   * through run(), which turns the AsyncLocalStorage off again when its transaction ends (#leave).
   */
  runSync<T>(work: () => T): Promise<T> {
    return this.#queue(work, false);
  }

  #queue<T>(work: () => T | Promise<T>, awaits: boolean): Promise<T> {
    if (this.#db.readonly) return Promise.reject(new StoreReadOnlyError(`SQLite database ${this.#db.name}`));
    if (this.insideTransaction()) {
      throw new WassalError(
        "NESTED_TRANSACTION",
        "a transaction was started inside another on the same SQLite connection; do the work inside the transaction you already have",
      );
    }
    const result = this.#tail.then(() => this.#runNow(work, awaits));
    this.#tail = result.catch(() => undefined);
    return result;
  }

  /**
   * True when called (synchronously or asynchronously) from inside the work of the `run`
   * transaction running now, or synchronously from inside `runSync`'s. A callback armed inside an
   * earlier transaction carries that one's token, so it is outside (its transaction has ended).
   */
  insideTransaction(): boolean {
    return this.#insideSync || (this.#current !== undefined && this.#inside.getStore() === this.#current);
  }

  /** Set while runSync's work runs. */
  #insideSync = false;

  /** runSync's work, under the flag; a promise from it is a mistake (it would run on outside the flag). */
  #runFlagged<T>(work: () => T | Promise<T>): T {
    this.#insideSync = true;
    try {
      const value = work();
      if (value instanceof Promise) throw new Error("WriteLock.runSync was given work that returned a promise; use run()");
      return value;
    } finally {
      this.#insideSync = false;
    }
  }

  /**
   * Runs `read` when no transaction of this connection is open, so it never sees another
   * caller's uncommitted writes. No transaction is started.
   */
  serial<T>(read: () => T): Promise<T> {
    if (this.insideTransaction()) return Promise.resolve().then(read);
    const result = this.#tail.then(read);
    this.#tail = result.catch(() => undefined);
    return result;
  }

  /** Resolves once every transaction queued so far has finished. */
  idle(): Promise<void> {
    return this.#tail.then(() => undefined);
  }

  /**
   * Takes the write lock: at once when it is free (synchronously, so no other work of this
   * process runs while it is held), else retried asynchronously with backoff and jitter.
   */
  #begin(): Promise<void> | undefined {
    try {
      this.#db.exec("BEGIN IMMEDIATE");
      return undefined;
    } catch (error) {
      if (!isBusy(error)) throw error;
      return this.#beginAfterWaiting(performance.now(), error);
    }
  }

  async #beginAfterWaiting(started: number, firstRefusal: unknown): Promise<void> {
    let delay = 1;
    let refusal = firstRefusal;
    for (;;) {
      const waited = performance.now() - started;
      if (waited >= this.#maxWaitMs) {
        throw new StoreBusyError(
          `could not get the SQLite write lock within ${Math.round(waited)} ms (another process holds it); nothing was written, try again`,
          { cause: refusal },
        );
      }
      await sleep(delay * (0.5 + Math.random()));
      delay = Math.min(delay * 2, MAX_RETRY_DELAY_MS);
      try {
        this.#db.exec("BEGIN IMMEDIATE");
        const total = performance.now() - started;
        this.stats.contended += 1;
        this.stats.waitedMs += total;
        this.stats.longestWaitMs = Math.max(this.stats.longestWaitMs, total);
        return;
      } catch (error) {
        if (!isBusy(error)) throw error;
        refusal = error;
      }
    }
  }

  /** Called once after the current transaction commits (not if it rolls back). */
  #afterCommit: (() => void) | undefined;

  /** Inside `run`'s work: calls `action` once the transaction has committed (nothing if it rolls back). */
  afterCommit(action: () => void): void {
    this.#afterCommit = action;
  }

  #runNow<T>(work: () => T | Promise<T>, awaits: boolean): Promise<T> {
    const waiting = this.#begin();
    return waiting === undefined ? this.#runLocked(work, awaits) : waiting.then(() => this.#runLocked(work, awaits));
  }

  /**
   * Runs `work` under the lock just taken, then commits. Work that finishes synchronously commits
   * at once, without yielding to the event loop: every moment the lock is held, every other
   * process's writer waits.
   */
  #runLocked<T>(work: () => T | Promise<T>, awaits: boolean): Promise<T> {
    this.#afterCommit = undefined;
    this.#heldSince = performance.now();
    if (this.#runQueue !== undefined) {
      try {
        const cpu = process.cpuUsage();
        this.#holdingStart = { cpuUs: cpu.user + cpu.system, runnableNs: this.#runQueue.waitedNs() };
      } catch {
        this.stopMeasuringHolding();
      }
    }
    let value: T | Promise<T>;
    try {
      value = awaits ? this.#runMarked(work) : this.#runFlagged(work);
    } catch (error) {
      this.#leave(awaits);
      this.#rollback();
      return Promise.reject(error);
    }
    if (value instanceof Promise) {
      return value.then(
        (done) => {
          this.#leave(awaits);
          return this.#commit(done);
        },
        (error: unknown) => {
          this.#leave(awaits);
          this.#rollback();
          throw error;
        },
      );
    }
    this.#leave(awaits);
    try {
      return Promise.resolve(this.#commit(value));
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** run()'s work, under a token of its own (see insideTransaction). */
  #runMarked<T>(work: () => T | Promise<T>): T | Promise<T> {
    const token = {};
    this.#current = token;
    return this.#inside.run(token, work);
  }

  /**
   * After run()'s work: no transaction's work is running, and the AsyncLocalStorage is turned off
   * until the next run(). On Node 20 an enabled AsyncLocalStorage keeps promise hooks on for the
   * whole process, so every promise of every handler would pay for them between transactions too.
   * (On Node 24, whose AsyncLocalStorage needs no hooks, disable() changes nothing that matters
   * here: the token check alone answers "outside".)
   */
  #leave(awaits: boolean): void {
    if (!awaits) return;
    this.#current = undefined;
    this.#inside.disable();
  }

  #commit<T>(value: T): T {
    const committing = performance.now();
    try {
      this.#db.exec("COMMIT");
    } catch (error) {
      this.#rollback();
      throw error;
    }
    const committed = performance.now();
    this.stats.committingMs += committed - committing;
    this.#released(committed);
    const after = this.#afterCommit as (() => void) | undefined; // set by the work, which TypeScript cannot see
    this.#afterCommit = undefined;
    after?.();
    return value;
  }

  #rollback(): void {
    this.#afterCommit = undefined;
    if (this.#db.inTransaction) this.#db.exec("ROLLBACK");
    this.#released();
  }

  /** `at`: when the lock was let go (performance.now()), if the caller has read the clock already. */
  #released(at = performance.now()): void {
    this.stats.transactions += 1;
    this.stats.heldMs += at - this.#heldSince;
    const start = this.#holdingStart;
    this.#holdingStart = undefined;
    if (start !== undefined && this.#runQueue !== undefined) {
      try {
        const cpu = process.cpuUsage();
        const runnableNs = this.#runQueue.waitedNs();
        this.stats.heldOnCpuMs += (cpu.user + cpu.system - start.cpuUs) / 1000;
        this.stats.heldRunnableMs += (runnableNs - start.runnableNs) / 1e6;
      } catch {
        // A measurement never fails a transaction that committed: it stops instead.
        this.stopMeasuringHolding();
      }
    }
  }
}

/**
 * Takes the write lock of the SQLite file at `path` on a connection of its own and holds it for
 * `holdMs`, blocking this thread (the chaos harness's competing writer runs it in its own process).
 */
export function holdWriteLock(path: string, holdMs: number): void {
  const db = new (sqliteDriver())(path, { timeout: 10_000 });
  try {
    db.exec("BEGIN IMMEDIATE");
    // Block (and so keep the lock) without spinning.
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, holdMs);
    db.exec("COMMIT");
  } finally {
    db.close();
  }
}
