// The long-running worker: claims up to its free slots in one call, runs each message's handler
// with an AbortSignal that fires when the lease is lost, renews leases on a heartbeat while
// handlers run, completes through the guarded transaction, retries failures with exponential
// backoff and jitter, marks dead after the last attempt, wakes on new messages (polling stays
// the fallback and catches expired leases), and shuts down gracefully.
//
// Every wait goes through the injected clock, so tests drive heartbeats, backoff and polling
// with a ManualClock instead of sleeping.

import { onCancelled, publish } from "./events.js";
import { hostname } from "node:os";
import { setImmediate } from "node:timers/promises";
import { randomBytes } from "node:crypto";
import { systemClock, type Clock } from "./clock.js";
import {
  AttemptsExhaustedError,
  InvalidArgumentError,
  LeaseLostError,
  ProcessingTimeoutError,
  ShutdownError,
  UnknownMessageTypeError,
  UnrecoverableError,
} from "./errors.js";
import {
  errorText,
  type Handler,
  handlerContext,
  handlerResult,
  type HandlerResult,
  processLease,
  type ProcessOptions,
  reportFinished,
  reportOutcome,
  reportStarted,
} from "./process-lease.js";
import { backoffDelay, checkRetryPolicy, DEFAULT_RETRY, type RetryPolicy } from "./retry.js";
import type { OutboxStore } from "./store.js";
import type { ClaimTrace, ProcessTrace, Tracing } from "./tracing.js";
import type { Completed, Finalize, Lease, LeaseLost, RetryDecision } from "./types.js";
import { CompletionBatcher } from "./completion-batcher.js";
import { type BatchHandler, type BatchRun, batchRuns, checkBatchHandlers } from "./batch-handler.js";
import { checkLeaseMs, checkOwner, checkText, checkTypes, describeError, MAX_CLAIM_LIMIT } from "./validate.js";

export interface WorkerOptions<Tx> {
  readonly store: OutboxStore<Tx>;
  /** One handler per message type. The worker claims these types only (see `types`). */
  readonly handlers: Readonly<Record<string, Handler<Tx>>>;
  /**
   * Handlers of many messages of one type at once: type → { maxBatch, handle }. A claim's
   * messages of the type go to one call (up to maxBatch each), each under its own lease, with a
   * result per message (see BatchHandler). The worker claims these types too. A type has a handler
   * or a batch handler, not both.
   */
  readonly batchHandlers?: Readonly<Record<string, BatchHandler<Tx>>>;
  /** Handles every type that has no handler of its own (a relay publishes every type). Default: none. */
  readonly defaultHandler?: Handler<Tx>;
  /**
   * The message types this worker claims. Default: the types in `handlers`, so a type no handler
   * knows stays pending for the service that handles it (never dead-lettered by a stranger);
   * every type when there is a `defaultHandler`. A listed type without a handler goes to
   * `defaultHandler`, or is marked dead (UnknownMessageTypeError).
   */
  readonly types?: readonly string[];
  /** The owner name written on every lease (default: host-pid-random). */
  readonly name?: string;
  /** Messages processed at once (default 10). */
  readonly concurrency?: number;
  /** Lease length in milliseconds (default 30 000). */
  readonly leaseMs?: number;
  /** How often a running handler's lease is renewed (default: a third of the lease). */
  readonly renewIntervalMs?: number;
  /** The longest wait between claims when nothing wakes the worker (default 1 000 ms). */
  readonly pollIntervalMs?: number;
  /** Retries and marking dead (defaults: 5 attempts, 1 s doubling to 5 min, ±20 % jitter). */
  readonly retry?: Partial<RetryPolicy>;
  /** How long `stop` lets running handlers finish before releasing their messages (default 10 000 ms). */
  readonly shutdownGraceMs?: number;
  /** Listen for new messages instead of waiting for the next poll (default true). */
  readonly wakeOnNewMessages?: boolean;
  /**
   * Message types whose dead messages let their ordering key move on (they are skipped) instead
   * of blocking it until redriven or skipped by hand, the default, since silently reordering is
   * worse. Give every worker of an outbox the same list.
   */
  readonly keyMovesOnWhenDead?: readonly string[];
  /**
   * The longest a handler may run (default: no limit; its lease is renewed as long as it runs).
   * Past it the attempt fails with ProcessingTimeoutError, retried as any failure is, and the
   * handler's signal is aborted; a result it commits later is refused.
   */
  readonly maxProcessingMs?: number;
  /** Settings of one message type that differ from the worker's: its concurrency, retries and maximum processing time. */
  readonly perType?: Readonly<Record<string, TypeSettings>>;
  /**
   * Share one commit among the completions ready at the same time, each in its own savepoint
   * (default true; `false` commits each completion on its own). `maxBatch` caps a group (default 100).
   */
  readonly groupCommit?: boolean | { readonly maxBatch: number };
  /**
   * Traces each claim, each message's processing (its handler runs inside that trace's context)
   * and the store call that settles it: see Tracing, and otelTracing in "wassal/observability".
   * Default: none, at no cost.
   */
  readonly tracing?: Tracing;
  /**
   * How often the worker writes its heartbeat row (outbox_owners) and reaps the owners whose
   * heartbeat stopped, expiring their leases at once, so that a killed process's messages wait
   * about `ownerDeadAfterMs` instead of a whole lease. Default 2 000 ms; `false`: no row, no
   * reaping (a crash then holds its messages until their leases expire). A worker given a clock of
   * its own (a ManualClock: tests, the lab) beats only when heartbeatMs is given, since time that jumps makes any
   * heartbeat look stopped. The beat rides the claim loop, which runs at least every
   * pollIntervalMs, so a worker beats every max(heartbeatMs, pollIntervalMs).
   */
  readonly heartbeatMs?: number | false;
  /**
   * How long after its last heartbeat this worker counts as dead to its peers (default 10 000 ms,
   * or 3 beats when pollIntervalMs or heartbeatMs is longer): each beat registers the worker as
   * alive until then. At least 2 beats. Each worker says its own, so peers need not agree.
   */
  readonly ownerDeadAfterMs?: number;
  /**
   * How often the worker fires the schedules' due ticks (store.fireSchedules; see
   * OutboxStore.schedule), at most: it also looks at the next tick's time. Default 1 000 ms;
   * `false`: this worker fires none. Every worker and relay may fire them: each tick enqueues
   * once, whoever looks. A worker given a clock of its own fires them only when this is given.
   */
  readonly schedulePollMs?: number | false;
  /** What the worker's heartbeat row calls it (default "worker"; a Relay's says "relay"). */
  readonly ownerKind?: string;
  readonly clock?: Clock;
  /** Source of jitter (default Math.random). */
  readonly random?: () => number;
}

