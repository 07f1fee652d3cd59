// The pg driver, loaded when a PostgreSQL store is first opened: an app on SQLite alone need not
// install it.

import type pg from "pg";
import { requireOptional } from "../../outbox/optional.js";

export function pgDriver(): typeof pg {
  return requireOptional<typeof pg>("pg", "the PostgreSQL store");
}
