// A worker or relay that takes a type nobody enqueues would wait for ever, silently, while the
// messages it was meant for pile up under a name one letter away. At start, each type taken with
// nothing pending is compared with the pending types nothing here takes; a close one is named.

import { distance } from "fastest-levenshtein";
import type { Logger } from "pino";
import type { OutboxStore } from "../outbox/store.js";
import type { TypeCount } from "../outbox/types.js";

/** The pending types read at start: enough for any app's list of types. */
const TYPES_READ = 1_000;

export interface NearMiss {
  /** The type taken, with nothing pending. */
  readonly type: string;
  /** The pending type it is likely meant to be. */
  readonly meant: string;
  /** How many of those are pending. */
  readonly pending: number;
}

/** Edits that still make a near miss: one per four characters, at least one, at most three. */
function closeEnough(a: string, b: string): boolean {
  const allowed = Math.min(3, Math.max(1, Math.floor(Math.min(a.length, b.length) / 4)));
  return distance(a, b) <= allowed;
}

/** The near misses among `taken` (the types a process takes) given the pending counts per type. */
export function nearMisses(taken: readonly string[], pending: readonly TypeCount[]): NearMiss[] {
  const takenSet = new Set(taken);
  const waiting = new Set(pending.map((row) => row.type));
  const strangers = pending.filter((row) => !takenSet.has(row.type));
  const misses: NearMiss[] = [];
  for (const type of taken) {
    if (waiting.has(type)) continue;
    let best: TypeCount | undefined;
    let bestDistance = Number.POSITIVE_INFINITY;
    for (const row of strangers) {
      if (!closeEnough(type, row.type)) continue;
      const d = distance(type, row.type);
      if (d < bestDistance || (d === bestDistance && best !== undefined && row.count > best.count)) {
        best = row;
        bestDistance = d;
      }
    }
    if (best !== undefined) misses.push({ type, meant: best.type, pending: best.count });
  }
  return misses;
}

/** Reads the pending types and returns the near misses of `taken` (none when it takes every type). */
export async function findNearMisses(store: Pick<OutboxStore<unknown>, "pendingByType">, taken: readonly string[] | null): Promise<NearMiss[]> {
  if (taken === null || taken.length === 0) return [];
  return nearMisses(taken, await store.pendingByType({ limit: TYPES_READ }));
}

/** The warning's text: `order.placd: did you mean order.placed? 200 pending`. */
export function nearMissText(miss: NearMiss): string {
  return `${miss.type}: did you mean ${miss.meant}? ${miss.pending} pending (nothing of ${miss.type} is)`;
}

/** Logs a warning for each near miss of `taken` (see findNearMisses), before a worker or relay starts. */
export async function warnNearMisses(store: Pick<OutboxStore<unknown>, "pendingByType">, taken: readonly string[] | null, logger: Logger): Promise<void> {
  for (const miss of await findNearMisses(store, taken)) {
    logger.warn({ type: miss.type, meant: miss.meant, pending: miss.pending }, nearMissText(miss));
  }
}
