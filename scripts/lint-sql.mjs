#!/usr/bin/env node
// SQL lives only under src/stores/ (the library's) and src/lab/stores/ (the lab's own tables). This
// check fails when a statement appears anywhere else in src/ (the dependency rules in .dependency-cruiser.cjs keep the database drivers there too).
import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";

const STATEMENT =
  /\b(SELECT\s+[\w*(]|INSERT\s+INTO|UPDATE\s+\S+\s+SET|DELETE\s+FROM|CREATE\s+(TABLE|INDEX|SCHEMA)|DROP\s+(TABLE|SCHEMA)|ALTER\s+TABLE|BEGIN\s+IMMEDIATE|SAVEPOINT\s+\w|pg_terminate_backend\(|PRAGMA\s+\w)/;
const root = join(import.meta.dirname, "..", "src");

function* files(dir) {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) yield* files(path);
    else if (entry.name.endsWith(".ts")) yield path;
  }
}

const found = [];
for (const file of files(root)) {
  const name = relative(root, file);
  if (name.startsWith("stores/") || name.startsWith("lab/stores/")) continue;
  readFileSync(file, "utf8")
    .split("\n")
    .forEach((line, index) => {
      if (STATEMENT.test(line)) found.push(`src/${name}:${index + 1}: ${line.trim()}`);
    });
}
if (found.length > 0) {
  process.stderr.write(`SQL outside src/stores/ and src/lab/stores/ (move it into a store module):\n${found.join("\n")}\n`);
  process.exit(1);
}
process.stdout.write("lint-sql: no SQL outside src/stores/ and src/lab/stores/\n");
