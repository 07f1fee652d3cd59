// Prepared statements, cached per connection: preparing costs more than running a small query.

import type Database from "better-sqlite3";

const caches = new WeakMap<Database.Database, Map<string, Database.Statement>>();

export function statement(db: Database.Database, sql: string): Database.Statement {
  let cache = caches.get(db);
  if (cache === undefined) {
    cache = new Map();
    caches.set(db, cache);
  }
  let prepared = cache.get(sql);
  if (prepared === undefined) {
    prepared = db.prepare(sql);
    cache.set(sql, prepared);
  }
  return prepared;
}

const rawCaches = new WeakMap<Database.Database, Map<string, Database.Statement>>();

/**
 * As statement, in better-sqlite3's raw mode: each row comes back as an array of its columns in
 * the statement's order, not as an object, which saves building an object per row (kept apart
 * from `statement`'s cache, so that no other caller of the same text meets arrays).
 */
export function rawStatement(db: Database.Database, sql: string): Database.Statement {
  let cache = rawCaches.get(db);
  if (cache === undefined) {
    cache = new Map();
    rawCaches.set(db, cache);
  }
  let prepared = cache.get(sql);
  if (prepared === undefined) {
    prepared = db.prepare(sql).raw(true);
    cache.set(sql, prepared);
  }
  return prepared;
}
