// `wassal outbox`: operate an outbox on either store: stats, dead messages, redrive, cancel, purge.

import { Command } from "commander";
import type { Cancelled, OnComplete, OutboxMessage, OutboxStats, TypeCount } from "../outbox/types.js";
import { ShardedOutbox } from "../shards/sharded-outbox.js";
import { InvalidArgumentError, MessageNotFoundError, MessageNotPendingError, MessageRunningError } from "../outbox/errors.js";
import { checkMessageId } from "../outbox/validate.js";
import { type OpenedOutbox, type OpenOutboxOptions, withOutbox } from "../stores/open-outbox.js";
import { EXIT } from "./exit-codes.js";
import { integer, parseDuration } from "./options.js";
import { err, field, out, printJson } from "./output.js";
import { type AdminFlags, adminOptions, dbOption, onCompleteOption, outboxTarget, schemaOption, shardOption, storeOptions } from "./shared-options.js";

type Common = AdminFlags;
const common = adminOptions;

function age(ms: number): string {
  if (ms < 1000) return `${ms} ms`;
  if (ms < 120_000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 7_200_000) return `${(ms / 60_000).toFixed(1)} min`;
  return `${(ms / 3_600_000).toFixed(1)} h`;
}

function deadLine(m: OutboxMessage): string {
  return `${m.id}\t${field(m.type)}\t${field(m.dedupeKey)}\tattempts ${m.attempts}\t${field(m.lastError, "(no error recorded)")}`;
}

type PurgeKind = "processed" | "dead" | "audit" | "inbox";
/** How each kind is reported: "deleted 3 dead messages marked dead before …". */
const PURGED: Record<PurgeKind, readonly [one: string, many: string, when: string]> = {
  processed: ["processed message", "processed messages", "processed before"],
  dead: ["dead message", "dead messages", "marked dead before"],
  audit: ["audit row", "audit rows", "written before"],
  inbox: ["inbox id", "inbox ids", "received before"],
};

