// Enqueue inside a Prisma interactive transaction (Prisma 7 with its driver adapters:
// @prisma/adapter-pg for the PostgreSQL store, @prisma/adapter-mariadb (provider "mysql") for the
// MariaDB store, @prisma/adapter-better-sqlite3 on the store's SQLite file): the message commits
// or rolls back with the app's own Prisma writes. Prisma is an optional peer dependency; nothing
// of it is loaded here.

import { NotInTransactionError } from "../outbox/errors.js";
import type { OutboxStore } from "../outbox/store.js";
import type { ForeignTransaction, JsonValue, NewMessage, OutboxMessage } from "../outbox/types.js";

/** What Wassal uses of a Prisma transaction client (the `tx` of prisma.$transaction(async (tx) => …)). */
export interface PrismaTransactionClient {
  $queryRawUnsafe<T = unknown>(query: string, ...values: unknown[]): Promise<T>;
}

/** The provider Prisma reports: postgresql numbers its parameters ($1), mysql (MariaDB) and sqlite take them in order (?). */
const PLACEHOLDERS: Readonly<Record<string, ForeignTransaction["placeholders"]>> = { postgresql: "numbered", mysql: "question", sqlite: "question" };

/** A Prisma interactive transaction client as a ForeignTransaction. */
export function fromPrisma(tx: PrismaTransactionClient): ForeignTransaction {
  const client = tx as PrismaTransactionClient & { readonly _activeProvider?: string; readonly $connect?: unknown };
  const provider = client?._activeProvider;
  return {
    placeholders: PLACEHOLDERS[provider ?? ""] ?? "numbered",
    problem: () => {
      if (typeof client?.$queryRawUnsafe !== "function") return "this is not a Prisma client";
      if (provider === undefined || !(provider in PLACEHOLDERS))
        return `Wassal runs on Prisma's postgresql, mysql (MariaDB) and sqlite providers (this client's is ${provider ?? "unknown"})`;
      // A transaction client has no $connect; the PrismaClient itself has.
      if (typeof client.$connect === "function")
        return "this is the PrismaClient, not a transaction: call enqueue inside prisma.$transaction(async (tx) => …) with its tx";
      return null;
    },
    query: async (sql, params) => {
      try {
        return await client.$queryRawUnsafe<Record<string, unknown>[]>(sql, ...params);
      } catch (error) {
        // A transaction that has ended refuses further queries: nothing was written.
        if (error instanceof Error && /Transaction already closed|Transaction not found/.test(error.message)) {
          throw new NotInTransactionError("enqueue needs an open transaction: this Prisma transaction has already ended; nothing was written", {
            cause: error,
          });
        }
        // Prisma wraps the database's error; its code (23505, SQLITE_CONSTRAINT_UNIQUE…) is what the
        // store recognises, e.g. a dedupe key already taken. MariaDB's is a number (1062), which the
        // store reads as errno, with the server's own message (naming the index).
        const original = (error as { meta?: { driverAdapterError?: { cause?: { originalCode?: unknown; originalMessage?: unknown } } } } | null)?.meta
          ?.driverAdapterError?.cause;
        if (typeof original?.originalCode === "string") {
          const text = error instanceof Error ? error.message.trim() : String(error);
          const server = typeof original.originalMessage === "string" ? original.originalMessage : "";
          const mysql = provider === "mysql" && /^\d+$/.test(original.originalCode);
          throw Object.assign(new Error(mysql && server !== "" && !text.includes(server) ? `${text}: ${server}` : text, { cause: error }), {
            code: original.originalCode,
            ...(mysql ? { errno: Number(original.originalCode) } : {}),
          });
        }
        throw error;
      }
    },
  };
}

/** Enqueues `message` inside the Prisma transaction `tx`, on `store` (see OutboxStore.enqueueIn). */
export function enqueue<P extends JsonValue>(
  store: Pick<OutboxStore<unknown>, "enqueueIn">,
  tx: PrismaTransactionClient,
  message: NewMessage<P>,
): Promise<OutboxMessage<P>> {
  return store.enqueueIn(fromPrisma(tx), message);
}
