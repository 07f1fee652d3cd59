// The MariaDB backend of the one opener: mariadb:// and mysql:// URLs (MariaDB 10.6 or later;
// MySQL itself is not supported: it has no INSERT … RETURNING). The URL names the database that
// holds Wassal's tables; --schema does not apply.

import type { OutboxStore } from "../../outbox/store.js";
import { InvalidArgumentError } from "../../outbox/errors.js";
import { type StoreBackend, serverConnectOptions } from "../backend.js";
import { isMariaDbUrl, redactUrl } from "./connect.js";
import { MariaDbOutboxStore } from "./mariadb-outbox-store.js";

export const mariadbBackend: StoreBackend = {
  name: "mariadb",
  shape: "mariadb://user@host:3306/database",
  matches: isMariaDbUrl,
  async open(db, options) {
    // A MariaDB schema is a database, which the URL names: a --schema would be silently ignored.
    if (options.schema !== undefined) {
      throw new InvalidArgumentError(
        `--schema is PostgreSQL's: on MariaDB the URL names the database holding Wassal's tables (mariadb://user@host:3306/DATABASE); leave --schema out (got ${JSON.stringify(options.schema)})`,
      );
    }
    const store = await MariaDbOutboxStore.connect({ url: db, ...serverConnectOptions(options) });
    return {
      store: store as OutboxStore<unknown>,
      location: redactUrl(db),
      missing: `no Wassal outbox in MariaDB database ${store.database} at ${redactUrl(db)}; run 'wassal migrate --db …' there first`,
    };
  },
};
