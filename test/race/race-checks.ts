// What the race tests assert at the end of a run, over the audit trail (store.auditTrail()),
// the final message rows and the business rows written by finalize. Each check returns a list of
// problems (empty when all is well), so a failure names every message that went wrong. Also how
// both race tests read the business rows back (the `effects` table, on either store).

import Database from "better-sqlite3";
import type pg from "pg";
import type { AuditEntry, OutboxMessage } from "../../src/outbox/types.js";

/** One business row, written by finalize inside a completion transaction. */
export interface BusinessRow {
  readonly messageId: string;
  readonly owner: string;
  readonly token: number;
}

/** The rows of the `effects` table in the SQLite file at `path`, read on a connection of its own. */
export function readSqliteBusinessRows(path: string): BusinessRow[] {
  const reader = new Database(path, { readonly: true, fileMustExist: true });
  try {
    return (reader.prepare("SELECT message_id, owner, token FROM effects ORDER BY rowid").all() as { message_id: number; owner: string; token: number }[]).map(
      (r) => ({ messageId: String(r.message_id), owner: r.owner, token: r.token }),
    );
  } finally {
    reader.close();
  }
}

/** The rows of `<schema>.effects`, read on `client`. */
export async function readPostgresBusinessRows(client: pg.ClientBase, schema: string): Promise<BusinessRow[]> {
  const { rows } = await client.query<{ message_id: string; owner: string; token: number }>(
    `SELECT message_id::text, owner, token FROM ${schema}.effects ORDER BY message_id, token`,
  );
  return rows.map((r) => ({ messageId: r.message_id, owner: r.owner, token: r.token }));
}

function groupBy<T>(items: readonly T[], key: (item: T) => string): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const item of items) {
    const k = key(item);
    const list = groups.get(k);
    if (list === undefined) groups.set(k, [item]);
    else list.push(item);
  }
  return groups;
}

const show = (e: AuditEntry) => `${e.action}#${e.token}@${e.owner}`;

/**
 * The audit trail against the final rows. For every message, in audit order:
 * - no claim after a completion (the property under test);
 * - a processed message has exactly one completion, whose token is the row's final lease token
 *   and whose owner is the row's final owner; any other message has none;
 * - its claims carry tokens 1, 2, …, n in order, n being the row's final token (no claim lost,
 *   none issued twice), the first taking over a pending message and every later one taking over
 *   the previous claim's expired lease;
 * - nothing but claims and completions happened (the race tests never fail or release).
 */
export function auditProblems(audit: readonly AuditEntry[], messages: readonly OutboxMessage[]): string[] {
  const problems: string[] = [];
  const byMessage = groupBy(audit, (e) => e.messageId);
  const known = new Set(messages.map((m) => m.id));
  for (const id of byMessage.keys()) if (!known.has(id)) problems.push(`audit trail names unknown message ${id}`);
  for (const message of messages) {
    const entries = byMessage.get(message.id) ?? [];
    const trail = entries.map(show).join(", ");
    const firstComplete = entries.findIndex((e) => e.action === "complete");
    if (firstComplete >= 0) {
      const later = entries.slice(firstComplete + 1).filter((e) => e.action === "claim");
      if (later.length > 0) problems.push(`message ${message.id}: claimed again after its completion (${trail})`);
    }
    const completes = entries.filter((e) => e.action === "complete");
    if (message.status === "processed") {
      if (completes.length !== 1) {
        problems.push(`message ${message.id}: ${completes.length} completions in the audit trail, expected 1 (${trail})`);
      } else {
        const done = completes[0]!;
        if (done.token !== message.leaseToken)
          problems.push(`message ${message.id}: completed under token ${done.token} but its final lease token is ${message.leaseToken} (${trail})`);
        if (done.owner !== message.lockedBy)
          problems.push(`message ${message.id}: completed by ${done.owner} but the row names ${String(message.lockedBy)} (${trail})`);
      }
    } else if (completes.length > 0) {
      problems.push(`message ${message.id}: status ${message.status} yet ${completes.length} completions in the audit trail (${trail})`);
    }
    const others = entries.filter((e) => e.action !== "claim" && e.action !== "complete" && e.action !== "refused");
    if (others.length > 0) problems.push(`message ${message.id}: unexpected audited actions (${trail})`);
    // A refused write is a stale lease's: a later claim (a higher token) came before it.
    entries.forEach((entry, n) => {
      if (entry.action !== "refused") return;
      const superseded = entries.slice(0, n).some((e) => e.action === "claim" && e.token > entry.token);
      if (!superseded)
        problems.push(
          `message ${message.id}: ${entry.owner}'s ${String(entry.operation)} under token ${entry.token} refused though no later claim came before it (${trail})`,
        );
    });
    const claims = entries.filter((e) => e.action === "claim");
    const tokens = claims.map((e) => e.token);
    const expected = Array.from({ length: message.leaseToken }, (_, n) => n + 1);
    if (tokens.join(",") !== expected.join(",")) {
      problems.push(`message ${message.id}: claim tokens [${tokens.join(", ")}], expected [${expected.join(", ")}] (final token ${message.leaseToken})`);
    }
    claims.forEach((claim, n) => {
      const previous = n === 0 ? null : claims[n - 1]!;
      const wanted = previous === null ? { status: "pending", owner: null } : { status: "processing", owner: previous.owner };
      if (claim.previousStatus !== wanted.status || claim.previousOwner !== wanted.owner) {
        problems.push(
          `message ${message.id}: claim #${claim.token} by ${claim.owner} took over ${String(claim.previousStatus)}/${String(claim.previousOwner)}, expected ${wanted.status}/${String(wanted.owner)} (${trail})`,
        );
      }
    });
  }
  return problems;
}

/**
 * The business rows against the final rows: exactly one per processed message, written under the
 * row's final token by its final owner; none for a message that is not processed.
 */
export function businessProblems(rows: readonly BusinessRow[], messages: readonly OutboxMessage[]): string[] {
  const problems: string[] = [];
  const byMessage = groupBy(rows, (r) => r.messageId);
  const known = new Set(messages.map((m) => m.id));
  for (const id of byMessage.keys()) if (!known.has(id)) problems.push(`business row for unknown message ${id}`);
  for (const message of messages) {
    const mine = byMessage.get(message.id) ?? [];
    const list = mine.map((r) => `${r.owner}#${r.token}`).join(", ");
    if (message.status !== "processed") {
      if (mine.length > 0) problems.push(`message ${message.id}: status ${message.status} yet business rows ${list}`);
      continue;
    }
    if (mine.length !== 1) {
      problems.push(`message ${message.id}: ${mine.length} business rows (${list}), expected 1`);
      continue;
    }
    const row = mine[0]!;
    if (row.token !== message.leaseToken || row.owner !== message.lockedBy) {
      problems.push(
        `message ${message.id}: business row by ${row.owner}#${row.token}, but the message was completed as ${String(message.lockedBy)}#${message.leaseToken}`,
      );
    }
  }
  return problems;
}

/** Every message must be processed, with a processed time and no lease left. */
export function unprocessed(messages: readonly OutboxMessage[]): string[] {
  return messages
    .filter((m) => m.status !== "processed" || m.processedAt === null || m.lockedUntil !== null)
    .map((m) => `message ${m.id}: ${m.status}, processedAt ${String(m.processedAt?.toISOString())}, lockedUntil ${String(m.lockedUntil?.toISOString())}`);
}
