// `wassal chaos`: run workers under faults and check the invariants afterwards (`run`), or check
// a database someone else ran (`check`).

import { Command, InvalidArgumentError as CommanderInvalidArgument, Option } from "commander";
import { checkInvariants, renderInvariants } from "../chaos/invariant-checker.js";
import {
  CHAOS_BROKERS,
  type ChaosBrokerName,
  RELAY_CHAOS_DEFAULTS,
  RELAY_CHAOS_LIMITS,
  RelayChaosInterruptedError,
  relayChaosFigureRows,
  renderRelayChaos,
  renderShardTimeline,
  runRelayChaos,
} from "../chaos/relay-chaos.js";
import { CHAOS_DEFAULTS, ChaosInterruptedError, runChaos } from "../chaos/run-chaos.js";
import { readProviderLog } from "../payments/provider-simulator.js";
import { withLabOutbox } from "../lab/stores/open-lab-outbox.js";
import { storeShapes } from "../lab/stores/places.js";
import { EXIT } from "./exit-codes.js";
import { integer, rateOption, share } from "./options.js";
import { err, out, printJson } from "./output.js";
import { dbOption, onCompleteOption, schemaOption, storeOptions } from "./shared-options.js";
import type { OnComplete, Rate } from "../outbox/types.js";
import { textTable } from "../lab/text-table.js";

interface RunOptions {
  store: string;
  workers: number;
  payments: number;
  rate: number;
  seed: number;
  leaseMs: number;
  killEvery: number;
  pauseEvery: number;
  handlerErrors: number;
  providerFailures: number;
  providerTimeouts: number;
  latencySpikes: number;
  latencySpikeMs: number;
  killConnectionsEvery: number;
  pgRestart?: boolean;
  sqliteLockEvery: number;
  sqliteLockMs: number;
  timeout?: number;
  keys: number;
  onComplete: OnComplete;
  stallFirst?: boolean;
  limitConcurrency: number;
  limitRate?: Rate;
  cancelEvery: number;
  keep?: boolean;
  json?: boolean;
}

/**
 * Runs a chaos run that stops on its signal. The first SIGINT or SIGTERM stops the run, which
 * stops its processes and removes what it started; a second exits at once. Undefined when
 * interrupted (the exit code is then 1: the run did not finish, nothing was judged).
 */
