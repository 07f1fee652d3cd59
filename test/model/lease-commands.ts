// The commands of the model-based test: each one does the same thing to a real store and to the
// model (lease-model.ts), checks that the operation's result agrees, then checks the whole state
// (every message, the business rows, the audit trail, the exclusivity invariants).
//
// Several simulated workers each remember the leases they were handed, stale ones included: a
// worker presents them again after a completion, a failure, a release, an expiry or a reclaim,
// and the store must refuse every lease that is no longer current. A crash makes a worker forget
// its leases without touching the store.
//
// Recurring schedules are added, replaced and removed, and fired by a worker, or by two schedulers
// on two connections at the same moment. Besides the model's answer, every fireSchedules result is
// booked in the schedule's *life* (from its addition, or its replacement with another expression):
// after every command, each tick of a life before the schedule's next tick was fired exactly once
// or reported skipped, no tick was fired twice in the whole run, and no two messages name one tick.

import { isDeepStrictEqual } from "node:util";
import fc from "fast-check";
import type { ManualClock } from "../../src/outbox/clock.js";
import { KeyNotBlockedError } from "../../src/outbox/errors.js";
import type { OutboxStore } from "../../src/outbox/store.js";
import type {
  AuditEntry,
  ClaimMessageResult,
  FiredTick,
  JsonValue,
  Lease,
  LeaseLost,
  OutboxMessage,
  Schedule,
  ScheduledMessage,
  ScheduleFiring,
  SkippedTicks,
} from "../../src/outbox/types.js";
import { START, type BusinessRowsReader, type StoreHarness } from "../conformance/stores.js";
import {
  LeaseModel,
  type FinalizeKind,
  type Holder,
  type ModelAuditEntry,
  type LeaseLost as ModelLeaseLost,
  type ModelFiring,
  type ModelLease,
  type ModelMessage,
  type ModelSchedule,
  DEFAULT_BACKFILL_MS,
  MESSAGE_TYPE,
  tickAfter,
} from "./lease-model.js";

export const OWNERS = ["w1", "w2", "w3"] as const;

/** The model side: the specification plus what each simulated worker remembers. */
export interface World {
  readonly spec: LeaseModel;
  /** Each worker's leases, as the store handed them out (stale ones included until a crash). */
  readonly workers: Map<string, Lease[]>;
  /** Message ids in enqueue order (purged ones included). */
  readonly ids: string[];
  failures: number;
  /** Keys where a skipped message was redriven: there the queue, not the ids, says whose turn it is. */
  readonly rejoinedKeys: Set<string>;
  /** When each lease was handed out (a renewal keeps its place). */
  readonly handedOut: Map<Lease, number>;
  /** Each schedule's current life, booked from the store's answers (see the top of this file). */
  readonly lives: Map<string, Life>;
  /** Every tick fired in this run, "<name> <tick>" → its message id, whatever the life: a tick fires once for good. */
  readonly firedTicks: Map<string, string>;
  /** Whether a schedule was ever added: from then on the state check reads the schedules too. */
  scheduled: boolean;
}

/**
 * A schedule from its addition (or its replacement with another expression, which drops the ticks
 * still due of the old one, as documented) until it is removed or replaced so: when it began, and
 * what the store said it did with its ticks.
 */
export interface Life {
  readonly cron: string;
  readonly start: number;
  /** Fired ticks and their messages' ids. */
  readonly fired: Map<number, string>;
  /** Ranges of ticks reported skipped: from `from` up to, not including, `until`. */
  readonly skipped: { readonly from: number; readonly until: number }[];
  /** The expression's ticks after `start`, as far as read so far (croner is slow enough that the state check should not read them again each time). */
  readonly ticks: number[];
}

/** A life beginning now. */
function newLife(cron: string, start: number): Life {
  return { cron, start, fired: new Map(), skipped: [], ticks: [] };
}

/** The real side: one fresh database per run. */
export interface Real {
  readonly harness: StoreHarness;
  readonly clock: ManualClock;
  readonly business: BusinessRowsReader;
  /** Every (message, token) a claim has ever handed out: a token is never issued twice. */
  readonly issued: Set<string>;
  /** What happened so far in this run, printed when a check fails. */
  readonly trace: string[];
  /** Outcomes seen, per operation, across all runs of a test (to show the generator reaches them). */
  readonly seen: Map<string, number>;
  /** A second store on the same database (another process's scheduler), opened the first time two schedulers fire. */
  second?: OutboxStore<unknown>;
}

function tally(r: Real, key: string): void {
  r.seen.set(key, (r.seen.get(key) ?? 0) + 1);
}

export function newWorld(): World {
  return {
    spec: new LeaseModel(START.getTime()),
    workers: new Map(OWNERS.map((o) => [o, []])),
    ids: [],
    failures: 0,
    rejoinedKeys: new Set(),
    handedOut: new Map(),
    lives: new Map(),
    firedTicks: new Map(),
    scheduled: false,
  };
}

// ---------------------------------------------------------------------------------------------
// Views: real and model values in one comparable shape (times as milliseconds after START).

const rel = (t: Date | number | null): number | null => (t === null ? null : (typeof t === "number" ? t : t.getTime()) - START.getTime());

