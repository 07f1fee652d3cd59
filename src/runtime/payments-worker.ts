// A ready-to-run worker: opens the store, loads the app's handlers module (see handlers-module.ts)
// or, by default, the payments demo's (payments-handlers.ts), wires logs and metrics to the event
// stream, and starts claiming.

import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { Worker, defaultWorkerName } from "../outbox/worker.js";
import { checkMetricsAddress } from "../observability/metrics.js";
import { flushRegisteredTracing, registeredOtelTracing } from "../observability/tracing.js";
import { openOutbox } from "../stores/open-outbox.js";
import { addModuleSchedules, importHandlers } from "./handlers-module.js";
import { shardOfKey } from "../shards/key-hash.js";
import { warnNearMisses } from "./near-miss.js";
import { redactUrl } from "../outbox/redact.js";
import { observe, outboxDbs, type RunnerOptions, runnerTiming, shardLogger, shardName } from "./observed.js";
import { type RunningShards, type ShardUnit, shardUnit, startShardUnits } from "./shard-units.js";
import type { PaymentsHandlerSettings, WorkerFaults } from "./payments-handlers.js";

export type { WorkerFaults } from "./payments-handlers.js";

/** The payments demo's handlers module, next to this file (built, or its source under a TypeScript runner). */
const PAYMENTS_HANDLERS = [".js", ".ts"]
  .map((extension) => fileURLToPath(new URL(`./payments-handlers${extension}`, import.meta.url)))
  .find((path) => existsSync(path)) as string;

export interface PaymentsWorkerOptions extends RunnerOptions {
  /** A module exporting the app's handlers by message type; without it, the payments handler. */
  readonly handlersModule?: string;
  /** The message types to claim (default: those the handlers handle). */
  readonly types?: readonly string[];
  /** The longest a handler may run (default: no limit); a module's perType may set it per type. */
  readonly maxProcessingMs?: number;
  readonly concurrency?: number;
  /** Simulated provider latency per call. */
  readonly providerLatencyMs?: number;
  /** Append every provider call to this file (shared by processes; read by the chaos checker). */
  readonly providerLog?: string;
  /** Keep the audit trail (outbox_audit). */
  readonly audit?: boolean;
  /** The demo also handles the chaos run's schedule messages (see PULSE_MESSAGE_TYPE). */
  readonly pulse?: boolean;
  /** Faults to inject, for chaos runs. */
  readonly faults?: WorkerFaults;
}

export interface RunningPaymentsWorker {
  /** The workers' names (the owner on their leases), in shard order: the one, or <name>-shard<n> each. */
  readonly names: readonly string[];
  /** The workers running now, in shard order: with shards, one whose server has not answered yet is missing. */
  readonly workers: readonly Worker<unknown>[];
  /** The database's location (its path, or its URL without the password), or the shards' in order. */
  readonly location: string;
  /** The metrics server's address, when serving. */
  readonly metricsUrl: string | null;
  /** Whether it traces (an OpenTelemetry SDK registered a tracer provider before it started). */
  readonly tracing: boolean;
  /** Graceful stop: finish or release in-flight work, then close everything (and flush the spans). */
  stop(graceMs?: number): Promise<void>;
}

/** One shard's worker (or the one worker) with its open store. */
interface WorkerUnit extends ShardUnit {
  readonly worker: Worker<unknown>;
}

