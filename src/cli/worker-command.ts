// `wassal worker`: parses its options and runs a worker until SIGTERM or SIGINT (see
// until-signal.ts): the app's handlers from --handlers, or the payments demo's.

import { Command } from "commander";
import type { LevelWithSilent } from "pino";
import { createLogger } from "../observability/logging.js";
import { startPaymentsWorker } from "../runtime/payments-worker.js";
import { InvalidArgumentError } from "../outbox/errors.js";
import { integer, share as rate, typeList } from "./options.js";
import {
  dbOption,
  outboxTarget,
  type RunnerFlags,
  runnerOptions,
  runnerSettings,
  schemaOption,
  shardOption,
  synchronousOption,
  withOptions,
} from "./shared-options.js";
import { retentionInEffect } from "./retention-options.js";
import { runUntilSignal } from "./until-signal.js";
import type { Worker } from "../outbox/worker.js";

/** --fault-stall-first watches one database: refused with shards. */
function stallFirstDb(options: WorkerOptions, cmd: Command): string {
  const target = outboxTarget(options, cmd);
  if (typeof target !== "string") throw new InvalidArgumentError("--fault-stall-first is a testing aid for one outbox (--db): leave it out with --shard");
  return target;
}

interface WorkerOptions extends RunnerFlags {
  concurrency: number;
  handlers?: string;
  types?: string[];
  maxProcessingMs?: number;
  logLevel: LevelWithSilent;
  providerLatencyMs: number;
  audit?: boolean;
  providerLog?: string;
  labPulse?: boolean;
  faultSeed: number;
  faultHandlerErrorRate?: number;
  faultProviderFailureRate?: number;
  faultProviderTimeoutRate?: number;
  faultLatencySpikeRate?: number;
  faultLatencySpikeMs?: number;
  faultStallFirst?: boolean;
}

