// A message's ownership as a timeline: one bar per lease, from its claim to its completion,
// retry, dead-letter, release or expiry, and marks for what changed nothing (a refused stale write,
// a blocked claim) or came from outside a lease (a redrive, a crash, the clock moving). Built from
// the audit trail (the dashboard) or from the event stream (the lab), drawn as one SVG by the
// same function for both. Every text that reaches the SVG is escaped.

import type { OutboxEvent } from "../outbox/events.js";
import { escapeHtml } from "./escape-html.js";
import type { AuditEntry, LeaseOperation, OutboxMessage } from "../outbox/types.js";
import { cancelReason, isCancelEntry } from "../outbox/cancels.js";

/**
 * How a lease ended: its holder finished (completed, retry, dead, released), it ran out, it is
 * still held, or its end is not in the audit trail (written by a process that did not audit, or
 * purged): drawn up to when the row says the message moved on.
 */
export type LeaseEnd = "completed" | "retry" | "dead" | "released" | "cancelled" | "expired" | "held" | "unrecorded";

export interface LeaseBar {
  readonly owner: string;
  readonly token: number;
  readonly from: Date;
  /** When it ended (for "held": when it will run out, if known, else when it was last seen). */
  readonly to: Date;
  readonly end: LeaseEnd;
  /** Who took the message over after this lease ran out, or null. */
  readonly reclaimedBy: string | null;
}

export type MarkKind = "refused" | "blocked" | "redrive" | "cancel" | "crash" | "clock";

export interface TimelineMark {
  readonly kind: MarkKind;
  readonly at: Date;
  /** The owner's lane it belongs in, or null for a mark across all lanes (the clock, a redrive). */
  readonly owner: string | null;
  readonly label: string;
}

export interface Timeline {
  readonly messageId: string;
  /** Owners in order of first appearance: one lane each. */
  readonly owners: readonly string[];
  readonly bars: readonly LeaseBar[];
  readonly marks: readonly TimelineMark[];
}

interface Open {
  owner: string;
  token: number;
  from: Date;
  /** When this lease runs out, when known (the event stream says; the audit trail does not). */
  until: Date | null;
}

/** Collects bars and marks as a lease history is replayed, oldest first. */
class Builder {
  readonly bars: LeaseBar[] = [];
  readonly marks: TimelineMark[] = [];
  readonly #owners: string[] = [];
  #open: Open | null = null;

  constructor(readonly messageId: string) {}

  #lane(owner: string): void {
    if (!this.#owners.includes(owner)) this.#owners.push(owner);
  }

  claim(owner: string, token: number, at: Date, until: Date | null, previousUntil: Date | null): void {
    const open = this.#open;
    if (open !== null) {
      // A claim while a lease was open is a reclaim: that lease ran out first.
      this.bars.push({ owner: open.owner, token: open.token, from: open.from, to: previousUntil ?? open.until ?? at, end: "expired", reclaimedBy: owner });
    }
    this.#lane(owner);
    this.#open = { owner, token, from: at, until };
  }

