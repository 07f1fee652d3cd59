// The processes of a chaos run (workers, relays, consumers): each slot runs one process at a time,
// which reports "ready" over IPC once it is claiming (or consuming); what else it sends there goes
// to `onMessage`. A process that dies is started again; the run SIGKILLs one (and starts its
// replacement) or SIGSTOPs one past its lease and lets it go on, but only a process that has been
// ready for a lease at least, so that a slow start on a busy machine does not turn the run into a
// measure of start-up time.

import { type ChildProcess, spawn } from "node:child_process";
import { closeSync, existsSync, openSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { WassalError } from "../outbox/errors.js";

/** The run could not start: its processes never became ready. */
export class ChaosSetupError extends WassalError {
  override name = "ChaosSetupError";
  constructor(message: string) {
    super("CHAOS_SETUP", message);
  }
}

interface Slot {
  readonly index: number;
  generation: number;
  process: ChildProcess | undefined;
  paused: boolean;
  /** When the current process reported ready (performance.now()), or undefined while it starts. */
  readyAt: number | undefined;
  /** When it was last woken from a pause (SIGCONT), if ever. */
  resumedAt: number | undefined;
}

export interface ProcessPoolOptions {
  readonly size: number;
  /** The log files' folder: each process writes <name>.log there. */
  readonly workDir: string;
  /**
   * The lease (for consumers: the ack wait): a process is faulted only once it has been ready this
   * long, and a pause lasts 1.5 times it.
   */
  readonly leaseMs: number;
  readonly random: () => number;
  /**
   * After a pause, pause the process again only once it has run a lease since its SIGCONT (it may
   * be killed at once). Without it, a pause every 1.5 leases or less can keep a process stopped
   * nearly all the time, with only moments of running in between.
   */
  readonly restAfterPause?: boolean;
  /** What a process sends on its IPC channel other than "ready", with its slot and start number. */
  onMessage?(message: unknown, index: number, generation: number): void;
  /** The process's name and its arguments (after node), for slot `index`, start number `generation`. */
  command(index: number, generation: number): { readonly name: string; readonly args: readonly string[] };
}

export class ProcessPool {
  /** Processes started, restarts included. */
  starts = 0;
  kills = 0;
  pauses = 0;
  readonly #options: ProcessPoolOptions;
  readonly #slots: Slot[];
  /** The log files the processes wrote to. */
  readonly #logs = new Set<string>();
  #stopping = false;
  #stopped: Promise<void> | undefined;

  constructor(options: ProcessPoolOptions) {
    this.#options = options;
    this.#slots = Array.from({ length: options.size }, (_, index) => ({
      index,
      generation: 0,
      process: undefined,
      paused: false,
      readyAt: undefined,
      resumedAt: undefined,
    }));
  }

  #start(slot: Slot): void {
    slot.generation += 1;
    this.starts += 1;
    const { name, args } = this.#options.command(slot.index, slot.generation);
    const path = join(this.#options.workDir, `${name}.log`);
    this.#logs.add(path);
    const log = openSync(path, "a");
    // An IPC channel: the process sends "ready" on it once it is claiming.
    const child = spawn(process.execPath, [...args], { stdio: ["ignore", log, log, "ipc"] });
    child.once("error", () => undefined); // a failed spawn also exits: the exit handler starts another
    closeSync(log);
    slot.process = child;
    slot.paused = false;
    slot.readyAt = undefined;
    slot.resumedAt = undefined;
    const generation = slot.generation;
    child.on("message", (message) => {
      if (message === "ready") {
        if (slot.process === child) slot.readyAt = performance.now();
      } else {
        this.#options.onMessage?.(message, slot.index, generation);
      }
    });
    child.on("exit", () => {
      if (slot.process !== child) return; // killed by us: the killer restarts it
      // A process that died on its own is started again too: the run must go on.
      slot.process = undefined;
      if (!this.#stopping) setTimeout(() => !this.#stopping && slot.process === undefined && this.#start(slot), 100);
    });
  }

  /**
   * Starts the first `count` slots (default: all) not started yet, and waits until they all report
   * ready (or throws ChaosSetupError after `waitMs`). Called again, it starts the rest.
   */
  async start(waitMs: number, count = this.#slots.length): Promise<void> {
    const slots = this.#slots.slice(0, count);
    for (const slot of slots) if (slot.generation === 0) this.#start(slot);
    const readyBy = performance.now() + waitMs;
    while (slots.some((s) => s.readyAt === undefined)) {
      if (performance.now() > readyBy) {
        throw new ChaosSetupError(`the processes did not all report ready within ${waitMs / 1000} s; rerun with --keep and read their logs`);
      }
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  /** Processes a fault may hit: running, ready for a lease, and (to be paused) rested after a pause. */
  #live(forPause: boolean): Slot[] {
    const now = performance.now();
    const { leaseMs, restAfterPause } = this.#options;
    return this.#slots.filter(
      (s) =>
        s.process !== undefined &&
        !s.paused &&
        s.readyAt !== undefined &&
        now - s.readyAt >= leaseMs &&
        !(forPause && restAfterPause && s.resumedAt !== undefined && now - s.resumedAt < leaseMs),
    );
  }

  #pick(forPause: boolean): Slot | undefined {
    const live = this.#live(forPause);
    return live[Math.floor(this.#options.random() * live.length)];
  }

  /** SIGKILLs a random live process and starts its replacement at once. */
  killOne(): void {
    const slot = this.#pick(false);
    if (!slot?.process) return;
    this.kills += 1;
    const victim = slot.process;
    slot.process = undefined; // the exit handler leaves it to us
    victim.kill("SIGKILL");
    // Its replacement starts at once, so that every kill has one, even one just before stop().
    this.#start(slot);
  }

  /** SIGSTOPs a random live process for 1.5 leases, then SIGCONT: it wakes believing it still owns its leases. */
  pauseOne(): void {
    const slot = this.#pick(true);
    if (!slot?.process) return;
    this.pauses += 1;
    slot.paused = true;
    const child = slot.process;
    child.kill("SIGSTOP");
    setTimeout(
      () => {
        child.kill("SIGCONT");
        slot.paused = false;
        if (slot.process === child) slot.resumedAt = performance.now();
      },
      Math.round(this.#options.leaseMs * 1.5),
    );
  }

  /** Lines of the processes' logs that `match` (e.g. a warning the run counts). */
  countLogLines(match: (line: string) => boolean): number {
    let count = 0;
    for (const path of this.#logs) {
      if (!existsSync(path)) continue;
      for (const line of readFileSync(path, "utf8").split("\n")) if (match(line)) count += 1;
    }
    return count;
  }

  /**
   * Stops every process gracefully (SIGCONT, SIGTERM; SIGKILL after 10 s), and starts no more.
   * Resolves once each has exited and its IPC channel closed (what it sent last has arrived).
   * Calling it again waits for the same stop.
   */
  stop(): Promise<void> {
    this.#stopped ??= this.#stop();
    return this.#stopped;
  }

  async #stop(): Promise<void> {
    this.#stopping = true;
    const running = this.#slots.map((s) => s.process).filter((p): p is ChildProcess => p !== undefined && p.exitCode === null && p.signalCode === null);
    await Promise.all(
      running.map(
        (child) =>
          new Promise<void>((resolve) => {
            const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
            child.once("close", () => {
              clearTimeout(timer);
              resolve();
            });
            child.kill("SIGCONT");
            child.kill("SIGTERM");
          }),
      ),
    );
  }
}
