// Every store's SQL file names the same statements: each name one backend defines is defined by
// every other, or carries a one-line `// name: (none) why` note there, so a reader comparing two
// backends finds every statement's counterpart (or the reason there is none) by its name.

import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ROOT } from "../support/cli.js";

const STORES = join(ROOT, "src", "stores");

interface Names {
  readonly defined: ReadonlySet<string>;
  readonly none: ReadonlySet<string>;
}

/** The statement names of a backend's outbox-sql.ts: keys of its statements object, and `(none)` notes. */
function namesOf(file: string): Names {
  const text = readFileSync(file, "utf8");
  const start = text.search(/^export (const SQL\b|function outboxSql\b)/m);
  expect(start, `${file}: its statements object (export const SQL or export function outboxSql)`).toBeGreaterThanOrEqual(0);
  // The object alone, up to its closing brace at the start of a line (the types after it are not statements).
  const end = text.slice(start).search(/^}( as const)?;?$/m);
  const body = text.slice(start, end < 0 ? undefined : start + end);
  return {
    defined: new Set([...body.matchAll(/^ {2,4}([a-zA-Z]+)(?::|\()/gm)].map((m) => m[1] as string)),
    none: new Set([...body.matchAll(/\/\/ ([a-zA-Z]+): \(none/g)].map((m) => m[1] as string)),
  };
}

const backends = readdirSync(STORES, { withFileTypes: true })
  .filter((entry) => entry.isDirectory())
  .map((entry) => ({ name: entry.name, names: namesOf(join(STORES, entry.name, "outbox-sql.ts")) }));

describe("statement names across the stores' SQL files", () => {
  it("finds at least the SQLite and PostgreSQL files, each with dozens of statements", () => {
    expect(backends.map((b) => b.name)).toEqual(expect.arrayContaining(["sqlite", "postgres"]));
    for (const backend of backends) expect(backend.names.defined.size, backend.name).toBeGreaterThan(40);
  });

  for (const from of backends) {
    for (const to of backends) {
      if (from === to) continue;
      it(`every ${from.name} statement is in ${to.name}'s file, or has a (none) note there`, () => {
        const missing = [...from.names.defined].filter((name) => !to.names.defined.has(name) && !to.names.none.has(name));
        expect(missing, `names ${from.name} defines that ${to.name}'s outbox-sql.ts neither defines nor notes as (none: why)`).toEqual([]);
      });
    }
  }
});
