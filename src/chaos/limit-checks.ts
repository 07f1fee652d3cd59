// The judge of flow control (store.limit): from the audit trail alone, were a type's leases ever
// more than its concurrency at once, or its claims more than its rate's count in any interval?
//
// What the limits promise is about leases: at most `concurrency` unexpired leases of the type at
// once (a worker paused past its lease has lost its slot, as it has lost its message). A lease
// runs from its claim to the first of: its completion, retry, dead-marking or release under the
// same token; the message's next claim; its end (claim + leaseMs). Renewals are not in the audit
// trail, so a renewed lease counts as ended at its first end: the check is exact for handlers
// shorter than a third of the lease (never renewed), and for longer ones can miss an excess but
// never invent one.

import type { AuditEntry, Rate } from "../outbox/types.js";

/** A type's limit as the judge reads it. */
export interface JudgedLimit {
  readonly concurrency: number | null;
  readonly rate: Rate | null;
}

export interface LimitExcess {
  readonly type: string;
  readonly limit: "concurrency" | "rate";
  /** How many leases ran at once, or how many claims fell in one interval. */
  readonly seen: number;
  readonly allowed: number;
  /** When: the claim that made it too many. */
  readonly at: Date;
}

export interface LimitReport {
  /** Per limited type: the most leases held at once, and the most claims in any rate interval. */
  readonly peaks: Record<string, { readonly running: number; readonly perInterval: number }>;
  readonly excesses: readonly LimitExcess[];
}

const ENDS = new Set(["complete", "retry", "dead", "release"]);

/** Judges `limits` (by type) over an audit trail; `typeOf` names each message's type (undefined: not judged). */
export function judgeLimits(
  trail: readonly AuditEntry[],
  limits: ReadonlyMap<string, JudgedLimit>,
  typeOf: (messageId: string) => string | undefined,
  leaseMs: number,
): LimitReport {
  const byMessage = new Map<string, AuditEntry[]>();
  for (const entry of trail) {
    const type = typeOf(entry.messageId);
    if (type === undefined || !limits.has(type)) continue;
    const entries = byMessage.get(entry.messageId);
    if (entries === undefined) byMessage.set(entry.messageId, [entry]);
    else entries.push(entry);
  }
  const leases = new Map<string, { start: number; end: number }[]>();
  for (const [messageId, entries] of byMessage) {
    entries.sort((a, b) => a.at.getTime() - b.at.getTime());
    const type = typeOf(messageId) as string;
    const list = leases.get(type) ?? [];
    leases.set(type, list);
    entries.forEach((entry, n) => {
      if (entry.action !== "claim") return;
      const start = entry.at.getTime();
      let end = start + leaseMs;
      for (const later of entries.slice(n + 1)) {
        if (later.action === "claim" || (later.token === entry.token && ENDS.has(later.action))) {
          end = Math.min(end, later.at.getTime());
          break;
        }
      }
      list.push({ start, end });
    });
  }
  const peaks: Record<string, { running: number; perInterval: number }> = {};
  const excesses: LimitExcess[] = [];
  for (const [type, limit] of limits) {
    const list = (leases.get(type) ?? []).sort((a, b) => a.start - b.start);
    // Concurrency: ends before starts at the same instant (a lease ending at t frees its slot at t).
    const events = list.flatMap((lease) => [
      { at: lease.start, step: 1 },
      { at: lease.end, step: -1 },
    ]);
    events.sort((a, b) => a.at - b.at || a.step - b.step);
    let running = 0;
    let peakRunning = 0;
    for (const event of events) {
      running += event.step;
      if (running > peakRunning) {
        peakRunning = running;
        if (limit.concurrency !== null && running > limit.concurrency && event.step > 0) {
          excesses.push({ type, limit: "concurrency", seen: running, allowed: limit.concurrency, at: new Date(event.at) });
        }
      }
    }
    // Rate: claims in (x - intervalMs, x] for each claim time x.
    let perInterval = 0;
    if (limit.rate !== null) {
      const { count, intervalMs } = limit.rate;
      let first = 0;
      list.forEach((lease, n) => {
        while ((list[first] as { start: number }).start <= lease.start - intervalMs) first += 1;
        const inWindow = n - first + 1;
        if (inWindow > perInterval) {
          perInterval = inWindow;
          if (inWindow > count) excesses.push({ type, limit: "rate", seen: inWindow, allowed: count, at: new Date(lease.start) });
        }
      });
    } else {
      perInterval = list.length;
    }
    peaks[type] = { running: peakRunning, perInterval };
  }
  return { peaks, excesses };
}
