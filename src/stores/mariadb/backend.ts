// The MariaDB backend of the one opener: mariadb:// and mysql:// URLs (MariaDB 10.6 or later;
// MySQL itself is not supported: it has no INSERT … RETURNING). The URL names the database that
// holds Wassal's tables; --schema does not apply.

import type { OutboxStore } from "../../outbox/store.js";
import type { StoreBackend } from "../backend.js";
import { isMariaDbUrl, redactUrl } from "./connect.js";
import { MariaDbOutboxStore } from "./mariadb-outbox-store.js";

export const mariadbBackend: StoreBackend = {
  name: "mariadb",
  shape: "mariadb://user@host:3306/database",
  matches: isMariaDbUrl,
  async open(db, options) {
    const store = await MariaDbOutboxStore.connect({
      url: db,
      ...(options.clock === undefined ? {} : { clock: options.clock }),
      ...(options.maxConnections === undefined ? {} : { maxConnections: options.maxConnections }),
      ...(options.applicationName === undefined ? {} : { applicationName: options.applicationName }),
      ...(options.audit === undefined ? {} : { audit: options.audit }),
      ...(options.tracing === undefined ? {} : { tracing: options.tracing }),
      ...(options.readOnly ? { readOnly: true } : {}),
    });
    return {
      store: store as OutboxStore<unknown>,
      location: redactUrl(db),
      missing: `no Wassal outbox in MariaDB database ${store.database} at ${redactUrl(db)}; run 'wassal migrate --db …' there first`,
    };
  },
};