export function outboxCommand(): Command {
  const outbox = new Command("outbox").description("inspect and repair an outbox: stats, dead messages, redrive, cancel, purge");

  const stats = new Command("stats")
    .description(
      "counts by state, pending messages per type (the 20 most numerous), oldest pending message, leases held and expired per owner; of one outbox (--db), or of a sharded one (--shard, each shard's and their sum)",
    )
    .addOption(dbOption())
    .addOption(shardOption())
    .addOption(schemaOption())
    .option("--json", "print JSON");
  outbox.addCommand(
    stats.action(async (options: Partial<Common> & { shard?: string[] }) => {
      const target = outboxTarget(options, stats);
      if (typeof target !== "string") {
        await withOutboxes(target, storeOptions(options, "read"), (opened) => printShardedStats(opened, options.json === true));
        return;
      }
      await withOutbox(target, storeOptions(options, "read"), async ({ store, location }) => {
        const stats = await store.stats();
        const pendingByType = await store.pendingByType({ limit: 20 });
        const oldestPendingAgeMs = stats.oldestPendingCreatedAt ? stats.now.getTime() - stats.oldestPendingCreatedAt.getTime() : null;
        if (options.json) {
          printJson({ db: location, ...stats, pendingByType, oldestPendingAgeMs });
          return;
        }
        const c = stats.counts;
        const lines = [
          `outbox ${location} at ${stats.now.toISOString()}`,
          `  pending ${c.pending}   processing ${c.processing}   processed ${c.processed}   dead ${c.dead}   cancelled ${c.cancelled}`,
          ...statsLines(pendingByType, oldestPendingAgeMs, stats),
        ];
        out(`${lines.join("\n")}\n`);
      });
    }),
  );

  outbox.addCommand(
    common(new Command("dead"))
      .description("list dead messages with their last errors")
      .option("--limit <n>", "show at most n", integer(1), 100)
      .action(async (options: Common & { limit: number }) => {
        await withOutbox(options.db, storeOptions(options, "read"), async ({ store }) => {
          const dead = await store.listMessages({ status: ["dead"], limit: options.limit });
          if (options.json) printJson(dead);
          else out(dead.length === 0 ? "no dead messages\n" : `${dead.map(deadLine).join("\n")}\n`);
        });
      }),
  );

  outbox.addCommand(
    common(new Command("show"))
      .description("one message in full: its envelope (ordering key, headers, destination), payload, state and lease")
      .argument("<id>", "the message id")
      .action(async (id: string, options: Common) => {
        checkMessageId(id);
        await withOutbox(options.db, storeOptions(options, "read"), async ({ store }) => {
          const message = await store.getMessage(id);
          if (message === undefined) throw new MessageNotFoundError(`no message ${id} in this outbox; list dead ones with: wassal outbox dead`);
          if (options.json) {
            printJson(message);
            return;
          }
          const time = (d: Date | null) => (d === null ? "-" : d.toISOString());
          const headers = Object.entries(message.headers);
          const lines = [
            `message ${message.id}  ${field(message.type)}  ${message.status}`,
            `  key          ${field(message.key)}`,
            `  destination  ${field(message.destination)}`,
            `  dedupe key   ${field(message.dedupeKey)}`,
            `  singleton    ${field(message.singletonKey)}`,
            `  priority     ${message.priority === 0 ? "0 (none)" : `${message.priority} s of head start`}`,
            `  headers      ${headers.length === 0 ? "-" : headers.map(([name, value]) => `${field(name)}: ${field(value)}`).join("\n               ")}`,
            `  created      ${time(message.createdAt)}   available ${time(message.availableAt)}   processed ${time(message.processedAt)}`,
            `  lease        ${field(message.lockedBy)} until ${time(message.lockedUntil)}, token ${message.leaseToken}, attempts ${message.attempts}`,
            `  last error   ${field(message.lastError)}`,
            `  payload      ${JSON.stringify(message.payload)}`,
          ];
          out(`${lines.join("\n")}\n`);
        });
      }),
  );

  outbox.addCommand(
    common(new Command("blocked-keys"))
      .description("ordering keys held by a dead message: the messages behind each wait until it is redriven or skipped")
      .option("--limit <n>", "show at most n", integer(1, 100_000), 100)
      .action(async (options: Common & { limit: number }) => {
        await withOutbox(options.db, storeOptions(options, "read"), async ({ store }) => {
          const blocked = await store.blockedKeys({ limit: options.limit });
          if (options.json) {
            printJson(blocked);
            return;
          }
          if (blocked.length === 0) {
            out("no blocked keys\n");
            return;
          }
          const lines = blocked.map(
            (b) =>
              `${field(b.key)}\tmessage ${b.messageId} (${field(b.type)}) dead since ${b.diedAt.toISOString()}\t${b.waiting} waiting\t${field(b.lastError, "(no error recorded)")}`,
          );
          out(`${lines.join("\n")}\n`);
        });
      }),
  );

  outbox.addCommand(
    common(new Command("unblock"))
      .description("unblock an ordering key held by a dead message: --redrive it (it goes first again) or --skip it (it stays dead, the key moves on)")
      .argument("<key>", "the ordering key (see: wassal outbox blocked-keys)")
      .option("--redrive", "move the dead message back to pending, first of its key")
      .option("--skip", "leave it dead and let the next message of its key go")
      .addHelpText("after", "\nExits 2 when no dead message holds the key.")
      .action(async (key: string, options: Common & { redrive?: boolean; skip?: boolean }) => {
        if (Boolean(options.redrive) === Boolean(options.skip)) throw new InvalidArgumentError("choose one: --redrive or --skip");
        await withOutbox(options.db, storeOptions(options, "repair"), async ({ store }) => {
          const done = await store.unblockKey(key, options.redrive ? "redrive" : "skip");
          if (options.json) printJson(done);
          else
            out(
              done.action === "redrive"
                ? `key ${field(key)}: message ${done.messageId} moved back to pending, first of its key\n`
                : `key ${field(key)}: message ${done.messageId} skipped (still dead); the next message of the key may go\n`,
            );
        });
      }),
  );

  outbox.addCommand(
    common(new Command("redrive"))
      .description("move dead messages back to pending (due now, attempts reset); exits 1 when a named id did not move")
      .argument("[ids...]", "message ids to redrive")
      .option("--all", "redrive every dead message")
      .action(async (ids: string[], options: Common & { all?: boolean }) => {
        if (Boolean(options.all) === ids.length > 0) {
          throw new InvalidArgumentError("name the dead message ids to redrive, or pass --all (not both)");
        }
        // Checked before the database is opened, as all bad input is.
        try {
          for (const id of ids) checkMessageId(id);
        } catch (error) {
          throw new InvalidArgumentError(`${(error as Error).message}; see the dead messages' ids with: wassal outbox dead`);
        }
        await withOutbox(options.db, storeOptions(options, "repair"), async ({ store }) => {
          const { moved, notMoved } = await store.redrive(options.all ? "all" : { messageIds: ids });
          if (notMoved.length > 0) process.exitCode = EXIT.failed;
          if (options.json) {
            printJson({ redriven: moved, notMoved });
            return;
          }
          out(`${moved} dead message${moved === 1 ? "" : "s"} moved back to pending\n`);
          for (const { messageId, status } of notMoved) {
            const why = status === "missing" ? "no such message" : `it is ${status}, and only dead messages are redriven`;
            err(`wassal: message ${messageId} not moved: ${why}\n`);
          }
        });
      }),
  );

  outbox.addCommand(
    common(new Command("cancel"))
      .description(
        "cancel pending messages (with --running, running ones too): each becomes cancelled, never delivered (with --on-complete delete, its row is deleted); one that held its ordering key hands the key on to the next",
      )
      .argument("<ids...>", "ids of messages to cancel (browse them on the dashboard's messages page, filtered by status pending)")
      .option("--reason <text>", "why, recorded in the audit trail when it is on (at most 180 characters)")
      .option(
        "--running",
        "cancel a running (leased) message too: its worker's handler signal aborts (at its next lease renewal) and its result, business write included, is refused",
      )
      .addOption(
        onCompleteOption(
          "what the cancel does with the row: keep it as cancelled (the history; its dedupe key stays taken until purged), or delete it, as your workers' --on-complete delete does with finished rows",
        ),
      )
      .addHelpText(
        "after",
        "\nWithout --running, a running (leased) message is refused: wait for its attempt to end, or cancel it with --running.\n" +
          "A processed, dead or cancelled one is refused (purge it, or skip a dead key holder with: wassal outbox unblock <key> --skip).\n" +
          "Exits 0 when every id was cancelled, 1 when one was not (each refusal is printed), 2 on bad input.",
      )
      .action(async (ids: string[], options: Common & { reason?: string; running?: boolean; onComplete: OnComplete }) => {
        // Checked before the database is opened, as all bad input is.
        for (const id of ids) checkMessageId(id);
        const unique = [...new Set(ids)];
        await withOutbox(options.db, { ...storeOptions(options, "repair"), onComplete: options.onComplete }, async ({ store }) => {
          const cancelled: Cancelled[] = [];
          const notCancelled: { messageId: string; code: string; error: string }[] = [];
          for (const id of unique) {
            try {
              cancelled.push(
                await store.cancel(id, { ...(options.reason === undefined ? {} : { reason: options.reason }), ...(options.running ? { running: true } : {}) }),
              );
            } catch (error) {
              if (!(error instanceof MessageNotFoundError || error instanceof MessageRunningError || error instanceof MessageNotPendingError)) throw error;
              notCancelled.push({ messageId: id, code: error.code, error: error.message });
            }
          }
          if (notCancelled.length > 0) process.exitCode = EXIT.failed;
          if (options.json) {
            printJson({ cancelled, notCancelled });
            return;
          }
          for (const c of cancelled) {
            const key = c.key === null ? "" : c.handedOn ? `; key ${field(c.key)} handed on to its next message` : `; it waited behind key ${field(c.key)}`;
            const run = c.runningOwner === null ? "" : `; its run by ${field(c.runningOwner)} is refused and aborted`;
            out(`message ${c.messageId} (${field(c.type)}) cancelled${run}${key}\n`);
          }
          for (const n of notCancelled) err(`wassal: message ${n.messageId} not cancelled: ${n.error}\n`);
        });
      }),
  );

  outbox.addCommand(
    common(new Command("purge"))
      .description(
        "retention: delete processed (and cancelled) messages, dead messages, audit rows and inbox ids older than a duration, in short batches (no long locks)",
      )
      .option("--processed-before <duration>", "delete messages processed (or cancelled) longer ago than this, e.g. 7d, 12h, 30m", parseDuration)
      .option("--dead-before <duration>", "delete dead messages that died longer ago than this", parseDuration)
      .option("--audit-before <duration>", "delete audit rows written longer ago than this", parseDuration)
      .option(
        "--inbox-before <duration>",
        "delete inbox ids received longer ago than this (keep them longer than a message can come again: the broker's redelivery and any replay)",
        parseDuration,
      )
      .option("--batch-size <n>", "rows deleted per transaction", integer(1, 100_000), 1000)
      .addHelpText(
        "after",
        "\nAt least one of --processed-before, --dead-before, --audit-before and --inbox-before. A deleted message's dedupe key can be used again; a message whose inbox id was deleted would be applied again.",
      )
      .action(async (options: Common & { processedBefore?: number; deadBefore?: number; auditBefore?: number; inboxBefore?: number; batchSize: number }) => {
        const ages: [PurgeKind, number | undefined][] = [
          ["processed", options.processedBefore],
          ["dead", options.deadBefore],
          ["audit", options.auditBefore],
          ["inbox", options.inboxBefore],
        ];
        const asked = ages.filter((entry): entry is [PurgeKind, number] => entry[1] !== undefined);
        if (asked.length === 0)
          throw new InvalidArgumentError("name what to purge: --processed-before, --dead-before, --audit-before or --inbox-before (a duration such as 7d)");
        await withOutbox(options.db, storeOptions(options, "repair"), async ({ store }) => {
          const now = (await store.stats()).now.getTime();
          const result: Partial<Record<PurgeKind, { deleted: number; before: string }>> = {};
          for (const [kind, ageMs] of asked) {
            const before = new Date(now - ageMs);
            const purge = { processed: store.purgeProcessed, dead: store.purgeDead, audit: store.purgeAudit, inbox: store.purgeInbox }[kind];
            const deleted = await purge.call(store, before, {
              batchSize: options.batchSize,
              onProgress: (n) => {
                if (!options.json && process.stderr.isTTY) process.stderr.write(`\rdeleted ${n}…`); // a count, redrawn in place
              },
            });
            if (!options.json && process.stderr.isTTY) err("\n");
            result[kind] = { deleted, before: before.toISOString() };
            const [one, many, when] = PURGED[kind];
            if (!options.json) out(`deleted ${deleted} ${deleted === 1 ? one : many} ${when} ${before.toISOString()}\n`);
          }
          if (options.json) printJson(result);
        });
      }),
  );

  return outbox;
}