function realMessage(m: OutboxMessage) {
  return {
    id: m.id,
    type: m.type,
    payload: m.payload,
    dedupeKey: m.dedupeKey,
    headers: m.headers,
    key: m.key,
    priority: m.priority,
    status: m.status,
    lockedBy: m.lockedBy,
    token: m.leaseToken,
    attempts: m.attempts,
    lockedUntil: rel(m.lockedUntil),
    availableAt: rel(m.availableAt),
    lastError: m.lastError,
    processedAt: rel(m.processedAt),
  };
}
function modelMessage(m: ModelMessage) {
  return {
    id: m.id,
    type: m.type,
    payload: m.payload,
    dedupeKey: m.dedupeKey,
    headers: m.headers,
    key: m.key,
    priority: m.priority,
    status: m.status,
    lockedBy: m.lockedBy,
    token: m.token,
    attempts: m.attempts,
    lockedUntil: rel(m.lockedUntil),
    availableAt: rel(m.availableAt),
    lastError: m.lastError,
    processedAt: rel(m.processedAt),
  };
}
function realLease(l: Lease) {
  return {
    messageId: l.messageId,
    owner: l.owner,
    token: l.token,
    lockedUntil: rel(l.lockedUntil),
    reclaimedFrom: l.reclaimedFrom,
    message: realMessage(l.message),
  };
}
function modelLease(l: ModelLease, spec: LeaseModel) {
  return {
    messageId: l.messageId,
    owner: l.owner,
    token: l.token,
    lockedUntil: rel(l.lockedUntil),
    reclaimedFrom: l.reclaimedFrom,
    message: modelMessage(spec.messages.get(l.messageId)!),
  };
}
function holder(h: Holder | LeaseLost["current"]) {
  return h === null ? null : { status: h.status, lockedBy: h.lockedBy, lockedUntil: rel(h.lockedUntil), leaseToken: h.leaseToken };
}
function realAudit(e: AuditEntry) {
  return {
    messageId: e.messageId,
    token: e.token,
    owner: e.owner,
    action: e.action,
    at: rel(e.at),
    previousStatus: e.previousStatus,
    previousOwner: e.previousOwner,
    previousLockedUntil: rel(e.previousLockedUntil),
    operation: e.operation,
  };
}
function modelAudit(e: ModelAuditEntry) {
  return { ...e, at: rel(e.at), previousLockedUntil: rel(e.previousLockedUntil) };
}
function realSchedule(s: Schedule) {
  return {
    name: s.name,
    cron: s.cron,
    timezone: s.timezone,
    backfillMs: s.backfillMs,
    message: s.message,
    nextAt: rel(s.nextAt),
    lastTickAt: rel(s.lastTickAt),
    createdAt: rel(s.createdAt),
    updatedAt: rel(s.updatedAt),
  };
}
function modelSchedule(s: ModelSchedule) {
  const { payload, key, priority, headers } = s.message;
  return {
    name: s.name,
    cron: s.cron,
    timezone: "UTC",
    backfillMs: s.backfillMs,
    // As the store shows a schedule's message: the fields it was not given are absent.
    message: { type: MESSAGE_TYPE, payload, ...(key !== null && { key }), ...(headers !== null && { headers }), ...(priority !== 0 && { priority }) },
    nextAt: rel(s.nextAt),
    lastTickAt: rel(s.lastTickAt),
    createdAt: rel(s.createdAt),
    updatedAt: rel(s.updatedAt),
  };
}
const realFired = (t: FiredTick) => ({ schedule: t.schedule, tick: rel(t.tick) });
const realSkipped = (t: SkippedTicks) => ({ schedule: t.schedule, reason: t.reason, from: rel(t.from), until: rel(t.until) });
function realFiring(f: ScheduleFiring) {
  return { at: rel(f.at), fired: f.fired.map(realFired), skipped: f.skipped.map(realSkipped), failed: f.failed, nextAt: rel(f.nextAt), more: f.more };
}
function modelFiring(f: ModelFiring) {
  return {
    at: rel(f.at),
    fired: f.fired.map((t) => ({ schedule: t.schedule, tick: rel(t.tick) })),
    skipped: f.skipped.map((t) => ({ ...t, from: rel(t.from), until: rel(t.until) })),
    failed: [],
    nextAt: rel(f.nextAt),
    more: f.more,
  };
}

/**
 * The audit rows one redrive writes come in no particular order (one INSERT … SELECT over the dead
 * rows): sorts each run of consecutive redrive rows by message id, on both sides.
 */
function redrivesSorted<T extends { action: string; messageId: string }>(entries: T[]): T[] {
  const out: T[] = [];
  let run: T[] = [];
  const flush = () => {
    out.push(...run.sort((a, b) => Number(a.messageId) - Number(b.messageId)));
    run = [];
  };
  for (const e of entries) {
    if (e.action === "redrive") run.push(e);
    else {
      flush();
      out.push(e);
    }
  }
  flush();
  return out;
}

/** Fails with both values printed when the store and the model disagree (for lists of equal length, only the differing items). */
function same(actual: unknown, expected: unknown, what: string): void {
  if (isDeepStrictEqual(actual, expected)) return;
  const show = (label: string, store: unknown, model: unknown) => `\n  ${label}store: ${JSON.stringify(store)}\n  ${label}model: ${JSON.stringify(model)}`;
  const detail =
    Array.isArray(actual) && Array.isArray(expected) && actual.length === expected.length
      ? actual.map((item, i) => (isDeepStrictEqual(item, expected[i]) ? "" : show(`[${i}] `, item, expected[i]))).join("")
      : show("", actual, expected);
  throw new Error(`${what}: the store disagrees with the model${detail}`);
}

function brief(l: { messageId: string; token: number; lockedUntil: Date | number }): string {
  return `#${l.messageId}@${l.token} until +${rel(l.lockedUntil)}`;
}

// ---------------------------------------------------------------------------------------------
// The state check, after every command.

export async function checkState(w: World, r: Real): Promise<void> {
  const store = r.harness.store;
  const now = w.spec.now;
  if (r.clock.now().getTime() !== now) throw new Error(`clock at +${rel(r.clock.now())}, model at +${rel(now)}`);

  const rows = await store.listMessages();
  const kept = [...w.spec.messages.values()].filter((m) => !(deleting(r) && finished(m.status)));
  same(rows.map(realMessage), kept.map(modelMessage), "messages");

  // Exactly one committed business row per processed message, none for any other.
  const business = await r.business.counts();
  same(business, Object.fromEntries(w.spec.businessRows), "business rows per message");
  for (const row of rows) {
    const n = business[row.id] ?? 0;
    if (n !== (row.status === "processed" ? 1 : 0)) throw new Error(`invariant: message #${row.id} is ${row.status} with ${n} business row(s)`);
  }

  const audit = await store.auditTrail();
  // A refused write on a message the store deleted found no holder to record.
  const modelTrail = w.spec.audit
    .map(modelAudit)
    .map((e) =>
      deleting(r) && e.action === "refused" && e.previousStatus !== null && finished(e.previousStatus)
        ? { ...e, previousStatus: null, previousOwner: null, previousLockedUntil: null }
        : e,
    );
  same(redrivesSorted(audit.map(realAudit)), redrivesSorted(modelTrail), "audit trail");

  // The keys blocked by a dead message, and how many wait behind each.
  const blocked = await store.blockedKeys();
  same(
    blocked.map((b) => ({ key: b.key, messageId: b.messageId, lastError: b.lastError, diedAt: rel(b.diedAt), waiting: b.waiting })),
    w.spec.blockedKeys().map((b) => ({ ...b, diedAt: rel(b.diedAt) })),
    "blocked keys",
  );

  // Exclusive: at most one unexpired lease per message among everything the workers hold that the
  // store would honour, and every reclaim came at or after the previous lease's expiry.
  for (const row of rows) {
    if (row.status !== "processing" || row.lockedUntil!.getTime() <= now) continue;
    const live = [...w.workers.values()].flat().filter((l) => l.messageId === row.id && l.token === row.leaseToken);
    if (live.length > 1)
      throw new Error(`invariant: message #${row.id} has ${live.length} unexpired leases: ${live.map((l) => `${l.owner}@${l.token}`).join(", ")}`);
  }
  // FIFO per key: at most one message of a key is processing (in flight), expired or not.
  const inFlight = new Map<string, string[]>();
  for (const row of rows) if (row.key !== null && row.status === "processing") inFlight.set(row.key, [...(inFlight.get(row.key) ?? []), row.id]);
  for (const [key, ids] of inFlight) if (ids.length > 1) throw new Error(`invariant: key ${key} has ${ids.length} messages in flight: #${ids.join(", #")}`);
  for (const e of audit) {
    if (e.action === "claim" && e.previousStatus === "processing" && e.previousLockedUntil!.getTime() > e.at.getTime()) {
      throw new Error(
        `invariant: #${e.messageId} reclaimed by ${e.owner} at +${rel(e.at)} while ${e.previousOwner}'s lease ran until +${rel(e.previousLockedUntil)}`,
      );
    }
  }

  // Recurring schedules: the store's list as the model has it, each tick's message there at most
  // once, and every tick of every schedule's life accounted for.
  checkTickMessages(w, rows);
  if (w.scheduled) {
    const schedules = await store.schedules();
    same(
      schedules.map(realSchedule),
      [...w.spec.schedules.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)).map(modelSchedule),
      "schedules",
    );
    checkLives(w, schedules);
  }
}

