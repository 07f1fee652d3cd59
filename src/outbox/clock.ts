// The source of time for every lease decision and every wait. Production uses the system clock;
// tests and lab scenarios use a ManualClock and advance it instead of sleeping.

export interface Clock {
  /** The current time. */
  now(): Date;
  /**
   * Resolves after `ms` milliseconds of this clock's time, or as soon as `signal` aborts
   * (it never rejects).
   */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
  /** Calls `callback` after `ms` of this clock's time; the returned function cancels it. Cheaper than sleep with a signal. */
  setTimer(ms: number, callback: () => void): () => void;
}

/** The machine's wall clock. */
export const systemClock: Clock = {
  now: () => new Date(),
  setTimer: (ms, callback) => {
    const timer = setTimeout(callback, Math.max(0, ms));
    return () => clearTimeout(timer);
  },
  sleep: (ms, signal) =>
    new Promise<void>((resolve) => {
      if (signal?.aborted) return resolve();
      const onAbort = () => {
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(
        () => {
          signal?.removeEventListener("abort", onAbort);
          resolve();
        },
        Math.max(0, ms),
      );
      signal?.addEventListener("abort", onAbort, { once: true });
    }),
};

interface Sleeper {
  readonly due: number;
  readonly resolve: () => void;
}

/** A clock that moves only when told to: lease expiry and timers without real waiting. */
export class ManualClock implements Clock {
  #ms: number;
  #sleepers: Sleeper[] = [];

  constructor(start: Date | string | number = "2026-01-01T09:00:00.000Z") {
    const ms = new Date(start).getTime();
    if (Number.isNaN(ms)) {
      throw new RangeError(`ManualClock: start time ${JSON.stringify(start)} is not a valid date; pass a Date, an ISO-8601 string or epoch milliseconds`);
    }
    this.#ms = ms;
  }

  now(): Date {
    return new Date(this.#ms);
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    if (signal?.aborted) return Promise.resolve();
    if (!(ms > 0)) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const sleeper: Sleeper = {
        due: this.#ms + ms,
        resolve: () => {
          signal?.removeEventListener("abort", onAbort);
          resolve();
        },
      };
      const onAbort = () => {
        this.#sleepers = this.#sleepers.filter((s) => s !== sleeper);
        resolve();
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.#sleepers.push(sleeper);
    });
  }

  setTimer(ms: number, callback: () => void): () => void {
    const sleeper: Sleeper = { due: this.#ms + Math.max(0, ms), resolve: callback };
    if (!(ms > 0)) {
      queueMicrotask(callback);
      return () => undefined;
    }
    this.#sleepers.push(sleeper);
    return () => {
      this.#sleepers = this.#sleepers.filter((s) => s !== sleeper);
    };
  }

  /** How many sleeps are waiting on this clock (tests use it to know a worker is idle). */
  get sleeping(): number {
    return this.#sleepers.length;
  }

  /** Moves the clock forward by `ms` milliseconds (never backwards), waking every sleep now due. */
  advance(ms: number): Date {
    if (!Number.isFinite(ms) || ms < 0) {
      throw new RangeError(`ManualClock.advance: ${ms} is not a valid step; pass a finite number of milliseconds >= 0`);
    }
    this.#ms += ms;
    this.#wake();
    return this.now();
  }

  /** Moves the clock to `time`, which must not be earlier than the current time. */
  set(time: Date | string | number): Date {
    const ms = new Date(time).getTime();
    if (Number.isNaN(ms) || ms < this.#ms) {
      throw new RangeError(
        `ManualClock.set: ${JSON.stringify(time)} is invalid or earlier than ${this.now().toISOString()}; a manual clock only moves forward`,
      );
    }
    this.#ms = ms;
    this.#wake();
    return this.now();
  }

  #wake(): void {
    const due = this.#sleepers.filter((s) => s.due <= this.#ms).sort((a, b) => a.due - b.due);
    this.#sleepers = this.#sleepers.filter((s) => s.due > this.#ms);
    for (const sleeper of due) sleeper.resolve();
  }
}
