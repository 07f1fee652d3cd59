// The SQLite backend of the one opener: a file path (anything that is not a URL with a scheme).

import { existsSync } from "node:fs";
import { DatabaseOpenError } from "../../outbox/errors.js";
import type { OutboxStore } from "../../outbox/store.js";
import type { StoreBackend } from "../backend.js";
import { fileHasTable } from "./open-database.js";
import { SqliteOutboxStore } from "./sqlite-outbox-store.js";

/** scheme://…: a server's URL, never a file path. */
const URL_SCHEME = /^[a-z][a-z0-9+.-]*:\/\//i;

export const sqliteBackend: StoreBackend = {
  name: "sqlite",
  shape: "a file path such as ./app.db",
  matches: (db) => !URL_SCHEME.test(db),
  async open(db, options, lookOnly) {
    if (lookOnly && !existsSync(db)) {
      // Nothing there yet: an empty database in memory answers for it, and no file is created.
      return { store: new SqliteOutboxStore({ path: ":memory:" }) as OutboxStore<unknown>, location: `${db} (no file yet)`, missing: "" };
    }
    const missing = `${db} is a SQLite database but holds no Wassal outbox; give the path of a Wassal database (run 'wassal migrate --db ${db}' to create one)`;
    if (options.mustExist || options.readOnly) {
      if (!existsSync(db)) throw new DatabaseOpenError(`no database at ${db}; give the path of an existing Wassal SQLite file or a server's URL`);
      // Look before opening: opening for Wassal would already change someone else's file.
      if (!fileHasTable(db, "outbox_messages")) throw new DatabaseOpenError(missing);
    }
    const store = new SqliteOutboxStore({
      path: db,
      ...(options.synchronous === undefined ? {} : { synchronous: options.synchronous }),
      ...(options.clock === undefined ? {} : { clock: options.clock }),
      ...(options.audit === undefined ? {} : { audit: options.audit }),
      ...(options.onComplete === undefined ? {} : { onComplete: options.onComplete }),
      ...(options.tracing === undefined ? {} : { tracing: options.tracing }),
      ...(options.readOnly ? { readOnly: true } : {}),
    });
    return { store: store as OutboxStore<unknown>, location: db, missing };
  },
};
