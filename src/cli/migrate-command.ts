// `wassal migrate`: create or upgrade Wassal's outbox tables, check whether any migration is
// pending, or print the SQL for a DBA to review. Only Wassal's own tables: a demo's or an app's
// are theirs to create.

import { Command } from "commander";
import { migrateOutbox, migrationStatus } from "../stores/open-outbox.js";
import { EXIT } from "./exit-codes.js";
import { field, out, printJson } from "./output.js";
import { dbOption, schemaOption, storeOptions, synchronousOption } from "./shared-options.js";

interface MigrateOptions {
  db: string;
  schema?: string;
  synchronous?: "FULL" | "NORMAL";
  check?: boolean;
  printSql?: boolean;
  json?: boolean;
}

export function migrateCommand(): Command {
  return new Command("migrate")
    .description("create or upgrade Wassal's outbox tables (and nothing else) in a database; safe to run on every deploy")
    .addOption(dbOption().makeOptionMandatory())
    .addOption(schemaOption())
    .addOption(synchronousOption())
    .option("--check", "change nothing: list the pending migrations, and exit 1 when there are any (0 when up to date)")
    .option("--print-sql", "change nothing: print the SQL of the pending migrations, for review")
    .option("--json", "print JSON")
    .addHelpText(
      "after",
      "\nExamples:\n  wassal migrate --db postgres://app@db:5432/app --schema wassal   # a deploy step, before the app starts\n  wassal migrate --db app.db --check                               # exit 1 while a migration is pending\n  wassal migrate --db postgres://app@db:5432/app --print-sql > wassal.sql\n\nWorkers, relays and the dashboard also create the tables when they start; an app that calls\nenqueue before any of them ran gets NotMigratedError, which says to run this command.\n\nExit codes: 0 done (or, with --check, nothing pending), 1 with --check: migrations pending, 2 bad input or a database that cannot be used, 74 the machine failed.",
    )
    .action(async (options: MigrateOptions) => {
      const open = storeOptions(options, "write");
      if (options.check || options.printSql) {
        const { location, pending } = await migrationStatus(options.db, open);
        if (options.json) printJson({ location, pending: pending.map((m) => (options.printSql ? { name: m.name, sql: m.sql } : m.name)) });
        else if (options.printSql) {
          out(pending.length === 0 ? `-- ${field(location)}: no migration pending\n` : `-- ${field(location)}: ${pending.length} pending\n`);
          for (const migration of pending) out(`\n-- ${migration.name}\n${migration.sql.trim()}\n`);
          if (pending.length > 0) out("\n-- wassal migrate also records each name in wassal_migrations, in the same transaction.\n");
        } else if (pending.length === 0) out(`${field(location)}: up to date, no migration pending\n`);
        else out(`${field(location)}: ${pending.length} migration${pending.length === 1 ? "" : "s"} pending: ${pending.map((m) => m.name).join(", ")}\n`);
        if (options.check && pending.length > 0) process.exitCode = EXIT.failed;
        return;
      }
      const { location, applied } = await migrateOutbox(options.db, open);
      if (options.json) printJson({ location, applied });
      else if (applied.length === 0) out(`${field(location)}: up to date, nothing applied\n`);
      else out(`${field(location)}: applied ${applied.length} migration${applied.length === 1 ? "" : "s"}: ${applied.join(", ")}\n`);
    });
}