const iso = (t: number) => new Date(t).toISOString();

/** The life's ticks up to and including the first one at or after `until` (if it has one), oldest first. */
function ticksUntil(life: Life, until: number): readonly number[] {
  const { ticks } = life;
  while (ticks.length === 0 || ticks[ticks.length - 1]! < until) {
    const tick = tickAfter(life.cron, ticks.length === 0 ? life.start : ticks[ticks.length - 1]!);
    if (tick === null) break;
    ticks.push(tick);
  }
  return ticks;
}

/**
 * Each tick's message is there at most once: no two messages name one schedule and tick in their
 * wassal-schedule and wassal-tick headers (the dedupe key "schedule:<name>:<tick>" is unique in
 * the store anyway), the headers and the dedupe key agree, and the message is the one
 * fireSchedules said it enqueued for that tick.
 */
function checkTickMessages(w: World, rows: readonly OutboxMessage[]): void {
  const byTick = new Map<string, string[]>();
  for (const row of rows) {
    const name = row.headers["wassal-schedule"];
    const tick = row.headers["wassal-tick"];
    if (name === undefined && tick === undefined && !row.dedupeKey?.startsWith("schedule:")) continue;
    if (row.dedupeKey !== `schedule:${name}:${tick}`)
      throw new Error(`invariant: message #${row.id} has the dedupe key ${row.dedupeKey} and the headers of schedule ${name}'s tick ${tick}`);
    const id = `${name} ${tick}`;
    byTick.set(id, [...(byTick.get(id) ?? []), row.id]);
    const fired = w.firedTicks.get(id);
    if (fired !== row.id)
      throw new Error(
        `invariant: message #${row.id} is schedule ${name}'s tick ${tick}, ${fired === undefined ? "which no fireSchedules fired" : `which fireSchedules said it enqueued as #${fired}`}`,
      );
  }
  for (const [id, ids] of byTick) if (ids.length > 1) throw new Error(`invariant: ${ids.length} messages for the tick ${id}: #${ids.join(", #")}`);
}

/**
 * Nothing silently lost: every tick of a schedule's life before the schedule's next tick was fired
 * exactly once or reported skipped, nothing at or after it was (nor before the life began), and the
 * next tick is one of the expression's ticks after the life began.
 */
function checkLives(w: World, schedules: readonly Schedule[]): void {
  same(
    schedules.map((s) => s.name),
    [...w.lives.keys()].sort(),
    "the schedules with a life booked",
  );
  for (const s of schedules) {
    const life = w.lives.get(s.name)!;
    if (s.nextAt === null) throw new Error(`invariant: schedule ${s.name} ("${s.cron}") has no next tick`);
    const next = s.nextAt.getTime();
    // No tick still to come was fired or skipped: the next one is at the latest the first after now.
    const upcoming = tickAfter(life.cron, w.spec.now);
    if (upcoming !== null && next > upcoming)
      throw new Error(
        `invariant: schedule ${s.name}'s next tick ${iso(next)} is past ${iso(upcoming)}, its first tick after now: a tick not yet due was passed`,
      );
    const ticks = ticksUntil(life, next);
    const first = ticks.find((tick) => tick >= next);
    if (first !== next)
      throw new Error(
        `invariant: schedule ${s.name}'s next tick ${iso(next)} is not a tick of "${life.cron}" (the first one at or after it is ${first === undefined ? "none" : iso(first)})`,
      );
    for (const tick of ticks) {
      if (tick >= next) break;
      const fired = life.fired.has(tick) ? 1 : 0;
      const skipped = life.skipped.filter((range) => range.from <= tick && tick < range.until).length;
      if (fired + skipped !== 1)
        throw new Error(
          `invariant: tick ${iso(tick)} of schedule ${s.name} (its next tick ${iso(next)}) was ${fired + skipped === 0 ? "neither fired nor reported skipped: lost" : `fired ${fired} time(s) and reported skipped ${skipped} time(s)`}`,
        );
    }
    for (const tick of life.fired.keys())
      if (tick <= life.start || tick >= next)
        throw new Error(`invariant: schedule ${s.name} fired the tick ${iso(tick)}, outside its life (${iso(life.start)} to ${iso(next)})`);
    for (const range of life.skipped)
      if (range.from <= life.start || range.until > next)
        throw new Error(
          `invariant: schedule ${s.name} skipped the ticks ${iso(range.from)} to ${iso(range.until)}, outside its life (${iso(life.start)} to ${iso(next)})`,
        );
  }
}

// ---------------------------------------------------------------------------------------------
// Commands.

class FinalizeFailure extends Error {
  constructor() {
    super("finalize failed on purpose");
  }
}

type Act = (w: World, r: Real) => Promise<string>;

/** One command: `act` drives store and model and checks the result; then the whole state is checked. */
class Step implements fc.AsyncCommand<World, Real> {
  constructor(
    private readonly label: string,
    private readonly applies: (w: World) => boolean,
    private readonly act: Act,
  ) {}

  check(w: Readonly<World>): boolean {
    return this.applies(w as World);
  }

  async run(w: World, r: Real): Promise<void> {
    const at = `t+${rel(w.spec.now)}`;
    try {
      r.trace.push(`${at} ${this.label} → ${await this.act(w, r)}`);
      await checkState(w, r);
    } catch (error) {
      if (!r.trace[r.trace.length - 1]?.startsWith(`${at} ${this.label} →`)) r.trace.push(`${at} ${this.label} → (failed)`);
      const message = error instanceof Error ? error.message : String(error);
      throw new Error(`${message}\n  run so far (store ${r.harness.store.kind}):\n    ${r.trace.join("\n    ")}`, { cause: error });
    }
  }

  toString(): string {
    return this.label;
  }
}

/** Every lease some worker remembers, worker by worker, oldest first. */
function remembered(w: World): { owner: string; lease: Lease; index: number }[] {
  return [...w.workers.entries()].flatMap(([owner, leases]) => leases.map((lease, index) => ({ owner, lease, index })));
}

/**
 * The lease a worker presents: one that some worker remembers, picked by index, or "latest": the
 * last one handed out among those the model says are still current (else the last one handed out),
 * so that failures land often enough to kill, skip and block.
 */
function presented(w: World, pick: number | "latest"): { owner: string; lease: Lease; index: number } {
  const all = remembered(w);
  if (pick !== "latest") return all[pick % all.length]!;
  const current = all.filter(({ lease }) => w.spec.current(lease) !== undefined);
  return (current.length > 0 ? current : all).reduce((a, b) => (w.handedOut.get(b.lease)! > w.handedOut.get(a.lease)! ? b : a));
}

const anyHeld = (w: World) => remembered(w).length > 0;

/** A lease-lost result, the store's or the model's, in one shape. */
function lostView(l: LeaseLost | ModelLeaseLost) {
  return { outcome: l.outcome, messageId: l.messageId, token: l.token, current: holder(l.current) };
}

// The model keeps a completed message as processed, a cancelled one as cancelled. A store with
// onComplete "delete" deletes their rows instead, and nothing else differs: so the model's views are
// translated at the comparison, a processed or cancelled message being one the store no longer has.

