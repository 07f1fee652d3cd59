#!/usr/bin/env node
// The `wassal` command: parses arguments and hands off to the library. Errors become one clear
// line and an exit code (see exit-codes.ts); WASSAL_DEBUG=1 adds the stack.

import { Command, CommanderError } from "commander";
import { createRequire } from "node:module";
import { WassalError } from "../outbox/errors.js";
import { EXIT } from "./exit-codes.js";
import { chaosCommand } from "./chaos-command.js";
import { labCommand } from "./lab-command.js";
import { outboxCommand } from "./outbox-command.js";
import { paymentsCommand } from "./payments-command.js";
import { workerCommand } from "./worker-command.js";

const { version } = createRequire(import.meta.url)("../../package.json") as { version: string };

const USAGE_CODES = new Set(["INVALID_ARGUMENT", "UNSUPPORTED_PAYLOAD", "DATABASE_OPEN", "NOT_IN_TRANSACTION"]);

/** Every command (and sub-command) reports errors the same way: through main's catch, exit 2. */
function withErrors(command: Command): Command {
  command.exitOverride().showHelpAfterError("(run with --help for usage)");
  for (const sub of command.commands) withErrors(sub);
  return command;
}

function program(): Command {
  return new Command("wassal")
    .description("Wassal: a leased transactional outbox for Node.js, and the payments lab that proves it")
    .version(version)
    .showHelpAfterError("(run with --help for usage)")
    .exitOverride()
    .addCommand(withErrors(labCommand()))
    .addCommand(withErrors(workerCommand()))
    .addCommand(withErrors(paymentsCommand()))
    .addCommand(withErrors(outboxCommand()))
    .addCommand(withErrors(chaosCommand()));
}

async function main(argv: readonly string[]): Promise<number> {
  try {
    await program().parseAsync([...argv], { from: "node" });
    return typeof process.exitCode === "number" ? process.exitCode : EXIT.ok;
  } catch (error) {
    if (error instanceof CommanderError) {
      // Commander has already printed its message (or the help, or the version).
      return error.exitCode === 0 ? EXIT.ok : EXIT.usage;
    }
    if (error instanceof WassalError) {
      process.stderr.write(`wassal: ${error.message}\n`);
      if (process.env.WASSAL_DEBUG) process.stderr.write(`${error.stack}\n`);
      return USAGE_CODES.has(error.code) ? EXIT.usage : EXIT.failed;
    }
    process.stderr.write(`wassal: unexpected error: ${error instanceof Error ? error.message : String(error)}\n`);
    if (process.env.WASSAL_DEBUG) process.stderr.write(`${error instanceof Error ? error.stack : ""}\n`);
    else process.stderr.write("(set WASSAL_DEBUG=1 to see the stack)\n");
    return EXIT.failed;
  }
}

// A reader that stops early (`wassal lab … | head`) is not an error.
process.stdout.on("error", (error: NodeJS.ErrnoException) => {
  if (error.code === "EPIPE") process.exit(process.exitCode ?? EXIT.ok);
  throw error;
});

process.exitCode = await main(process.argv);
