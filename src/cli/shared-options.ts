// Options several commands share.

import { type Command, Option } from "commander";
import { resolve } from "node:path";
import { InvalidArgumentError } from "../outbox/errors.js";
import { redactUrl } from "../outbox/redact.js";
import { LOG_LEVELS } from "../observability/logging.js";
import { ON_COMPLETE_MODES, type OnComplete } from "../outbox/types.js";
import { ownerTiming } from "../outbox/worker.js";
import { BACKENDS, type OpenOutboxOptions } from "../stores/open-outbox.js";
import { integer, oneOf } from "./options.js";
import { type RetentionFlags, retentionOptions, retentionSettings } from "./retention-options.js";

/**
 * How a command uses the database: "read" only looks (opened read-only, never migrated), "repair"
 * changes an existing Wassal database, "write" may create one.
 */
export type Access = "read" | "repair" | "write";

/** The open options every command builds from its access and its --schema and --synchronous. */
export function storeOptions(options: { readonly schema?: string; readonly synchronous?: "FULL" | "NORMAL" }, access: Access): OpenOutboxOptions {
  return {
    mustExist: access !== "write",
    readOnly: access === "read",
    ...(options.schema === undefined ? {} : { schema: options.schema }),
    ...(options.synchronous === undefined ? {} : { synchronous: options.synchronous }),
  };
}

/** What an admin sub-command (outbox, inbox, schedule) takes: one outbox, its schema, and --json. */
export interface AdminFlags {
  db: string;
  schema?: string;
  json?: boolean;
}

/** Adds an admin sub-command's flags: --db (required), --schema and --json. */
export function adminOptions(command: Command): Command {
  return command.addOption(dbOption().makeOptionMandatory()).addOption(schemaOption()).option("--json", "print JSON");
}

export function dbOption(): Option {
  return new Option("--db <url-or-path>", `the database: ${BACKENDS.map((b) => `${b.shape} (${b.name})`).join(", ")}`).env("WASSAL_DATABASE_URL");
}

/** --shard, repeatable: the shards of a sharded outbox (wassal/shards), in shard order, instead of --db. */
export function shardOption(): Option {
  return new Option("--shard <url-or-path>", "a shard of a sharded outbox (wassal/shards), given once per shard, in shard order, instead of --db").argParser(
    (value: string, previous: string[] | undefined) => [...(previous ?? []), value],
  );
}

/** The server ports a URL may leave out, by scheme. */
const DEFAULT_PORTS: Readonly<Record<string, string>> = { "postgres:": "5432", "postgresql:": "5432", "mysql:": "3306", "mariadb:": "3306" };

/**
 * Where a --db or --shard value points, so that two spellings of one database compare equal: a
 * file path resolved against the working directory (./a.db and a.db), a URL with its scheme's
 * synonyms, its host's case and its default port made one (postgres://h/db and
 * postgresql://H:5432/db). Two host names for one machine (localhost, 127.0.0.1) still differ.
 */
export function databasePlace(value: string): string {
  if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(value)) return resolve(value);
  try {
    const url = new URL(value);
    const scheme = url.protocol === "postgresql:" ? "postgres:" : url.protocol === "mariadb:" ? "mysql:" : url.protocol;
    const port = url.port === "" ? (DEFAULT_PORTS[url.protocol] ?? "") : url.port;
    return `${scheme}//${url.hostname.toLowerCase()}:${port}${url.pathname.replace(/\/+$/, "")}${url.search}`;
  } catch {
    return value;
  }
}

/**
 * The outbox a command runs on: --db's, or the --shard list (two or more, each once, in shard
 * order). Refuses both, neither, one shard, and a shard given twice, naming what to give.
 */
export function outboxTarget(options: { readonly db?: string; readonly shard?: readonly string[] }, command: Command): string | readonly string[] {
  const shards = options.shard ?? [];
  if (shards.length > 0 && command.getOptionValueSource("db") === "cli") {
    throw new InvalidArgumentError("give either --db (one outbox) or --shard once per shard (a sharded outbox), not both");
  }
  if (shards.length === 1)
    throw new InvalidArgumentError("a sharded outbox has two or more shards: give --shard once for each (got one); for one outbox use --db");
  const places = shards.map(databasePlace);
  const twice = shards.find((_shard, i) => places.indexOf(places[i] as string) !== i);
  if (twice !== undefined) {
    const first = shards[places.indexOf(databasePlace(twice))] as string;
    const also = first === twice ? "" : ` (the same database as ${redactUrl(first)})`;
    throw new InvalidArgumentError(`--shard ${redactUrl(twice)} is given twice${also}: give each shard once, in shard order`);
  }
  if (shards.length > 1) return shards;
  if (options.db === undefined)
    throw new InvalidArgumentError("give the outbox's database: --db <url-or-path> (or WASSAL_DATABASE_URL), or --shard once per shard");
  return options.db;
}

export function schemaOption(): Option {
  return new Option("--schema <name>", "PostgreSQL schema holding Wassal's tables (default: wassal)");
}

export function synchronousOption(): Option {
  return new Option(
    "--synchronous <mode>",
    "SQLite durability: FULL flushes every commit (default), NORMAL is faster and may lose the last commits on power loss",
  ).argParser(oneOf(["FULL", "NORMAL"] as const));
}