/** The lines of stats below the counts: pending by type, the oldest pending, expired leases and leases by owner. */
function statsLines(
  pendingByType: readonly TypeCount[],
  oldestPendingAgeMs: number | null,
  stats: Pick<OutboxStats, "expiredLeases" | "leasesByOwner">,
): string[] {
  return [
    `  pending by type:${pendingByType.length === 0 ? " none" : ""}`,
    ...pendingByType.map((t) => `    ${field(t.type)}: ${t.count}`),
    `  oldest pending: ${oldestPendingAgeMs === null ? "none" : `${age(oldestPendingAgeMs)} old`}`,
    `  expired leases: ${stats.expiredLeases}`,
    `  leases by owner:${stats.leasesByOwner.length === 0 ? " none" : ""}`,
    ...stats.leasesByOwner.map((o) => `    ${field(o.owner)}: ${o.held} held, ${o.expired} expired`),
  ];
}

/** Opens every database (closing the ones opened if one fails), runs `work` with them, and closes them all. */
async function withOutboxes<T>(dbs: readonly string[], options: OpenOutboxOptions, work: (opened: readonly OpenedOutbox[]) => Promise<T>): Promise<T> {
  const [first, ...rest] = dbs;
  if (first === undefined) return work([]);
  return withOutbox(first, options, (opened) => withOutboxes(rest, options, (others) => work([opened, ...others])));
}

