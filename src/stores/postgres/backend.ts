// The PostgreSQL backend of the one opener: postgres:// and postgresql:// URLs.

import type { OutboxStore } from "../../outbox/store.js";
import { type StoreBackend, serverConnectOptions } from "../backend.js";
import { isPostgresUrl, redactUrl } from "./connect.js";
import { PostgresOutboxStore } from "./postgres-outbox-store.js";

export const postgresBackend: StoreBackend = {
  name: "postgres",
  shape: "postgres://user@host:5432/database",
  matches: isPostgresUrl,
  async open(db, options) {
    const store = await PostgresOutboxStore.connect({
      url: db,
      ...(options.schema === undefined ? {} : { schema: options.schema }),
      ...serverConnectOptions(options),
    });
    return {
      store: store as OutboxStore<unknown>,
      location: `${redactUrl(db)} (schema ${store.schema})`,
      missing: `no Wassal outbox in schema ${store.schema} at ${redactUrl(db)}; check --schema (default wassal), or run 'wassal migrate --db …' there first`,
    };
  },
};