/** Whether the store under test deletes a completed (or cancelled) message's row. */
const deleting = (r: Real) => r.harness.store.onComplete === "delete";

/** Whether a status is one whose row a deleting store no longer has. */
const finished = (status: string) => status === "processed" || status === "cancelled";

/** The model's lease-lost result as the store must report it: a processed holder is gone when the store deletes. */
function expectedLost(l: ModelLeaseLost, r: Real) {
  const view = lostView(l);
  return deleting(r) && view.current !== null && finished(view.current.status) ? { ...view, current: null } : view;
}

/** The model's status of a message as the store must report it ("missing" for a processed one when the store deletes). */
function expectedStatus<S extends string>(status: S, r: Real): S | "missing" {
  return deleting(r) && finished(status) ? "missing" : status;
}

function claimed(w: World, r: Real, owner: string, lease: Lease): void {
  const key = `${lease.messageId}#${lease.token}`;
  if (r.issued.has(key)) throw new Error(`invariant: token ${lease.token} of #${lease.messageId} was handed out twice`);
  r.issued.add(key);
  // FIFO per key, by its definition: no earlier message of the key is unfinished, or dead and still
  // holding it. (Where a skipped message was redriven, the queue decides instead: see the model.)
  const mine = lease.message.key;
  if (mine !== null && !w.rejoinedKeys.has(mine)) {
    const earlier = [...w.spec.messages.values()].filter(
      (m) => m.key === mine && Number(m.id) < Number(lease.messageId) && !finished(m.status) && m.keyState !== "skipped",
    );
    if (earlier.length > 0)
      throw new Error(`invariant: #${lease.messageId} of key ${mine} claimed while earlier #${earlier.map((m) => m.id).join(", #")} unfinished`);
  }
  // Its number in its key's order, as the model numbers a key's holders.
  const expectedSeq = w.spec.messages.get(lease.messageId)?.keySeq ?? null;
  if (lease.message.keySeq !== expectedSeq)
    throw new Error(`invariant: #${lease.messageId} of key ${mine} claimed as number ${lease.message.keySeq} of its key, the model says ${expectedSeq}`);
  w.workers.get(owner)!.push(lease);
  w.handedOut.set(lease, w.handedOut.size);
  tally(r, lease.reclaimedFrom === null ? "lease:fresh" : lease.reclaimedFrom === owner ? "lease:reclaimed-own" : "lease:reclaimed-other");
}

export function enqueue(delayMs: number | undefined, key: string | null, priority = 0): Step {
  return new Step(
    `enqueue(${delayMs === undefined ? "due now" : `availableAt now${delayMs < 0 ? "" : "+"}${delayMs}`}${key === null ? "" : `, key ${key}`}${priority === 0 ? "" : `, priority ${priority}`})`,
    () => true,
    async (w, r) => {
      const store = r.harness.store;
      const availableAt = delayMs === undefined ? undefined : new Date(w.spec.now + delayMs);
      const payload = { n: w.ids.length };
      const message = await store.transaction((tx) =>
        store.enqueue(tx, {
          type: MESSAGE_TYPE,
          payload,
          ...(availableAt && { availableAt }),
          ...(key !== null && { key }),
          ...(priority !== 0 && { priority }),
        }),
      );
      if (w.spec.messages.has(message.id)) throw new Error(`enqueue returned id ${message.id} twice`);
      w.ids.push(message.id);
      w.spec.enqueue(message.id, availableAt?.getTime() ?? w.spec.now, key, priority, { type: MESSAGE_TYPE, payload, dedupeKey: null, headers: {} });
      same(realMessage(message), modelMessage(w.spec.messages.get(message.id)!), "enqueued message");
      return `#${message.id}`;
    },
  );
}

export function claim(owner: string, limit: number, leaseMs: number): Step {
  return new Step(
    `${owner} claim(limit ${limit}, lease ${leaseMs}ms)`,
    () => true,
    async (w, r) => {
      // A due message held back by an earlier one of its key: the claim must pass it over.
      if ([...w.spec.messages.values()].some((m) => m.status === "pending" && m.availableAt <= w.spec.now && w.spec.waiting(m))) tally(r, "claim:key-waited");
      const claimable = [...w.spec.messages.values()].filter((m) => w.spec.claimable(m)).length;
      const leases = await r.harness.store.claim(owner, { limit, leaseMs });
      const expected = w.spec.claim(owner, limit, leaseMs);
      if (expected.length < Math.min(limit, claimable)) tally(r, "claim:held-by-limit");
      const note = leases.length === 0 ? "nothing" : leases.map(brief).join(", ");
      same(
        leases.map((l) => `#${l.messageId}`).join(", "),
        expected.map((l) => `#${l.messageId}`).join(", "),
        `${owner}'s claim: the messages claimed, in order`,
      );
      same(
        leases.map(realLease),
        expected.map((l) => modelLease(l, w.spec)),
        `${owner}'s claim: the leases`,
      );
      for (const lease of leases) claimed(w, r, owner, lease);
      tally(r, leases.length === 0 ? "claim:empty" : leases.length === 1 ? "claim:one" : "claim:several");
      return note;
    },
  );
}

export function claimMessage(owner: string, pick: number, leaseMs: number): Step {
  return new Step(
    `${owner} claimMessage(message pick ${pick}, lease ${leaseMs}ms)`,
    () => true,
    async (w, r) => {
      // One pick past the known ids names a message that does not exist.
      const index = pick % (w.ids.length + 1);
      const id = w.ids[index] ?? "999999";
      const result: ClaimMessageResult = await r.harness.store.claimMessage(owner, id, { leaseMs });
      const expected = w.spec.claimMessage(owner, id, leaseMs);
      const view =
        result.outcome === "claimed"
          ? { outcome: result.outcome, lease: realLease(result.lease) }
          : result.outcome === "blocked"
            ? { outcome: result.outcome, messageId: result.messageId, heldBy: result.heldBy, lockedUntil: rel(result.lockedUntil), token: result.token }
            : { outcome: result.outcome, messageId: result.messageId, status: result.status };
      const model =
        expected.outcome === "claimed"
          ? { outcome: expected.outcome, lease: modelLease(expected.lease, w.spec) }
          : expected.outcome === "blocked"
            ? { outcome: expected.outcome, messageId: id, heldBy: expected.heldBy, lockedUntil: rel(expected.lockedUntil), token: expected.token }
            : { outcome: expected.outcome, messageId: id, status: expectedStatus(expected.status, r) };
      same(view, model, `${owner}'s claim of #${id}`);
      if (result.outcome === "claimed") claimed(w, r, owner, result.lease);
      tally(r, result.outcome === "not-claimable" && result.status === "waiting" ? "claimMessage:waiting" : `claimMessage:${result.outcome}`);
      return `#${id}: ${result.outcome === "claimed" ? brief(result.lease) : result.outcome}`;
    },
  );
}

