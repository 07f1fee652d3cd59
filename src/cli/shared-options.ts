// Options several commands share.

import { Option } from "commander";
import type { OpenOutboxOptions } from "../stores/open-outbox.js";
import { oneOf } from "./options.js";

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

export function dbOption(): Option {
  return new Option("--db <url-or-path>", "a SQLite file path or a postgres:// URL").env("WASSAL_DATABASE_URL");
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
