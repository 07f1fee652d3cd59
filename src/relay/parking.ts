// Where a consumer keeps the deliveries it holds back because their key waits for an earlier number:
// in its own hands (still unacknowledged, so a crash gives them back to the broker), tried again
// soon (50 ms, doubling to 1 s) and at once when this consumer applies a message of the same key,
// while the messages behind them go on. Parked messages come out in their key's order.

export interface Parked<T> {
  readonly item: T;
  readonly key: string;
  readonly keySeq: number;
  /** How many times it was parked (tries so far). */
  readonly tries: number;
  due: number;
}

const FIRST_WAIT_MS = 50;
const LONGEST_WAIT_MS = 1_000;

export class Parking<T> {
  readonly #parked: Parked<T>[] = [];
  readonly #now: () => number;

  constructor(now: () => number = () => performance.now()) {
    this.#now = now;
  }

  get size(): number {
    return this.#parked.length;
  }

  /** Holds `item` back, to be tried again after a wait that grows with its tries. */
  park(item: T, key: string, keySeq: number, tries: number): void {
    this.#parked.push({ item, key, keySeq, tries: tries + 1, due: this.#now() + Math.min(FIRST_WAIT_MS * 2 ** tries, LONGEST_WAIT_MS) });
  }

  /** A message of `key` was applied: its parked ones may be next, so they are due now. */
  applied(key: string): void {
    for (const p of this.#parked) if (p.key === key) p.due = 0;
  }

  /** Takes out the parked messages that are due, each key's in its order. */
  takeDue(): Parked<T>[] {
    const now = this.#now();
    const due = this.#parked.filter((p) => p.due <= now).sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : a.keySeq - b.keySeq));
    for (const p of due) this.#parked.splice(this.#parked.indexOf(p), 1);
    return due;
  }

  /** Milliseconds until the next parked message is due (Infinity when none is parked). */
  nextDueIn(): number {
    let next = Number.POSITIVE_INFINITY;
    for (const p of this.#parked) next = Math.min(next, p.due);
    return Math.max(0, next - this.#now());
  }

  /** Every parked item (to keep them alive), without taking them out. */
  items(): T[] {
    return this.#parked.map((p) => p.item);
  }

  /** Takes every parked item out (a consumer stopping hands them back). */
  clear(): T[] {
    return this.#parked.splice(0).map((p) => p.item);
  }
}