export function renew(pick: number, leaseMs: number): Step {
  return new Step(`renew(lease pick ${pick}, ${leaseMs}ms)`, anyHeld, async (w, r) => {
    const { owner, lease, index } = presented(w, pick);
    const result = await r.harness.store.renew(lease, leaseMs);
    const expected = w.spec.renew(lease, leaseMs);
    same(
      result.outcome === "renewed" ? { outcome: result.outcome, lease: realLease(result.lease) } : lostView(result),
      expected.outcome === "renewed"
        ? {
            outcome: expected.outcome,
            lease: {
              messageId: lease.messageId,
              owner,
              token: lease.token,
              lockedUntil: rel(expected.lockedUntil),
              reclaimedFrom: lease.reclaimedFrom,
              message: modelMessage(w.spec.messages.get(lease.messageId)!),
            },
          }
        : expectedLost(expected, r),
      `${owner}'s renewal of #${lease.messageId}@${lease.token}`,
    );
    if (result.outcome === "renewed") {
      w.workers.get(owner)![index] = result.lease;
      w.handedOut.set(result.lease, w.handedOut.get(lease)!);
    }
    const held = w.spec.messages.get(lease.messageId);
    const expiredOwn = result.outcome === "lease-lost" && held?.status === "processing" && held.token === lease.token;
    tally(r, expiredOwn ? "renew:expired" : `renew:${result.outcome}`);
    return `${owner} renews #${lease.messageId}@${lease.token}: ${result.outcome === "renewed" ? brief(result.lease) : result.outcome}`;
  });
}

export function complete(pick: number, finalize: FinalizeKind): Step {
  return new Step(`complete(lease pick ${pick}${finalize === "write" ? "" : ", finalize throws"})`, anyHeld, async (w, r) => {
    const { owner, lease } = presented(w, pick);
    let finalizeCalls = 0;
    let view: unknown;
    try {
      const result = await r.harness.store.complete(lease, async (tx) => {
        finalizeCalls += 1;
        await r.harness.businessWrite(tx, lease.messageId);
        if (finalize === "write-then-throw") throw new FinalizeFailure();
      });
      view = result.outcome === "completed" ? { outcome: result.outcome, messageId: result.messageId, processedAt: rel(result.processedAt) } : lostView(result);
    } catch (error) {
      if (!(error instanceof FinalizeFailure)) throw error;
      view = { outcome: "finalize-threw" };
    }
    const expected = w.spec.complete(lease, finalize);
    same(
      view,
      expected.outcome === "completed"
        ? { outcome: expected.outcome, messageId: lease.messageId, processedAt: rel(expected.processedAt) }
        : expected.outcome === "finalize-threw"
          ? expected
          : expectedLost(expected, r),
      `${owner}'s completion of #${lease.messageId}@${lease.token}`,
    );
    // A stale token never writes: finalize runs only under the current lease.
    same(finalizeCalls, expected.outcome === "lease-lost" ? 0 : 1, `finalize calls for #${lease.messageId}@${lease.token}`);
    tally(r, `complete:${(view as { outcome: string }).outcome}`);
    return `${owner} completes #${lease.messageId}@${lease.token}: ${(view as { outcome: string }).outcome}`;
  });
}

export function fail(pick: number | "latest", decision: { readonly retryInMs: number } | "dead" | "dead-and-skip"): Step {
  const how = typeof decision === "string" ? decision : `retry in ${decision.retryInMs}ms`;
  return new Step(`fail(${pick === "latest" ? "latest lease" : `lease pick ${pick}`}, ${how})`, anyHeld, async (w, r) => {
    const { owner, lease } = presented(w, pick);
    w.failures += 1;
    const error = new Error(`boom ${w.failures}`);
    const result = await r.harness.store.fail(lease, error, decision);
    const expected = w.spec.fail(lease, `Error: boom ${w.failures}`, decision);
    same(
      result.outcome === "retry-scheduled"
        ? { outcome: result.outcome, messageId: result.messageId, availableAt: rel(result.availableAt) }
        : result.outcome === "dead"
          ? { outcome: result.outcome, messageId: result.messageId }
          : lostView(result),
      expected.outcome === "retry-scheduled"
        ? { outcome: expected.outcome, messageId: lease.messageId, availableAt: rel(expected.availableAt) }
        : expected.outcome === "dead"
          ? { outcome: expected.outcome, messageId: lease.messageId }
          : expectedLost(expected, r),
      `${owner}'s failure of #${lease.messageId}@${lease.token}`,
    );
    tally(r, `fail:${result.outcome}`);
    return `${owner} fails #${lease.messageId}@${lease.token}: ${result.outcome}`;
  });
}

export function release(pick: number): Step {
  return new Step(`release(lease pick ${pick})`, anyHeld, async (w, r) => {
    const { owner, lease } = presented(w, pick);
    const result = await r.harness.store.release(lease);
    const expected = w.spec.release(lease);
    same(
      result.outcome === "released" ? { outcome: result.outcome, messageId: result.messageId } : lostView(result),
      expected.outcome === "released" ? { outcome: expected.outcome, messageId: lease.messageId } : expectedLost(expected, r),
      `${owner}'s release of #${lease.messageId}@${lease.token}`,
    );
    tally(r, `release:${result.outcome}`);
    return `${owner} releases #${lease.messageId}@${lease.token}: ${result.outcome}`;
  });
}

export function crash(owner: string): Step {
  return new Step(
    `${owner} crash (forgets its leases)`,
    (w) => w.workers.get(owner)!.length > 0,
    async (w) => {
      const forgotten = w.workers.get(owner)!.map((l) => `#${l.messageId}@${l.token}`);
      w.workers.set(owner, []);
      return `forgot ${forgotten.join(", ")}`;
    },
  );
}

/** The owner's heartbeat: it counts as alive for `aliveMs` more. */
export function heartbeat(owner: string, aliveMs: number): Step {
  return new Step(
    `${owner} heartbeat(${aliveMs}ms)`,
    () => true,
    async (w, r) => {
      await r.harness.store.heartbeat(owner, { aliveMs });
      w.spec.heartbeat(owner, aliveMs);
      return "alive";
    },
  );
}

/** A reap: owners whose heartbeat stopped lose their leases at once (each an expired lease from then on). */
export function reap(): Step {
  return new Step(
    "reapDeadOwners",
    () => true,
    async (w, r) => {
      const real = await r.harness.store.reapDeadOwners("reaper");
      const model = w.spec.reap();
      same(real, model, "reaped owners");
      tally(r, `reap:${real.length === 0 ? "none" : real.some((o) => o.expired > 0) ? "leases" : "owners"}`);
      return JSON.stringify(real);
    },
  );
}

export function advance(ms: number): Step {
  return new Step(
    `advance(${ms}ms)`,
    () => true,
    async (w, r) => {
      r.clock.advance(ms);
      w.spec.advance(ms);
      return `now +${rel(w.spec.now)}`;
    },
  );
}

/** Notes the keys where a skipped message is about to rejoin its queue (before the model moves it). */
function noteRejoins(w: World, ids: readonly string[] | "all"): void {
  for (const m of w.spec.messages.values()) {
    if (m.status === "dead" && m.keyState === "skipped" && (ids === "all" || ids.includes(m.id))) w.rejoinedKeys.add(m.key!);
  }
}