export function workerCommand(): Command {
  const command = new Command("worker")
    .description(
      "process messages with your handlers (--handlers) or the payments demo's, until stopped (SIGTERM or SIGINT: graceful; a second signal: at once)",
    )
    .addOption(dbOption())
    .addOption(shardOption())
    .addOption(schemaOption())
    .addOption(synchronousOption())
    .option("--name <name>", "owner name written on this worker's leases (default: host-pid-random)")
    .option("--concurrency <n>", "messages processed at once", integer(1, 1000), 10)
    .option(
      "--handlers <file>",
      "a JavaScript module exporting your handlers by message type (default export or `handlers`: { type: async (message, context) => result }, or a function (context) => that); default: the payments demo's",
    )
    .option(
      "--types <list>",
      "comma-separated message types to claim (default: those the handlers handle; other types stay pending for their own service). A listed type without a handler is marked dead",
      typeList,
    )
    .option(
      "--max-processing-ms <ms>",
      "the longest a handler may run; past it the attempt fails (retried) and the handler's signal is aborted (default: no limit; a handlers module's perType export may set it per type)",
      integer(1, 2_147_483_647),
    );
  return withOptions(
    command,
    runnerOptions({ name: "worker", work: "a handler runs", inFlight: "running handlers", attempts: "attempts before a message is dead" }),
  )
    .option("--provider-latency-ms <ms>", "simulated payment provider latency per call", integer(0, 60_000), 0)
    .option("--audit", "keep the audit trail: every claim, completion, retry, dead message and release with its token")
    .option("--provider-log <file>", "append every simulated provider call to <file> as JSON lines")
    .option("--lab-pulse", "testing aid: the demo also handles the chaos run's every-second schedule (lab.pulse messages), as no-ops")
    .option("--fault-seed <n>", "testing aid: seed of the injected faults below", integer(0), 1)
    .option("--fault-handler-error-rate <share>", "testing aid: share of handler runs that throw", rate)
    .option("--fault-provider-failure-rate <share>", "testing aid: share of provider status checks that fail", rate)
    .option("--fault-provider-timeout-rate <share>", "testing aid: share of provider status checks that time out after the provider answered", rate)
    .option("--fault-latency-spike-rate <share>", "testing aid: share of provider calls slowed by --fault-latency-spike-ms", rate)
    .option("--fault-latency-spike-ms <ms>", "testing aid: length of a latency spike", integer(0, 600_000))
    .option(
      "--fault-stall-first",
      "testing aid: after the first handler run, block this process until another worker has taken that message, so its completion is stale (and refused)",
    )
    .addHelpText(
      "after",
      '\nExamples:\n  wassal worker --db app.db --handlers ./handlers.mjs   # your handlers; other types stay pending\n  wassal payments seed --db app.db --count 100\n  wassal worker --db app.db --concurrency 4      # the demo, in two terminals: they share the work\n  wassal worker --shard a.db --shard b.db --handlers ./handlers.mjs   # a sharded outbox: one worker per shard, in this process\n\nStarted with an IPC channel (child_process.fork, pm2\'s wait_ready), it sends "ready" there once it is claiming.\n\nOpenTelemetry: preload your SDK setup (node --import ./instrumentation.mjs $(which wassal) worker …) and the worker traces each claim, handler and completion, continuing the trace of the request that enqueued the message (see docs/tracing.md).',
    )
    .action(async (options: WorkerOptions, cmd: Command) => {
      if (options.handlers !== undefined) {
        const demoOnly = cmd.options.filter((o) => /^--(provider|fault|lab)-/.test(o.long ?? "") && cmd.getOptionValueSource(o.attributeName()) === "cli");
        if (demoOnly.length > 0) {
          throw new InvalidArgumentError(`${demoOnly.map((o) => o.long).join(", ")} configure the payments demo's handler: leave them out with --handlers`);
        }
      }
      const logger = createLogger(options.logLevel);
      await runUntilSignal(logger, "worker", async () => {
        const running = await startPaymentsWorker({
          ...runnerSettings(options, cmd),
          concurrency: options.concurrency,
          ...(options.handlers === undefined ? {} : { handlersModule: options.handlers }),
          ...(options.types === undefined ? {} : { types: options.types }),
          ...(options.maxProcessingMs === undefined ? {} : { maxProcessingMs: options.maxProcessingMs }),
          providerLatencyMs: options.providerLatencyMs,
          ...(options.audit ? { audit: true } : {}),
          ...(options.providerLog === undefined ? {} : { providerLog: options.providerLog }),
          ...(options.labPulse ? { pulse: true } : {}),
          faults: {
            seed: options.faultSeed,
            ...(options.faultHandlerErrorRate === undefined ? {} : { handlerErrorRate: options.faultHandlerErrorRate }),
            ...(options.faultProviderFailureRate === undefined ? {} : { providerFailureRate: options.faultProviderFailureRate }),
            ...(options.faultProviderTimeoutRate === undefined ? {} : { providerTimeoutRate: options.faultProviderTimeoutRate }),
            ...(options.faultLatencySpikeRate === undefined ? {} : { latencySpikeRate: options.faultLatencySpikeRate }),
            ...(options.faultLatencySpikeMs === undefined ? {} : { latencySpikeMs: options.faultLatencySpikeMs }),
            ...(options.faultStallFirst
              ? { stallFirst: { db: stallFirstDb(options, cmd), ...(options.schema === undefined ? {} : { schema: options.schema }) } }
              : {}),
          },
          logger,
        });
        const [worker] = running.workers as [Worker<unknown>];
        logger.info(
          {
            worker: running.names.length > 1 ? running.names : worker.name,
            db: running.location,
            types: worker.types,
            takes: worker.types ?? "every type",
            concurrency: worker.concurrency,
            leaseMs: worker.leaseMs,
            onComplete: options.onComplete,
            metrics: running.metricsUrl,
            tracing: running.tracing,
            retention: retentionInEffect(options),
          },
          "worker started",
        );
        return {
          stop: () => running.stop(),
          stoppingDetail: () => ({ inFlight: running.workers.reduce((sum, w) => sum + w.inFlight, 0), graceMs: options.graceMs }),
        };
      });
    });
}
