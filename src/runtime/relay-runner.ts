// A ready-to-run relay: checks the broker URL (and a webhook's secret) before anything opens,
// opens the store, starts the publisher, wires logs and metrics, and starts publishing.

import { defaultWorkerName } from "../outbox/worker.js";
import { checkMetricsAddress, relayMetrics, slotMetrics } from "../observability/metrics.js";
import { publisherTarget, redactTarget } from "../relay/open-publisher.js";
import type { Routes } from "../relay/publisher.js";
import { Relay, type RelayOptions, routedTypes } from "../relay/relay.js";
import { WalRelay, type WalRelayFeedEvent } from "../relay/wal-relay.js";
import { InvalidArgumentError } from "../outbox/errors.js";
import { flushRegisteredTracing, registeredOtelTracing } from "../observability/tracing.js";
import { openOutbox } from "../stores/open-outbox.js";
import { backendFor } from "../stores/backends.js";
import { redactUrl } from "../outbox/redact.js";
import { openWalFeed } from "../stores/postgres/wal-feed.js";
import type { Logger } from "../observability/logging.js";
import type { Registry } from "prom-client";
import { warnNearMisses } from "./near-miss.js";
import { type Observed, observe, outboxDbs, type RunnerOptions, runnerTiming, shardLogger, shardName } from "./observed.js";
import { type ShardUnit, shardUnit, startShardUnits } from "./shard-units.js";
import { shardIdPrefix } from "../shards/key-hash.js";

/** The log line of a re-publish the broker recognised (after a relay stopped between its ack and the completion). */
export const RE_PUBLISHED = "re-published; the broker already had it (its duplicate window absorbed it)";

export interface RelayRunnerOptions extends RunnerOptions {
  /** The broker: nats://host:port, or an http(s) URL for webhooks. */
  readonly to: string;
  /** Routes by type; the default destination (for webhooks, the --to URL unless given). */
  readonly routes: Routes;
  readonly webhookSecret?: string;
  readonly idPrefix?: string;
  readonly maxInFlight?: number;
  /**
   * The types to take. Default: every type when there is a default destination; else the routed
   * types (a relay with neither is refused).
   */
  readonly types?: readonly string[];
  /** Keep the audit trail (outbox_audit), as the worker's --audit does. */
  readonly audit?: boolean;
  /**
   * Hear of new messages from a PostgreSQL logical replication slot (the WAL relay) instead of by
   * polling: the slot's name, or true for the default ("<schema>_outbox"). PostgreSQL only.
   */
  readonly fromWal?: string | true;
}

export interface RunningRelay {
  /** The relays' names (the owner on their leases), in shard order: the one, or <name>-shard<n> each. */
  readonly names: readonly string[];
  /** The relays running now, in shard order: with shards, one whose server has not answered yet is missing. */
  readonly relays: readonly Relay<unknown>[];
  /** The replication slot each relay reads (--from-wal), or null when they poll. */
  readonly slot: string | null;
  /** The database's location (its path, or its URL without the password), or the shards' in order. */
  readonly location: string;
  readonly broker: string;
  readonly metricsUrl: string | null;
  /** Whether it traces (an OpenTelemetry SDK registered a tracer provider before it started). */
  readonly tracing: boolean;
  /** Graceful stop: finish or release outstanding publishes, then close everything (and flush the spans). */
  stop(): Promise<void>;
}

/** One shard's relay (or the one relay) with its open store. */
interface RelayUnit extends ShardUnit {
  readonly relay: Relay<unknown>;
}

