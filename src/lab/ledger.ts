// The lab's record of what happened, built only from the stores' event stream (plus notes for
// things that are not outbox events, like a worker loading a snapshot or crashing). Claims and
// processing attempts are kept apart: one can succeed many times while the other happens once.

import type { EventHub, OutboxEvent } from "../outbox/events.js";

export type NoteEvent = { readonly type: "note"; readonly at: Date; readonly owner: string; readonly text: string };
export type LedgerEntry = (OutboxEvent | NoteEvent) & { readonly seq: number };

export interface ClaimTally {
  won: number;
  empty: number;
  blocked: number;
}

export class Ledger {
  readonly entries: LedgerEntry[] = [];

  /** Records every event of this hub from now on. */
  attach(hub: EventHub): () => void {
    return hub.subscribe((event) => this.record(event));
  }

  record(event: OutboxEvent | NoteEvent): void {
    this.entries.push({ ...event, seq: this.entries.length + 1 });
  }

  note(at: Date, owner: string, text: string): void {
    this.record({ type: "note", at, owner, text });
  }

  of<T extends LedgerEntry["type"]>(type: T): Extract<LedgerEntry, { type: T }>[] {
    return this.entries.filter((entry): entry is Extract<LedgerEntry, { type: T }> => entry.type === type);
  }

  /** Claims won, empty and blocked: in total and per worker. */
  claimTally(): { total: ClaimTally; byWorker: Map<string, ClaimTally> } {
    const total: ClaimTally = { won: 0, empty: 0, blocked: 0 };
    const byWorker = new Map<string, ClaimTally>();
    for (const entry of this.entries) {
      const kind = entry.type === "claim-won" ? "won" : entry.type === "claim-empty" ? "empty" : entry.type === "claim-blocked" ? "blocked" : undefined;
      if (kind === undefined) continue;
      total[kind] += 1;
      const tally = byWorker.get(entry.owner) ?? { won: 0, empty: 0, blocked: 0 };
      tally[kind] += 1;
      byWorker.set(entry.owner, tally);
    }
    return { total, byWorker };
  }

  /** Processing attempts per message id. */
  attemptsByMessage(): Map<string, number> {
    const counts = new Map<string, number>();
    for (const entry of this.of("processing-started")) counts.set(entry.messageId, (counts.get(entry.messageId) ?? 0) + 1);
    return counts;
  }

  /**
   * Claims that took a message while another worker's lease on it was still unexpired. The
   * protocol forbids it; the lab counts it from the events so a broken store would show up.
   */
  overlappingClaims(): LedgerEntry[] {
    const held = new Map<string, { until: number; active: boolean }>();
    const overlaps: LedgerEntry[] = [];
    for (const entry of this.entries) {
      if (entry.type === "claim-won") {
        const previous = held.get(entry.messageId);
        if (previous?.active && previous.until > entry.at.getTime()) overlaps.push(entry);
        held.set(entry.messageId, { until: entry.lockedUntil.getTime(), active: true });
      } else if (entry.type === "renewed") {
        held.set(entry.messageId, { until: entry.lockedUntil.getTime(), active: true });
      } else if (entry.type === "completed" || entry.type === "released" || entry.type === "retry-scheduled" || entry.type === "dead") {
        held.set(entry.messageId, { until: 0, active: false });
      }
    }
    return overlaps;
  }

  /**
   * Completions written under a token that was not the message's latest claim at that moment:
   * results written without ownership. Zero when fencing works.
   */
  unownedCompletions(): LedgerEntry[] {
    const latest = new Map<string, number>();
    const bad: LedgerEntry[] = [];
    for (const entry of this.entries) {
      if (entry.type === "claim-won") latest.set(entry.messageId, entry.token);
      if (entry.type === "completed" && latest.get(entry.messageId) !== entry.token) bad.push(entry);
    }
    return bad;
  }
}