export function redrive(picks: readonly number[] | "all"): Step {
  return new Step(
    `redrive(${picks === "all" ? "all" : `message picks ${picks.join(", ")}`})`,
    () => true,
    async (w, r) => {
      const ids = picks === "all" ? "all" : [...new Set(picks.map((p) => w.ids[p % (w.ids.length + 1)] ?? "999999"))];
      const rejoins = [...w.spec.messages.values()].some((m) => m.status === "dead" && m.keyState === "skipped" && (ids === "all" || ids.includes(m.id)));
      const result = await r.harness.store.redrive(ids === "all" ? "all" : { messageIds: ids });
      noteRejoins(w, ids);
      const moved = w.spec.redrive(ids);
      const notMoved =
        ids === "all"
          ? []
          : ids.filter((id) => !moved.includes(id)).map((id) => ({ messageId: id, status: expectedStatus(w.spec.messages.get(id)?.status ?? "missing", r) }));
      same(result, { moved: moved.length, notMoved }, `redrive of ${ids === "all" ? "all" : ids.map((id) => `#${id}`).join(", ")}`);
      tally(r, moved.length === 0 ? "redrive:none" : rejoins ? "redrive:rejoined" : "redrive:moved");
      return `moved ${moved.map((id) => `#${id}`).join(", ") || "nothing"}`;
    },
  );
}

export function unblockKey(key: string, action: "redrive" | "skip"): Step {
  return new Step(
    `unblockKey(${key}, ${action})`,
    () => true,
    async (w, r) => {
      let view: unknown;
      try {
        view = await r.harness.store.unblockKey(key, action);
      } catch (error) {
        if (!(error instanceof KeyNotBlockedError)) throw error;
        view = "not blocked";
      }
      const holder = w.spec.deadHolder(key);
      const expected = w.spec.unblockKey(key, action);
      same(view, expected === undefined ? "not blocked" : { key, messageId: expected, action }, `unblockKey(${key}, ${action})`);
      tally(r, expected === undefined ? "unblock:not-blocked" : `unblock:${action}`);
      return expected === undefined ? "not blocked" : `${action} #${holder?.id}`;
    },
  );
}

export function purgeDead(ageMs: number): Step {
  return new Step(
    `purgeDead(died over ${ageMs}ms ago)`,
    () => true,
    async (w, r) => {
      const before = new Date(w.spec.now - ageMs);
      const deleted = await r.harness.store.purgeDead(before, { batchSize: 2 });
      const expected = w.spec.purgeDead(before.getTime());
      same(deleted, expected, "dead messages purged");
      // A dead message still holding its key was kept.
      if (w.spec.blockedKeys().some((b) => b.diedAt < before.getTime())) tally(r, "purgeDead:kept-blocking");
      tally(r, deleted === 0 ? "purgeDead:none" : "purgeDead:deleted");
      return `deleted ${deleted}`;
    },
  );
}

/** Sets (or replaces) a limit on the model's one message type: every claim after it obeys it. */
export function limit(concurrency: number | null, rate: { readonly count: number; readonly intervalMs: number } | null): Step {
  return new Step(
    `limit(${concurrency === null ? "" : `concurrency ${concurrency}`}${concurrency !== null && rate !== null ? ", " : ""}${rate === null ? "" : `rate ${rate.count}/${rate.intervalMs}ms`})`,
    () => true,
    async (w, r) => {
      await r.harness.store.limit(MESSAGE_TYPE, { concurrency, rate });
      w.spec.setLimit(concurrency, rate);
      tally(r, "limit:set");
      return "set";
    },
  );
}

export function unlimit(): Step {
  return new Step(
    "unlimit",
    (w) => w.spec.limit !== null,
    async (w, r) => {
      same(await r.harness.store.unlimit(MESSAGE_TYPE), true, "unlimit");
      w.spec.unlimit();
      return "lifted";
    },
  );
}

/** Cancels a message without an ordering key: a pending one, and with `running` a leased one too (its holder's leases go stale). */
export function cancel(pick: number, running: boolean): Step {
  return new Step(
    `cancel(message pick ${pick}${running ? ", running" : ""})`,
    () => true,
    async (w, r) => {
      // Keyed messages hand their key on when cancelled (the conformance suite covers it); the model cancels unkeyed ones.
      const unkeyed = w.ids.filter((id) => w.spec.messages.has(id) && w.spec.messages.get(id)?.key === null);
      // A running cancel picks among the running messages when there are any; pick 11 names a message that does not exist.
      const runningIds = unkeyed.filter((id) => w.spec.messages.get(id)?.status === "processing");
      const among = running && runningIds.length > 0 ? runningIds : unkeyed;
      const id = pick === 11 ? "999999" : (among[pick % Math.max(among.length, 1)] ?? "999999");
      let view: unknown;
      try {
        const done = await r.harness.store.cancel(id, running ? { running: true } : {});
        view = { outcome: "cancelled", runningOwner: done.runningOwner };
      } catch (error) {
        const code = (error as { code?: string }).code;
        if (code === undefined) throw error;
        view = { outcome: code };
      }
      const expected = w.spec.cancel(id, running);
      const codes: Record<string, string> = {
        missing: "MESSAGE_NOT_FOUND",
        processing: "MESSAGE_RUNNING",
        processed: deleting(r) ? "MESSAGE_NOT_FOUND" : "MESSAGE_NOT_PENDING",
        cancelled: deleting(r) ? "MESSAGE_NOT_FOUND" : "MESSAGE_NOT_PENDING",
        dead: "MESSAGE_NOT_PENDING",
      };
      if (expected.outcome === "cancelled") {
        same(view, expected, `cancel of #${id}`);
        tally(r, expected.runningOwner === null ? "cancel:pending" : "cancel:running");
        return "cancelled";
      }
      same(view, { outcome: codes[expected.status] }, `cancel of #${id}`);
      tally(r, `cancel:${expected.status}`);
      return expected.status;
    },
  );
}

// ---------------------------------------------------------------------------------------------
// Recurring schedules.

/** The schedules' names: few, so that a schedule is often replaced. Only s2's messages may carry an ordering key (see fireTogether). */
export const SCHEDULE_NAMES = ["s1", "s2"] as const;

/** What a schedule's message varies in: its payload's version (a replacement changes it), its key, priority and headers. */
export interface ScheduleVariant {
  readonly version: number;
  readonly keyed: boolean;
  readonly priority: number;
  readonly headers: boolean;
}

/**
 * Adds a schedule, or replaces it: with the same expression it keeps its next tick, else its next
 * tick is the first after now. Without a backfillMs it takes the default.
 */
export function schedule(name: string, cron: string, backfillMs: number | undefined, variant: ScheduleVariant): Step {
  const key = variant.keyed && name === "s2" ? "a" : null;
  const headers = variant.headers ? { origin: "model" } : null;
  const { priority, version } = variant;
  return new Step(
    `schedule(${name}, "${cron}", ${backfillMs === undefined ? "default backfill" : `backfill ${backfillMs}ms`}, message v${version}${key === null ? "" : `, key ${key}`}${priority === 0 ? "" : `, priority ${priority}`}${headers === null ? "" : ", headers"})`,
    () => true,
    async (w, r) => {
      const payload: JsonValue = { schedule: name, version };
      const message: ScheduledMessage = {
        type: MESSAGE_TYPE,
        payload,
        ...(key !== null && { key }),
        ...(priority !== 0 && { priority }),
        ...(headers !== null && { headers }),
      };
      const stored = await r.harness.store.schedule(name, cron, message, backfillMs === undefined ? {} : { backfillMs });
      const outcome = w.spec.schedule(name, cron, { payload, key, priority, headers }, backfillMs ?? DEFAULT_BACKFILL_MS);
      same(realSchedule(stored), modelSchedule(w.spec.schedules.get(name)!), `schedule ${name}`);
      // A new schedule, or a new expression, begins a new life (the old one's ticks still due are
      // dropped, as documented); the same expression goes on with its ticks.
      if (outcome !== "kept-next") w.lives.set(name, newLife(cron, w.spec.now));
      w.scheduled = true;
      tally(r, `schedule:${outcome}`);
      return `${outcome}, next tick +${rel(stored.nextAt)}`;
    },
  );
}

export function unschedule(name: string): Step {
  return new Step(
    `unschedule(${name})`,
    () => true,
    async (w, r) => {
      const removed = await r.harness.store.unschedule(name);
      const expected = w.spec.unschedule(name);
      same(removed, expected, `unschedule(${name})`);
      w.lives.delete(name);
      tally(r, removed ? "unschedule:removed" : "unschedule:none");
      return removed ? "removed" : "none";
    },
  );
}

/** Firing before any schedule was added finds nothing, every time: the commands that fire wait for one (and go on after it is removed). */
const everScheduled = (w: World) => w.scheduled;

/** Books what fireSchedules said in the schedules' lives: a tick fired twice in the run is an invariant broken (the state check finds the rest). */
function book(w: World, fired: readonly FiredTick[], skipped: readonly SkippedTicks[]): void {
  for (const range of skipped) {
    const life = w.lives.get(range.schedule);
    if (life === undefined) throw new Error(`invariant: ticks of schedule ${range.schedule}, which does not exist, reported skipped`);
    life.skipped.push({ from: range.from.getTime(), until: range.until.getTime() });
  }
  for (const t of fired) {
    const id = `${t.schedule} ${t.tick.toISOString()}`;
    const earlier = w.firedTicks.get(id);
    if (earlier !== undefined) throw new Error(`invariant: the tick ${id} fired twice: messages #${earlier} and #${t.messageId}`);
    w.firedTicks.set(id, t.messageId);
    const life = w.lives.get(t.schedule);
    if (life === undefined) throw new Error(`invariant: schedule ${t.schedule}, which does not exist, fired the tick ${id}`);
    life.fired.set(t.tick.getTime(), t.messageId);
  }
}

/** The fired ticks' messages join the model in the order of their ids, as every message does. */
function enqueueTicks(w: World, fired: readonly FiredTick[]): void {
  for (const t of [...fired].sort((a, b) => Number(a.messageId) - Number(b.messageId))) {
    if (w.spec.messages.has(t.messageId)) throw new Error(`fireSchedules returned id ${t.messageId} of a message already there`);
    w.ids.push(t.messageId);
    w.spec.enqueueTick(t.messageId, t.schedule, t.tick.getTime());
  }
}

function firingNote(fired: readonly FiredTick[], skipped: readonly SkippedTicks[], nextAt: Date | null, more: boolean): string {
  const parts = [
    ...fired.map((t) => `fired ${t.schedule}@+${rel(t.tick)} #${t.messageId}`),
    ...skipped.map((t) => `skipped ${t.schedule} +${rel(t.from)}..+${rel(t.until)}`),
  ];
  return `${parts.join(", ") || "nothing due"}; next +${rel(nextAt)}${more ? ", more" : ""}`;
}

function tallyFiring(r: Real, expected: ModelFiring, prefix = ""): void {
  if (expected.fired.length > 0) tally(r, `${prefix}schedule:fired`);
  if (expected.skipped.length > 0) tally(r, `${prefix}schedule:skipped`);
  if (expected.fired.length === 0 && expected.skipped.length === 0) tally(r, `${prefix}fire:nothing-due`);
}

/** A worker fires the due ticks, at most `limit` of them. */
export function fire(owner: string, limit: number | undefined): Step {
  return new Step(`${owner} fireSchedules(${limit === undefined ? "" : `limit ${limit}`})`, everScheduled, async (w, r) => {
    const firing = await r.harness.store.fireSchedules({ owner, ...(limit !== undefined && { limit }) });
    const expected = w.spec.fireSchedules(limit);
    same(realFiring(firing), modelFiring(expected), `${owner}'s fireSchedules`);
    book(w, firing.fired, firing.skipped);
    enqueueTicks(w, firing.fired);
    tallyFiring(r, expected);
    if (expected.more) tally(r, "fire:limited");
    return firingNote(firing.fired, firing.skipped, firing.nextAt, firing.more);
  });
}

/**
 * Two schedulers, each with a connection of its own, fire at the same moment: between them each
 * due tick fires once (the compare-and-set on the schedule's next tick lets one through), the
 * skipped ticks are reported once, and neither is told to look again later than the next tick (a
 * scheduler sleeping until then would find that tick late). Who fires which tick is up to the
 * race. Only s2's messages carry an ordering key, so two messages of one key are never enqueued at
 * once (one schedule's ticks fire one after the other, whoever fires them).
 */
export function fireTogether(): Step {
  return new Step("two schedulers fireSchedules at once", everScheduled, async (w, r) => {
    if (r.second === undefined) r.second = await r.harness.connect();
    const [one, two] = await Promise.all([r.harness.store.fireSchedules({ owner: "scheduler-1" }), r.second.fireSchedules({ owner: "scheduler-2" })]);
    const expected = w.spec.fireSchedules();
    const view = modelFiring(expected);
    const inOrder = <T extends { readonly schedule: string }>(list: readonly T[], time: (item: T) => number | null) =>
      [...list].sort((a, b) => (time(a) ?? 0) - (time(b) ?? 0) || (a.schedule < b.schedule ? -1 : a.schedule > b.schedule ? 1 : 0));
    same(
      inOrder([...one.fired, ...two.fired].map(realFired), (t) => t.tick),
      inOrder(view.fired, (t) => t.tick),
      "the ticks two schedulers fired at one moment",
    );
    same(
      inOrder([...one.skipped, ...two.skipped].map(realSkipped), (t) => t.from),
      inOrder(view.skipped, (t) => t.from),
      "the ticks two schedulers skipped at one moment",
    );
    for (const [who, firing] of [
      ["scheduler-1", one],
      ["scheduler-2", two],
    ] as const) {
      same({ at: rel(firing.at), failed: firing.failed, more: firing.more }, { at: view.at, failed: [], more: view.more }, `${who}'s fireSchedules`);
      const next = rel(firing.nextAt);
      if ((next === null) !== (view.nextAt === null) || (next !== null && view.nextAt !== null && next > view.nextAt))
        throw new Error(`invariant: ${who} was told to look for the next tick at +${next}, and it is at +${view.nextAt}`);
    }
    book(w, [...one.fired, ...two.fired], [...one.skipped, ...two.skipped]);
    enqueueTicks(w, [...one.fired, ...two.fired]);
    const did = (f: ScheduleFiring) => f.fired.length + f.skipped.length > 0;
    if (did(one) || did(two)) tally(r, "fire:concurrent");
    if (did(one) && did(two)) tally(r, "fire:concurrent-both");
    tallyFiring(r, expected, "concurrent:");
    return `scheduler-1 ${firingNote(one.fired, one.skipped, one.nextAt, one.more)}; scheduler-2 ${firingNote(two.fired, two.skipped, two.nextAt, two.more)}`;
  });
}

// ---------------------------------------------------------------------------------------------
// Generators. Lease lengths and clock steps come from small sets so that expiries land exactly on
// "now" often (lockedUntil <= now is expired), and from a range so that they also fall between.

const owner = fc.constantFrom(...OWNERS);
const leaseMs = fc.oneof(fc.constantFrom(5, 10, 20), fc.integer({ min: 1, max: 30 }));
const pick = fc.nat(11);

/**
 * Cron expressions with a seconds field, so that ticks come due within a few clock steps: every 10
 * and every 30 seconds, and every minute.
 */
const CRONS = ["*/10 * * * * *", "*/30 * * * * *", "0 * * * * *"] as const;

/**
 * Two mixes of the same commands. "all" exercises every operation, keys for half the messages,
 * and recurring schedules.
 * "dead-keys" puts every message on one of two keys and fails often, so that keys are blocked by
 * dead messages, skipped, redriven (a skipped message rejoining its queue) and purged many times
 * per run.
 */
export type Mix = "all" | "dead-keys";

export function commandArb(mix: Mix): fc.Arbitrary<Step> {
  const dead = mix === "dead-keys";
  // Keys from a small set, so that messages of one key meet often.
  const keys = dead ? fc.constantFrom("a", "a", "b") : fc.constantFrom(null, null, null, "a", "a", "b");
  const failDecision = dead
    ? fc.oneof(fc.constantFrom("dead" as const, "dead-and-skip" as const), fc.constant({ retryInMs: 5 }))
    : fc.oneof(
        fc.constantFrom("dead" as const, "dead" as const, "dead-and-skip" as const),
        fc.constantFrom(0, 5, 10, 25).map((retryInMs) => ({ retryInMs })),
      );
  return fc.oneof(
    {
      weight: 4,
      // In the dead-keys mix most messages are due at once, so that claims find work.
      arbitrary: fc
        .tuple(
          // Now and then due 1.5 s ago: older than a priority of 1 s's head start, so the head start does not pass it.
          fc.option(fc.oneof({ weight: 9, arbitrary: fc.integer({ min: -20, max: 40 }) }, { weight: 1, arbitrary: fc.constant(-1_500) }), {
            freq: dead ? 5 : 2,
            nil: undefined,
          }),
          keys,
          fc.constantFrom(0, 0, 0, 1, 2),
        )
        .map(([delay, key, priority]) => enqueue(delay, key, priority)),
    },
    { weight: dead ? 6 : 4, arbitrary: fc.tuple(owner, fc.integer({ min: 1, max: 3 }), leaseMs).map(([o, n, ms]) => claim(o, n, ms)) },
    { weight: 3, arbitrary: fc.tuple(owner, fc.nat(9), leaseMs).map(([o, p, ms]) => claimMessage(o, p, ms)) },
    { weight: dead ? 1 : 2, arbitrary: fc.tuple(pick, leaseMs).map(([p, ms]) => renew(p, ms)) },
    { weight: 3, arbitrary: fc.tuple(pick, fc.constantFrom<FinalizeKind>("write", "write", "write", "write-then-throw")).map(([p, f]) => complete(p, f)) },
    {
      weight: dead ? 5 : 2,
      arbitrary: fc
        .tuple(dead ? fc.oneof(pick, fc.constant("latest" as const), fc.constant("latest" as const)) : pick, failDecision)
        .map(([p, d]) => fail(p, d)),
    },
    { weight: 1, arbitrary: pick.map(release) },
    {
      weight: dead ? 2 : 1,
      arbitrary: fc
        .oneof({ weight: 3, arbitrary: fc.array(fc.nat(9), { minLength: 1, maxLength: 3 }) }, { weight: 1, arbitrary: fc.constant("all" as const) })
        .map(redrive),
    },
    {
      weight: dead ? 3 : 1,
      arbitrary: fc.tuple(fc.constantFrom("a", "b"), fc.constantFrom("redrive" as const, "skip" as const)).map(([k, a]) => unblockKey(k, a)),
    },
    { weight: dead ? 2 : 1, arbitrary: fc.constantFrom(0, 0, 10, 30).map(purgeDead) },
    { weight: 1, arbitrary: owner.map(crash) },
    { weight: 1, arbitrary: fc.tuple(fc.nat(11), fc.boolean()).map(([p, running]) => cancel(p, running)) },
    {
      // A limit set, replaced or lifted: one weight for the three, so that the other commands keep their share.
      weight: 1,
      arbitrary: fc.oneof(
        fc
          .tuple(
            fc.option(fc.integer({ min: 1, max: 3 }), { nil: null }),
            fc.option(fc.tuple(fc.integer({ min: 1, max: 4 }), fc.constantFrom(100, 150)), { nil: null }),
          )
          .filter(([c, r]) => c !== null || r !== null)
          .map(([c, r]) => limit(c, r === null ? null : { count: r[0], intervalMs: r[1] })),
        fc.constant(null).map(unlimit),
      ),
    },
    { weight: 1, arbitrary: fc.tuple(owner, fc.constantFrom(5, 10, 20)).map(([o, ms]) => heartbeat(o, ms)) },
    { weight: 1, arbitrary: fc.constant(null).map(reap) },
    { weight: dead ? 3 : 5, arbitrary: fc.oneof(fc.constantFrom(0, 1, 5, 10, 20), fc.integer({ min: 0, max: 40 })).map(advance) },
    ...(dead ? [] : scheduling),
  );
}

/**
 * The schedule commands of the "all" mix. Its clock steps above are milliseconds, for leases; the
 * steps here are cron-sized: 10 s brings the next tick of every 10 seconds, 61 s a minute's ticks
 * (and skips what is older than a 10 s backfill), 5 minutes skips what is older than any
 * backfill. The backfills are the least (10 s), the default (60 s, by giving none) and 2 minutes,
 * which leaves a dozen ticks due after a long step: more than a fireSchedules limit of 1 or 2.
 */
const scheduling = [
  {
    weight: 3,
    arbitrary: fc
      .tuple(
        fc.constantFrom(...SCHEDULE_NAMES),
        fc.constantFrom(...CRONS),
        fc.constantFrom(10_000, undefined, 120_000),
        fc.record({ version: fc.nat(2), keyed: fc.boolean(), priority: fc.constantFrom(0, 0, 1), headers: fc.boolean() }),
      )
      .map(([name, cron, backfillMs, variant]) => schedule(name, cron, backfillMs, variant)),
  },
  { weight: 1, arbitrary: fc.constantFrom(...SCHEDULE_NAMES).map(unschedule) },
  { weight: 3, arbitrary: fc.tuple(owner, fc.constantFrom(1, 1, 2, undefined)).map(([o, limit]) => fire(o, limit)) },
  { weight: 2, arbitrary: fc.constant(null).map(fireTogether) },
  { weight: 3, arbitrary: fc.constantFrom(10_000, 61_000, 300_000).map(advance) },
];
