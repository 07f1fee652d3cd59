// The mysql2 driver (its promise API), loaded when a MariaDB store is first opened: an app on
// SQLite or PostgreSQL alone need not install it.

import type * as mysql from "mysql2/promise";
import { requireOptional } from "../../outbox/optional.js";

export function mysqlDriver(): typeof mysql {
  return requireOptional<typeof mysql>("mysql2/promise", "the MariaDB store");
}
