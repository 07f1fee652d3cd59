// The lease protocol as a small in-memory model: the specification that lease-protocol.test.ts
// holds every store to, command by command. It knows nothing of SQL or of the stores' code; it
// is written from docs (DESIGN.md, the OutboxStore contract) and kept small enough to read.
//
// Times are epoch milliseconds. A message is claimable when it is pending and due
// (availableAt <= now) or processing under an expired lease (lockedUntil <= now), and, if it has an
// ordering key, when it is its key's turn (FIFO per key, as the README words it):
// - Each key has a queue. A message joins it at enqueue: as the key's *holder* when the key has no
//   unfinished message in its queue, else *waiting*.
// - Only the holder may be claimed. When it finishes (processed, or dead and skipped), the waiting
//   message with the lowest id becomes the holder.
// - A dead holder keeps its key (blocks it) until it is redriven (it stays the holder) or skipped
//   (it leaves the queue, and the key moves on). Dead messages that left the queue may be purged.
// - A skipped message that is redriven rejoins the queue: as holder if the queue is empty, else
//   waiting, so it never overtakes the message whose turn it is; among the waiting, the lowest id
//   goes first.
// Without redrives of skipped messages this is "no earlier message of the key is unfinished", and
// checkState in lease-commands.ts checks that reading too. A lease is
// *current* while its message is processing under its token, expired or not: an expired lease
// that nobody reclaimed may still complete, fail or release, but not renew (an expired lease
// never comes back, so a concurrency limit, which counts unexpired leases, never counts it twice).
//
// Recurring schedules (store.schedule, fireSchedules), as the OutboxStore contract words them: a
// schedule's next tick is the first tick of its cron expression after now when it is added, or
// replaced with another expression; replaced with the same expression it keeps its next tick. A
// fireSchedules call looks at one moment (now) and goes through the schedules with a next tick,
// earliest first (then by name), until its limit of ticks: a schedule whose next tick is older than
// now - backfillMs first skips, in one step, every tick older than that (reported as the range
// from its next tick up to the first tick it keeps); then each due tick (<= now) fires, oldest
// first, each enqueueing one message due now: the schedule's message, with the dedupe key
// "schedule:<name>:<tick>" and the headers wassal-schedule and wassal-tick. The call says what
// fired and what was skipped, the earliest next tick of all, and `more` when it stopped at its
// limit with a tick still due. Expressions are read by croner, as the library reads them: the
// model says which ticks fire, not what a cron expression means.

import { Cron } from "croner";

export type Status = "pending" | "processing" | "processed" | "dead" | "cancelled";
export type KeyState = "holder" | "waiting" | "skipped";

/** What a message carries besides its lease state, fixed at enqueue. */
export interface ModelBody {
  readonly type: string;
  readonly payload: unknown;
  readonly dedupeKey: string | null;
  /** Empty when none were given. */
  readonly headers: Readonly<Record<string, string>>;
}

/** The one message type of the model: the messages the commands enqueue and every schedule's. */
export const MESSAGE_TYPE = "model.message";

export interface ModelMessage extends ModelBody {
  readonly id: string;
  /** The ordering key, or null. */
  readonly key: string | null;
  /** Whole seconds of head start in the claim order (0 to 86,400). */
  readonly priority: number;
  /** Its place in its key's queue (always "holder" without a key); "skipped" once it left the queue dead. */
  keyState: KeyState;
  /**
   * Its number in its key's order, given when it becomes the key's holder: the key's next number,
   * which a completion moves on by one and a skip leaves (the skipped number was never used). Null
   * while it waits, and without a key.
   */
  keySeq: number | null;
  status: Status;
  /** Who holds or last held the lease (kept on processed and dead rows). */
  lockedBy: string | null;
  /** Claims so far: every claim issues token + 1. */
  token: number;
  /** Set only while processing. */
  lockedUntil: number | null;
  /** When a pending message becomes due; equals lockedUntil while processing. */
  availableAt: number;
  /** Counted at claim; a release gives one back (never below 0). */
  attempts: number;
  lastError: string | null;
  processedAt: number | null;
}

