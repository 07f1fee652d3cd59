// The migration-version guard of every store. Every row of wassal_migrations is Wassal's: each
// component (the outbox with its inbox, and any that a Wassal client such as the payments lab
// brings) records its own migrations there under its own prefix ("outbox-013-inbox-order"), and
// ships its list here with shipMigrations when its module loads. A store refuses to write to a
// database holding a name of a shipped component that this version does not ship, since a newer
// Wassal wrote it (typically: a deployment rolled back). A component this process does not load
// is not judged: its tables are not this process's to write. Each store checks before it writes
// anything: when it opens the database, and again inside its migration's lock, where a newer
// Wassal migrating meanwhile shows.

import { DatabaseTooNewError, InvalidArgumentError } from "../outbox/errors.js";

/** Each component's shipped migration names, by the component's prefix. */
const shipped = new Map<string, Set<string>>();

function componentOf(name: string): string {
  return name.split("-", 1)[0] ?? name;
}

/** Records a component's migrations (every name starts with the component's prefix and a dash). */
export function shipMigrations(migrations: readonly { readonly name: string }[]): void {
  for (const { name } of migrations) {
    const component = componentOf(name);
    const names = shipped.get(component) ?? new Set<string>();
    names.add(name);
    shipped.set(component, names);
  }
}

/** Throws DatabaseTooNewError when `applied` holds a name of a shipped component that it does not ship. `location` says which database. */
export function refuseNewer(applied: readonly string[], location: string): void {
  const newer = applied.filter((name) => shipped.get(componentOf(name))?.has(name) === false).sort();
  if (newer.length > 0) throw new DatabaseTooNewError(location, newer);
}

/**
 * Throws InvalidArgumentError for a migration that no component shipped: wassal_migrations holds
 * Wassal's own migrations only, so a name of the app's own there could mark the database as newer.
 */
export function refuseUnshipped(migrations: readonly { readonly name: string }[]): void {
  const foreign = migrations.map((m) => m.name).filter((name) => shipped.get(componentOf(name))?.has(name) !== true);
  if (foreign.length > 0) {
    throw new InvalidArgumentError(
      `migration ${foreign.map((name) => JSON.stringify(name)).join(", ")} is not one of this Wassal version's: wassal_migrations records Wassal's own migrations only (a name Wassal does not know marks the database as migrated by a newer Wassal); keep your own migrations in a table of your own`,
    );
  }
}