async function interruptible<T>(run: (signal: AbortSignal) => Promise<T>): Promise<T | undefined> {
  const interrupt = new AbortController();
  const onSignal = (signal: NodeJS.Signals) => {
    if (interrupt.signal.aborted) process.exit(EXIT.interrupted);
    err(`chaos: ${signal}: stopping the run and removing what it started (again to exit at once)\n`);
    interrupt.abort();
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
  try {
    return await run(interrupt.signal);
  } catch (error) {
    if (!(error instanceof RelayChaosInterruptedError || error instanceof ChaosInterruptedError)) throw error;
    err(`wassal: ${error.message}\n`);
    process.exitCode = EXIT.failed;
    return undefined;
  } finally {
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
  }
}

export function chaosCommand(): Command {
  const chaos = new Command("chaos").description("prove the outbox under faults: workers killed, paused, cut off, failing; then check every invariant");
  const d = CHAOS_DEFAULTS;

  chaos.addCommand(
    new Command("run")
      .description("start workers against one store, create payments at a steady rate, inject faults, then check the invariants (exit 0 only if all hold)")
      .addOption(new Option("--store <sqlite|url>", `${storeShapes()}: the run's data in a temporary file, schema or database`).default("sqlite"))
      .option("--workers <n>", "worker processes", integer(1, 64), d.workers)
      .option("--payments <n>", "payments to create", integer(1, 10_000_000), d.payments)
      .option("--rate <n>", "payments created per second", integer(1, 1_000_000), d.rate)
      .option("--seed <n>", "seed of every random choice (replay a run with it)", integer(0), d.seed)
      .option("--lease-ms <ms>", "workers' lease", integer(100, 600_000), d.leaseMs)
      .option("--kill-every <ms>", "SIGKILL a random worker (and restart it) this often; 0: never", integer(0), d.killEveryMs)
      .option("--pause-every <ms>", "SIGSTOP a random worker for 1.5 leases, then SIGCONT, this often; 0: never", integer(0), d.pauseEveryMs)
      .option("--handler-errors <share>", "share of handler runs that throw", share, d.handlerErrorRate)
      .option("--provider-failures <share>", "share of provider status checks that fail", share, d.providerFailureRate)
      .option("--provider-timeouts <share>", "share of provider status checks that time out after the provider answered", share, d.providerTimeoutRate)
      .option("--latency-spikes <share>", "share of provider calls slowed by --latency-spike-ms", share, d.latencySpikeRate)
      .option("--latency-spike-ms <ms>", "length of a latency spike", integer(0), d.latencySpikeMs)
      .option(
        "--kill-connections-every <ms>",
        "a server store: end the workers' connections this often (PostgreSQL: pg_terminate_backend on their application name; MariaDB: KILL on every connection to the run's database); 0: never",
        integer(0),
        d.killConnectionsEveryMs,
      )
      .addOption(
        // The flag's old name, kept only to say its new one.
        new Option("--pg-terminate-every <ms>").hideHelp().argParser(() => {
          throw new CommanderInvalidArgument("it was renamed: use --kill-connections-every <ms> (it applies to every server store)");
        }),
      )
      .option("--pg-restart", "PostgreSQL: restart the server once, mid-run (needs root and a local cluster; disturbs anything else using it)")
      .option("--sqlite-lock-every <ms>", "SQLite: a competing writer holds the write lock this often; 0: never", integer(0), d.sqliteLockEveryMs)
      .option("--sqlite-lock-ms <ms>", "SQLite: how long the competing writer holds it", integer(0), d.sqliteLockMs)
      .option("--timeout <ms>", "give up waiting for the workers after this long (default: 30 s + the creation time + 100 ms per payment)", integer(1000))
      .option(
        "--keys <n>",
        "spread the payments over n ordering keys, so each key's reconciliations must run one at a time, in order; 0: no keys",
        integer(0, 1_000_000),
        d.keys,
      )
      .addOption(
        onCompleteOption(
          "what the workers' completions do with a message's row (their --on-complete): keep it as processed, or delete it; in delete mode the checker takes each completed message's audited completion as its record",
        ).default(d.onComplete),
      )
      .option(
        "--limit-concurrency <n>",
        "limit the payments' message type to n leases at once across the workers (wassal limit set … --concurrency), judged over the audit trail; 0: no limit",
        integer(0, 100_000),
        0,
      )
      .option(
        "--limit-rate <count/interval>",
        "limit the payments' message type to count claims in any interval, e.g. 300/1s (wassal limit set … --rate), judged over the audit trail",
        rateOption,
      )
      .option(
        "--cancel-every <ms>",
        "cancel a random payment message this often, running ones included (store.cancel with running: true: the run is aborted, its result refused; a cancelled key holder hands its key on); 0: never",
        integer(0),
        0,
      )
      .option(
        "--stall-first",
        "the first worker starts alone, takes the first payment and blocks after its handler run until another worker (started then) has taken that message: a stale completion, certainly attempted, that must be refused",
      )
      .option("--keep", "keep the database, the provider log and the workers' logs (their folder is printed)")
      .option("--json", "print one JSON object instead of the table")
      .action(async (o: RunOptions) => {
        const result = await interruptible((signal) =>
          runChaos({
            signal,
            store: o.store,
            workers: o.workers,
            payments: o.payments,
            rate: o.rate,
            seed: o.seed,
            leaseMs: o.leaseMs,
            killEveryMs: o.killEvery,
            pauseEveryMs: o.pauseEvery,
            handlerErrorRate: o.handlerErrors,
            providerFailureRate: o.providerFailures,
            providerTimeoutRate: o.providerTimeouts,
            latencySpikeRate: o.latencySpikes,
            latencySpikeMs: o.latencySpikeMs,
            killConnectionsEveryMs: o.killConnectionsEvery,
            pgRestart: o.pgRestart ?? false,
            sqliteLockEveryMs: o.sqliteLockEvery,
            sqliteLockMs: o.sqliteLockMs,
            ...(o.timeout === undefined ? {} : { timeoutMs: o.timeout }),
            keys: o.keys,
            onComplete: o.onComplete,
            ...(o.stallFirst ? { stallFirst: true } : {}),
            limitConcurrency: o.limitConcurrency,
            cancelEveryMs: o.cancelEvery,
            ...(o.limitRate === undefined ? {} : { limitRate: o.limitRate }),
            keep: o.keep ?? false,
            ...(o.json ? {} : { onProgress: (line: string) => err(`chaos: ${line}\n`) }),
          }),
        );
        if (result === undefined) return;
        if (o.json) {
          printJson(result);
        } else {
          const f = result.figures;
          out(
            [
              `chaos run on ${result.location}`,
              `settings: ${Object.entries(result.settings)
                .map(([k, v]) => `${k}=${v}`)
                .join(" ")}`,
              "",
              textTable(
                ["figure", "value"],
                Object.entries(f).map(([k, v]) => [k, v]),
              ),
              "",
              renderInvariants(result.report),
              result.workDir ? `kept: ${result.workDir}` : "",
              result.passed
                ? "PASSED: every invariant held"
                : result.timedOut
                  ? `TIMED OUT with ${result.unfinished} messages unfinished (late, not lost)${result.report.rows.some((r) => !r.ok && !r.name.startsWith("messages unfinished when the run timed out")) ? "; and an invariant was broken (see above)" : ""}`
                  : "FAILED: an invariant was broken (see above)",
              "",
            ].join("\n"),
          );
        }
        process.exitCode = result.passed ? EXIT.ok : EXIT.failed;
      }),
  );

  const r = RELAY_CHAOS_DEFAULTS;
  const l = RELAY_CHAOS_LIMITS;
  chaos.addCommand(
    new Command("relay")
      .description(
        "end to end: enqueue at a steady rate, relays publish to a broker of the run's own (NATS JetStream, RabbitMQ or Redis Streams; NATS and RabbitMQ also as a 3-node cluster), consumer processes apply each message through the inbox; kill and pause relays and consumers, restart the broker; then check every message had exactly one effect, in each key's order",
      )
      .addOption(new Option("--store <sqlite|url>", `${storeShapes()}: the run's data in temporary files, schemas or databases`).default("sqlite"))
      .addOption(
        new Option(
          "--broker <name>",
          "the broker the run starts for itself: nats (a nats-server with JetStream), nats-cluster (three nats-servers as one cluster, the stream replicated on all three; the mid-run fault SIGKILLs the stream leader's node), rabbitmq (a RabbitMQ node), rabbitmq-cluster (three RabbitMQ nodes as one cluster, a quorum queue on all three; the mid-run fault SIGKILLs the queue leader's node) or redis (a redis-server with an append-only file; Redis Streams)",
        )
          .choices(CHAOS_BROKERS)
          .default(r.broker),
      )
      .option("--relays <n>", "relay processes", integer(...l.relays), r.relays)
      .option("--messages <n>", "messages to enqueue", integer(1, 10_000_000), r.messages)
      .option("--rate <n>", "messages enqueued per second", integer(1, 1_000_000), r.rate)
      .option("--keys <n>", "ordering keys the messages are spread over; 0: none", integer(0, 1_000_000), r.keys)
      .option("--seed <n>", "seed of every random choice", integer(0), r.seed)
      .option("--lease-ms <ms>", "the relays' lease", integer(...l.leaseMs), r.leaseMs)
      .option("--kill-every <ms>", "SIGKILL a random relay (and restart it) this often; 0: never", integer(0), r.killEveryMs)
      .option("--pause-every <ms>", "SIGSTOP a random relay for 1.5 leases, then SIGCONT, this often; 0: never", integer(0), r.pauseEveryMs)
      .option(
        "--no-broker-restart",
        "do not fault the broker mid-run (stop and restart it; with a cluster, SIGKILL the node leading the stream or queue and restart it)",
      )
      .option(
        "--consumers <n>",
        "consumer processes sharing the broker's durable consumer (NATS), queue (RabbitMQ) or consumer group (Redis Streams)",
        integer(...l.consumers),
        r.consumers,
      )
      .option("--consumer-kill-every <ms>", "SIGKILL a random consumer process (and restart it) this often; 0: never", integer(0), r.consumerKillEveryMs)
      .option(
        "--consumer-pause-every <ms>",
        "SIGSTOP a random consumer process for 1.5 ack waits, then SIGCONT, this often; 0: never",
        integer(0),
        r.consumerPauseEveryMs,
      )
      .option(
        "--ack-wait-ms <ms>",
        "NATS: how long the durable consumer waits for an ack before it redelivers; every broker: a consumer process is faulted only once it has been ready this long, and paused again only once it has run this long since its last pause",
        integer(...l.ackWaitMs),
        r.ackWaitMs,
      )
      .option(
        "--from-wal",
        "the relays read a replication slot of the run's own (wassal relay --from-wal): one streams, the others wait as standbys; without --store the run starts a private PostgreSQL server with wal_level = logical for its data (initdb, removed at the end)",
      )
      .option(
        "--shards <n>",
        "a sharded outbox (wassal/shards) of n shards, each a private PostgreSQL server of the run's own; each relay works every shard (wassal relay --shard …); one shard is crashed (pg_ctl stop -m immediate) mid-run and started again, and the report shows each shard's completions per second",
        integer(...l.shards),
      )
      .option("--shard-down-ms <ms>", "with --shards: how long the crashed shard stays down", integer(...l.shardDownMs), 3000)
      .option("--timeout <ms>", "give up waiting after this long (default: 30 s + the enqueue time + 20 ms per message + the shard's downtime)", integer(1000))
      .option("--keep", "keep the databases and the relays' and consumers' logs (their folder is printed)")
      .option("--json", "print one JSON object instead of the table")
      .addHelpText(
        "after",
        [
          "",
          "Each consumer process (node dist/chaos/consumer-process.js) opens the consumer's database",
          'and consumes; it reports "ready" and its counters to the run over IPC. The run counts',
          "the effects in the consumer's database, so a killed consumer's lost counters change no",
          "check. Faults hit only a relay ready for a lease, and a consumer ready for an ack wait;",
          "a process woken from a pause is paused again only after that long (it may be killed at",
          "once). SIGINT or SIGTERM stops the run and removes what it started (exit 1); a second",
          "one exits at once.",
        ].join("\n"),
      )
      .action(
        async (o: {
          store: string;
          broker: ChaosBrokerName;
          relays: number;
          messages: number;
          rate: number;
          keys: number;
          seed: number;
          leaseMs: number;
          killEvery: number;
          pauseEvery: number;
          brokerRestart: boolean;
          consumers: number;
          consumerKillEvery: number;
          consumerPauseEvery: number;
          ackWaitMs: number;
          fromWal?: boolean;
          shards?: number;
          shardDownMs: number;
          timeout?: number;
          keep?: boolean;
          json?: boolean;
        }) => {
          const result = await interruptible((signal) =>
            runRelayChaos({
              ...(o.fromWal ? { fromWal: true } : {}),
              ...(o.shards === undefined ? {} : { shards: o.shards, shardDownMs: o.shardDownMs }),
              signal,
              store: o.store,
              broker: o.broker,
              relays: o.relays,
              messages: o.messages,
              rate: o.rate,
              keys: o.keys,
              seed: o.seed,
              leaseMs: o.leaseMs,
              killEveryMs: o.killEvery,
              pauseEveryMs: o.pauseEvery,
              brokerRestart: o.brokerRestart,
              consumers: o.consumers,
              consumerKillEveryMs: o.consumerKillEvery,
              consumerPauseEveryMs: o.consumerPauseEvery,
              ackWaitMs: o.ackWaitMs,
              ...(o.timeout === undefined ? {} : { timeoutMs: o.timeout }),
              keep: o.keep ?? false,
              ...(o.json ? {} : { onProgress: (line: string) => err(`chaos: ${line}\n`) }),
            }),
          );
          if (result === undefined) return;
          if (o.json) printJson(result);
          else
            out(
              [
                `relay chaos run on ${result.location}`,
                `settings: ${Object.entries(result.settings)
                  .map(([k, v]) => `${k}=${v}`)
                  .join(" ")}`,
                "",
                textTable(["figure", "value"], relayChaosFigureRows(result.figures)),
                "",
                renderRelayChaos(result),
                ...(result.shards === null ? [] : [renderShardTimeline(result.shards), ""]),
                result.workDir ? `kept: ${result.workDir}` : "",
                result.passed
                  ? "PASSED: every message had exactly one effect, in each key's order"
                  : result.timedOut
                    ? "TIMED OUT (see above)"
                    : "FAILED (see above)",
                "",
              ].join("\n"),
            );
          process.exitCode = result.passed ? EXIT.ok : EXIT.failed;
        },
      ),
  );

  chaos.addCommand(
    new Command("check")
      .description(
        "check the invariants of a database a chaos run (or anyone) left behind; needs the audit trail (--audit workers) and the provider log; a message whose row its completion deleted (--on-complete delete) is judged by its audited completion",
      )
      .addOption(dbOption().makeOptionMandatory())
      .addOption(schemaOption())
      .requiredOption("--provider-log <file>", "the provider log the workers wrote (--provider-log)")
      .option("--json", "print JSON")
      .action(async (o: { db: string; schema?: string; providerLog: string; json?: boolean }) => {
        await withLabOutbox(o.db, storeOptions(o, "repair"), async (outbox) => {
          const [messages, audit, payments] = await Promise.all([outbox.store.listMessages(), outbox.store.auditTrail(), outbox.payments.list()]);
          const report = checkInvariants({ messages, audit, payments, providerLog: readProviderLog(o.providerLog) });
          if (o.json) printJson(report);
          else out(`${renderInvariants(report)}${report.passed ? "PASSED" : "FAILED"}\n`);
          process.exitCode = report.passed ? EXIT.ok : EXIT.failed;
        });
      }),
  );
  return chaos;
}