/** A message type's own settings (see WorkerOptions.perType). */
export interface TypeSettings {
  /** At most this many messages of the type run at once (within the worker's concurrency). */
  readonly concurrency?: number;
  /** The type's retry policy, over the worker's. */
  readonly retry?: Partial<RetryPolicy>;
  /** The type's maximum processing time (see WorkerOptions.maxProcessingMs). */
  readonly maxProcessingMs?: number;
}

/** A type's settings, checked and filled in. */
interface TypePolicy {
  readonly concurrency: number | undefined;
  readonly retry: RetryPolicy;
  readonly maxProcessingMs: number | undefined;
}

/**
 * One claimed message while the worker runs it: what the worker keeps for it, its heartbeat's
 * state, and its processLease options (beforeComplete is a method and complete the worker's own
 * function, so no closure is made for them per message). It replaced, per message, a record keyed
 * by an "id#token" string in a Map, a closure for the cleanup (Promise.finally), and a heartbeat of
 * four closures: 3.34 against 2.97 KB kept per running message (heap snapshots, 200 running), what
 * each young-generation collection has to copy; CPU 5.63 against 5.77 µs per message (medians of 9,
 * the worker over an in-memory driver, where messages live too briefly for this to show).
 * Rejected: one clock timer for every running message's heartbeat instead of one per message
 * (a queue in due order kept in the jobs themselves), because the worker's tests count the timers
 * on their ManualClock to know what the worker waits for.
 */
class Job<Tx> implements ProcessOptions<Tx> {
  readonly lease: Lease;
  readonly trace: ProcessTrace | undefined;
  /** Counted in its type's running messages (the type has a concurrency of its own). */
  readonly counted: boolean;
  /** How processLease completes it: the worker's completion, or a traced one. */
  readonly complete: (lease: Lease, finalize?: Finalize<Tx>) => Promise<Completed | LeaseLost>;
  readonly abort = new LazyAbort();
  /** Settles once the message is done with, the worker's bookkeeping included. */
  finished: Promise<void> = Promise.resolve();
  /** Its bookkeeping is done (it left the running set). */
  ended = false;
  /** The release of a message given back at shutdown, while it runs (its trace ends after it). */
  releasing: Promise<void> | undefined;
  /** Its neighbours in the worker's running list (see RunningJobs), and whether it is in it. */
  prev: Job<Tx> | undefined;
  next: Job<Tx> | undefined;
  listed = false;
  /** Cancels the heartbeat's armed timer. */
  cancelBeat: () => void = NOTHING;
  /**
   * Cancels the timer of its maximum processing time, while armed (cancelled on stop too). Kept
   * here rather than in a Set of the worker's: see RunningJobs for what a Set that every message
   * joins and leaves costs (with maxProcessingMs, 715 KB kept and 291 KB promoted per young
   * collection on PostgreSQL with a Set, 386 KB and 3 KB with this field).
   */
  cancelLimit: () => void = NOTHING;
  /** The renewal in flight, if any. */
  renewing: Promise<void> | undefined;
  beatStopped = false;
  /** Its share of a batch handler's call, when its type has one (see BatchRun). */
  handler: Handler<Tx> | undefined;

  constructor(
    lease: Lease,
    trace: ProcessTrace | undefined,
    counted: boolean,
    complete: (lease: Lease, finalize?: Finalize<Tx>) => Promise<Completed | LeaseLost>,
  ) {
    this.lease = lease;
    this.trace = trace;
    this.counted = counted;
    this.complete = complete;
  }

  /** processLease calls it once the handler returned: the heartbeat stops before the completion. */
  beforeComplete(): Promise<void> | undefined {
    return this.stopBeat();
  }

  /** Cancels the processing-time timer, if armed. */
  stopLimit(): void {
    const cancel = this.cancelLimit;
    this.cancelLimit = NOTHING;
    cancel();
  }

  /**
   * Stops the heartbeat. Returns the renewal in flight, if any, to wait for (so none can race the
   * completion or a failure). Not async: two calls per message (before the completion and after
   * it) made two promises and two awaits of nothing, 0.9 KB of the worker's 8 KB per message; as a
   * plain function, 6.87 → 6.44 µs per message (medians of 5, the worker over an in-memory driver).
   */
  stopBeat(): Promise<void> | undefined {
    this.beatStopped = true;
    this.cancelBeat();
    return this.renewing;
  }
}

const NOTHING = (): void => undefined;

/**
 * The worker's running jobs, in the order they started: a list linked through the jobs themselves,
 * not a Set (nor a Map).
 *
 * A Set that a job joins and leaves per message replaces its hash table now and then (V8 rehashes
 * it as deletions pile up), and a replaced table that had already moved to the old generation
 * keeps pointing at the jobs it held until the next full collection. Every young-generation
 * collection then keeps those finished jobs alive, with their leases, messages and payloads, and
 * moves them to the old generation too, which fills it and brings the next full collection
 * sooner: on PostgreSQL each young collection kept 1.8 MB and moved 1.3 MB of it (about 1.1 KB per
 * message, nearly every message since the one before), against 0.18 MB and 18 KB with this list.
 * Worker CPU per message 34.3 against 25.6 and 41.9 against 27.7 µs in two series (medians of 3,
 * PostgreSQL, one worker, 20,000 messages, concurrency 200, the machine busier in the second): the
 * largest single item of the gap to the equal-work raw loop.
 */
