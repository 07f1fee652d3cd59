// The app's own handlers for `wassal worker --handlers <file>`: a module that exports them by
// message type. It exports, as `default` or as `handlers`, either an object of message type →
// handler function, or a function that receives the opened store (and a logger) and returns, or
// resolves to, such an object (for handlers that need the store, a pool or a client). It may also
// export `perType`: settings of some types (concurrency, retry, maxProcessingMs; see the Worker),
// `schedules`: recurring schedules by name, added (or replaced) when the worker starts, and
// `batchHandlers`: handlers of many messages of a type at once (see WorkerOptions.batchHandlers).

import { existsSync } from "node:fs";
import { extname, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import type { Logger } from "pino";
import { InvalidArgumentError, WassalError } from "../outbox/errors.js";
import type { Handler } from "../outbox/process-lease.js";
import type { OutboxStore } from "../outbox/store.js";
import type { TypeSettings } from "../outbox/worker.js";
import { checkScheduleName, checkScheduleTiming } from "../outbox/schedules.js";
import { type BatchHandler, checkBatchHandlers } from "../outbox/batch-handler.js";
import { checkKnownKeys } from "../outbox/validate.js";
import type { ScheduledMessage } from "../outbox/types.js";

/** A handlers module that cannot be used: missing, failing to load, or not exporting handlers. */
export class HandlersModuleError extends WassalError {
  override name = "HandlersModuleError";
  constructor(file: string, problem: string, options?: { cause?: unknown }) {
    super("HANDLERS_MODULE", `--handlers ${file}: ${problem}`, options);
  }
}

/** What a handlers module's factory receives. */
export interface HandlersContext {
  readonly store: OutboxStore<unknown>;
  readonly logger: Logger;
  /** Settings for the module (the payments demo's flags for its own module; none for an app's). */
  readonly settings?: Readonly<Record<string, unknown>>;
}

/** What a handlers module exports: message type → handler. */
export type HandlerMap = Readonly<Record<string, Handler<unknown>>>;

const TYPESCRIPT = new Set([".ts", ".mts", ".cts"]);

/**
 * Whether this Node strips TypeScript's types when it imports a .ts file: Node 22.18+, 23.6+ and
 * 24 do by default; 22.10+ with --experimental-strip-types (process.features.typescript says;
 * 22.6 to 22.9 strip with the flag but do not say, and are refused).
 */
export function stripsTypes(features: { readonly typescript?: unknown } = process.features as { readonly typescript?: unknown }): boolean {
  return features.typescript === "strip" || features.typescript === "transform";
}

const EXPECTED = "expected a default export or an export named handlers: an object of message type → handler function, or a function (context) => that object";

function checkMap(file: string, value: unknown, batched = false): HandlerMap {
  if (typeof value !== "object" || value === null || Array.isArray(value))
    throw new HandlersModuleError(file, `${EXPECTED} (got ${Array.isArray(value) ? "an array" : typeof value})`);
  const entries = Object.entries(value);
  if (entries.length === 0 && !batched)
    throw new HandlersModuleError(file, "exports no handlers (an empty object); give at least one message type → handler function");
  for (const [type, handler] of entries) {
    if (typeof handler !== "function")
      throw new HandlersModuleError(
        file,
        `the handler for message type ${JSON.stringify(type)} is not a function (got ${handler === null ? "null" : typeof handler})`,
      );
  }
  return value as HandlerMap;
}

/** One schedule of a handlers module's `schedules` export (see OutboxStore.schedule). */
export interface ModuleSchedule {
  /** Five fields (minute hour day-of-month month day-of-week), or six with seconds first. */
  readonly cron: string;
  /** The message each tick enqueues. */
  readonly message: ScheduledMessage;
  /** The IANA time zone the expression is read in (default "UTC"). */
  readonly timezone?: string;
  /** How late a tick may be found and still fire (default 60 000 ms). */
  readonly backfillMs?: number;
}

/** What a handlers module's `schedules` export holds: schedule name → schedule. */
export type ScheduleMap = Readonly<Record<string, ModuleSchedule>>;

/** A loaded handlers module: its handlers, its per-type settings and its schedules if it has them. */
export interface HandlersModule {
  readonly handlers: HandlerMap;
  readonly perType: Readonly<Record<string, TypeSettings>> | undefined;
  readonly schedules: ScheduleMap | undefined;
  /** Its batch handlers (see WorkerOptions.batchHandlers), if it exports them. */
  readonly batchHandlers: Readonly<Record<string, BatchHandler<unknown>>> | undefined;
}

const SCHEDULE_SHAPE = "{ cron, message: { type, payload, key?, headers?, destination?, priority? }, timezone?, backfillMs? }";

/** The module's `schedules` export, its names and timing checked (each message is checked when it is added). */
function checkSchedules(file: string, value: unknown): ScheduleMap | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new HandlersModuleError(
      file,
      `its schedules export must be an object of schedule name → ${SCHEDULE_SHAPE} (got ${Array.isArray(value) ? "an array" : typeof value})`,
    );
  }
  for (const [name, schedule] of Object.entries(value)) {
    if (typeof schedule !== "object" || schedule === null || typeof (schedule as { message?: unknown }).message !== "object") {
      throw new HandlersModuleError(file, `schedule ${JSON.stringify(name)} must be ${SCHEDULE_SHAPE}`);
    }
    const { cron, timezone, backfillMs } = schedule as ModuleSchedule;
    try {
      checkKnownKeys(schedule, `schedule ${JSON.stringify(name)}`, ["cron", "message", "timezone", "backfillMs"]);
      checkScheduleTiming(checkScheduleName(name), cron, {
        ...(timezone === undefined ? {} : { timezone }),
        ...(backfillMs === undefined ? {} : { backfillMs }),
      });
    } catch (error) {
      throw new HandlersModuleError(file, `schedule ${JSON.stringify(name)}: ${error instanceof Error ? error.message : String(error)}`, { cause: error });
    }
  }
  return value as ScheduleMap;
}