export async function startRelay(options: RelayRunnerOptions): Promise<RunningRelay> {
  const { logger } = options;
  const dbs = outboxDbs(options.db);
  const broker = redactTarget(options.to);
  const target = publisherTarget(options.to, {
    ...(options.webhookSecret === undefined ? {} : { webhookSecret: options.webhookSecret }),
    // A cluster's publisher (RabbitMQ) names the node it connected to or lost, redacted.
    onStatus: (status, node) => {
      const where = node === undefined ? { broker } : { broker, node };
      if (status === "disconnect") logger.warn(where, "broker connection lost; reconnecting");
      else if (status === "connect" || status === "reconnect") logger.info({ ...where, status }, "broker connected");
      // Anything else is a failure ("connect failed: …"): said as one, never as connected.
      else logger.warn({ broker, status }, "broker unreachable; trying again");
    },
  });
  const defaultDestination = options.routes.default ?? target.defaultDestination;
  const routes: Routes = { ...options.routes, ...(defaultDestination === undefined ? {} : { default: defaultDestination }) };
  // What it takes, checked before anything opens: a type with nowhere to go is refused.
  const routed = Object.keys(routes.byType ?? {});
  const everyType = routes.default !== undefined || routes.ownDestinations === true;
  if (options.types === undefined && !everyType && routed.length === 0) {
    throw new InvalidArgumentError(
      "the relay has nowhere to send messages: give --destination <template> (it then takes every type), --route <type>=<destination> (it takes those types), or both; or --own-destinations if the messages are enqueued with a destination of their own",
    );
  }
  const types = routedTypes(options.types ?? (everyType ? undefined : routed), routes);
  const notPostgres = dbs.find((db) => backendFor(db).name !== "postgres");
  if (options.fromWal !== undefined && notPostgres !== undefined) {
    throw new InvalidArgumentError(
      `--from-wal reads a PostgreSQL replication slot, and ${redactUrl(notPostgres)} is a ${backendFor(notPostgres).name} database: run the relay without --from-wal (it polls)`,
    );
  }
  const name = options.name ?? defaultWorkerName();
  // Traced when an OpenTelemetry SDK registered a tracer provider (preloaded with node --import).
  const tracing = registeredOtelTracing();
  if (options.metricsPort !== undefined) await checkMetricsAddress(options.metricsPort, options.metricsHost); // before the database is opened
  let observed: Observed | undefined;
  let publisher: Awaited<ReturnType<typeof target.open>> | undefined;
  try {
    const running = await observe(dbs.length, options);
    observed = running;
    const count = relayMetrics(running.registry);
    /** Opened once, after the first database (a database that cannot be used is said before the broker is tried). */
    let opening: Promise<Awaited<ReturnType<typeof target.open>>> | undefined;
    const openPublisher = () => {
      opening ??= target.open().then((opened) => {
        publisher = opened;
        return opened;
      });
      return opening;
    };
    const onEvent: RelayOptions<unknown>["onEvent"] = (event) => {
      count(event);
      if (event.type === "broker-unavailable") {
        logger.warn(
          { messageId: event.messageId, retryInMs: event.retryInMs, error: event.error },
          "broker unreachable; holding the message and publishing again",
        );
      } else if (event.duplicate) {
        logger.warn({ messageId: event.messageId, destination: event.destination }, RE_PUBLISHED);
      } else {
        logger.debug({ messageId: event.messageId, destination: event.destination }, "published");
      }
    };
    /** The slot the WAL relays read (the same name on each shard), once one is made. */
    let slot: string | null = null;
    /** Each shard's location: the opened store's once it is open (a SQLite path made absolute). */
    const locations = dbs.map((db) => redactUrl(db));
    const up = async (db: string, shard: number): Promise<RelayUnit> => {
      const shardLog = shardLogger(logger, shard, dbs);
      const outbox = await openOutbox(db, { ...options, mustExist: true, applicationName: `wassal-relay-${shardName(name, shard, dbs)}`.slice(0, 63) });
      locations[shard] = outbox.location;
      return shardUnit(
        outbox,
        () => running.attach(shard, outbox.store),
        async (track) => {
          // Each shard numbers its messages on its own: its ids at the broker carry the shard.
          const idPrefix = dbs.length > 1 ? shardIdPrefix(shard, options.idPrefix) : options.idPrefix;
          const relayOptions: RelayOptions<unknown> = {
            store: outbox.store,
            publisher: await openPublisher(),
            routes,
            ...(types === undefined ? {} : { types }),
            name: shardName(name, shard, dbs),
            ...(idPrefix === undefined ? {} : { idPrefix }),
            ...(options.maxInFlight === undefined ? {} : { maxInFlight: options.maxInFlight }),
            ...runnerTiming(options),
            ...(tracing === undefined ? {} : { tracing }),
            onEvent,
          };
          let relay: Relay<unknown>;
          if (options.fromWal !== undefined) {
            const feed = openWalFeed({
              url: db,
              ...(options.schema === undefined ? {} : { schema: options.schema }),
              ...(options.fromWal === true ? {} : { slot: options.fromWal }),
            });
            /** Resolves at the first "slot-busy": the relay then waits for its slot as a standby. */
            let slotBusy!: () => void;
            const standby = new Promise<"standby">((resolve) => {
              slotBusy = () => resolve("standby");
            });
            const wal = new WalRelay({
              ...relayOptions,
              feed,
              onFeedEvent: (event) => {
                logFeedEvent(shardLog, event);
                if (event.type === "slot-busy") slotBusy();
              },
            });
            track(wal);
            relay = wal.relay;
            slot = feed.slot;
            slotMetrics(running.registries[shard] as Registry, () => feed.lag());
            await warnNearMisses(outbox.store, relay.types, shardLog);
            await startWal(wal, standby, shardLog);
          } else {
            relay = new Relay(relayOptions);
            track(relay);
            await warnNearMisses(outbox.store, relay.types, shardLog);
            await relay.start();
          }
          return { relay };
        },
      );
    };

    const shards = await startShardUnits(dbs, up, { logger, describe: redactUrl });
    const opened = await openPublisher();
    return {
      names: dbs.map((_, shard) => shardName(name, shard, dbs)),
      get relays() {
        return shards.units.flatMap((unit) => (unit === undefined ? [] : [unit.relay]));
      },
      get slot() {
        return slot;
      },
      get location() {
        return locations.join(", ");
      },
      broker: opened.description,
      metricsUrl: running.metricsUrl,
      tracing: tracing !== undefined,
      async stop() {
        await shards.stop();
        await opened.close();
        await running.close();
        if (tracing !== undefined) await flushRegisteredTracing();
      },
    };
  } catch (error) {
    await publisher?.close();
    await observed?.close();
    throw error;
  }
}