class RunningJobs<Tx> implements Iterable<Job<Tx>> {
  #head: Job<Tx> | undefined;
  #tail: Job<Tx> | undefined;
  #size = 0;

  get size(): number {
    return this.#size;
  }

  add(job: Job<Tx>): void {
    job.prev = this.#tail;
    job.next = undefined;
    if (this.#tail === undefined) this.#head = job;
    else this.#tail.next = job;
    this.#tail = job;
    job.listed = true;
    this.#size += 1;
  }

  delete(job: Job<Tx>): void {
    if (!job.listed) return;
    job.listed = false;
    const { prev, next } = job;
    if (prev === undefined) this.#head = next;
    else prev.next = next;
    if (next === undefined) this.#tail = prev;
    else next.prev = prev;
    job.prev = undefined; // a finished job points at no running one
    job.next = undefined;
    this.#size -= 1;
  }

  *[Symbol.iterator](): Iterator<Job<Tx>> {
    for (let job = this.#head; job !== undefined; job = job.next) yield job;
  }
}

/**
 * A message's abort switch whose AbortSignal is built only if the handler reads it. Creating an
 * AbortSignal costs about as much as a claimed row's SQL (it showed at the top of the worker's CPU
 * profile); most handlers never look at theirs, and most leases are never aborted.
 */
class LazyAbort {
  #controller: AbortController | undefined;
  #aborted = false;
  #reason: unknown;

  get aborted(): boolean {
    return this.#aborted;
  }

  /** Why it was aborted (undefined while it is not). */
  get reason(): unknown {
    return this.#reason;
  }

  get signal(): AbortSignal {
    if (this.#controller === undefined) {
      this.#controller = new AbortController();
      if (this.#aborted) this.#controller.abort(this.#reason);
    }
    return this.#controller.signal;
  }

  abort(reason: unknown): void {
    if (this.#aborted) return;
    this.#aborted = true;
    this.#reason = reason;
    this.#controller?.abort(reason);
  }
}

/** What a handler must be, as the errors for one that is not a function say it. */
const HANDLER_SHAPE = "(message, context) => Promise<HandlerResult | void> (an async function; returning nothing completes the message)";

/**
 * Abort reasons for the worker's internal signals. abort() without a reason builds a DOMException
 * (with a stack trace) every time; at thousands of messages a second that showed in the profile.
 */
const FINISHED = Object.freeze({ reason: "grace over" });
const STOPPING = Object.freeze({ reason: "stopping" });

/** The longest timer Node runs as asked (2^31 - 1 ms, about 24.8 days); a longer one fires at once. */
const MAX_TIMER_MS = 2_147_483_647;

function checkTimerMs(name: string, value: number): number {
  if (!Number.isInteger(value) || value < 1 || value > MAX_TIMER_MS) {
    throw new InvalidArgumentError(`${name} must be a whole number of milliseconds from 1 to ${MAX_TIMER_MS} (got ${String(value)})`);
  }
  return value;
}

function positiveInteger(name: string, value: number): number {
  if (!Number.isInteger(value) || value < 1) throw new InvalidArgumentError(`${name} must be a whole number >= 1 (got ${String(value)})`);
  return value;
}

/** What ownerTiming's errors call each setting: the option's name, or a command's flag. */
export interface OwnerTimingNames {
  readonly heartbeatMs: string;
  readonly pollIntervalMs: string;
  readonly ownerDeadAfterMs: string;
}

const OPTION_NAMES: OwnerTimingNames = { heartbeatMs: "heartbeatMs", pollIntervalMs: "pollIntervalMs", ownerDeadAfterMs: "ownerDeadAfterMs" };

/**
 * A worker's heartbeat (null: none) and how long after its last beat its peers count it dead,
 * checked: the default dead-after is 10 000 ms, or 3 beats when a beat is longer, and a given one
 * must span 2 beats or a live worker's leases could be reaped. A beat is max(heartbeatMs,
 * pollIntervalMs), as it rides the claim loop. The Worker runs it; a command runs it with its flags'
 * names before it opens anything.
 */
export function ownerTiming(
  settings: { readonly heartbeatMs: number | false; readonly pollIntervalMs: number; readonly ownerDeadAfterMs?: number },
  names: OwnerTimingNames = OPTION_NAMES,
): { heartbeatMs: number | null; ownerDeadAfterMs: number } {
  const heartbeatMs = settings.heartbeatMs === false ? null : checkTimerMs(names.heartbeatMs, settings.heartbeatMs);
  const period = Math.max(heartbeatMs ?? 0, settings.pollIntervalMs);
  if (settings.ownerDeadAfterMs === undefined) return { heartbeatMs, ownerDeadAfterMs: Math.max(10_000, 3 * period) };
  const ownerDeadAfterMs = checkTimerMs(names.ownerDeadAfterMs, settings.ownerDeadAfterMs);
  if (heartbeatMs !== null && ownerDeadAfterMs < 2 * period) {
    throw new InvalidArgumentError(
      `${names.ownerDeadAfterMs} (${ownerDeadAfterMs}) must be at least twice the heartbeat (the longer of ${names.heartbeatMs} ${heartbeatMs} and ${names.pollIntervalMs} ${settings.pollIntervalMs}), or a live worker's leases could be reaped: give it ${2 * period} or more`,
    );
  }
  return { heartbeatMs, ownerDeadAfterMs };
}

/** The wait after a store error, from the one before: 100 ms, doubling to 5 s (0: none before). */
function nextErrorDelay(previous: number): number {
  return Math.min(Math.max(100, previous * 2), 5_000);
}

export function defaultWorkerName(): string {
  return `${hostname()}-${process.pid}-${randomBytes(2).toString("hex")}`;
}

export class Worker<Tx> {
  readonly name: string;
  readonly store: OutboxStore<Tx>;
  readonly concurrency: number;
  readonly leaseMs: number;
  readonly renewIntervalMs: number;
  readonly pollIntervalMs: number;
  readonly retry: RetryPolicy;
  readonly shutdownGraceMs: number;
  /** How often the worker beats (see WorkerOptions.heartbeatMs), or null when it does not. */
  readonly heartbeatMs: number | null;
  /** How long after its last beat its peers count it dead (see WorkerOptions.ownerDeadAfterMs). */
  readonly ownerDeadAfterMs: number;
  /** How often the worker fires due schedule ticks, at most (see WorkerOptions.schedulePollMs), or null when it does not. */
  readonly schedulePollMs: number | null;
  readonly #ownerKind: string;
  /** The worker's clock time from which its next beat is due. */
  #nextBeatAt = Number.NEGATIVE_INFINITY;
  /** It wrote its heartbeat row (so a stop signs off). */
  #registered = false;
  readonly #handlers: Readonly<Record<string, Handler<Tx>>>;
  readonly #defaultHandler: Handler<Tx> | undefined;
  readonly #batchHandlers: Readonly<Record<string, BatchHandler<Tx>>>;
  readonly #hasBatchHandlers: boolean;
  /** What claims ask for: the types claimed, or undefined for every type. */
  readonly #types: readonly string[] | undefined;
  readonly #clock: Clock;
  readonly #random: () => number;
  readonly #wakeOnNew: boolean;
  readonly #keyMovesOnWhenDead: ReadonlySet<string>;
  readonly #tracing: Tracing | undefined;
  /** The messages running now, each its own job: this worker may hold a stale and a fresh claim of one message. */
  readonly #running = new RunningJobs<Tx>();
  /** The default policy, and each type's own where perType gives one. */
  readonly #policy: TypePolicy;
  readonly #perType: ReadonlyMap<string, TypePolicy>;
  /** The claimed types with a concurrency cap and those without, when any has one. */
  readonly #typeSplit: { readonly capped: readonly { type: string; cap: number; only: readonly string[] }[]; readonly uncapped: readonly string[] } | undefined;
  /** Messages running per type, for the types with a concurrency of their own. */
  readonly #runningOfType = new Map<string, number>();
  /** A wake-up arrived since the claim loop last looked for work. */
  #woken = false;
  /** Ends the claim loop's wait for the next poll, while it waits. */
  #endWait: (() => void) | undefined;
  #stopping = false;
  #started = false;
  /** Aborted when stopping: cuts short the waits that would otherwise keep the process alive. */
  readonly #stopSignal = new AbortController();
  /** Wake-ups scheduled for retries coming due; cancelled on stop. */
  readonly #retryTimers = new Set<() => void>();
  #loop: Promise<void> | undefined;
  /** The loop that fires schedule ticks, when this worker fires them. */
  #scheduling: Promise<void> | undefined;
  #unsubscribe: (() => Promise<void>) | undefined;
  /** Stops watching the store's cancels (set when started). */
  #unwatchCancels: (() => void) | undefined;
  #stopped: Promise<void> | undefined;
  /** Present when completions share commits. */
  readonly completions: CompletionBatcher<Tx> | undefined;
  /** How an untraced message completes: through the group commit when there is one, else alone. */
  readonly #complete: (lease: Lease, finalize?: Finalize<Tx>) => Promise<Completed | LeaseLost>;

  constructor(options: WorkerOptions<Tx>) {
    this.store = options.store;
    this.#handlers = options.handlers;
    if (options.defaultHandler !== undefined && typeof options.defaultHandler !== "function") {
      throw new InvalidArgumentError(`defaultHandler must be a function ${HANDLER_SHAPE}; got ${typeof options.defaultHandler}`);
    }
    this.#defaultHandler = options.defaultHandler;
    if (typeof this.#handlers !== "object" || this.#handlers === null)
      throw new InvalidArgumentError("handlers must be an object of message type → handler function");
    for (const [type, handler] of Object.entries(this.#handlers)) {
      if (typeof handler !== "function")
        throw new InvalidArgumentError(`the handler for ${JSON.stringify(type)} must be a function ${HANDLER_SHAPE}; got ${typeof handler}`);
    }
    this.#batchHandlers = checkBatchHandlers<Tx>(options.batchHandlers, this.#handlers);
    this.#hasBatchHandlers = Object.keys(this.#batchHandlers).length > 0;
    if (options.types !== undefined) this.#types = checkTypes(options.types);
    else if (this.#defaultHandler !== undefined) this.#types = undefined;
    else {
      const handled = [...Object.keys(this.#handlers), ...Object.keys(this.#batchHandlers)];
      if (handled.length === 0) throw new InvalidArgumentError("a worker needs at least one handler (or a defaultHandler, or the types it claims)");
      this.#types = checkTypes(handled);
    }
    this.name = checkOwner(options.name ?? defaultWorkerName());
    this.concurrency = positiveInteger("concurrency", options.concurrency ?? 10);
    this.leaseMs = checkLeaseMs(options.leaseMs ?? 30_000);
    this.renewIntervalMs = positiveInteger("renewIntervalMs", options.renewIntervalMs ?? Math.max(1, Math.floor(this.leaseMs / 3)));
    if (this.renewIntervalMs >= this.leaseMs) {
      throw new InvalidArgumentError(
        `renewIntervalMs (${this.renewIntervalMs}) must be shorter than leaseMs (${this.leaseMs}), or leases expire between renewals`,
      );
    }
    this.pollIntervalMs = positiveInteger("pollIntervalMs", options.pollIntervalMs ?? 1_000);
    this.retry = checkRetryPolicy({ ...DEFAULT_RETRY, ...options.retry });
    const grace = options.shutdownGraceMs ?? 10_000;
    if (!Number.isFinite(grace) || grace < 0) throw new InvalidArgumentError(`shutdownGraceMs must be a number of milliseconds >= 0 (got ${String(grace)})`);
    this.shutdownGraceMs = grace;
    this.#clock = options.clock ?? systemClock;
    ({ heartbeatMs: this.heartbeatMs, ownerDeadAfterMs: this.ownerDeadAfterMs } = ownerTiming({
      heartbeatMs: options.heartbeatMs ?? (this.#clock === systemClock ? 2_000 : false),
      pollIntervalMs: this.pollIntervalMs,
      ...(options.ownerDeadAfterMs === undefined ? {} : { ownerDeadAfterMs: options.ownerDeadAfterMs }),
    }));
    const schedulePollMs = options.schedulePollMs ?? (this.#clock === systemClock ? 1_000 : false);
    this.schedulePollMs = schedulePollMs === false ? null : checkTimerMs("schedulePollMs", schedulePollMs);
    this.#ownerKind = checkText(options.ownerKind ?? "worker", "ownerKind", 50);
    this.#random = options.random ?? Math.random;
    this.#wakeOnNew = options.wakeOnNewMessages ?? true;
    this.#keyMovesOnWhenDead = new Set(options.keyMovesOnWhenDead ?? []);
    this.#tracing = options.tracing;
    const maxProcessingMs = options.maxProcessingMs === undefined ? undefined : checkTimerMs("maxProcessingMs", options.maxProcessingMs);
    this.#policy = { concurrency: undefined, retry: this.retry, maxProcessingMs };
    this.#perType = this.#typePolicies(options.perType ?? {});
    // Worked out once: the claim loop reads it at every round.
    const capped = (this.#types ?? []).flatMap((type) => {
      const cap = this.#perType.get(type)?.concurrency;
      return cap === undefined ? [] : [{ type, cap, only: [type] }];
    });
    this.#typeSplit = capped.length === 0 ? undefined : { capped, uncapped: (this.#types ?? []).filter((type) => !this.#perType.get(type)?.concurrency) };
    const group = options.groupCommit ?? true;
    if (group === false) {
      this.completions = undefined;
    } else {
      const maxBatch = group === true ? 100 : positiveInteger("groupCommit.maxBatch", group.maxBatch);
      this.completions = new CompletionBatcher(this.store, maxBatch);
    }
    const batcher = this.completions;
    this.#complete = batcher ? (lease, finalize) => batcher.complete(lease, finalize) : (lease, finalize) => this.store.complete(lease, finalize);
  }

  /** Messages whose handlers are running now. */
  get inFlight(): number {
    return this.#running.size;
  }

  /** Starts claiming. Resolves once the worker listens for new messages; `stop` ends it. */
  async start(): Promise<void> {
    if (this.#started) throw new InvalidArgumentError(`worker ${this.name} is already started; a worker runs once (create a new one to run again)`);
    this.#started = true;
    if (this.#stopping) throw new InvalidArgumentError(`worker ${this.name} was stopped before it started; create a new one`);
    if (this.#wakeOnNew) {
      const unsubscribe = await this.store.onNewMessages(() => this.wake());
      if (this.#stopping) {
        await unsubscribe(); // stopped while subscribing
        return;
      }
      this.#unsubscribe = unsubscribe;
    }
    // A cancel of one of this worker's running messages through this store aborts its run at once
    // (store.cancel with running: true); one made elsewhere is found at the lease's next renewal.
    this.#unwatchCancels = onCancelled(this.store.events, (event) => {
      if (event.runningOwner !== this.name) return;
      for (const job of this.#running) {
        if (job.lease.messageId === event.messageId && job.lease.token === event.token) {
          job.abort.abort(new LeaseLostError(event.messageId, event.token, `the message was cancelled (${event.owner})`));
        }
      }
    });
    this.#loop = this.#claimLoop();
    if (this.schedulePollMs !== null) this.#scheduling = this.#scheduleLoop(this.schedulePollMs);
  }

  /** Claim now instead of at the next poll. */
  wake(): void {
    this.#woken = true;
    this.#endWait?.();
  }

  /**
   * Stops claiming, lets running handlers finish for up to `shutdownGraceMs`, then aborts and
   * releases the rest so another worker can take them at once. Safe to call more than once.
   */
  stop(options: { readonly graceMs?: number } = {}): Promise<void> {
    this.#stopped ??= this.#shutdown(options.graceMs ?? this.shutdownGraceMs);
    return this.#stopped;
  }

  async #shutdown(graceMs: number): Promise<void> {
    try {
      await this.#shutdownSteps(graceMs);
    } finally {
      this.#unwatchCancels?.();
    }
  }

  async #shutdownSteps(graceMs: number): Promise<void> {
    this.#stopping = true;
    this.#stopSignal.abort(STOPPING);
    for (const cancel of this.#retryTimers) cancel();
    this.#retryTimers.clear();
    for (const job of this.#running) job.stopLimit();
    this.wake();
    await this.#loop;
    await this.#scheduling;
    await this.#unsubscribe?.();
    // The loop, and so the beat, has ended: one last beat covers the grace, or a peer could reap
    // this worker while its handlers finish and run their messages a second time.
    if (this.#registered && this.#running.size > 0) {
      try {
        await this.store.heartbeat(this.name, { aliveMs: graceMs + this.ownerDeadAfterMs, kind: this.#ownerKind, takes: this.#types ?? null });
      } catch (error) {
        this.#storeError("heartbeat", error);
      }
    }
    const all = Promise.all([...this.#running].map((job) => job.finished));
    const graceOver = new AbortController();
    const timer = this.#clock.sleep(graceMs, graceOver.signal).then(() => "grace-over" as const);
    const first = await Promise.race([all.then(() => "done" as const), timer]);
    graceOver.abort(FINISHED);
    if (first === "grace-over") {
      const left = [...this.#running];
      for (const job of left) job.abort.abort(new ShutdownError());
      // Set before any handler can react to its abort, so a traced one's trace ends after its release.
      await Promise.all(left.map((job) => (job.releasing = this.#release(job))));
      // Their heartbeats stop with the abort, so nothing of ours touches the store after this,
      // even if a handler ignores its signal and runs on.
    }
    if (this.#registered) {
      // Every lease completed or released: the row goes, so no peer reaps a worker that left.
      try {
        await this.store.signOff(this.name);
      } catch (error) {
        this.#storeError("sign-off", error); // the row's alive-until passes, and a peer drops it
      }
    }
  }

  /**
   * The worker's heartbeat, when due: its row says it is alive for ownerDeadAfterMs more, then
   * the owners whose rows ran out are reaped (their leases expired now), and the loop claims again
   * at once if any lease was freed. Runs in the claim loop, before its claim, so the worker is
   * registered before its first lease. A failure is a store-error event; the loop carries on.
   */
  async #beat(): Promise<void> {
    if (this.heartbeatMs === null) return;
    const now = this.#clock.now().getTime();
    if (now < this.#nextBeatAt) return;
    this.#nextBeatAt = now + this.heartbeatMs;
    try {
      await this.store.heartbeat(this.name, { aliveMs: this.ownerDeadAfterMs, kind: this.#ownerKind, takes: this.#types ?? null });
      this.#registered = true;
    } catch (error) {
      this.#storeError("heartbeat", error);
      return;
    }
    try {
      const reaped = await this.store.reapDeadOwners(this.name);
      if (reaped.some((owner) => owner.expired > 0)) this.#woken = true;
    } catch (error) {
      this.#storeError("reap", error);
    }
  }

  /**
   * Fires the schedules' due ticks, then waits for the next tick or `pollMs`, whichever is sooner
   * (a schedule added elsewhere is seen within `pollMs`). A failure is a store-error event, and
   * the loop backs off as the claim loop does.
   */
  async #scheduleLoop(pollMs: number): Promise<void> {
    let errorDelay = 0;
    while (!this.#stopping) {
      let wait = pollMs;
      try {
        // Stopped by stop() between two ticks, so a long backlog does not hold the shutdown.
        const firing = await this.store.fireSchedules({ owner: this.name, signal: this.#stopSignal.signal });
        errorDelay = 0;
        if (firing.more) wait = 0;
        else if (firing.nextAt !== null) wait = Math.min(pollMs, Math.max(0, firing.nextAt.getTime() - firing.at.getTime()));
      } catch (error) {
        this.#storeError("schedule", error);
        errorDelay = nextErrorDelay(errorDelay);
        wait = Math.max(pollMs, errorDelay);
      }
      if (this.#stopping) break;
      if (wait > 0) await this.#clock.sleep(wait, this.#stopSignal.signal);
      else await setImmediate(); // more due at once: let timers and I/O run first
    }
  }

  async #release(job: Job<Tx>): Promise<void> {
    const settled = job.trace?.settle("release");
    try {
      const result = await this.store.release(job.lease); // (not inside settled?.(…): without a trace, it would not run)
      settled?.(result);
    } catch (error) {
      settled?.(undefined, error);
      this.#storeError("release", error); // the lease will expire and the message be reclaimed
    }
  }

  #storeError(operation: string, error: unknown): void {
    publish(this.store.events, { type: "store-error", at: this.#clock.now(), owner: this.name, operation, error: describeError(error) });
  }

  #typePolicies(perType: Readonly<Record<string, TypeSettings>>): ReadonlyMap<string, TypePolicy> {
    if (typeof perType !== "object" || perType === null)
      throw new InvalidArgumentError("perType must be an object of message type → { concurrency, retry, maxProcessingMs }");
    const policies = new Map<string, TypePolicy>();
    for (const [type, settings] of Object.entries(perType)) {
      const name = `perType[${JSON.stringify(type)}]`;
      if (typeof settings !== "object" || settings === null)
        throw new InvalidArgumentError(`${name} must be an object { concurrency, retry, maxProcessingMs }`);
      const concurrency = settings.concurrency === undefined ? undefined : positiveInteger(`${name}.concurrency`, settings.concurrency);
      if (concurrency !== undefined && this.#types === undefined) {
        throw new InvalidArgumentError(`${name}.concurrency needs the worker to claim named types (give types, or handlers without a defaultHandler)`);
      }
      policies.set(type, {
        concurrency,
        retry: settings.retry === undefined ? this.retry : checkRetryPolicy({ ...this.retry, ...settings.retry }),
        maxProcessingMs:
          settings.maxProcessingMs === undefined ? this.#policy.maxProcessingMs : checkTimerMs(`${name}.maxProcessingMs`, settings.maxProcessingMs),
      });
    }
    return policies;
  }

  #policyOf(type: string): TypePolicy {
    return this.#perType.get(type) ?? this.#policy;
  }

  /** The claims to make now for `free` slots: one for the types without a cap, one per capped type with room. */
  #claimPlan(free: number): { readonly limit: number; readonly types: readonly string[] | undefined }[] {
    const split = this.#typeSplit;
    if (split === undefined) return [{ limit: free, types: this.#types }];
    // The capped types first, each up to its room: claimed after the others, they would wait for
    // every message of the uncapped types, however old their own are.
    const plan: { limit: number; types: readonly string[] }[] = [];
    for (const { type, cap, only } of split.capped) {
      const room = cap - (this.#runningOfType.get(type) ?? 0);
      if (room > 0) plan.push({ limit: Math.min(free, room), types: only });
    }
    if (split.uncapped.length > 0) plan.push({ limit: free, types: split.uncapped });
    return plan;
  }

  /** The message types this worker claims, or null for every type. */
  get types(): readonly string[] | null {
    return this.#types ?? null;
  }

  async #claimLoop(): Promise<void> {
    let errorDelay = 0;
    while (!this.#stopping) {
      // Cleared before looking: a wake-up that arrives while we claim (a new message, a slot
      // freeing) then cuts the following wait short instead of being lost.
      this.#woken = false;
      await this.#beat();
      if (this.#stopping) break;
      let free = this.concurrency - this.#running.size;
      let claimedAll = false;
      if (free > 0) {
        try {
          // One claim, or with per-type caps one per capped type with room: a full claim means there may be more.
          for (const step of this.#claimPlan(free)) {
            const limit = Math.min(step.limit, free, MAX_CLAIM_LIMIT);
            if (limit < 1) break; // every slot taken: the rest waits for the next round
            const trace = this.#tracing?.claim(this.name, step.types ?? null);
            const claiming = this.store.claim(
              this.name,
              step.types === undefined ? { limit, leaseMs: this.leaseMs } : { limit, leaseMs: this.leaseMs, types: step.types },
            );
            const leases = await (trace === undefined ? claiming : tracedClaim(trace, claiming));
            // A batch type's messages of this claim go to one call of its batch handler (a message past its attempts is marked dead alone, as ever).
            const batched = this.#hasBatchHandlers ? batchRuns(leases, this.#batchHandlers, this.#batchable) : undefined;
            for (const lease of leases) this.#start(lease, trace?.process(lease), batched?.get(lease));
            free -= leases.length;
            claimedAll ||= leases.length === limit;
          }
          errorDelay = 0;
        } catch (error) {
          this.#storeError("claim", error);
          errorDelay = nextErrorDelay(errorDelay);
          await this.#clock.sleep(errorDelay, this.#stopSignal.signal);
          continue;
        }
        if (claimedAll) continue; // there may be more: claim again once slots free up
      }
      if (!this.#woken) await this.#waitForPoll();
    }
  }

  /**
   * Waits for the next poll, or until woken. A clock timer and a function to end the wait early,
   * instead of a fresh AbortController per round of the loop for clock.sleep: each AbortSignal
   * that is aborted or listened to outlives a few young-generation collections (a loop doing
   * nothing else kept 1.5 MB alive per collection against 60 KB without the signal), and on SQLite
   * the signals and their events took 1.5 % of the worker's profile. 31.9 against 29.4 µs per
   * message on SQLite (medians of 5, one worker, 20,000 messages, synchronous NORMAL); the same
   * timer on the clock, so a ManualClock counts one sleeper for it as before.
   */
  #waitForPoll(): Promise<void> {
    return new Promise<void>((resolve) => {
      const cancel = this.#clock.setTimer(this.pollIntervalMs, () => {
        this.#endWait = undefined;
        resolve();
      });
      this.#endWait = () => {
        this.#endWait = undefined;
        cancel();
        resolve();
      };
    });
  }

  /** Whether a claimed message of a batch type goes to its batch handler: not when its attempts are spent (it is marked dead first). */
  readonly #batchable = (lease: Lease): boolean => lease.message.attempts <= this.#policyOf(lease.message.type).retry.maxAttempts;

  #start(lease: Lease, trace: ProcessTrace | undefined, batch?: { readonly run: BatchRun<Tx>; readonly index: number }): void {
    const { type } = lease.message;
    const counted = this.#perType.get(type)?.concurrency !== undefined;
    if (counted) this.#runningOfType.set(type, (this.#runningOfType.get(type) ?? 0) + 1);
    // The job is its processLease options: built per message with a spread and a fresh closure for
    // the completion, they cost 6.58 against 6.01 µs per message (medians of 5, the worker over an
    // in-memory driver). Its completion is made once per worker, or per message when traced.
    const job = new Job<Tx>(
      lease,
      trace,
      counted,
      trace === undefined ? this.#complete : (l: Lease, finalize?: Finalize<Tx>) => this.#tracedComplete(trace, l, finalize),
    );
    if (batch !== undefined) {
      job.handler = batch.run.handlerFor(batch.index);
      batch.run.join(job.abort.signal);
    }
    // An untraced job does its bookkeeping at the end of #process; a traced one after its trace's
    // context is left (and after a release at shutdown, see #ended).
    job.finished = trace === undefined ? this.#process(job) : trace.run(() => this.#process(job)).finally(() => this.#ended(job));
    if (!job.ended) this.#running.add(job);
  }

  /** A job is done with: its trace ends, it leaves the running set, and the claim loop may fill its slot. */
  #ended(job: Job<Tx>): void {
    const { trace, abort } = job;
    if (trace !== undefined) {
      const reason = abort.aborted ? abort.reason : undefined;
      const releasing = job.releasing;
      if (releasing === undefined) trace.end(reason);
      else void releasing.then(() => trace.end(reason));
    }
    job.ended = true;
    this.#running.delete(job);
    if (job.counted) {
      const { type } = job.lease.message;
      this.#runningOfType.set(type, (this.#runningOfType.get(type) ?? 1) - 1);
    }
    if (!this.#stopping) this.wake();
  }

  async #process(job: Job<Tx>): Promise<void> {
    const { lease, abort, trace } = job;
    const { message } = lease;
    try {
      const { retry, maxProcessingMs } = this.#policyOf(message.type);
      if (message.attempts > retry.maxAttempts) {
        await this.#fail(lease, new AttemptsExhaustedError(message.attempts, retry.maxAttempts, message.lastError), "dead", trace);
        return;
      }
      const handler = job.handler ?? (Object.hasOwn(this.#handlers, message.type) ? this.#handlers[message.type] : this.#defaultHandler);
      if (handler === undefined) {
        await this.#fail(lease, new UnknownMessageTypeError(message.type, Object.keys(this.#handlers)), "dead", trace);
        return;
      }
      this.#startHeartbeat(job);
      let timedOut: ProcessingTimeoutError | undefined;
      try {
        if (maxProcessingMs === undefined) {
          // processLease's steps and reports (see there), in this async function rather than in a
          // second one awaited from it: a running message then holds one suspended frame, not two.
          // Through processLease: 2.86 against 2.38 KB kept per running message (heap snapshots, 200
          // running), what each young-generation collection copies; CPU 7.70 against 7.80 µs per
          // message (medians of 9, the worker over an in-memory driver), no difference there.
          const clock = this.#clock;
          const { events } = this.store;
          reportStarted(events, clock, lease);
          let handled: HandlerResult<Tx>;
          try {
            handled = handlerResult(await handler(message, handlerContext(lease, undefined, abort)));
          } catch (error) {
            reportFinished(events, clock, lease, "failed", errorText(error));
            throw error;
          }
          const summary = handled.summary ?? "";
          const renewing = job.stopBeat();
          if (renewing !== undefined) await renewing;
          let result: Completed | LeaseLost;
          try {
            result = await job.complete(lease, handled.finalize);
          } catch (error) {
            // The business write failed: nothing was committed, the message is still ours to fail or retry.
            reportFinished(events, clock, lease, "failed", `business write failed: ${errorText(error)}`);
            throw error;
          }
          reportOutcome(events, clock, lease, result, summary);
        } else {
          const processing = processLease(this.store, lease, handler, this.#clock, job);
          // Past the limit the attempt fails even if the handler ignores its signal, and a result it
          // commits later finds the lease gone. (A lease already lost, or a stop, is not a timeout.)
          const expired = new Promise<void>((resolve) => {
            job.cancelLimit = this.#clock.setTimer(maxProcessingMs, () => {
              job.cancelLimit = NOTHING;
              if (abort.aborted) return;
              timedOut = new ProcessingTimeoutError(message.type, maxProcessingMs);
              abort.abort(timedOut);
              resolve();
            });
          });
          processing.catch(() => undefined); // if it settles after the limit, nothing is left to report
          await Promise.race([processing, expired]);
          if (timedOut !== undefined) {
            job.stopLimit();
            await job.stopBeat();
            const last = message.attempts >= retry.maxAttempts;
            await this.#fail(lease, timedOut, last ? "dead" : { retryInMs: backoffDelay(message.attempts, retry, this.#random) }, trace);
            // The slot (and the type's) stays taken until the handler returns: one that ignores its
            // signal still uses what the limit protects.
            await processing.catch(() => undefined);
            return;
          }
        }
      } catch (error) {
        if (abort.aborted) return; // lease lost or shutdown: the message is someone else's now
        await job.stopBeat(); // no renewal may race the failure either
        const last = message.attempts >= retry.maxAttempts || error instanceof UnrecoverableError;
        await this.#fail(lease, error, last ? "dead" : { retryInMs: backoffDelay(message.attempts, retry, this.#random) }, trace);
      }
    } finally {
      job.stopLimit();
      const renewing = job.stopBeat();
      if (renewing !== undefined) await renewing;
      if (trace === undefined) this.#ended(job);
    }
  }

  /** A completion of a traced message: through the group commit when there is one, settled on its trace. */
  #tracedComplete(trace: ProcessTrace, lease: Lease, finalize: Finalize<Tx> | undefined): Promise<Completed | LeaseLost> {
    const settled = trace.settle("complete");
    const batcher = this.completions;
    const completing = batcher ? batcher.complete(lease, finalize) : this.store.complete(lease, finalize);
    completing.then(
      (result) => settled(result),
      (error: unknown) => settled(undefined, error),
    );
    return completing;
  }

  async #fail(lease: Lease, error: unknown, decision: "dead" | { retryInMs: number }, trace: ProcessTrace | undefined): Promise<void> {
    const stored: RetryDecision = decision === "dead" && this.#keyMovesOnWhenDead.has(lease.message.type) ? "dead-and-skip" : decision;
    const settled = trace?.settle("fail", error);
    try {
      const result = await this.store.fail(lease, error, stored);
      settled?.(result);
      if (result.outcome === "retry-scheduled" && decision !== "dead") {
        // Come back for it when it is due rather than at the next poll.
        const cancel = this.#clock.setTimer(decision.retryInMs, () => {
          this.#retryTimers.delete(cancel);
          this.wake();
        });
        this.#retryTimers.add(cancel);
      }
    } catch (storeError) {
      settled?.(undefined, storeError);
      this.#storeError("fail", storeError); // the lease will expire; the attempt is already counted
    }
  }

  /**
   * Renews the job's lease every renewIntervalMs while its handler runs and aborts the handler when
   * the lease is lost; job.stopBeat() ends it. One clock timer per beat, and one closure per
   * message for it to call: no promise or signal per message.
   */
  #startHeartbeat(job: Job<Tx>): void {
    const beat = () => {
      if (job.abort.aborted) return; // shut down (or lost): renewing would keep a dead lease alive
      job.renewing = this.#renew(job).finally(() => {
        job.renewing = undefined;
        if (!job.beatStopped) job.cancelBeat = this.#clock.setTimer(this.renewIntervalMs, beat);
      });
    };
    job.cancelBeat = this.#clock.setTimer(this.renewIntervalMs, beat);
  }

  async #renew(job: Job<Tx>): Promise<void> {
    const { lease } = job;
    try {
      const renewed = await this.store.renew(lease, this.leaseMs);
      if (renewed.outcome === "lease-lost") {
        // Still ours by token but past its end: an expired lease is never extended (its slot may be someone else's).
        const why =
          renewed.current?.leaseToken === lease.token && renewed.current.status === "processing"
            ? "it expired before a heartbeat renewed it"
            : "a heartbeat found it gone";
        job.abort.abort(new LeaseLostError(lease.messageId, lease.token, why));
        job.beatStopped = true;
      }
    } catch (error) {
      this.#storeError("renew", error); // try again at the next beat; the lease may still hold
    }
  }
}

/** A claim's result (or error), reported to its trace. */
function tracedClaim(trace: ClaimTrace, claiming: Promise<Lease[]>): Promise<Lease[]> {
  return claiming.then(
    (leases) => {
      trace.end(leases);
      return leases;
    },
    (error: unknown) => {
      trace.end([], error);
      throw error;
    },
  );
}