/**
 * Loads the module at `file` (relative to the working directory) and checks its exports, touching
 * no database: a module that is missing or exports no handlers is refused before the worker opens
 * anything. Returns the step that makes its handlers once the store is open.
 */
export async function importHandlers(file: string): Promise<(context: HandlersContext) => Promise<HandlersModule>> {
  const path = resolve(file);
  if (!existsSync(path)) throw new HandlersModuleError(file, `no such file (${path}); give the path of a JavaScript module that exports handlers`);
  if (TYPESCRIPT.has(extname(path).toLowerCase()) && !stripsTypes()) {
    throw new HandlersModuleError(
      file,
      `is TypeScript, and this Node (${process.version}) does not strip types: run the worker on Node 22.18+, 23.6+ or 24 (or 22.10+ with NODE_OPTIONS=--experimental-strip-types), or compile the module to JavaScript first`,
    );
  }
  let loaded: Record<string, unknown>;
  try {
    loaded = (await import(pathToFileURL(path).href)) as Record<string, unknown>;
  } catch (error) {
    throw new HandlersModuleError(file, `could not be loaded: ${error instanceof Error ? error.message : String(error)}`, { cause: error });
  }
  const perType = loaded.perType;
  if (perType !== undefined && (typeof perType !== "object" || perType === null || Array.isArray(perType))) {
    throw new HandlersModuleError(
      file,
      `its perType export must be an object of message type → { concurrency, retry, maxProcessingMs } (got ${typeof perType})`,
    );
  }
  const settings = perType as Readonly<Record<string, TypeSettings>> | undefined;
  const schedules = checkSchedules(file, loaded.schedules);

  /** The batch handlers checked, against the module's handlers once they are known (a type has one or the other). */
  const checkBatched = (handlers: Readonly<Record<string, unknown>>) => {
    try {
      return loaded.batchHandlers === undefined ? undefined : checkBatchHandlers<unknown>(loaded.batchHandlers, handlers);
    } catch (error) {
      throw new HandlersModuleError(file, `its ${error instanceof Error ? error.message : String(error)}`, { cause: error });
    }
  };
  const batchHandlers = checkBatched({});
  const batched = batchHandlers !== undefined && Object.keys(batchHandlers).length > 0;
  const exported = loaded.handlers ?? loaded.default ?? (batched ? {} : undefined);
  if (exported === undefined) throw new HandlersModuleError(file, `${EXPECTED} (it exports ${Object.keys(loaded).join(", ") || "nothing"})`);
  if (typeof exported !== "function") {
    const handlers = checkMap(file, exported, batched);
    checkBatched(handlers);
    return async () => ({ handlers, perType: settings, schedules, batchHandlers });
  }
  return async (context) => {
    let made: unknown;
    try {
      made = await (exported as (context: HandlersContext) => unknown)(context);
    } catch (error) {
      throw new HandlersModuleError(file, `its handlers function threw: ${error instanceof Error ? error.message : String(error)}`, { cause: error });
    }
    const handlers = checkMap(file, made, batched);
    checkBatched(handlers);
    return { handlers, perType: settings, schedules, batchHandlers };
  };
}

/**
 * Adds (or replaces) a module's schedules in `store`: those `here` keeps, every one by default (a
 * sharded worker keeps each on one shard). A schedule re-added unchanged keeps its next tick, so a
 * restart loses none. A message the store refuses is a HandlersModuleError naming the schedule.
 */
export async function addModuleSchedules(
  file: string,
  store: OutboxStore<unknown>,
  schedules: ScheduleMap,
  here: (name: string, schedule: ModuleSchedule) => boolean = () => true,
): Promise<string[]> {
  const added: string[] = [];
  for (const [name, { cron, message, timezone, backfillMs }] of Object.entries(schedules)) {
    if (!here(name, schedules[name] as ModuleSchedule)) {
      // Another shard's: a copy left here (the key or the shard count changed) would fire each tick twice.
      await store.unschedule(name);
      continue;
    }
    try {
      await store.schedule(name, cron, message, { ...(timezone === undefined ? {} : { timezone }), ...(backfillMs === undefined ? {} : { backfillMs }) });
    } catch (error) {
      if (!(error instanceof InvalidArgumentError)) throw error;
      throw new HandlersModuleError(file, `schedule ${JSON.stringify(name)}: ${error.message}`, { cause: error });
    }
    added.push(name);
  }
  return added;
}