/**
 * Starts the WAL relay: resolves once it streams from its slot, or once it has found the slot held
 * by another relay (it then waits for it as a standby, logging, and takes over when it is free).
 * Rejects when the server cannot stream (logical replication off): bad input, said at once.
 */
async function startWal(wal: WalRelay<unknown>, standby: Promise<"standby">, logger: Logger): Promise<void> {
  const started = wal.start();
  if ((await Promise.race([started.then(() => "streaming" as const), standby])) === "standby") {
    started.catch((error: unknown) => logger.error({ error: error instanceof Error ? error.message : String(error) }, "the WAL relay could not take its slot"));
  }
}

function logFeedEvent(logger: Logger, event: WalRelayFeedEvent): void {
  switch (event.type) {
    case "streaming":
      logger.info({ slot: event.slot, from: event.from }, "reading new messages from the replication slot");
      break;
    case "slot-created":
      logger.info({ slot: event.slot }, "replication slot created; claiming what was inserted before it from the table");
      break;
    case "slot-busy":
      logger.warn(
        { slot: event.slot, retryInMs: event.retryInMs, detail: event.detail },
        "another relay streams from the replication slot; waiting for it as a standby",
      );
      break;
    case "disconnected":
      logger.warn({ slot: event.slot, retryInMs: event.retryInMs, error: event.error }, "replication stream lost; connecting again");
      break;
  }
}