/** What a lease operation presents: the message, the owner and the token it was handed. */
export interface PresentedLease {
  readonly messageId: string;
  readonly owner: string;
  readonly token: number;
}

/** A lease as a claim hands it out. */
export interface ModelLease extends PresentedLease {
  readonly lockedUntil: number;
  /** The owner of the expired lease this claim took over, or null. */
  readonly reclaimedFrom: string | null;
}

/** Who holds the message now, as a lease-lost result reports it. */
export interface Holder {
  readonly status: Status;
  readonly lockedBy: string | null;
  readonly lockedUntil: number | null;
  readonly leaseToken: number;
}

export interface LeaseLost {
  readonly outcome: "lease-lost";
  readonly messageId: string;
  readonly token: number;
  /** Null when the message no longer exists (purged). */
  readonly current: Holder | null;
}

export type AuditAction = "claim" | "complete" | "retry" | "dead" | "release" | "redrive" | "refused";
export type LeaseOperation = "renew" | "complete" | "fail" | "release";

/** One row of the audit trail (the previous* fields are set on claims, and on refused writes as the holder then). */
export interface ModelAuditEntry {
  readonly messageId: string;
  readonly token: number;
  readonly owner: string;
  readonly action: AuditAction;
  readonly at: number;
  readonly previousStatus: Status | null;
  readonly previousOwner: string | null;
  readonly previousLockedUntil: number | null;
  /** For a refused write: the operation the stale lease attempted. */
  readonly operation: LeaseOperation | null;
}

export type ClaimMessageOutcome =
  | { readonly outcome: "claimed"; readonly lease: ModelLease }
  | { readonly outcome: "blocked"; readonly heldBy: string | null; readonly lockedUntil: number | null; readonly token: number }
  | { readonly outcome: "not-claimable"; readonly status: Status | "missing" | "waiting" };

/** What complete's business write does: commit one row keyed by the message id, or throw after writing it. */
export type FinalizeKind = "write" | "write-then-throw";

export type CompleteOutcome = { readonly outcome: "completed"; readonly processedAt: number } | { readonly outcome: "finalize-threw" } | LeaseLost;
export type FailOutcome = { readonly outcome: "retry-scheduled"; readonly availableAt: number } | { readonly outcome: "dead" } | LeaseLost;

/** What each tick of a schedule enqueues besides the tick's dedupe key and headers (its type is MESSAGE_TYPE). */
export interface ModelScheduledMessage {
  readonly payload: unknown;
  readonly key: string | null;
  readonly priority: number;
  /** The schedule's own headers, or null for none. */
  readonly headers: Readonly<Record<string, string>> | null;
}

export interface ModelSchedule {
  readonly name: string;
  /** A cron expression read in UTC (the model's schedules all use the default time zone). */
  readonly cron: string;
  readonly backfillMs: number;
  readonly message: ModelScheduledMessage;
  /** The next tick to fire (null when the expression has no tick left; never so for the model's expressions). */
  nextAt: number | null;
  /** The last tick that enqueued its message: kept when the schedule is replaced, whatever its expression. */
  lastTickAt: number | null;
  readonly createdAt: number;
  readonly updatedAt: number;
}

/** What store.schedule did: added a new schedule, or replaced one keeping its next tick (same expression) or not. */
export type ScheduleOutcome = "added" | "kept-next" | "replaced";

export interface ModelFiredTick {
  readonly schedule: string;
  readonly tick: number;
}

/** Ticks passed over without a message: from `from` up to, not including, `until`. */
export interface ModelSkippedTicks {
  readonly schedule: string;
  readonly reason: "too-late";
  readonly from: number;
  readonly until: number;
}

/** What one fireSchedules call did; the ticks' messages join the model through enqueueTick, under the ids the store gave them. */
export interface ModelFiring {
  readonly at: number;
  readonly fired: readonly ModelFiredTick[];
  readonly skipped: readonly ModelSkippedTicks[];
  /** The earliest next tick of all the schedules, or null when there is none. */
  readonly nextAt: number | null;
  /** True when the call stopped at its limit with a tick still due. */
  readonly more: boolean;
}

