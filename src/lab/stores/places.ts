// Where a lab or chaos run keeps its data on each store backend, one entry per backend: a place
// of the run's own (a fresh schema on a PostgreSQL server, a fresh database on a MariaDB server,
// a file in the run's folder for SQLite), how to remove it, and the faults the chaos harness can
// inject there. The lab, the
// chaos runs and the CLI ask here instead of testing which backend a --db names.

import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { InvalidArgumentError } from "../../outbox/errors.js";
import { redactUrl } from "../../outbox/redact.js";
import { BACKENDS, backendFor } from "../../stores/open-outbox.js";
import { type ConnectionKiller, dropSchema, openConnectionKiller, postgresServerVersion } from "./admin.js";
import { createMariaDbDatabase, dropMariaDbDatabase, mariadbServerVersion, openMariaDbConnectionKiller } from "./mariadb-admin.js";

export type { ConnectionKiller } from "./admin.js";

/** A place of one run's own, on one store. */
export interface ScratchPlace {
  /** The backend's name ("sqlite", "postgres", "mariadb"). */
  readonly kind: string;
  /** What openOutbox takes: the URL or the path. */
  readonly db: string;
  /** Where on that database (a PostgreSQL schema). */
  readonly options: { readonly schema?: string };
  /** Shown to the user: the path, or the URL without its password and the schema. */
  readonly location: string;
  /** The place itself, in words: "schema wassal_lab_…", "database wassal_lab_…", or the file's path. */
  readonly name: string;
  /** Removes the place and everything in it (a file place goes with the run's folder). */
  remove(): Promise<void>;
  /** For a server: a connection that terminates the run's connections (the chaos harness's fault). */
  readonly openConnectionKiller?: () => Promise<ConnectionKiller>;
}

interface PlaceKind {
  /** A server's places are fresh schemas or databases on it, so several runs may share one --db; a file backend's are files. */
  readonly server: boolean;
  /** One line naming the server, its version and the settings runs use; one clear error when it cannot be reached. */
  describe(db: string): Promise<string>;
  /** A fresh place named after `label`: on the server `db` (created there now), or a file in `folder`. */
  scratch(db: string, folder: string, label: string): Promise<ScratchPlace>;
}

const PLACES: Readonly<Record<string, PlaceKind>> = {
  sqlite: {
    server: false,
    describe: async () => "SQLite",
    scratch: async (_db, folder, label) => {
      const path = join(folder, `${label}.db`);
      return { kind: "sqlite", db: path, options: {}, location: path, name: path, remove: async () => undefined };
    },
  },
  postgres: {
    server: true,
    describe: async (db) => `PostgreSQL ${await postgresServerVersion(db)} (pg), READ COMMITTED, one pool per worker`,
    scratch: async (db, _folder, label) => {
      const schema = `wassal_${label}_${randomBytes(5).toString("hex")}`;
      return {
        kind: "postgres",
        db,
        options: { schema },
        location: `${redactUrl(db)} (schema ${schema})`,
        name: `schema ${schema}`,
        remove: () => dropSchema(db, schema),
        openConnectionKiller: () => openConnectionKiller(db),
      };
    },
  },
  mariadb: {
    server: true,
    describe: async (db) => `MariaDB ${await mariadbServerVersion(db)} (mysql2), READ COMMITTED, one pool per worker`,
    scratch: async (db, _folder, label) => {
      // A MariaDB schema is a database: the run gets a database of its own, and its URL names it.
      const database = `wassal_${label}_${randomBytes(5).toString("hex")}`;
      const url = await createMariaDbDatabase(db, database);
      return {
        kind: "mariadb",
        db: url,
        options: {},
        location: redactUrl(url),
        name: `database ${database}`,
        remove: () => dropMariaDbDatabase(db, database),
        openConnectionKiller: () => openMariaDbConnectionKiller(db, database),
      };
    },
  },
};

/** The stores a run can use, as the --store option of the chaos commands names them. */
export function storeShapes(): string {
  return `"sqlite" or a server's URL (${BACKENDS.filter((b) => PLACES[b.name]?.server === true)
    .map((b) => b.shape)
    .join(", ")})`;
}

/** The place kind for a --store value ("sqlite", or a server's URL); InvalidArgumentError naming the valid ones otherwise. */
function placeKind(store: string): { readonly name: string; readonly kind: PlaceKind } {
  const name = store === "sqlite" ? "sqlite" : backendFor(store).name;
  const kind = PLACES[name];
  if (kind === undefined || (store !== "sqlite" && !kind.server)) {
    throw new InvalidArgumentError(`store must be ${storeShapes()} (got ${JSON.stringify(redactUrl(store))})`);
  }
  return { name, kind };
}

/** Checks a --store value (before anything runs). */
export function checkStore(store: string): void {
  placeKind(store);
}

/** True when `db` names a server, where every run gets a fresh place of its own. */
export function isServer(db: string): boolean {
  return PLACES[backendFor(db).name]?.server === true;
}

/** A fresh place for one run: `store` is "sqlite" (a file in `folder`) or a server's URL (a fresh schema or database there). */
export function scratchPlace(store: string, folder: string, label: string): Promise<ScratchPlace> {
  return placeKind(store).kind.scratch(store, folder, label);
}

/** One line naming the server `db` names, its version and the settings runs use (one clear error when it cannot be reached). */
export function describeServer(db: string): Promise<string> {
  return placeKind(db).kind.describe(db);
}
