// The migration-version guard of both stores. Every row of wassal_migrations is Wassal's: each
// component of this version (the outbox with its inbox, the payments domain) records its own
// migrations there, and a store refuses to write to a database holding a name that no component
// of this version ships, since a newer Wassal wrote it (typically: a deployment rolled back).
// Each store checks before it writes anything: when it opens the database, and again inside its
// migration's lock, where a newer Wassal migrating meanwhile shows.

import { DatabaseTooNewError, InvalidArgumentError } from "../outbox/errors.js";

/** Throws DatabaseTooNewError when `applied` holds a name outside `known`. `location` says which database. */
export function refuseNewer(applied: readonly string[], known: ReadonlySet<string>, location: string): void {
  const newer = applied.filter((name) => !known.has(name)).sort();
  if (newer.length > 0) throw new DatabaseTooNewError(location, newer);
}

/**
 * Throws InvalidArgumentError for a migration that is not one this version ships: wassal_migrations
 * holds Wassal's own migrations only, so a name of the app's own there would make every later open
 * refuse the database as newer.
 */
export function refuseUnshipped(migrations: readonly { readonly name: string }[], known: ReadonlySet<string>): void {
  const foreign = migrations.map((m) => m.name).filter((name) => !known.has(name));
  if (foreign.length > 0) {
    throw new InvalidArgumentError(
      `migration ${foreign.map((name) => JSON.stringify(name)).join(", ")} is not one of this Wassal version's: wassal_migrations records Wassal's own migrations only (a name Wassal does not know marks the database as migrated by a newer Wassal); keep your own migrations in a table of your own`,
    );
  }
}
