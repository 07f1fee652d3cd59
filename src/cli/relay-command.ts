// `wassal relay`: parses its options and runs a relay from the outbox to a broker until SIGTERM or
// SIGINT (see until-signal.ts).

import { InvalidArgumentError as CommanderInvalidArgument, Command, Option } from "commander";
import type { LevelWithSilent } from "pino";
import { createLogger } from "../observability/logging.js";
import { PUBLISHER_SCHEMES } from "../relay/open-publisher.js";
import { startRelay } from "../runtime/relay-runner.js";
import { integer, typeList } from "./options.js";
import { dbOption, type RunnerFlags, runnerOptions, runnerSettings, schemaOption, shardOption, synchronousOption, withOptions } from "./shared-options.js";
import { retentionInEffect } from "./retention-options.js";
import { runUntilSignal } from "./until-signal.js";
import type { Relay } from "../relay/relay.js";

interface RelayCommandOptions extends RunnerFlags {
  to: string;
  destination?: string;
  route: Record<string, string>;
  types?: string[];
  ownDestinations?: boolean;
  webhookSecret?: string;
  idPrefix?: string;
  maxInFlight: number;
  audit?: boolean;
  fromWal?: string | true;
  logLevel: LevelWithSilent;
}

/** Collects repeated --route <type>=<destination> into one map. */
function route(value: string, previous: Record<string, string>): Record<string, string> {
  const at = value.indexOf("=");
  if (at < 1 || at === value.length - 1) throw new CommanderInvalidArgument("expected <type>=<destination>, e.g. order.paid=orders.paid");
  const type = value.slice(0, at);
  if (Object.hasOwn(previous, type)) throw new CommanderInvalidArgument(`type ${JSON.stringify(type)} is routed twice`);
  return { ...previous, [type]: value.slice(at + 1) };
}

export function relayCommand(): Command {
  const schemes = Object.entries(PUBLISHER_SCHEMES)
    .map(([scheme, what]) => `  ${`${scheme}//`.padEnd(10)} ${what}`)
    .join("\n");
  const command = new Command("relay")
    .description("publish the outbox's messages to a broker, completing each once the broker acknowledged it (until SIGTERM or SIGINT)")
    .addOption(dbOption())
    .addOption(shardOption())
    .addOption(schemaOption())
    .addOption(synchronousOption())
    .requiredOption(
      "--to <url>",
      "the broker: nats://host:port (JetStream), amqp://user:pass@host:5672 (RabbitMQ), redis://host:6379 (Redis Streams), or an http(s) URL for webhooks; a NATS or RabbitMQ cluster's nodes separated by commas (the list of schemes below)",
    )
    .option(
      "--destination <template>",
      "where a message goes when it has no destination of its own and no --route: a subject, or a URL; {type} stands for its type (default for webhooks: the --to URL)",
    )
    .option("--route <type=destination>", "send messages of <type> to <destination> (repeatable)", route, {})
    .option(
      "--own-destinations",
      "the messages are enqueued with a destination of their own: the types taken need no route, and without --types the relay takes every type (one without a destination and a route is then dead)",
    )
    .option(
      "--types <list>",
      "comma-separated message types to take (default: every type with --destination, else the --route types); each needs a route. Leave your workers' types out: a type two processes take is split between them",
      typeList,
    )
    .addOption(new Option("--webhook-secret <whsec_…>", "Standard Webhooks signing secret, required for http(s)").env("WASSAL_WEBHOOK_SECRET"))
    .option(
      "--id-prefix <text>",
      "put in front of each message id the broker deduplicates on (give each outbox sharing a broker its own; with --shard, each shard's ids also get shard<n>- after it)",
    )
    .option("--name <name>", "owner name written on the relay's leases (default: host-pid-random)")
    .option("--max-in-flight <n>", "messages published and awaiting the broker's acknowledgement at once", integer(1, 1000), 256)
    .option(
      "--audit",
      "keep the audit trail (every claim, completion, retry, dead message and release with its token), so the dashboard draws relayed messages' timelines",
    )
    .option(
      "--from-wal [slot]",
      "PostgreSQL with wal_level=logical: hear of new messages from a logical replication slot (default <schema>_outbox, made when missing) instead of by polling; one relay streams from a slot, others wait as standbys",
    );
  return withOptions(
    command,
    runnerOptions({
      name: "relay",
      work: "a publish is outstanding",
      inFlight: "outstanding publishes",
      attempts: "attempts before a message the broker keeps failing is dead (an unreachable broker spends none)",
    }),
  )
    .addHelpText(
      "after",
      `\nBrokers (--to):\n${schemes}\n\nWhere a message goes: its own destination (set at enqueue), else its type's --route, else --destination.\n\nWhat it takes: --types; else every type when there is a --destination (for webhooks, the --to URL) or --own-destinations; else the --route types. It prints them at start ("takes"). A relay and a worker on one outbox must not take the same type: each message goes to one of them. To send a message to both, enqueue it to named subscribers (subscriptions() in the library) and give each its copies' types (order.placed@relay).\n\nExamples:\n  wassal relay --db app.db --to nats://127.0.0.1:4222 --destination 'events.{type}'\n  wassal relay --db postgres://app@db/app --from-wal --to nats://127.0.0.1:4222 --destination 'events.{type}'\n  wassal relay --shard postgres://db-a/app --shard postgres://db-b/app --to nats://127.0.0.1:4222 --destination 'events.{type}'\n  WASSAL_WEBHOOK_SECRET=whsec_… wassal relay --db app.db --to https://example.com/hooks/{type}\n\nExit codes: 0 stopped by a signal, 2 bad input (an unknown URL scheme, a missing or short webhook secret, a database that cannot be used, --from-wal on a server without logical replication, no shard of --shard answering), 70 an internal error, 74 the machine failed (disk full, I/O error, out of memory).`,
    )
    .action(async (options: RelayCommandOptions, cmd: Command) => {
      const logger = createLogger(options.logLevel);
      await runUntilSignal(logger, "relay", async () => {
        const running = await startRelay({
          ...runnerSettings(options, cmd),
          to: options.to,
          routes: {
            byType: options.route,
            ...(options.destination === undefined ? {} : { default: options.destination }),
            ...(options.ownDestinations ? { ownDestinations: true } : {}),
          },
          ...(options.types === undefined ? {} : { types: options.types }),
          ...(options.webhookSecret === undefined ? {} : { webhookSecret: options.webhookSecret }),
          ...(options.idPrefix === undefined ? {} : { idPrefix: options.idPrefix }),
          maxInFlight: options.maxInFlight,
          ...(options.audit ? { audit: true } : {}),
          ...(options.fromWal === undefined ? {} : { fromWal: options.fromWal }),
          logger,
        });
        const [relay] = running.relays as [Relay<unknown>];
        logger.info(
          {
            relay: running.names.length > 1 ? running.names : relay.name,
            db: running.location,
            broker: running.broker,
            takes: relay.types ?? "every type",
            maxInFlight: relay.worker.concurrency,
            onComplete: options.onComplete,
            metrics: running.metricsUrl,
            tracing: running.tracing,
            retention: retentionInEffect(options),
            ...(running.slot === null ? {} : { fromWal: running.slot }),
          },
          "relay started",
        );
        return {
          stop: () => running.stop(),
          stoppingDetail: () => ({
            inFlight: running.relays.reduce((sum, r) => sum + r.worker.inFlight, 0),
            graceMs: options.graceMs,
            published: running.relays.reduce((sum, r) => sum + r.stats.published, 0),
          }),
        };
      });
    });
}
