// The better-sqlite3 driver (a native addon), loaded when a SQLite store is first opened: an app
// on PostgreSQL alone need not install it, nor compile it.

import type Database from "better-sqlite3";
import { requireOptional } from "../../outbox/optional.js";

export function sqliteDriver(): typeof Database {
  return requireOptional<typeof Database>("better-sqlite3", "the SQLite store");
}