/** `outbox stats --shard …`: each shard's counts, and the sum with pending by type, leases and the oldest pending over all. */
async function printShardedStats(opened: readonly OpenedOutbox[], json: boolean): Promise<void> {
  const sharded = new ShardedOutbox(opened.map((o) => o.store));
  const { total, shards } = await sharded.stats();
  const byType = new Map<string, number>();
  for (const { store } of opened) for (const t of await store.pendingByType({ limit: 20 })) byType.set(t.type, (byType.get(t.type) ?? 0) + t.count);
  const pendingByType = [...byType]
    .map(([type, count]) => ({ type, count }))
    .sort((a, b) => b.count - a.count || a.type.localeCompare(b.type))
    .slice(0, 20);
  const now = shards[0]?.now ?? new Date();
  const ageOf = (stats: Pick<OutboxStats, "oldestPendingCreatedAt">, at: Date) =>
    stats.oldestPendingCreatedAt ? at.getTime() - stats.oldestPendingCreatedAt.getTime() : null;
  if (json) {
    printJson({
      total: { ...total, pendingByType, oldestPendingAgeMs: ageOf(total, now) },
      shards: shards.map((s, i) => ({ ...s, db: opened[i]?.location, oldestPendingAgeMs: ageOf(s, s.now) })),
    });
    return;
  }
  const counts = (c: OutboxStats["counts"]) =>
    `pending ${c.pending}   processing ${c.processing}   processed ${c.processed}   dead ${c.dead}   cancelled ${c.cancelled}`;
  const lines = [
    `sharded outbox, ${shards.length} shards, at ${now.toISOString()}`,
    `  all shards: ${counts(total.counts)}`,
    ...shards.map((s, i) => `  shard ${s.shard} ${opened[i]?.location ?? ""}: ${counts(s.counts)}`),
    ...statsLines(pendingByType, ageOf(total, now), total),
  ];
  out(`${lines.join("\n")}\n`);
}
