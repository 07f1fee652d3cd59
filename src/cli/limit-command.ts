// `wassal limit`: flow control across processes. A message type's concurrency limit (leases held
// at once) and rate limit (claims in any interval), held in the database and obeyed by every
// claim of every worker and relay on it: list them, set one, remove one.

import { Command } from "commander";
import { InvalidArgumentError, LimitNotFoundError } from "../outbox/errors.js";
import { MAX_LIMIT_COUNT } from "../outbox/limits.js";
import type { Rate, TypeLimit } from "../outbox/types.js";
import { formatDuration } from "../runtime/durations.js";
import { withOutbox } from "../stores/open-outbox.js";
import { integer, rateOption } from "./options.js";
import { field, out, printJson } from "./output.js";
import { type AdminFlags, adminOptions, storeOptions } from "./shared-options.js";

type Common = AdminFlags;
const common = adminOptions;

function describe(limit: TypeLimit): string {
  return [
    field(limit.type),
    limit.concurrency === null ? "concurrency -" : `concurrency ${limit.concurrency}`,
    limit.rate === null ? "rate -" : `rate ${limit.rate.count}/${formatDuration(limit.rate.intervalMs)}`,
  ].join("\t");
}

export function limitCommand(): Command {
  const limit = new Command("limit").description(
    "flow control across processes: at most N messages of a type running at once, and at most R claims of it per interval, across every worker and relay on this outbox",
  );

  limit.addCommand(
    common(new Command("list"))
      .description("every limited message type: its concurrency and rate")
      .action(async (options: Common) => {
        await withOutbox(options.db, storeOptions(options, "read"), async ({ store }) => {
          const limits = await store.limits();
          if (options.json) printJson(limits);
          else if (limits.length === 0) out("no limits (set one with: wassal limit set <type> --concurrency <n> or --rate <count>/<interval>)\n");
          else out(`${limits.map(describe).join("\n")}\n`);
        });
      }),
  );

  limit.addCommand(
    common(new Command("set"))
      .description("set a message type's limit, replacing any it had (give --concurrency, --rate or both)")
      .argument("<type>", "the message type")
      .option(
        "--concurrency <n>",
        `at most this many of its messages hold a lease at once, across every process (1 to ${MAX_LIMIT_COUNT}); a killed worker's slot frees when its lease ends`,
        integer(1, MAX_LIMIT_COUNT),
      )
      .option("--rate <count/interval>", "at most count claims in any interval, e.g. 100/1m or 5/1s (a retry is a claim too)", rateOption)
      .addHelpText(
        "after",
        "\nExamples:\n  wassal limit set email.send --db app.db --rate 100/1m\n  wassal limit set report.build --db app.db --concurrency 2 --rate 10/1h\n\nWorkers see a new limit within a second, and a changed one at their next claim.",
      )
      .action(async (type: string, options: Common & { concurrency?: number; rate?: Rate }) => {
        if (options.concurrency === undefined && options.rate === undefined) {
          throw new InvalidArgumentError("give --concurrency <n>, --rate <count/interval> or both (to lift a limit: wassal limit remove <type>)");
        }
        await withOutbox(options.db, storeOptions(options, "repair"), async ({ store }) => {
          const set = await store.limit(type, { concurrency: options.concurrency ?? null, rate: options.rate ?? null });
          if (options.json) printJson(set);
          else out(`limit set: ${describe(set)}\n`);
        });
      }),
  );

  limit.addCommand(
    common(new Command("remove"))
      .description("lift a message type's limit")
      .argument("<type>", "the message type (see: wassal limit list)")
      .addHelpText("after", "\nExits 2 when the type has no limit.")
      .action(async (type: string, options: Common) => {
        await withOutbox(options.db, storeOptions(options, "repair"), async ({ store }) => {
          if (!(await store.unlimit(type)))
            throw new LimitNotFoundError(
              type,
              (await store.limits()).map((l) => l.type),
            );
          if (options.json) printJson({ removed: type });
          else out(`limit of ${field(type)} removed\n`);
        });
      }),
  );

  return limit;
}
