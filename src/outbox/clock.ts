// The source of time for every lease decision. Production uses the system clock; tests and
// lab scenarios use a ManualClock and advance it instead of sleeping.

export interface Clock {
  /** The current time. */
  now(): Date;
}

/** The machine's wall clock. */
export const systemClock: Clock = {
  now: () => new Date(),
};

/** A clock that moves only when told to: lease expiry without real waiting. */
export class ManualClock implements Clock {
  #ms: number;

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

  /** Moves the clock forward by `ms` milliseconds (never backwards). */
  advance(ms: number): Date {
    if (!Number.isFinite(ms) || ms < 0) {
      throw new RangeError(`ManualClock.advance: ${ms} is not a valid step; pass a finite number of milliseconds >= 0`);
    }
    this.#ms += ms;
    return this.now();
  }

  /** Moves the clock to `time`, which must not be earlier than the current time. */
  set(time: Date | string | number): Date {
    const ms = new Date(time).getTime();
    if (Number.isNaN(ms) || ms < this.#ms) {
      throw new RangeError(`ManualClock.set: ${JSON.stringify(time)} is invalid or earlier than ${this.now().toISOString()}; a manual clock only moves forward`);
    }
    this.#ms = ms;
    return this.now();
  }
}
