// Prepared statements, cached per connection: preparing costs more than running a small query.

import type Database from "better-sqlite3";

const caches = new WeakMap<Database.Database, Map<string, Database.Statement>>();
const rawCaches = new WeakMap<Database.Database, Map<string, Database.Statement>>();

function cached(store: WeakMap<Database.Database, Map<string, Database.Statement>>, db: Database.Database, sql: string, raw: boolean): Database.Statement {
  let cache = store.get(db);
  if (cache === undefined) {
    cache = new Map();
    store.set(db, cache);
  }
  let prepared = cache.get(sql);
  if (prepared === undefined) {
    prepared = raw ? db.prepare(sql).raw(true) : db.prepare(sql);
    cache.set(sql, prepared);
  }
  return prepared;
}

export function statement(db: Database.Database, sql: string): Database.Statement {
  return cached(caches, db, sql, false);
}

/**
 * As statement, in better-sqlite3's raw mode: each row comes back as an array of its columns in
 * the statement's order, not as an object, which saves building an object per row (kept apart
 * from `statement`'s cache, so that no other caller of the same text meets arrays).
 */
export function rawStatement(db: Database.Database, sql: string): Database.Statement {
  return cached(rawCaches, db, sql, true);
}