/** How late a tick may be found and still fire, for a schedule added without a backfillMs. */
export const DEFAULT_BACKFILL_MS = 60_000;

/** The most ticks one fireSchedules call fires, and its limit when it is given none. */
export const MAX_TICKS_PER_CALL = 1_000;

/** Parsed expressions: the model reads the same few again and again. */
const parsedCrons = new Map<string, Cron>();

/** The first tick of a cron expression (read in UTC) strictly after `after`, or null when it has none. */
export function tickAfter(cron: string, after: number): number | null {
  let parsed = parsedCrons.get(cron);
  if (parsed === undefined) {
    parsed = new Cron(cron, { timezone: "UTC", paused: true });
    parsedCrons.set(cron, parsed);
  }
  return parsed.nextRun(new Date(after))?.getTime() ?? null;
}

export class LeaseModel {
  /** Every message, in enqueue (= id) order. */
  readonly messages = new Map<string, ModelMessage>();
  /** The audit trail the store must have written, oldest first. */
  readonly audit: ModelAuditEntry[] = [];
  /** Committed business rows per message id. */
  readonly businessRows = new Map<string, number>();
  /** Each key's next number: the one its next holder takes (1 for a key never seen). */
  readonly #nextSeq = new Map<string, number>();

  constructor(public now: number) {}

  advance(ms: number): void {
    this.now += ms;
  }

  /** Registered owners and when each stops counting as alive. */
  readonly owners = new Map<string, number>();

  /** A beat never shortens the owner's alive time (a namesake with a shorter one cannot make it look dead). */
  heartbeat(owner: string, aliveMs: number): void {
    this.owners.set(owner, Math.max(this.owners.get(owner) ?? Number.NEGATIVE_INFINITY, this.now + aliveMs));
  }

  /**
   * The owners whose alive time passed: dropped, and each one's unexpired leases expired now (an
   * expired lease in every way after that). Owners in name order, with how many leases each lost.
   */
  reap(): { owner: string; expired: number }[] {
    const dead = [...this.owners]
      .filter(([, until]) => until <= this.now)
      .map(([owner]) => owner)
      .sort();
    return dead.map((owner) => {
      this.owners.delete(owner);
      let expired = 0;
      for (const m of this.messages.values()) {
        if (m.status === "processing" && m.lockedBy === owner && m.lockedUntil !== null && m.lockedUntil > this.now) {
          m.lockedUntil = this.now;
          m.availableAt = this.now;
          expired += 1;
        }
      }
      return { owner, expired };
    });
  }

  enqueue(
    id: string,
    availableAt: number,
    key: string | null = null,
    priority = 0,
    body: ModelBody = { type: MESSAGE_TYPE, payload: null, dedupeKey: null, headers: {} },
  ): void {
    const waits = key !== null && this.#queued(key).length > 0;
    this.messages.set(id, {
      ...body,
      id,
      key,
      priority,
      keyState: waits ? "waiting" : "holder",
      keySeq: key === null || waits ? null : this.#seqOf(key),
      status: "pending",
      lockedBy: null,
      token: 0,
      lockedUntil: null,
      availableAt,
      attempts: 0,
      lastError: null,
      processedAt: null,
    });
  }