/** --on-complete <mode>: keep or delete, "keep" by default; any other value is refused naming both. */
export function onCompleteOption(description: string): Option {
  return new Option("--on-complete <mode>", description).argParser(oneOf(ON_COMPLETE_MODES)).default("keep");
}

/**
 * The options of a long-running claimer (the worker, the relay): leases, polling, retries,
 * shutdown, metrics, logs and retention. `what` says, for the help texts, its name, when a lease is renewed
 * ("a handler runs"), what may finish at shutdown, and what --max-attempts counts.
 */
export function runnerOptions(what: { readonly name: string; readonly work: string; readonly inFlight: string; readonly attempts: string }): Option[] {
  return [
    new Option("--lease-ms <ms>", `lease length; renewed every third of it while ${what.work}`).argParser(integer(100, 86_400_000)).default(30_000),
    new Option("--poll-ms <ms>", `longest wait between claims when nothing wakes the ${what.name}`).argParser(integer(1, 3_600_000)).default(1_000),
    new Option("--max-attempts <n>", what.attempts).argParser(integer(1, 1000)).default(5),
    new Option("--retry-base-ms <ms>", "wait after the first failure; doubles each attempt (with ±20% jitter)").argParser(integer(0, 3_600_000)).default(1_000),
    new Option("--grace-ms <ms>", `on shutdown, how long ${what.inFlight} may finish before their messages are released`)
      .argParser(integer(0, 3_600_000))
      .default(10_000),
    new Option(
      "--heartbeat-ms <ms>",
      `how often the ${what.name} writes its heartbeat row and reaps peers whose heartbeat stopped (their leases freed at once); 0: no heartbeat`,
    )
      .argParser(integer(0, 3_600_000))
      .default(2_000),
    new Option(
      "--owner-dead-after-ms <ms>",
      `how long after its last heartbeat the ${what.name} counts as dead to its peers, so its messages wait about this long after a crash instead of a whole lease (default 10000, or 3 beats of max(--heartbeat-ms, --poll-ms) when longer)`,
    ).argParser(integer(1, 86_400_000)),
    onCompleteOption(
      `what completing a message does with its row: keep (the history the dashboard and outbox commands show; purge it with --retain-processed) or delete (in the same statement: a smaller, faster table; the audit trail, with --audit, is the history; a dedupe key is free again once its message is done)`,
    ),
    new Option("--metrics-port <port>", "serve Prometheus metrics on http://<metrics-host>:<port>/metrics (0 picks a free port)").argParser(integer(0, 65_535)),
    new Option("--metrics-host <address>", "the address the metrics server listens on (another one exposes the metrics beyond this machine)").default(
      "127.0.0.1",
    ),
    new Option("--log-level <level>", "log level (JSON lines on stderr)").argParser(oneOf(LOG_LEVELS)).default("info"),
    ...retentionOptions(),
  ];
}

/** Adds every option of the list to the command. */
export function withOptions<C extends { addOption(option: Option): C }>(command: C, options: readonly Option[]): C {
  return options.reduce((c, option) => c.addOption(option), command);
}

/** What runnerOptions (with --db, --schema, --synchronous and --name) parsed to, the --retain-* flags included. */
export interface RunnerFlags extends RetentionFlags {
  db?: string;
  shard?: string[];
  schema?: string;
  synchronous?: "FULL" | "NORMAL";
  name?: string;
  leaseMs: number;
  pollMs: number;
  maxAttempts: number;
  retryBaseMs: number;
  graceMs: number;
  heartbeatMs: number;
  ownerDeadAfterMs?: number;
  onComplete: OnComplete;
  metricsPort?: number;
  metricsHost: string;
}

const FLAG_NAMES = { heartbeatMs: "--heartbeat-ms", pollIntervalMs: "--poll-ms", ownerDeadAfterMs: "--owner-dead-after-ms" } as const;

/** The settings every runner takes, from its flags, checked together before anything opens. */
export function runnerSettings(flags: RunnerFlags, command: Command) {
  const db = outboxTarget(flags, command);
  const retention = retentionSettings(flags);
  const heartbeatMs = flags.heartbeatMs === 0 ? (false as const) : flags.heartbeatMs;
  ownerTiming(
    { heartbeatMs, pollIntervalMs: flags.pollMs, ...(flags.ownerDeadAfterMs === undefined ? {} : { ownerDeadAfterMs: flags.ownerDeadAfterMs }) },
    FLAG_NAMES,
  );
  return {
    db,
    ...(flags.schema === undefined ? {} : { schema: flags.schema }),
    ...(flags.synchronous === undefined ? {} : { synchronous: flags.synchronous }),
    ...(flags.name === undefined ? {} : { name: flags.name }),
    ...(flags.metricsPort === undefined ? {} : { metricsPort: flags.metricsPort, metricsHost: flags.metricsHost }),
    leaseMs: flags.leaseMs,
    pollIntervalMs: flags.pollMs,
    retry: { maxAttempts: flags.maxAttempts, baseDelayMs: flags.retryBaseMs },
    shutdownGraceMs: flags.graceMs,
    ...(retention === undefined ? {} : { retention }),
    onComplete: flags.onComplete,
    heartbeatMs,
    ...(flags.ownerDeadAfterMs === undefined ? {} : { ownerDeadAfterMs: flags.ownerDeadAfterMs }),
  };
}
