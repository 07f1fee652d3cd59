// The shards of a long-running command (`wassal worker --shard …`, `wassal relay --shard …`): one
// unit (a worker or a relay, with its open store) per shard, in one process. A shard whose server
// does not answer at start holds back none of the others: the command starts with the shards that
// answer, logs the one that does not, and brings it up once it answers. A shard that goes down
// later is the store's business, as with one outbox: claims fail, are logged, and go on.

import type { Logger } from "pino";
import { DatabaseOpenError } from "../outbox/errors.js";

/** What runs one shard: stopped gracefully (or at once, graceMs 0) when the command stops. */
export interface ShardUnit {
  stop(graceMs?: number): Promise<void>;
}

export interface RunningShards<U extends ShardUnit> {
  /** Each shard's unit, in shard order; undefined while the shard's server has not answered yet. */
  readonly units: readonly (U | undefined)[];
  /** Stops trying the shards not up yet, and stops every unit. */
  stop(graceMs?: number): Promise<void>;
}

/** Error codes of a server that cannot be reached now (down, restarting, or not there yet). */
const UNREACHABLE = new Set(["ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "EHOSTUNREACH", "ENETUNREACH", "EPIPE", "EAI_AGAIN", "57P03", "53300"]);

/** Whether opening a store failed because its server did not answer (rather than bad input). */
export function isUnreachable(error: unknown): boolean {
  if (!(error instanceof DatabaseOpenError)) return false;
  for (let cause: unknown = error.cause, depth = 0; cause !== undefined && cause !== null && depth < 5; depth += 1) {
    const { code, message } = cause as { code?: unknown; message?: unknown };
    if (typeof code === "string" && UNREACHABLE.has(code)) return true;
    if (typeof message === "string" && /connection terminated|timeout expired/i.test(message)) return true;
    cause = (cause as { cause?: unknown }).cause;
  }
  return false;
}

/**
 * Brings up one unit per database with `up` (which opens, starts, and on its own failure undoes
 * what it did). One database: its failure is thrown. Shards: a shard whose server does not answer
 * is logged and tried again every `retryMs` until it answers or the command stops; any other
 * failure, or no shard answering at all, stops the units started and is thrown.
 */
export async function startShardUnits<U extends ShardUnit>(
  dbs: readonly string[],
  up: (db: string, shard: number) => Promise<U>,
  options: {
    readonly logger: Logger;
    readonly retryMs?: number;
    readonly describe: (db: string) => string;
    /** Called when a shard tried again fails for a reason other than its server not answering: it is left out for good. */
    readonly onLeftOut?: (shard: number, error: unknown) => void;
  },
): Promise<RunningShards<U>> {
  const retryMs = options.retryMs ?? 2_000;
  const units: (U | undefined)[] = dbs.map(() => undefined);
  const timers = new Set<NodeJS.Timeout>();
  const attempts = new Set<Promise<void>>();
  let stopping = false;
  const stop = async (graceMs?: number) => {
    stopping = true;
    for (const timer of timers) clearTimeout(timer);
    timers.clear();
    await Promise.allSettled([...attempts]);
    const stopped = await Promise.allSettled(units.map((unit) => unit?.stop(graceMs)));
    const failed = stopped.find((result): result is PromiseRejectedResult => result.status === "rejected");
    if (failed !== undefined) throw failed.reason;
  };
  const retryLater = (db: string, shard: number) => {
    const timer = setTimeout(() => {
      timers.delete(timer);
      if (stopping) return;
      const attempt = up(db, shard).then(
        async (unit) => {
          if (stopping) return unit.stop(0).catch(() => undefined);
          units[shard] = unit;
          options.logger.info({ shard, db: options.describe(db) }, "shard answers now; working it");
        },
        (error: unknown) => {
          if (stopping) return;
          if (!isUnreachable(error)) {
            options.logger.error({ shard, db: options.describe(db), error: String(error) }, "shard cannot be worked; leaving it out");
            options.onLeftOut?.(shard, error);
            return;
          }
          retryLater(db, shard);
        },
      );
      attempts.add(attempt);
      void attempt.finally(() => attempts.delete(attempt));
    }, retryMs);
    timers.add(timer);
  };
  // Every shard at once: one whose server does not answer (a connection timeout) holds back no other.
  const results = await Promise.allSettled(dbs.map((db, shard) => up(db, shard)));
  const unreachable: { db: string; shard: number; error: unknown }[] = [];
  let failure: { error: unknown } | undefined;
  for (const [shard, result] of results.entries()) {
    if (result.status === "fulfilled") units[shard] = result.value;
    else if (dbs.length > 1 && isUnreachable(result.reason)) unreachable.push({ db: dbs[shard] as string, shard, error: result.reason });
    else failure ??= { error: result.reason };
  }
  if (failure === undefined && unreachable.length === dbs.length) failure = { error: (unreachable[0] as { error: unknown }).error };
  if (failure !== undefined) {
    await stop(0).catch(() => undefined);
    throw failure.error;
  }
  for (const { db, shard, error } of unreachable) {
    options.logger.warn(
      { shard, db: options.describe(db), error: error instanceof Error ? error.message : String(error), retryInMs: retryMs },
      "shard does not answer; working the others, and this one once it answers",
    );
    retryLater(db, shard);
  }
  return { units, stop };
}

/** What a unit runs: a Worker, a Relay or a WalRelay. */
interface Stoppable {
  stop(options?: { readonly graceMs?: number }): Promise<void>;
}

/**
 * A shard's unit over its open store: attaches its logs and metrics, then `build` makes and starts
 * its runner (handing it to `track` before starting it). The unit's stop stops the runner, detaches
 * and closes the store; a failure anywhere undoes what was done, closing the store, and rethrows.
 */
export async function shardUnit<T extends object>(
  outbox: { close(): Promise<void> },
  attach: () => () => Promise<void>,
  build: (track: (runner: Stoppable) => void) => Promise<T>,
): Promise<T & ShardUnit> {
  let detach: (() => Promise<void>) | undefined;
  let runner: Stoppable | undefined;
  try {
    detach = attach();
    const unit = await build((made) => {
      runner = made;
    });
    const [started, detached] = [runner, detach];
    return {
      ...unit,
      async stop(graceMs?: number) {
        await started?.stop(graceMs === undefined ? {} : { graceMs });
        await detached();
        await outbox.close();
      },
    };
  } catch (error) {
    await runner?.stop({ graceMs: 0 }).catch(() => undefined);
    await detach?.();
    await outbox.close();
    throw error;
  }
}
