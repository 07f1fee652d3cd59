// `wassal dashboard`: parses its options and serves the dashboard (src/dashboard/) over one
// outbox until SIGTERM or SIGINT.

import { Command, Option } from "commander";
import type { RunningDashboard } from "../dashboard/dashboard.js";
import type { OnComplete } from "../outbox/types.js";
import { createLogger } from "../observability/logging.js";
import { openOutbox, watchSlot } from "../stores/open-outbox.js";
import { integer } from "./options.js";
import { out } from "./output.js";
import { dbOption, onCompleteOption, outboxTarget, schemaOption, shardOption, storeOptions } from "./shared-options.js";
import { InvalidArgumentError } from "../outbox/errors.js";
import { redactUrl } from "../outbox/redact.js";
import { type RunningShards, type ShardUnit, startShardUnits } from "../runtime/shard-units.js";
import type { OpenedOutbox } from "../stores/open-outbox.js";
import { runUntilSignal, type StoppingWords } from "./until-signal.js";

interface DashboardCommandOptions {
  db?: string;
  shard?: string[];
  schema?: string;
  host: string;
  port: number;
  token?: string;
  allowActions: boolean;
  pollMs: number;
  slot?: string;
  onComplete: OnComplete;
}

/** The dashboard holds no lease: stopping closes its connections and the database, nothing more (not a worker's words). */
const DASHBOARD_STOPPING: StoppingWords = {
  stopping: "stopping: closing the dashboard's connections and its database (it holds no messages)",
  interrupted: "second signal: exiting at once",
};

export function dashboardCommand(): Command {
  return new Command("dashboard")
    .description(
      "serve a web page over the outbox (or a sharded one: --shard): counts, throughput, leases per owner, dead messages, search, and each message's ownership timeline (until SIGTERM or SIGINT)",
    )
    .addOption(dbOption())
    .addOption(shardOption())
    .addOption(schemaOption())
    .option("--host <address>", "the address to listen on; any but loopback requires --token", "127.0.0.1")
    .option("--port <port>", "the port to listen on (0 picks a free one)", integer(0, 65_535), 4300)
    .addOption(
      new Option(
        "--token <secret>",
        "require this secret (at least 16 characters) from every request: an Authorization: Bearer header, or a cookie set by opening /?token=<secret>",
      ).env("WASSAL_DASHBOARD_TOKEN"),
    )
    .option(
      "--allow-actions",
      "show and accept actions: redrive a dead message, cancel a pending one, redrive or skip a blocked key's message (default: read-only)",
      false,
    )
    .addOption(
      onCompleteOption(
        "what a cancel from the dashboard does with the row: keep it as cancelled, or delete it, as your workers' --on-complete delete does with finished rows (give the workers' mode)",
      ),
    )
    .option("--poll-ms <ms>", "how often the outbox is read for live updates", integer(100, 60_000), 1000)
    .option(
      "--slot <name>",
      "PostgreSQL: show this replication slot of the WAL relay (wassal relay --from-wal): the write-ahead log it holds, and whether a relay streams from it",
    )
    .addHelpText(
      "after",
      `
The timeline of a message is drawn from the audit trail: run the workers with --audit to record it.
The dashboard migrates the database like a worker does (its tables must exist already).

Examples:
  wassal dashboard --db app.db
  wassal dashboard --db postgres://app@db/app --allow-actions --port 8080
  wassal dashboard --db postgres://app@db/app --slot wassal_outbox
  wassal dashboard --shard postgres://db-a/app --shard postgres://db-b/app   # a sharded outbox: the shards' sums at /, each shard at /shard/<n>/
  WASSAL_DASHBOARD_TOKEN=$(openssl rand -hex 24) wassal dashboard --db app.db --host 0.0.0.0

Exit codes: 0 stopped by a signal, 2 bad input (a port in use, another machine's address, a non-loopback host without a token, a database that cannot be used, no shard of --shard answering), 70 an internal error, 74 the machine failed (disk full, I/O error, out of memory).`,
    )
    .action(async (options: DashboardCommandOptions, cmd: Command) => {
      const target = outboxTarget(options, cmd);
      if (typeof target !== "string" && options.slot !== undefined) {
        throw new InvalidArgumentError("--slot watches one outbox's replication slot: give it with --db, not with --shard");
      }
      // Loaded here, so that other commands do not load the web framework.
      const { checkDashboardAddress, startDashboard, startShardedDashboard } = await import("../dashboard/dashboard.js");
      await checkDashboardAddress(options.host, options.port, options.token); // before the database is opened
      const slot =
        options.slot === undefined || typeof target !== "string"
          ? undefined
          : watchSlot(target, { slot: options.slot, ...(options.schema === undefined ? {} : { schema: options.schema }) });
      const logger = createLogger("info");
      const common = {
        host: options.host,
        port: options.port,
        allowActions: options.allowActions,
        pollMs: options.pollMs,
        ...(options.token === undefined ? {} : { token: options.token }),
      };
      // Audited: a redrive, a cancel or an unblocked key done here is in the audit trail, like any other.
      // A cancel does with the row what the workers' completions do (--on-complete).
      const openOptions = { ...storeOptions(options, "repair"), audit: true, onComplete: options.onComplete };
      const access = `${options.allowActions ? "actions allowed" : "read-only"}${options.token === undefined ? "" : ", token required"}`;
      if (typeof target !== "string") {
        const shards = target;
        // The shards: served at once, each shard's pages from when its database opens. A shard whose
        // server does not answer is shown as such and tried again; none answering is exit 2.
        await runUntilSignal(
          logger,
          "dashboard",
          async () => {
            const running = await startShardedDashboard({ ...common, shards: shards.map((db) => ({ database: redactUrl(db) })) });
            let units: RunningShards<ShardUnit>;
            try {
              units = await startShardUnits(
                shards,
                async (db, shard) => {
                  const outbox = await openOutbox(db, openOptions);
                  try {
                    await running.attach(shard, outbox.store, outbox.location);
                  } catch (error) {
                    await outbox.close();
                    throw error;
                  }
                  return { stop: () => outbox.close() };
                },
                {
                  logger,
                  describe: redactUrl,
                  onLeftOut: (shard, error) => running.leftOut(shard, error instanceof Error ? error.message : String(error)),
                },
              );
            } catch (error) {
              await running.close();
              throw error;
            }
            const waiting = units.units.filter((unit) => unit === undefined).length;
            out(`dashboard on ${running.url} (${shards.length} shards${waiting === 0 ? "" : `, ${waiting} not answering yet`}, ${access})\n`);
            return {
              stop: async () => {
                const stopped = units.stop(0); // no shard is attached from now on
                await running.close();
                await stopped;
              },
              stoppingDetail: () => ({ url: running.url }),
            };
          },
          DASHBOARD_STOPPING,
        );
        return;
      }
      let opened: OpenedOutbox;
      const closeAll = async () => {
        await slot?.close();
        await opened.close();
      };
      try {
        opened = await openOutbox(target, openOptions);
      } catch (error) {
        await slot?.close();
        throw error;
      }
      await runUntilSignal(
        logger,
        "dashboard",
        async () => {
          let running: RunningDashboard;
          try {
            running = await startDashboard({ ...common, store: opened.store, database: opened.location, ...(slot === undefined ? {} : { slot }) });
          } catch (error) {
            await closeAll();
            throw error;
          }
          out(`dashboard on ${running.url} (${access})\n`);
          return {
            stop: async () => {
              await running.close();
              await closeAll();
            },
            stoppingDetail: () => ({ url: running.url }),
          };
        },
        DASHBOARD_STOPPING,
      );
    });
}
