// `wassal dashboard`: parses its options and serves the dashboard (src/dashboard/) over one
// outbox until SIGTERM or SIGINT.

import { Command, Option } from "commander";
import type { RunningDashboard } from "../dashboard/dashboard.js";
import { createLogger } from "../observability/logging.js";
import { openOutbox, watchSlot } from "../stores/open-outbox.js";
import { integer } from "./options.js";
import { out } from "./output.js";
import { dbOption, schemaOption, storeOptions } from "./shared-options.js";
import { runUntilSignal, type StoppingWords } from "./until-signal.js";

interface DashboardCommandOptions {
  db: string;
  schema?: string;
  host: string;
  port: number;
  token?: string;
  allowActions: boolean;
  pollMs: number;
  slot?: string;
}

/** The dashboard holds no lease: stopping closes its connections and the database, nothing more (not a worker's words). */
const DASHBOARD_STOPPING: StoppingWords = {
  stopping: "stopping: closing the dashboard's connections and its database (it holds no messages)",
  interrupted: "second signal: exiting at once",
};

export function dashboardCommand(): Command {
  return new Command("dashboard")
    .description(
      "serve a web page over the outbox: counts, throughput, leases per owner, dead messages, search, and each message's ownership timeline (until SIGTERM or SIGINT)",
    )
    .addOption(dbOption().makeOptionMandatory())
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
  WASSAL_DASHBOARD_TOKEN=$(openssl rand -hex 24) wassal dashboard --db app.db --host 0.0.0.0

Exit codes: 0 stopped by a signal, 2 bad input (a port in use, another machine's address, a non-loopback host without a token, a database that cannot be used), 70 an internal error, 74 the machine failed (disk full, I/O error, out of memory).`,
    )
    .action(async (options: DashboardCommandOptions) => {
      // Loaded here, so that other commands do not load the web framework.
      const { checkDashboardAddress, startDashboard } = await import("../dashboard/dashboard.js");
      await checkDashboardAddress(options.host, options.port, options.token); // before the database is opened
      const slot =
        options.slot === undefined
          ? undefined
          : watchSlot(options.db, { slot: options.slot, ...(options.schema === undefined ? {} : { schema: options.schema }) });
      const logger = createLogger("info");
      // Audited: a redrive, a cancel or an unblocked key done here is in the audit trail, like any other.
      const outbox = await openOutbox(options.db, { ...storeOptions(options, "repair"), audit: true });
      await runUntilSignal(
        logger,
        "dashboard",
        async () => {
          let running: RunningDashboard;
          try {
            running = await startDashboard({
              store: outbox.store,
              database: outbox.location,
              host: options.host,
              port: options.port,
              allowActions: options.allowActions,
              pollMs: options.pollMs,
              ...(options.token === undefined ? {} : { token: options.token }),
              ...(slot === undefined ? {} : { slot }),
            });
          } catch (error) {
            await slot?.close();
            await outbox.close();
            throw error;
          }
          out(
            `dashboard on ${running.url} (${options.allowActions ? "actions allowed" : "read-only"}${options.token === undefined ? "" : ", token required"})\n`,
          );
          return {
            stop: async () => {
              await running.close();
              await slot?.close();
              await outbox.close();
            },
            stoppingDetail: () => ({ url: running.url }),
          };
        },
        DASHBOARD_STOPPING,
      );
    });
}
