// `wassal inbox`: the consuming side's inbox, in each key's order: which keys hold a message back
// (a later number of the key arrived while an earlier one is missing), and giving up the wait.

import { Command } from "commander";
import { InvalidArgumentError } from "../outbox/errors.js";
import { checkInboxSource, checkOrderingKey } from "../outbox/validate.js";
import { Inbox } from "../relay/inbox.js";
import { withOutbox } from "../stores/open-outbox.js";
import { integer, parseDuration } from "./options.js";
import { field, out, printJson } from "./output.js";
import { type AdminFlags, adminOptions, storeOptions } from "./shared-options.js";

type Common = AdminFlags;
const common = adminOptions;

/** The --source value, checked before the database is opened. */
function source(value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  try {
    return checkInboxSource(value);
  } catch (error) {
    throw new InvalidArgumentError(`--source: ${(error as Error).message}`);
  }
}

export function inboxCommand(): Command {
  const inbox = new Command("inbox").description(
    "the consuming side's inbox: keys holding a message back because an earlier message of the key has not been applied, and skipping such a gap",
  );

  inbox.addCommand(
    common(new Command("blocked-keys"))
      .description(
        "keys whose inbox holds a message back, waiting for an earlier number of the key (for a moment after a consumer crash; a key that stays has a gap)",
      )
      .option("--source <source>", "only this inbox source (as the consumer's Inbox was given)")
      .option("--older-than <duration>", "only keys waiting longer than this, e.g. 30s, 5m", parseDuration)
      .option("--limit <n>", "show at most n", integer(1, 100_000), 100)
      .action(async (options: Common & { source?: string; olderThan?: number; limit: number }) => {
        const only = source(options.source);
        await withOutbox(options.db, storeOptions(options, "read"), async ({ store }) => {
          const now = Date.now();
          const blocked = (await store.inboxBlockedKeys({ limit: options.limit, ...(only === undefined ? {} : { source: only }) })).filter(
            (b) => options.olderThan === undefined || now - b.heldSince.getTime() > options.olderThan,
          );
          if (options.json) {
            printJson(blocked);
            return;
          }
          if (blocked.length === 0) {
            out("no key holds a message back\n");
            return;
          }
          const lines = blocked.map(
            (b) =>
              `${field(b.key)}\tsource ${field(JSON.stringify(b.source))}\twaits for number ${b.waitingFor} (applied up to ${b.appliedSeq})\tholds ${b.heldSeq} back since ${b.heldSince.toISOString()}`,
          );
          out(`${lines.join("\n")}\n`);
        });
      }),
  );

  inbox.addCommand(
    common(new Command("unblock"))
      .description(
        "give up waiting for the numbers a key misses (--skip): the lowest number held back is applied when it comes again; a skipped one that comes later is applied then, out of its place",
      )
      .argument("[key]", "the ordering key (see: wassal inbox blocked-keys)")
      .option("--source <source>", "the inbox source (as the consumer's Inbox was given)", "")
      .option("--skip", "skip the missing numbers")
      .option("--all", "every key of the source that holds a message back (with --older-than, only those waiting longer)")
      .option("--older-than <duration>", "with --all: only keys waiting longer than this, e.g. 5m", parseDuration)
      .addHelpText(
        "after",
        "\nTo fill a gap instead, redrive the missing message in the producer's outbox (wassal outbox unblock <key> --redrive).\nExits 2 when the named key holds nothing back.",
      )
      .action(async (key: string | undefined, options: Common & { source: string; skip?: boolean; all?: boolean; olderThan?: number }) => {
        if (!options.skip)
          throw new InvalidArgumentError(
            "an inbox key is unblocked with --skip (to fill the gap instead, redrive the missing message in the producer's outbox)",
          );
        if ((key === undefined) === !options.all) throw new InvalidArgumentError("name one key, or pass --all (not both)");
        if (options.olderThan !== undefined && !options.all) throw new InvalidArgumentError("--older-than goes with --all");
        if (key !== undefined) checkOrderingKey(key);
        const from = source(options.source) ?? "";
        await withOutbox(options.db, storeOptions(options, "repair"), async ({ store }) => {
          if (key === undefined) {
            const done = await new Inbox({ store, source: from }).unblockKeys("skip", { olderThanMs: Math.round(options.olderThan ?? 0) });
            if (options.json) printJson(done);
            else
              out(
                `${done.length} key${done.length === 1 ? "" : "s"} skipped past their gaps\n${done.map((d) => `${field(d.key)}\tnumbers ${d.skipped[0]} to ${d.skipped[1]}\n`).join("")}`,
              );
            return;
          }
          const done = await store.skipInboxGap(key, { source: from });
          if (options.json) printJson(done);
          else
            out(`key ${field(key)}: numbers ${done.skipped[0]} to ${done.skipped[1]} skipped; number ${done.skipped[1] + 1} is applied when it comes again\n`);
        });
      }),
  );

  return inbox;
}