export async function startPaymentsWorker(options: PaymentsWorkerOptions): Promise<RunningPaymentsWorker> {
  // The module first: one that is missing or exports no handlers is refused before anything opens.
  const makeHandlers = await importHandlers(options.handlersModule ?? PAYMENTS_HANDLERS);
  const dbs = outboxDbs(options.db);
  const name = options.name ?? defaultWorkerName();
  // Traced when an OpenTelemetry SDK registered a tracer provider (preloaded, or by the handlers module).
  const tracing = registeredOtelTracing();
  // A metrics address that cannot serve is refused before the database is opened (or created).
  if (options.metricsPort !== undefined) await checkMetricsAddress(options.metricsPort, options.metricsHost);
  // The payments demo is a handlers module too, loaded the same way; its settings are the demo's flags.
  const settings: PaymentsHandlerSettings = {
    ...(options.providerLatencyMs === undefined ? {} : { providerLatencyMs: options.providerLatencyMs }),
    ...(options.providerLog === undefined ? {} : { providerLog: options.providerLog }),
    ...(options.pulse ? { pulse: true } : {}),
    ...(options.faults === undefined ? {} : { faults: options.faults }),
  };
  const observed = await observe(dbs.length, options);
  /** Each shard's location: the opened store's once it is open (a SQLite path made absolute). */
  const locations = dbs.map((db) => redactUrl(db));
  const up = async (db: string, shard: number): Promise<WorkerUnit> => {
    const shardLog = shardLogger(options.logger, shard, dbs);
    const outbox = await openOutbox(db, {
      ...options,
      applicationName: `wassal-worker-${shardName(name, shard, dbs)}`.slice(0, 63),
      ...(tracing === undefined ? {} : { tracing }),
    });
    locations[shard] = outbox.location;
    const { store } = outbox;
    return shardUnit(
      outbox,
      () => observed.attach(shard, store),
      async (track) => {
        // Each shard's handlers are made with its own store (a handler's context.store is its shard's).
        const { handlers, perType, schedules, batchHandlers } = await makeHandlers({
          store,
          logger: shardLog,
          ...(options.handlersModule === undefined ? { settings: { ...settings } } : {}),
        });
        if (schedules !== undefined && options.handlersModule !== undefined) {
          // With shards, each schedule lives on one: its message key's (a keyless one's by its name).
          const here = (scheduleName: string, { message }: { readonly message: { readonly key?: string } }) =>
            dbs.length === 1 || shardOfKey(message.key ?? `schedule:${scheduleName}`, dbs.length) === shard;
          const added = await addModuleSchedules(options.handlersModule, store, schedules, here);
          if (added.length > 0) shardLog.info({ schedules: added }, "schedules added (each tick enqueues once, whichever worker fires it)");
        }
        const worker = new Worker({
          store,
          name: shardName(name, shard, dbs),
          handlers,
          ...(options.types === undefined ? {} : { types: options.types }),
          ...(perType === undefined ? {} : { perType }),
          ...(batchHandlers === undefined ? {} : { batchHandlers }),
          ...(options.maxProcessingMs === undefined ? {} : { maxProcessingMs: options.maxProcessingMs }),
          ...(options.concurrency === undefined ? {} : { concurrency: options.concurrency }),
          ...runnerTiming(options),
          ...(tracing === undefined ? {} : { tracing }),
        });
        track(worker);
        await warnNearMisses(store, worker.types, shardLog);
        const unhandled = Object.entries(schedules ?? {}).filter(([, s]) => worker.types !== null && !worker.types.includes(s.message.type));
        if (unhandled.length > 0) {
          shardLog.warn(
            { schedules: unhandled.map(([scheduleName, s]) => ({ schedule: scheduleName, type: s.message.type })) },
            "schedules whose message type this worker does not take: their messages wait for a service that handles them",
          );
        }
        await worker.start();
        return { worker };
      },
    );
  };
  let shards: RunningShards<WorkerUnit>;
  try {
    shards = await startShardUnits(dbs, up, { logger: options.logger, describe: redactUrl });
  } catch (error) {
    await observed.close();
    throw error;
  }
  return {
    names: dbs.map((_, shard) => shardName(name, shard, dbs)),
    get workers() {
      return shards.units.flatMap((unit) => (unit === undefined ? [] : [unit.worker]));
    },
    get location() {
      return locations.join(", ");
    },
    metricsUrl: observed.metricsUrl,
    tracing: tracing !== undefined,
    async stop(graceMs) {
      await shards.stop(graceMs);
      await observed.close();
      if (tracing !== undefined) await flushRegisteredTracing();
    },
  };
}