  renew(token: number, until: Date): void {
    if (this.#open?.token === token) this.#open.until = until;
  }

  finish(token: number, at: Date, end: Finished): void {
    const open = this.#open;
    if (open === null || open.token !== token) return; // not the open lease's act: nothing to draw
    this.bars.push({ owner: open.owner, token, from: open.from, to: at, end, reclaimedBy: null });
    this.#open = null;
  }

  mark(kind: MarkKind, at: Date, owner: string | null, label: string): void {
    if (owner !== null) this.#lane(owner);
    this.marks.push({ kind, at, owner, label });
  }

  /** The token of the lease still open, or null. */
  get openToken(): number | null {
    return this.#open?.token ?? null;
  }

  /**
   * Closes the lease still open: held until `until` when that is after `now`, else expired (and not
   * yet reclaimed); or, when `unrecordedAt` is given, ended there without a record of how.
   */
  build(now: Date, until: Date | null, unrecordedAt: Date | null = null): Timeline {
    const open = this.#open;
    if (open !== null && until === null && unrecordedAt !== null) {
      this.bars.push({ owner: open.owner, token: open.token, from: open.from, to: unrecordedAt, end: "unrecorded", reclaimedBy: null });
    } else if (open !== null) {
      const end = until ?? open.until;
      const held = end !== null && end.getTime() > now.getTime();
      this.bars.push({ owner: open.owner, token: open.token, from: open.from, to: end ?? now, end: held ? "held" : "expired", reclaimedBy: null });
    }
    return { messageId: this.messageId, owners: [...this.#owners], bars: this.bars, marks: this.marks };
  }
}

const OPERATION_LABEL: Record<LeaseOperation, string> = { renew: "renewal", complete: "completion", fail: "failure", release: "release" };

/** What a cancel's mark says: that it was cancelled, and why when a reason was given. */
function cancelledLabel(reason: string | null): string {
  return reason === null ? "cancelled" : `cancelled (${reason})`;
}

/** What a refused-write mark says: whose write, which, under which token, and who held the message. */
function refusedLabel(owner: string, operation: LeaseOperation | null, token: number, heldBy: string | null): string {
  return `${owner}'s ${operation === null ? "write" : OPERATION_LABEL[operation]} under token ${token} refused${heldBy === null ? "" : ` (held by ${heldBy})`}`;
}

/** The audit actions and the events that end a lease, and how. */
type Finished = Exclude<LeaseEnd, "expired" | "held" | "unrecorded">;
const AUDIT_END: Partial<Record<AuditEntry["action"], Finished>> = { complete: "completed", retry: "retry", dead: "dead", release: "released" };
const EVENT_END: Partial<Record<OutboxEvent["type"], Finished>> = { completed: "completed", "retry-scheduled": "retry", dead: "dead", released: "released" };

/**
 * The timeline of one message from its audit trail (oldest first) and its row as read now. The
 * trail does not record a lease's planned end, so a lease that was reclaimed ends at the expiry the
 * reclaim recorded, and the current lease at the row's locked_until.
 */
export function timelineFromAudit(
  messageId: string,
  trail: readonly AuditEntry[],
  message: Pick<OutboxMessage, "status" | "leaseToken" | "lockedUntil" | "processedAt" | "availableAt"> | undefined,
  now: Date,
): Timeline {
  const timeline = new Builder(messageId);
  for (const entry of trail) {
    if (entry.messageId !== messageId) continue;
    const end = AUDIT_END[entry.action];
    if (isCancelEntry(entry)) {
      // store.cancel: an operator's act, outside any lease; a running message's lease ends with it.
      timeline.finish(entry.token, entry.at, "cancelled");
      timeline.mark("cancel", entry.at, null, cancelledLabel(cancelReason(entry.owner)));
    } else if (end !== undefined) timeline.finish(entry.token, entry.at, end);
    else if (entry.action === "claim") {
      timeline.claim(entry.owner, entry.token, entry.at, null, entry.previousStatus === "processing" ? entry.previousLockedUntil : null);
    } else if (entry.action === "redrive") timeline.mark("redrive", entry.at, null, "redriven by an operator");
    else if (entry.action === "refused")
      timeline.mark("refused", entry.at, entry.owner, refusedLabel(entry.owner, entry.operation, entry.token, entry.previousOwner));
  }
  if (message === undefined || timeline.openToken === null) return timeline.build(now, null);
  // The open lease is the row's current one: held (or run out) until its locked_until. Otherwise
  // the trail missed how it ended; the row says when the message moved on.
  if (message.status === "processing" && message.leaseToken === timeline.openToken) return timeline.build(now, message.lockedUntil);
  const movedOn = message.processedAt ?? (message.status === "processing" ? null : message.availableAt);
  return timeline.build(now, null, movedOn);
}

/** Lab notes that belong on a timeline: a crash in its owner's lane, the scenario clock across all. */
export interface TimelineNote {
  readonly at: Date;
  readonly owner: string;
  readonly text: string;
  readonly kind: "crash" | "clock";
}

/**
 * The timeline of one message from the event stream (the lab's ledger), which also knows each
 * lease's planned end and the claims that were blocked; `notes` add crashes and clock moves.
 */
export function timelineFromEvents(messageId: string, events: readonly OutboxEvent[], notes: readonly TimelineNote[] = [], now?: Date): Timeline {
  const timeline = new Builder(messageId);
  let last = new Date(0);
  const items: ({ readonly at: Date; readonly event: OutboxEvent } | { readonly at: Date; readonly note: TimelineNote })[] = [
    ...events.map((event) => ({ at: event.at, event })),
    ...notes.map((note) => ({ at: note.at, note })),
  ];
  // Stable: events keep their order among themselves, a note goes after events of its instant.
  items.sort((a, b) => a.at.getTime() - b.at.getTime() || ("note" in a ? 1 : 0) - ("note" in b ? 1 : 0));
  for (const item of items) {
    if (item.at.getTime() > last.getTime()) last = item.at;
    if ("note" in item) {
      const { note } = item;
      timeline.mark(note.kind, note.at, note.kind === "clock" ? null : note.owner, note.text);
      continue;
    }
    const event = item.event;
    if (!("messageId" in event) || event.messageId !== messageId) continue;
    const end = EVENT_END[event.type];
    if (end !== undefined && "token" in event && event.token !== null) timeline.finish(event.token, event.at, end);
    else if (event.type === "claim-won") timeline.claim(event.owner, event.token, event.at, event.lockedUntil, null);
    else if (event.type === "renewed") timeline.renew(event.token, event.lockedUntil);
    else if (event.type === "claim-blocked") timeline.mark("blocked", event.at, event.owner, `${event.owner} blocked: held by ${event.heldBy ?? "nobody"}`);
    else if (event.type === "cancelled") {
      timeline.finish(event.token, event.at, "cancelled");
      timeline.mark("cancel", event.at, null, cancelledLabel(event.reason));
    } else if (event.type === "lease-lost")
      timeline.mark("refused", event.at, event.owner, refusedLabel(event.owner, event.operation, event.token, event.heldBy));
  }
  return timeline.build(now ?? last, null);
}

// --- Drawing ------------------------------------------------------------------------------

/** Owner colours, in lane order (distinguishable, and readable on white). */
const PALETTE = ["#2f6fdf", "#d9730d", "#2e9a5b", "#9b51e0", "#c2185b", "#00838f", "#6d4c41", "#5c6bc0"];
const END_LABEL: Record<LeaseEnd, string> = {
  completed: "completed",
  retry: "failed, retry scheduled",
  dead: "failed, dead-lettered",
  released: "released",
  cancelled: "cancelled by an operator",
  expired: "lease expired",
  held: "held now",
  unrecorded: "end not in the audit trail",
};
/** What each mark shows in its circle (drawn shapes instead of glyphs a font may lack, where needed). */
const MARK_SYMBOL: Record<MarkKind, string> = { refused: "✕", blocked: "", redrive: "↻", cancel: "⊘", crash: "⚡", clock: "" };
const MARK_NAME: Record<MarkKind, string> = {
  refused: "refused stale write (red ✕)",
  blocked: "claim blocked by a live lease (amber bar)",
  redrive: "redrive (↻)",
  cancel: "cancel (⊘)",
  crash: "crash (⚡)",
  clock: "clock (dotted line)",
};

/** The time of day with milliseconds (UTC), as the lab and the dashboard print it. */
export function clockLabel(at: Date): string {
  return at.toISOString().slice(11, 23);
}

/**
 * The timeline as an SVG element: a lane per owner, a bar per lease coloured by owner with how it
 * ended, marks where something was refused, blocked, redriven, crashed or the clock moved, and a
 * time axis. Each bar and mark carries data- attributes (owner, token, from, to, end; kind, at) so
 * tests and scripts can read what is drawn; each has a <title> for a tooltip.
 */
export function renderTimelineSvg(timeline: Timeline, options: { readonly width?: number } = {}): string {
  const width = options.width ?? 880;
  const left = 130;
  const right = 170;
  const laneHeight = 34;
  const top = 22;
  const lanes = Math.max(timeline.owners.length, 1);
  const axisY = top + lanes * laneHeight + 8;
  const height = axisY + 34;
  const times = [...timeline.bars.flatMap((b) => [b.from.getTime(), b.to.getTime()]), ...timeline.marks.map((m) => m.at.getTime())];
  if (times.length === 0) {
    return `<svg class="timeline" role="img" width="${width}" height="40" viewBox="0 0 ${width} 40"><text x="8" y="24" font-size="13" fill="#5b6472">No lease recorded for this message.</text></svg>`;
  }
  const min = Math.min(...times);
  const span = Math.max(Math.max(...times) - min, 1);
  const pad = span * 0.06;
  const start = min - pad;
  const scale = (width - left - right) / (span + 2 * pad);
  const x = (at: Date) => left + (at.getTime() - start) * scale;
  const laneOf = (owner: string | null) => (owner === null ? -1 : timeline.owners.indexOf(owner));
  const colour = (owner: string) => PALETTE[Math.max(laneOf(owner), 0) % PALETTE.length] ?? "#2f6fdf";
  const parts: string[] = [];
  timeline.owners.forEach((owner, lane) => {
    const y = top + lane * laneHeight;
    parts.push(
      `<rect x="0" y="${y}" width="${width}" height="${laneHeight}" fill="${lane % 2 === 0 ? "#f6f7fa" : "#ffffff"}"/>`,
      `<text x="8" y="${y + laneHeight / 2 + 4}" font-size="12.5" fill="#1d2430">${escapeHtml(owner.length > 18 ? `${owner.slice(0, 17)}…` : owner)}</text>`,
    );
  });
  for (const bar of timeline.bars) {
    const lane = laneOf(bar.owner);
    const y = top + lane * laneHeight + 8;
    const x0 = x(bar.from);
    const w = Math.max(x(bar.to) - x0, 6);
    const fill = colour(bar.owner);
    const expired = bar.end === "expired";
    const title = `${bar.owner}, token ${bar.token}: ${clockLabel(bar.from)} → ${clockLabel(bar.to)}, ${END_LABEL[bar.end]}${bar.reclaimedBy === null ? "" : `, then reclaimed by ${bar.reclaimedBy}`}`;
    parts.push(
      `<g class="lease lease-${bar.end}" data-owner="${escapeHtml(bar.owner)}" data-token="${bar.token}" data-from="${bar.from.toISOString()}" data-to="${bar.to.toISOString()}" data-end="${bar.end}">` +
        `<title>${escapeHtml(title)}</title>` +
        `<rect x="${x0.toFixed(1)}" y="${y}" width="${w.toFixed(1)}" height="${laneHeight - 16}" rx="3" fill="${fill}" fill-opacity="${expired ? 0.35 : 0.85}" stroke="${fill}"${expired ? ' stroke-dasharray="4 3"' : ""}/>` +
        `<text x="${(x0 + w + 4).toFixed(1)}" y="${y + 13}" font-size="11" fill="#3b4452">#${bar.token} ${bar.end}</text>` +
        "</g>",
    );
  }
  for (const mark of timeline.marks) {
    const lane = laneOf(mark.owner);
    const mx = x(mark.at);
    const kind = `mark mark-${mark.kind}`;
    const data = `data-kind="${mark.kind}" data-at="${mark.at.toISOString()}" data-owner="${escapeHtml(mark.owner ?? "")}"`;
    const title = `<title>${escapeHtml(`${clockLabel(mark.at)} ${mark.label}`)}</title>`;
    if (lane < 0) {
      parts.push(
        `<g class="${kind}" ${data}>${title}<line x1="${mx.toFixed(1)}" y1="${top - 6}" x2="${mx.toFixed(1)}" y2="${axisY}" stroke="#8a93a3" stroke-dasharray="2 3"/>` +
          `<text x="${(mx + 3).toFixed(1)}" y="${top - 6}" font-size="11" fill="#5b6472">${escapeHtml(`${MARK_SYMBOL[mark.kind]} ${mark.label}`.trim())}</text></g>`,
      );
    } else {
      const y = top + lane * laneHeight + laneHeight / 2;
      const stroke = mark.kind === "refused" ? "#c62828" : mark.kind === "blocked" ? "#b26a00" : "#37474f";
      parts.push(
        `<g class="${kind}" ${data}>${title}<circle cx="${mx.toFixed(1)}" cy="${y}" r="8" fill="#fff" stroke="${stroke}" stroke-width="2"/>` +
          (mark.kind === "blocked"
            ? `<line x1="${(mx - 5).toFixed(1)}" y1="${y}" x2="${(mx + 5).toFixed(1)}" y2="${y}" stroke="${stroke}" stroke-width="3"/>`
            : `<text x="${mx.toFixed(1)}" y="${y + 4}" font-size="11" text-anchor="middle" fill="${stroke}">${MARK_SYMBOL[mark.kind]}</text>`) +
          "</g>",
      );
    }
  }
  // The axis: five ticks across the span.
  parts.push(`<line x1="${left}" y1="${axisY}" x2="${width - right}" y2="${axisY}" stroke="#8a93a3"/>`);
  for (let n = 0; n <= 4; n += 1) {
    const at = new Date(min + (span * n) / 4);
    const tx = x(at);
    parts.push(
      `<line x1="${tx.toFixed(1)}" y1="${axisY}" x2="${tx.toFixed(1)}" y2="${axisY + 5}" stroke="#8a93a3"/>`,
      `<text x="${tx.toFixed(1)}" y="${axisY + 18}" font-size="11" text-anchor="middle" fill="#5b6472">${clockLabel(at)}</text>`,
    );
  }
  return `<svg class="timeline" role="img" aria-label="${escapeHtml(`ownership timeline of message ${timeline.messageId}`)}" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="system-ui, sans-serif">${parts.join("")}</svg>`;
}

/** A legend for the timeline's bar ends and marks (HTML). */
export function timelineLegend(): string {
  const ends = (["completed", "retry", "dead", "released", "cancelled", "expired", "held", "unrecorded"] as const).map(
    (end) => `<span class="legend-end legend-${end}">${END_LABEL[end]}</span>`,
  );
  const marks = (Object.keys(MARK_NAME) as MarkKind[]).map((kind) => `<span>${MARK_NAME[kind]}</span>`);
  return `<p class="timeline-legend">Bars: one per lease, coloured by owner, dashed when the lease ran out. Ends: ${ends.join(", ")}. Marks: ${marks.join(" · ")}.</p>`;
}