  #seqOf(key: string): number {
    return this.#nextSeq.get(key) ?? 1;
  }

  /** The messages in a key's queue, in id order: unfinished (or dead and not skipped), holder or waiting. */
  #queued(key: string): ModelMessage[] {
    return [...this.messages.values()].filter((m) => m.key === key && m.status !== "processed" && m.status !== "cancelled" && m.keyState !== "skipped");
  }

  /** When the key has no holder left, its waiting message with the lowest id becomes the holder. */
  #handOn(key: string | null): void {
    if (key === null) return;
    const queue = this.#queued(key);
    if (queue.some((m) => m.keyState === "holder")) return;
    const next = queue.find((m) => m.keyState === "waiting");
    if (next !== undefined) {
      next.keyState = "holder";
      next.keySeq = this.#seqOf(key);
    }
  }

  /** Whether m waits in its key's queue behind the holder. */
  waiting(m: ModelMessage): boolean {
    return m.keyState === "waiting";
  }

  claimable(m: ModelMessage): boolean {
    const due = (m.status === "pending" && m.availableAt <= this.now) || (m.status === "processing" && m.lockedUntil! <= this.now);
    return due && m.keyState === "holder";
  }

  /**
   * The first claimable messages by (rank, id), at most `limit`, in that order. The rank is a
   * pending message's due time less its priority (whole seconds of head start), and an expired
   * lease's end as it is.
   */
  claim(owner: string, limit: number, leaseMs: number): ModelLease[] {
    const rank = (m: ModelMessage) => m.availableAt - (m.status === "pending" ? m.priority * 1000 : 0);
    const due = [...this.messages.values()]
      .filter((m) => this.claimable(m))
      .sort((a, b) => rank(a) - rank(b) || Number(a.id) - Number(b.id))
      .slice(0, Math.min(limit, this.#room()));
    const leases = due.map((m) => this.#take(m, owner, leaseMs));
    if (this.limit !== null) for (const lease of leases) this.#starts.push({ id: lease.messageId, token: lease.token, at: this.now });
    return leases;
  }

  /**
   * The limit on the model's one message type (store.limit), or null, and the claims recorded
   * under it (outbox_limit_starts): a claim takes at most the concurrency less the leases still
   * held (processing, unexpired), and at most the rate's count less the
   * limited claims after now - intervalMs. Every lease held counts as running, whoever took it.
   */
  limit: { readonly concurrency: number | null; readonly rate: { readonly count: number; readonly intervalMs: number } | null } | null = null;
  readonly #starts: { readonly id: string; readonly token: number; readonly at: number }[] = [];

  /** Sets the limit: the claims recorded before count no longer as starts (the rate counts from now). */
  setLimit(concurrency: number | null, rate: { readonly count: number; readonly intervalMs: number } | null): void {
    this.limit = { concurrency, rate };
    for (const [n, start] of this.#starts.entries()) this.#starts[n] = { ...start, at: Number.NEGATIVE_INFINITY };
  }

  unlimit(): void {
    this.limit = null;
    this.#starts.length = 0;
  }

  #room(): number {
    if (this.limit === null) return Number.POSITIVE_INFINITY;
    let room = Number.POSITIVE_INFINITY;
    const { concurrency, rate } = this.limit;
    if (concurrency !== null) {
      // Every lease of the type held now: a limited claim first records those no limited claim
      // took (claimMessage's, the ones held when the limit was set).
      const running = [...this.messages.values()].filter((m) => m.status === "processing" && m.lockedUntil! > this.now).length;
      room = Math.min(room, concurrency - running);
    }
    if (rate !== null) {
      room = Math.min(room, rate.count - this.#starts.filter((s) => s.at > this.now - rate.intervalMs).length);
    }
    return Math.max(0, room);
  }

  /**
   * Cancels a message without an ordering key (store.cancel): a pending one, or with `running` a
   * processing one too, becomes cancelled (finished now, lockedBy "cancel", no lease), and is
   * recorded as dead by "cancel"; else the status that refused it.
   */
  cancel(
    id: string,
    running: boolean,
  ): { readonly outcome: "cancelled"; readonly runningOwner: string | null } | { readonly outcome: "refused"; readonly status: Status | "missing" } {
    const m = this.messages.get(id);
    if (m === undefined) return { outcome: "refused", status: "missing" };
    if (m.status !== "pending" && !(running && m.status === "processing")) return { outcome: "refused", status: m.status };
    this.audit.push({
      messageId: m.id,
      token: m.token,
      owner: "cancel",
      action: "dead",
      at: this.now,
      previousStatus: m.status,
      previousOwner: m.lockedBy,
      previousLockedUntil: m.lockedUntil,
      operation: null,
    });
    const runningOwner = m.status === "processing" ? m.lockedBy : null;
    m.status = "cancelled";
    m.lockedBy = "cancel";
    m.lockedUntil = null;
    m.processedAt = this.now;
    return { outcome: "cancelled", runningOwner };
  }

  claimMessage(owner: string, id: string, leaseMs: number): ClaimMessageOutcome {
    const m = this.messages.get(id);
    if (m === undefined) return { outcome: "not-claimable", status: "missing" };
    if (this.claimable(m)) return { outcome: "claimed", lease: this.#take(m, owner, leaseMs) };
    if (m.status === "processing") return { outcome: "blocked", heldBy: m.lockedBy, lockedUntil: m.lockedUntil, token: m.token };
    return { outcome: "not-claimable", status: m.status === "pending" && this.waiting(m) ? "waiting" : m.status };
  }

  #take(m: ModelMessage, owner: string, leaseMs: number): ModelLease {
    const reclaimedFrom = m.status === "processing" ? m.lockedBy : null;
    this.audit.push({
      messageId: m.id,
      token: m.token + 1,
      owner,
      action: "claim",
      at: this.now,
      previousStatus: m.status,
      previousOwner: m.lockedBy,
      previousLockedUntil: m.lockedUntil,
      operation: null,
    });
    m.status = "processing";
    m.lockedBy = owner;
    m.token += 1;
    m.attempts += 1;
    m.lockedUntil = m.availableAt = this.now + leaseMs;
    return { messageId: m.id, owner, token: m.token, lockedUntil: m.lockedUntil, reclaimedFrom };
  }

  /** The message if this lease is its current one (processing under this token), else undefined. */
  current(lease: PresentedLease): ModelMessage | undefined {
    const m = this.messages.get(lease.messageId);
    return m !== undefined && m.status === "processing" && m.token === lease.token ? m : undefined;
  }

  /** A stale lease's write: nothing changes, and the refusal is in the audit trail with who held the message then. */
  #lost(lease: PresentedLease, operation: LeaseOperation): LeaseLost {
    const m = this.messages.get(lease.messageId);
    this.audit.push({
      messageId: lease.messageId,
      token: lease.token,
      owner: lease.owner,
      action: "refused",
      at: this.now,
      previousStatus: m?.status ?? null,
      previousOwner: m?.lockedBy ?? null,
      previousLockedUntil: m?.lockedUntil ?? null,
      operation,
    });
    return {
      outcome: "lease-lost",
      messageId: lease.messageId,
      token: lease.token,
      current: m === undefined ? null : { status: m.status, lockedBy: m.lockedBy, lockedUntil: m.lockedUntil, leaseToken: m.token },
    };
  }

  renew(lease: PresentedLease, leaseMs: number): { readonly outcome: "renewed"; readonly lockedUntil: number } | LeaseLost {
    const m = this.current(lease);
    if (m === undefined || (m.lockedUntil ?? 0) <= this.now) return this.#lost(lease, "renew");
    m.lockedUntil = m.availableAt = this.now + leaseMs;
    return { outcome: "renewed", lockedUntil: m.lockedUntil };
  }

  /** The guarded update and the business write commit together, or (lost, or finalize threw) neither does. */
  complete(lease: PresentedLease, finalize: FinalizeKind): CompleteOutcome {
    const m = this.current(lease);
    if (m === undefined) return this.#lost(lease, "complete");
    if (finalize === "write-then-throw") return { outcome: "finalize-threw" };
    m.status = "processed";
    m.processedAt = this.now;
    m.lockedUntil = null;
    m.lastError = null;
    this.businessRows.set(m.id, (this.businessRows.get(m.id) ?? 0) + 1);
    this.#auditResult(lease, "complete");
    if (m.key !== null) this.#nextSeq.set(m.key, (m.keySeq ?? this.#seqOf(m.key)) + 1);
    this.#handOn(m.key);
    return { outcome: "completed", processedAt: this.now };
  }

  fail(lease: PresentedLease, error: string, decision: { readonly retryInMs: number } | "dead" | "dead-and-skip"): FailOutcome {
    const m = this.current(lease);
    if (m === undefined) return this.#lost(lease, "fail");
    m.lockedUntil = null;
    m.lastError = error;
    if (decision === "dead" || decision === "dead-and-skip") {
      m.status = "dead"; // lockedBy stays: who gave up on it
      m.availableAt = this.now;
      this.#auditResult(lease, "dead");
      if (decision === "dead-and-skip" && m.key !== null) this.#skip(m);
      return { outcome: "dead" };
    }
    m.status = "pending";
    m.lockedBy = null;
    m.availableAt = this.now + decision.retryInMs;
    this.#auditResult(lease, "retry");
    return { outcome: "retry-scheduled", availableAt: m.availableAt };
  }

  release(lease: PresentedLease): { readonly outcome: "released" } | LeaseLost {
    const m = this.current(lease);
    if (m === undefined) return this.#lost(lease, "release");
    m.status = "pending";
    m.lockedBy = null;
    m.lockedUntil = null;
    m.availableAt = this.now;
    m.attempts = Math.max(m.attempts - 1, 0);
    this.#auditResult(lease, "release");
    return { outcome: "released" };
  }

  #skip(m: ModelMessage): void {
    m.keyState = "skipped";
    this.#handOn(m.key);
  }

  /** The dead message holding a key (the lowest id, should there be more), if any. */
  deadHolder(key: string): ModelMessage | undefined {
    return this.#queued(key).find((m) => m.status === "dead" && m.keyState === "holder");
  }

  /** Keys held by a dead message, oldest death first, with how many wait behind each. */
  blockedKeys(): { key: string; messageId: string; lastError: string | null; diedAt: number; waiting: number }[] {
    return [...this.messages.values()]
      .filter((m) => m.key !== null && m.status === "dead" && m.keyState === "holder")
      .sort((a, b) => a.availableAt - b.availableAt || Number(a.id) - Number(b.id))
      .map((m) => ({
        key: m.key!,
        messageId: m.id,
        lastError: m.lastError,
        diedAt: m.availableAt,
        waiting: this.#queued(m.key!).filter((w) => w.keyState === "waiting").length,
      }));
  }

  /**
   * Dead messages back to pending, due now, with their attempts reset; the rest of each is kept.
   * A skipped one rejoins its key's queue (see the top of this file). Returns the ids moved.
   */
  redrive(target: readonly string[] | "all"): string[] {
    const moved = [...this.messages.values()].filter((m) => m.status === "dead" && (target === "all" || target.includes(m.id)));
    // Decided for all of them at once, as one statement does: a skipped message waits when its
    // queue has a message, or an earlier skipped message of its key comes back with it.
    const rejoining = moved.filter((m) => m.keyState === "skipped");
    const states = new Map(
      rejoining.map((m) => [
        m.id,
        this.#queued(m.key!).length > 0 || rejoining.some((o) => o.key === m.key && Number(o.id) < Number(m.id)) ? ("waiting" as const) : ("holder" as const),
      ]),
    );
    for (const m of moved) {
      this.audit.push({
        messageId: m.id,
        token: m.token,
        owner: "redrive",
        action: "redrive",
        at: this.now,
        previousStatus: null,
        previousOwner: null,
        previousLockedUntil: null,
        operation: null,
      });
      m.status = "pending";
      m.availableAt = this.now;
      m.attempts = 0;
      m.lockedBy = null;
      m.lockedUntil = null;
      const rejoins = states.get(m.id);
      if (rejoins !== undefined) {
        m.keyState = rejoins;
        m.keySeq = rejoins === "holder" ? this.#seqOf(m.key!) : null;
      }
    }
    return moved.map((m) => m.id);
  }

  /** Redrives or skips the dead message holding the key; undefined when no dead message holds it. */
  unblockKey(key: string, action: "redrive" | "skip"): string | undefined {
    const holder = this.deadHolder(key);
    if (holder === undefined) return undefined;
    if (action === "skip") this.#skip(holder);
    else this.redrive([holder.id]);
    return holder.id;
  }

  /** Deletes dead messages that died before `before`, except those holding their key. Returns how many. */
  purgeDead(before: number): number {
    let deleted = 0;
    for (const m of [...this.messages.values()]) {
      if (m.status === "dead" && m.availableAt < before && (m.key === null || m.keyState !== "holder")) {
        this.messages.delete(m.id);
        deleted += 1;
      }
    }
    return deleted;
  }

  /** The recurring schedules by name. */
  readonly schedules = new Map<string, ModelSchedule>();

  /** Adds a schedule, or replaces the one of that name (see the top of this file for its next tick). */
  schedule(name: string, cron: string, message: ModelScheduledMessage, backfillMs: number): ScheduleOutcome {
    const old = this.schedules.get(name);
    const keepsNext = old !== undefined && old.cron === cron;
    this.schedules.set(name, {
      name,
      cron,
      backfillMs,
      message,
      nextAt: keepsNext ? old.nextAt : tickAfter(cron, this.now),
      lastTickAt: old?.lastTickAt ?? null,
      createdAt: old?.createdAt ?? this.now,
      updatedAt: this.now,
    });
    return old === undefined ? "added" : keepsNext ? "kept-next" : "replaced";
  }

  /** Removes a schedule: true when there was one. The messages it enqueued stay. */
  unschedule(name: string): boolean {
    return this.schedules.delete(name);
  }

  /**
   * Fires the due ticks at now, at most `limit`: see the top of this file. Only says which ticks
   * fired; the caller then enqueues each one's message with enqueueTick, in the order of the ids
   * the store gave them.
   */
  fireSchedules(limit: number = MAX_TICKS_PER_CALL): ModelFiring {
    const at = this.now;
    const fired: ModelFiredTick[] = [];
    const skipped: ModelSkippedTicks[] = [];
    let budget = limit;
    // The order is decided once, from the next ticks as the call finds them.
    const listed = [...this.schedules.values()]
      .filter((s) => s.nextAt !== null)
      .sort((a, b) => a.nextAt! - b.nextAt! || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const s of listed) {
      if (budget === 0) break;
      const oldest = at - s.backfillMs;
      if (s.nextAt !== null && s.nextAt < oldest) {
        // Every tick older than the backfill goes at once: the first one kept is the first at or after `oldest`.
        const kept = tickAfter(s.cron, oldest - 1);
        skipped.push({ schedule: s.name, reason: "too-late", from: s.nextAt, until: kept ?? at });
        s.nextAt = kept;
      }
      while (s.nextAt !== null && s.nextAt <= at && budget > 0) {
        budget -= 1;
        fired.push({ schedule: s.name, tick: s.nextAt });
        s.lastTickAt = s.nextAt;
        s.nextAt = tickAfter(s.cron, s.nextAt);
      }
    }
    const next = [...this.schedules.values()].map((s) => s.nextAt).filter((t): t is number => t !== null);
    return { at, fired, skipped, nextAt: next.length === 0 ? null : Math.min(...next), more: next.some((t) => t <= at) };
  }

  /**
   * A fired tick's message, under the id the store gave it, due now: the schedule's message with
   * the tick's dedupe key, and its headers with wassal-schedule and wassal-tick added.
   */
  enqueueTick(id: string, name: string, tick: number): void {
    const s = this.schedules.get(name);
    if (s === undefined) throw new Error(`the model has no schedule ${name} to enqueue the tick ${new Date(tick).toISOString()} of`);
    const iso = new Date(tick).toISOString();
    this.enqueue(id, this.now, s.message.key, s.message.priority, {
      type: MESSAGE_TYPE,
      payload: s.message.payload,
      dedupeKey: `schedule:${name}:${iso}`,
      headers: { ...s.message.headers, "wassal-schedule": name, "wassal-tick": iso },
    });
  }

  #auditResult(lease: PresentedLease, action: AuditAction): void {
    this.audit.push({
      messageId: lease.messageId,
      token: lease.token,
      owner: lease.owner,
      action,
      at: this.now,
      previousStatus: null,
      previousOwner: null,
      previousLockedUntil: null,
      operation: null,
    });
  }
}
