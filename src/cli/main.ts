#!/usr/bin/env node
// The `wassal` command: parses arguments and hands off to the library. Errors become one clear
// line on stderr and an exit code (see exit-codes.ts); WASSAL_DEBUG=1 adds the stack. Under
// --json an error is also printed on stdout as { "error": { "name", "code", "message" } }, so a
// script can parse every outcome.

import { Command, CommanderError } from "commander";
import { createRequire } from "node:module";
import { WassalError } from "../outbox/errors.js";
import { EXIT } from "./exit-codes.js";
import { environmentFault } from "./environment-fault.js";
import { err, jsonText } from "./output.js";
import { chaosCommand } from "./chaos-command.js";
import { dashboardCommand } from "./dashboard-command.js";
import { inboxCommand } from "./inbox-command.js";
import { limitCommand } from "./limit-command.js";
import { scheduleCommand } from "./schedule-command.js";
import { labCommand } from "./lab-command.js";
import { migrateCommand } from "./migrate-command.js";
import { outboxCommand } from "./outbox-command.js";
import { paymentsCommand } from "./payments-command.js";
import { relayCommand } from "./relay-command.js";
import { workerCommand } from "./worker-command.js";

const { version } = createRequire(import.meta.url)("../../package.json") as { version: string };

const USAGE_CODES = new Set([
  "INVALID_ARGUMENT",
  "UNSUPPORTED_PAYLOAD",
  "DATABASE_OPEN",
  "NOT_IN_TRANSACTION",
  "MESSAGE_NOT_FOUND",
  "SCHEDULE_NOT_FOUND",
  "LIMIT_NOT_FOUND",
  "KEY_NOT_BLOCKED",
  "MISSING_CLIENT",
  "HANDLERS_MODULE",
  "UNROUTED_TYPES",
  "LOGICAL_REPLICATION_UNAVAILABLE",
]);

/** Commander's errors (an invalid option value is echoed) go through the one writer too; help is ours, written as it is. */
const OUTPUT = { writeOut: (text: string) => process.stdout.write(text), writeErr: err };

/** Every command (and sub-command) reports errors the same way: through main's catch, exit 2. */
function withErrors(command: Command): Command {
  command.exitOverride().showHelpAfterError("(run with --help for usage)").configureOutput(OUTPUT);
  for (const sub of command.commands) withErrors(sub);
  return command;
}

function program(): Command {
  return new Command("wassal")
    .description("Wassal: a leased transactional outbox for Node.js, and the payments lab that proves it")
    .version(version)
    .showHelpAfterError("(run with --help for usage)")
    .configureOutput(OUTPUT)
    .exitOverride()
    .addCommand(withErrors(labCommand()))
    .addCommand(withErrors(migrateCommand()))
    .addCommand(withErrors(workerCommand()))
    .addCommand(withErrors(relayCommand()))
    .addCommand(withErrors(paymentsCommand()))
    .addCommand(withErrors(outboxCommand()))
    .addCommand(withErrors(inboxCommand()))
    .addCommand(withErrors(scheduleCommand()))
    .addCommand(withErrors(limitCommand()))
    .addCommand(withErrors(dashboardCommand()))
    .addCommand(withErrors(chaosCommand()));
}

/** Under --json, the error as JSON on stdout (the text line stays on stderr for people). */
function printJsonError(json: boolean, name: string, code: string, message: string): void {
  if (json) process.stdout.write(`${jsonText({ error: { name, code, message } })}\n`);
}

async function main(argv: readonly string[]): Promise<number> {
  const json = argv.slice(2).includes("--json");
  try {
    await program().parseAsync([...argv], { from: "node" });
    return typeof process.exitCode === "number" ? process.exitCode : EXIT.ok;
  } catch (error) {
    if (error instanceof CommanderError) {
      // Commander has already printed its message (or the help, or the version).
      if (error.exitCode === 0) return EXIT.ok;
      printJsonError(json, "UsageError", error.code, error.message.replace(/^error: /, ""));
      return EXIT.usage;
    }
    const fault = environmentFault(error);
    const message = error instanceof Error ? error.message : String(error);
    const stack = () => {
      if (process.env.WASSAL_DEBUG) err(`${error instanceof Error ? error.stack : ""}\n`);
    };
    if (fault !== undefined) {
      // The machine failed, not Wassal: what failed and what to free, in one line.
      err(`wassal: ${fault.what} (${fault.code}): ${fault.fix}, then run the command again; what committed before it stays\n`);
      stack();
      printJsonError(json, "EnvironmentError", fault.code, `${fault.what}: ${message}`);
      return EXIT.environment;
    }
    if (error instanceof WassalError) {
      err(`wassal: ${error.message}\n`);
      stack();
      printJsonError(json, error.name, error.code, error.message);
      return USAGE_CODES.has(error.code) ? EXIT.usage : EXIT.failed;
    }
    err(`wassal: unexpected error: ${message}\n`);
    if (process.env.WASSAL_DEBUG) stack();
    else err(`(exit ${EXIT.internal}: an internal error; set WASSAL_DEBUG=1 to see the stack, and report it)\n`);
    printJsonError(json, error instanceof Error ? error.name : "Error", "INTERNAL", message);
    return EXIT.internal;
  }
}

// A reader that stops early (`wassal lab … | head`) is not an error.
process.stdout.on("error", (error: NodeJS.ErrnoException) => {
  if (error.code === "EPIPE") process.exit(process.exitCode ?? EXIT.ok);
  throw error;
});

process.exitCode = await main(process.argv);
