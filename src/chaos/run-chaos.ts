// A chaos run: K `wassal worker` processes on one store, payments created at a steady rate
// through the payments API, and faults injected all along (SIGKILL, SIGSTOP past the lease,
// handler errors, provider failures, timeouts after success and latency spikes, killed
// PostgreSQL connections and a server restart, a competing SQLite writer). At the end the
// invariant checker reads what is left and judges it.

import { spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { InvalidArgumentError, WassalError } from "../outbox/errors.js";
import { seededRandom } from "../outbox/seeded-random.js";
import type { OnComplete, OutboxMessage, Rate } from "../outbox/types.js";
import { checkLimitOptions } from "../outbox/limits.js";
import { checkOnComplete } from "../outbox/validate.js";
import { PaymentsService } from "../payments/payments-service.js";
import { ProviderSimulator, readProviderLog } from "../payments/provider-simulator.js";
import { checkStore, type ConnectionKiller, scratchPlace } from "../lab/stores/places.js";
import { redactUrl } from "../outbox/redact.js";
import { openLabOutbox } from "../lab/stores/open-lab-outbox.js";
import { checkInvariants, type EnqueuedMessage, type InvariantReport } from "./invariant-checker.js";
import { ChaosSetupError, ProcessPool } from "./process-pool.js";
import type { JudgedLimit } from "./limit-checks.js";
import { RECONCILE_MESSAGE_TYPE } from "../payments/types.js";
import { PULSE_MESSAGE_TYPE, STALL_MARK } from "../runtime/payments-handlers.js";

/** The messageId of a worker's JSON log line, or "" when it has none. */
function messageIdOf(line: string): string {
  try {
    const id = (JSON.parse(line) as { messageId?: unknown }).messageId;
    return typeof id === "string" ? id : "";
  } catch {
    return "";
  }
}
export interface ChaosOptions {
  /** "sqlite" (a temporary file) or a postgres:// URL (a temporary schema there). */
  readonly store: string;
  readonly workers: number;
  readonly payments: number;
  /** Payments created per second. */
  readonly rate: number;
  readonly seed: number;
  readonly leaseMs: number;
  /** SIGKILL a random worker (and restart it) this often; 0 = never. */
  readonly killEveryMs: number;
  /** SIGSTOP a random worker for longer than the lease, then SIGCONT, this often; 0 = never. */
  readonly pauseEveryMs: number;
  readonly handlerErrorRate: number;
  readonly providerFailureRate: number;
  readonly providerTimeoutRate: number;
  readonly latencySpikeRate: number;
  readonly latencySpikeMs: number;
  /** PostgreSQL: terminate the workers' connections this often; 0 = never. */
  readonly killConnectionsEveryMs: number;
  /** PostgreSQL: restart the server once, mid-run (affects everything using it). */
  readonly pgRestart: boolean;
  /** SQLite: a competing writer takes the write lock this often; 0 = never. */
  readonly sqliteLockEveryMs: number;
  readonly sqliteLockMs: number;
  /** Spread the payments over this many ordering keys (0: no keys), so that each key's reconciliations must run one at a time, in order. */
  readonly keys: number;
  /**
   * What the workers' completions do with a message's row (their --on-complete): keep it as
   * processed, or delete it. In delete mode the audit trail is the record of each completion.
   */
  readonly onComplete: OnComplete;
  /**
   * The first worker stalls after its first handler run until another worker has taken that
   * message, so that a stale completion is certainly attempted, and must be refused. It starts
   * alone and is given the first payment; the others start once its stall has begun.
   */
  readonly stallFirst?: boolean;
  /**
   * A limit on the payments' message type (store.limit), set before the workers start and judged
   * over the audit trail: at most this many leases at once across the workers (0: none)…
   */
  readonly limitConcurrency?: number;
  /** …and at most this many claims in any interval (none when absent). */
  readonly limitRate?: Rate;
  /**
   * Cancel a random payment message this often (store.cancel with running: true, so a running
   * one's run is aborted and its result refused; a cancelled key holder hands its key on); 0: never.
   */
  readonly cancelEveryMs?: number;
  /** Give up waiting for the workers after this long (default: scaled to the work, see chaosTimeoutMs). */
  readonly timeoutMs?: number;
  /** Keep the database and the logs. */
  readonly keep: boolean;
  readonly onProgress?: (line: string) => void;
  /** Aborted (SIGINT, SIGTERM): the run stops, removes what it started (unless keep), and throws ChaosInterruptedError. */
  readonly signal?: AbortSignal;
}

/** The run was aborted through its signal; it stopped its workers and removed what it had started (unless keep). */
export class ChaosInterruptedError extends WassalError {
  override name = "ChaosInterruptedError";
  constructor(message: string) {
    super("CHAOS_INTERRUPTED", message);
  }
}

/** The name of the run's every-second schedule (see PULSE_MESSAGE_TYPE). */
const PULSE_SCHEDULE = "chaos-pulse";

export const CHAOS_DEFAULTS: Omit<ChaosOptions, "store"> = {
  workers: 4,
  payments: 2_000,
  rate: 500,
  seed: 1,
  leaseMs: 1_000,
  killEveryMs: 300,
  pauseEveryMs: 1_500,
  handlerErrorRate: 0.02,
  providerFailureRate: 0.02,
  providerTimeoutRate: 0.02,
  latencySpikeRate: 0.01,
  latencySpikeMs: 1_500,
  killConnectionsEveryMs: 1_000,
  pgRestart: false,
  sqliteLockEveryMs: 1_000,
  sqliteLockMs: 200,
  keys: 0,
  onComplete: "keep",
  keep: false,
};

/** The default wait for the workers, scaled to the run's work: 30 s, plus the creation time, plus 100 ms per payment. */
export function chaosTimeoutMs(options: Pick<ChaosOptions, "payments" | "rate">): number {
  return Math.round(30_000 + (options.payments / options.rate) * 1000 + options.payments * 100);
}

export interface ChaosResult {
  readonly passed: boolean;
  readonly report: InvariantReport;
  readonly settings: Record<string, string | number | boolean>;
  readonly figures: {
    readonly paymentsCreated: number;
    readonly processed: number;
    readonly dead: number;
    readonly kills: number;
    readonly pauses: number;
    readonly connectionKills: number;
    readonly serverRestarts: number;
    readonly lockHolds: number;
    readonly workerStarts: number;
    readonly seconds: number;
    /** Messages the run's every-second schedule enqueued (keep mode; 0 with delete). */
    readonly pulses: number;
    /** Payment messages the run cancelled (cancelEveryMs), pending and running. */
    readonly cancelledPending: number;
    readonly cancelledRunning: number;
  };
  readonly location: string;
  readonly workDir: string | null;
  /** The run stopped waiting with messages unfinished (late, not lost: see the report). */
  readonly timedOut: boolean;
  /** Messages still pending or processing at the end. */
  readonly unfinished: number;
}

const CLI = fileURLToPath(new URL("../cli/main.js", import.meta.url));
const LOCK_HOLDER = fileURLToPath(new URL("./lock-holder.js", import.meta.url));
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
/** How long the workers may take to start, all of them, before the run gives up. */
const READY_WAIT_MS = 60_000;

function checkChaosOptions(o: ChaosOptions): void {
  const whole = (name: string, value: number, min: number) => {
    if (!Number.isInteger(value) || value < min) throw new InvalidArgumentError(`${name} must be a whole number >= ${min} (got ${value})`);
  };
  whole("workers", o.workers, 1);
  whole("keys", o.keys, 0);
  whole("payments", o.payments, 1);
  whole("leaseMs", o.leaseMs, 100);
  for (const [name, value] of Object.entries({
    handlerErrorRate: o.handlerErrorRate,
    providerFailureRate: o.providerFailureRate,
    providerTimeoutRate: o.providerTimeoutRate,
    latencySpikeRate: o.latencySpikeRate,
  })) {
    if (!(value >= 0 && value <= 1)) throw new InvalidArgumentError(`${name} must be between 0 and 1 (got ${value})`);
  }
  if (!(o.rate > 0)) throw new InvalidArgumentError(`rate must be a positive number of payments per second (got ${o.rate})`);
  if (o.stallFirst && o.workers < 2) {
    throw new InvalidArgumentError(`stallFirst needs 2 workers or more: another worker must take the stalled message (got workers ${o.workers})`);
  }
  checkOnComplete(o.onComplete);
  whole("limitConcurrency", o.limitConcurrency ?? 0, 0);
  whole("cancelEveryMs", o.cancelEveryMs ?? 0, 0);
  const limit = judgedLimit(o);
  if (limit !== null) checkLimitOptions(limit, RECONCILE_MESSAGE_TYPE);
  checkStore(o.store);
}

export async function runChaos(options: ChaosOptions): Promise<ChaosResult> {
  checkChaosOptions(options);
  const started = performance.now();
  const progress = options.onProgress ?? (() => undefined);
  const random = seededRandom(options.seed);
  const runId = randomBytes(3).toString("hex");
  const workDir = mkdtempSync(join(tmpdir(), "wassal-chaos-"));
  const providerLog = join(workDir, "provider.log");
  const place = await scratchPlace(options.store, workDir, "chaos");
  const { db, location } = place;
  const { schema } = place.options;
  // The run's own store (its cancels) does with a finished row what the workers' --on-complete does.
  const outbox = await openLabOutbox(db, { audit: true, onComplete: options.onComplete, ...place.options }).catch(async (error: unknown) => {
    if (!options.keep) await place.remove().catch(() => undefined);
    throw error;
  });
  const provider = new ProviderSimulator({ logFile: providerLog });
  const service = new PaymentsService({
    store: outbox.store,
    repository: outbox.payments,
    provider,
    ...(options.keys > 0 ? { orderingKeyOf: (request: { idempotencyKey: string }) => keyOfPayment(request.idempotencyKey, options.keys) } : {}),
  });
  let timedOut = false;
  /** The schedule's first tick, once it is added. */
  let firstTick: Date | null = null;
  /** The messages the run enqueued, as each create returned them: in delete mode a completed one leaves no row. */
  const enqueued: EnqueuedMessage[] = [];
  const stopIfAborted = () => {
    if (options.signal?.aborted)
      throw new ChaosInterruptedError(
        `interrupted; the run's workers were stopped${options.keep ? ` (kept: ${workDir})` : ", its temporary files and schema removed"}`,
      );
  };
  const figures = {
    paymentsCreated: 0,
    processed: 0,
    dead: 0,
    kills: 0,
    pauses: 0,
    connectionKills: 0,
    serverRestarts: 0,
    lockHolds: 0,
    workerStarts: 0,
    seconds: 0,
    pulses: 0,
    cancelledPending: 0,
    cancelledRunning: 0,
  };
  const pool = new ProcessPool({
    size: options.workers,
    workDir,
    leaseMs: options.leaseMs,
    random,
    command: (index, generation) => {
      const name = `chaos-${runId}-w${index}-g${generation}`;
      return {
        name,
        args: [
          CLI,
          "worker",
          "--db",
          db,
          ...(schema ? ["--schema", schema] : []),
          "--name",
          name,
          "--audit",
          "--lab-pulse",
          "--on-complete",
          options.onComplete,
          "--provider-log",
          providerLog,
          "--concurrency",
          "4",
          "--lease-ms",
          String(options.leaseMs),
          "--poll-ms",
          "200",
          "--max-attempts",
          "100",
          "--retry-base-ms",
          "20",
          "--grace-ms",
          "500",
          "--log-level",
          process.env.WASSAL_CHAOS_LOG_LEVEL ?? "warn",
          "--fault-seed",
          String(options.seed * 1000 + index * 100 + generation),
          "--fault-handler-error-rate",
          String(options.handlerErrorRate),
          "--fault-provider-failure-rate",
          String(options.providerFailureRate),
          "--fault-provider-timeout-rate",
          String(options.providerTimeoutRate),
          "--fault-latency-spike-rate",
          String(options.latencySpikeRate),
          "--fault-latency-spike-ms",
          String(options.latencySpikeMs),
          // Until its stall has begun: a first process that died before it is replaced by one that stalls.
          ...(options.stallFirst && index === 0 && !stallBegun() ? ["--fault-stall-first"] : []),
        ],
      };
    },
  });

  /** Creates the run's payment number n (from 0), through the payments API, and records its message. */
  async function createPayment(n: number): Promise<void> {
    const message = await createWithRetry(service, `CHAOS-${runId}-${String(n + 1).padStart(6, "0")}`);
    if (message !== null) enqueued.push({ id: message.id, type: message.type, key: message.key, payload: message.payload });
    figures.paymentsCreated += 1;
  }

  let stalled = false;
  /** Whether the --stall-first worker has begun its stall (its log says so). */
  function stallBegun(): boolean {
    stalled ||= pool.countLogLines((line) => line.includes(`"event":"${STALL_MARK}"`)) > 0;
    return stalled;
  }

  const timers: NodeJS.Timeout[] = [];
  const every = (ms: number, action: () => void | Promise<void>) => {
    if (ms > 0) timers.push(setInterval(() => void Promise.resolve(action()).catch(() => undefined), ms));
  };

  let killer: ConnectionKiller | undefined;
  /** The competing writers still running: the run waits for them before it reads and cleans up. */
  const lockHolders = new Set<Promise<void>>();
  try {
    // The run starts once every worker is claiming, so that faults and work overlap however slowly
    // this machine starts processes.
    // With --stall-first the first worker starts alone and takes the first payment: the others start
    // once it has stalled on it, so the stall certainly holds a message that another worker takes.
    // The run's schedule (keep mode, where each tick's message keeps its row and names its tick): a
    // pulse every second, fired by the workers through their kills and pauses. Its backfill spans
    // the run, so a slow start skips no tick.
    if (options.onComplete === "keep") {
      const backfillMs = Math.min(
        31 * 24 * 3600_000,
        READY_WAIT_MS + (options.timeoutMs ?? chaosTimeoutMs(options)) + (options.payments / options.rate) * 1000,
      );
      const pulse = await outbox.store.schedule(
        PULSE_SCHEDULE,
        "* * * * * *",
        { type: PULSE_MESSAGE_TYPE, payload: { run: runId } },
        { backfillMs: Math.ceil(backfillMs) },
      );
      firstTick = pulse.nextAt;
    }
    const limited = judgedLimit(options);
    if (limited !== null) await outbox.store.limit(RECONCILE_MESSAGE_TYPE, limited);
    let firstCreated = 0;
    if (options.stallFirst && options.workers > 1) {
      await pool.start(READY_WAIT_MS, 1);
      stopIfAborted();
      await createPayment(0);
      firstCreated = 1;
      for (const until = performance.now() + READY_WAIT_MS; !stallBegun(); await sleep(50)) {
        stopIfAborted();
        if (performance.now() > until)
          throw new ChaosSetupError(`the first worker did not stall on the first payment within ${READY_WAIT_MS / 1000} s; rerun with --keep and read its log`);
      }
      progress("the first worker has stalled on the first payment; starting the others");
    }
    await pool.start(READY_WAIT_MS);
    stopIfAborted();
    progress(`${options.workers} workers ready after ${Math.round(performance.now() - started)} ms`);
    const createdFrom = performance.now();

    every(options.cancelEveryMs ?? 0, async () => {
      const target = enqueued[Math.floor(random() * enqueued.length)];
      if (target === undefined) return;
      try {
        const done = await outbox.store.cancel(target.id, { running: true, reason: "chaos" });
        if (done.runningOwner === null) figures.cancelledPending += 1;
        else figures.cancelledRunning += 1;
      } catch {
        // Finished already (processed, dead, cancelled, gone) or the store was busy: nothing was cancelled.
      }
    });
    every(options.killEveryMs, () => pool.killOne());
    every(options.pauseEveryMs, () => pool.pauseOne());
    if (place.openConnectionKiller !== undefined) {
      const opened = await place.openConnectionKiller();
      killer = opened;
      every(options.killConnectionsEveryMs, async () => {
        figures.connectionKills += await opened.terminate(`wassal-worker-chaos-${runId}-%`);
      });
    } else {
      every(options.sqliteLockEveryMs, () => {
        figures.lockHolds += 1;
        const holder = spawn(process.execPath, [LOCK_HOLDER, db, String(options.sqliteLockMs)], { stdio: "ignore" });
        const exited = new Promise<void>((resolve) => holder.once("close", () => resolve()));
        lockHolders.add(exited);
        void exited.then(() => lockHolders.delete(exited));
      });
    }

    // Create the payments at a steady rate, through the payments API.
    const restartAt = options.pgRestart && place.kind === "postgres" ? Math.floor(options.payments * 0.4) : -1;
    for (let n = firstCreated; n < options.payments; n += 1) {
      const due = createdFrom + ((n - firstCreated) / options.rate) * 1000;
      const wait = due - performance.now();
      if (wait > 0) await sleep(wait);
      stopIfAborted();
      if (n === restartAt) {
        progress("restarting the PostgreSQL server");
        await restartPostgres();
        figures.serverRestarts += 1;
      }
      await createPayment(n);
      if ((n + 1) % Math.max(1, Math.floor(options.payments / 10)) === 0) progress(`created ${n + 1}/${options.payments} payments`);
    }

    // The schedule ends with the payments: its last tick's message drains with theirs.
    if (firstTick !== null) await outbox.store.unschedule(PULSE_SCHEDULE);

    // Wait until every message is processed or dead.
    const timeoutMs = options.timeoutMs ?? chaosTimeoutMs(options);
    const deadline = performance.now() + timeoutMs;
    let lastReport = 0;
    for (;;) {
      stopIfAborted();
      const counts = await outbox.store.countByStatus().catch(() => undefined);
      if (counts && counts.pending + counts.processing === 0) break;
      if (performance.now() > deadline) {
        progress(`timed out after ${timeoutMs} ms with ${counts ? counts.pending + counts.processing : "an unknown number of"} messages unfinished`);
        timedOut = true;
        break;
      }
      if (counts && performance.now() - lastReport > 1000) {
        lastReport = performance.now();
        // A completion in delete mode leaves no row to count: what is not left was completed.
        const done =
          options.onComplete === "delete"
            ? `completed and deleted ${figures.paymentsCreated - counts.pending - counts.processing - counts.dead}`
            : `processed ${counts.processed}`;
        progress(`${done}, dead ${counts.dead}, pending ${counts.pending}, processing ${counts.processing}`);
      }
      await sleep(100);
    }
  } catch (error) {
    // The run could not go on: leave nothing behind but what --keep asks for.
    await pool.stop();
    await outbox.close().catch(() => undefined);
    if (!options.keep) await place.remove().catch(() => undefined);
    // The competing writers first (the finally below waits for them too, later than this removal).
    await Promise.all(lockHolders);
    // The error that stopped the run is the one to report, not a failed clean-up after it.
    if (!options.keep) removeWorkDir(workDir, () => undefined);
    throw error;
  } finally {
    for (const timer of timers) clearInterval(timer);
    await pool.stop();
    await killer?.close();
    await Promise.all(lockHolders);
    figures.kills = pool.kills;
    figures.pauses = pool.pauses;
    figures.workerStarts = pool.starts;
  }

  const [messages, audit, payments] = await Promise.all([outbox.store.listMessages(), outbox.store.auditTrail(), outbox.payments.list()]);
  // The schedule's messages (keep mode: each keeps its row), judged apart from the payments'.
  const pulseRows = messages.filter((m) => m.type === PULSE_MESSAGE_TYPE);
  const pulseIds = new Set(pulseRows.map((m) => m.id));
  const paymentRows = messages.filter((m) => !pulseIds.has(m.id));
  const rowIds = new Set(messages.map((m) => m.id));
  const report = checkInvariants({
    messages: paymentRows,
    audit: audit.filter((e) => !pulseIds.has(e.messageId)),
    payments,
    providerLog: existsSync(providerLog) ? readProviderLog(providerLog) : [],
    // The payments' alone, as the audit above: a refused pulse completion has its row there too, left out with it.
    staleCompletionsRejected: pool.countLogLines(
      (line) => line.includes('"event":"lease-lost"') && line.includes('"operation":"complete"') && !pulseIds.has(messageIdOf(line)),
    ),
    timedOut,
    enqueued,
    onComplete: options.onComplete,
    ...(judgedLimit(options) === null ? {} : { limit: { type: RECONCILE_MESSAGE_TYPE, limit: judgedLimit(options) as JudgedLimit, leaseMs: options.leaseMs } }),
    ...(firstTick === null
      ? {}
      : {
          schedule: {
            firstTick,
            ticks: pulseRows.map((m) => (m.dedupeKey ?? "").slice(`schedule:${PULSE_SCHEDULE}:`.length)),
            unfinished: pulseRows.filter((m) => m.status !== "processed").length,
            alreadyEnqueued: pool.countLogLines((line) => line.includes('"event":"schedule-skipped"') && line.includes('"reason":"already-enqueued"')),
          },
        }),
  });
  // A completion in delete mode leaves no row: its audited completion counts it.
  const deleted = new Set(audit.filter((e) => e.action === "complete" && !rowIds.has(e.messageId)).map((e) => e.messageId));
  figures.processed = paymentRows.filter((m) => m.status === "processed").length + deleted.size;
  figures.dead = paymentRows.filter((m) => m.status === "dead").length;
  figures.pulses = pulseRows.length;
  figures.seconds = Math.round((performance.now() - started) / 100) / 10;

  await outbox.close();
  if (!options.keep) await place.remove().catch(() => undefined);
  if (!options.keep) removeWorkDir(workDir, (error) => progress(`could not remove ${workDir}: ${error.message}`));

  const { onProgress: _onProgress, signal: _signal, limitRate, ...shown } = options;
  return {
    passed: report.passed,
    report,
    settings: {
      ...shown,
      ...(limitRate === undefined ? {} : { limitRate: `${limitRate.count}/${limitRate.intervalMs}ms` }),
      timeoutMs: options.timeoutMs ?? chaosTimeoutMs(options),
      store: redactUrl(options.store),
    },
    figures,
    location,
    workDir: options.keep ? workDir : null,
    timedOut,
    unfinished: messages.filter((m) => m.status === "pending" || m.status === "processing").length,
  };
}

/** The run's limit on the payments' type, or null when it sets none. */
function judgedLimit(options: ChaosOptions): JudgedLimit | null {
  const concurrency = options.limitConcurrency ? options.limitConcurrency : null;
  const rate = options.limitRate ?? null;
  return concurrency === null && rate === null ? null : { concurrency, rate };
}

/** Payment number n (from its key's last digits) goes to ordering key n mod `keys`: consecutive payments land on different keys. */
function keyOfPayment(idempotencyKey: string, keys: number): string {
  return `account-${Number(idempotencyKey.slice(-6)) % keys}`;
}

/**
 * Removes the run's directory. A process of the run that is still exiting may write one last
 * file into it (a log line, SQLite's -shm) while it is removed, so removal is tried a few times.
 */
function removeWorkDir(workDir: string, failed: (error: Error) => void): void {
  try {
    rmSync(workDir, { recursive: true, force: true, maxRetries: 5, retryDelay: 50 });
  } catch (error) {
    failed(error as Error);
  }
}

/**
 * The payments API is a client of the store too: a lost connection or a busy database is retried,
 * for up to a minute (by the clock, not by attempts: on a loaded machine a held lock lasts longer).
 * Returns the message enqueued, or null when an attempt whose answer was lost had committed it.
 */
async function createWithRetry(service: PaymentsService<unknown>, key: string): Promise<OutboxMessage | null> {
  const giveUpAt = performance.now() + 60_000;
  for (let attempt = 1; ; attempt += 1) {
    try {
      // The same request each time: a replay of a committed create writes nothing.
      return (await service.create({ idempotencyKey: key, amount: 1000, currency: "EUR" })).message;
    } catch (error) {
      if (performance.now() > giveUpAt) throw error;
      await sleep(Math.min(1000, 20 * attempt));
    }
  }
}

async function restartPostgres(): Promise<void> {
  const versions = existsSync("/etc/postgresql") ? readdirSync("/etc/postgresql") : [];
  const version = versions[0];
  if (version === undefined) throw new InvalidArgumentError("--pg-restart needs a local PostgreSQL cluster managed by pg_ctlcluster");
  const result = spawnSync("pg_ctlcluster", ["--skip-systemctl-redirect", version, "main", "restart"], { stdio: "ignore", timeout: 60_000 });
  if (result.status !== 0) throw new InvalidArgumentError(`pg_ctlcluster restart failed (exit ${result.status}); --pg-restart needs root and a local cluster`);
}
