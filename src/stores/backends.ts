// Every store backend the one opener knows, one line each. A --db string goes to the first
// backend that matches it; SQLite, which takes any path, comes last.

import { InvalidArgumentError } from "../outbox/errors.js";
import { redactUrl } from "../outbox/redact.js";
import type { StoreBackend } from "./backend.js";
import { mariadbBackend } from "./mariadb/backend.js";
import { postgresBackend } from "./postgres/backend.js";
import { sqliteBackend } from "./sqlite/backend.js";

export const BACKENDS: readonly StoreBackend[] = [postgresBackend, mariadbBackend, sqliteBackend];

/** The backend that takes `db`; InvalidArgumentError naming the valid shapes when none does (a scheme typo). */
export function backendFor(db: string): StoreBackend {
  const backend = BACKENDS.find((candidate) => candidate.matches(db));
  if (backend !== undefined) return backend;
  const scheme = /^[^:]*:/.exec(db)?.[0] ?? db;
  throw new InvalidArgumentError(
    `no store takes ${JSON.stringify(redactUrl(db))} (scheme ${JSON.stringify(scheme)}); give ${BACKENDS.map((b) => b.shape).join(", or ")}`,
  );
}
