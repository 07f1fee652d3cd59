// The packed package's types as users compile them, on each TypeScript they run: 5.4 (the oldest
// supported), 5.9 and 7 (the native port, published as `typescript` 7). One project installs the
// tarball and every data layer's package (the versions the lock file pins, so npm finds them in its
// cache), and type-checks, under `strict`, `exactOptionalPropertyTypes` and `nodenext`:
//  - every ```ts block of README.md, verbatim, each its own module. A block that assumes names from
//    the prose around it (a `store`, the app's `db`) says so on the line before it,
//    `<!-- compiled with: NAME -->`, and test/package/types/readme/NAME.mts declares them, ahead of
//    the block. A block that is not meant to compile says why, `<!-- not compiled: WHY -->`; the
//    test counts those and prints them.
//  - test/package/types/*.mts: each integration's enqueue and from* with the user's own transaction
//    type (Kysely's Transaction and ControlledTransaction, Knex's Transaction, Drizzle's on
//    node-postgres, mysql2 and better-sqlite3, TypeORM's EntityManager and QueryRunner, a generated
//    Prisma client's), on a one-table and on a many-table schema.
// skipLibCheck is off, so Wassal's own declarations are checked on each version too. An error in
// the user's files or in Wassal's declarations fails; errors inside another package's
// declarations are counted and their packages named (drizzle-orm's need skipLibCheck, which its
// users set; pg-protocol's need TypeScript 5.7), not Wassal's to fix. Each TypeScript is installed from the registry once, into WASSAL_TS_CACHE
// (default <tmp>/wassal-typescript-cache), and reused.

import { spawnSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { requireBuilt, ROOT } from "../support/cli.js";
import { childEnv } from "../support/env.js";
import { devVersion, installedProject, installOnce, packTarball, typescriptBlocks } from "./consumer-support.js";

/** The newest 5.4, 5.9 and 7 releases when this was written (`npm view typescript versions`); bump them as new ones come. */
const VERSIONS = ["5.4.5", "5.9.3", "7.0.2"] as const;
const CACHE = process.env.WASSAL_TS_CACHE ?? join(tmpdir(), "wassal-typescript-cache");
const TYPES = join(ROOT, "test", "package", "types");
/** The data layers' packages, and the drivers whose types their entry points name. */
const PEERS = ["kysely", "knex", "drizzle-orm", "typeorm", "@prisma/client", "pg", "mysql2"] as const;

const PRISMA_SCHEMAS = {
  "prisma-one": 'model Order {\n  id String @id\n  @@map("orders")\n}\n',
  "prisma-many":
    'model Order {\n  id String @id\n  @@map("orders")\n}\nmodel Customer {\n  id String @id\n  name String\n  @@map("customers")\n}\n' +
    'model Line {\n  orderId String @map("order_id")\n  sku String\n  @@id([orderId, sku])\n  @@map("lines")\n}\n',
} as const;

/** Generates a Prisma client from `models` into `<dir>/<name>`, as `prisma generate` does for a user (offline: no engine download). */
function generatePrisma(dir: string, name: string, models: string): void {
  const schema = join(dir, `${name}.prisma`);
  writeFileSync(
    schema,
    `generator client {\n  provider = "prisma-client"\n  output   = "./${name}"\n}\ndatasource db {\n  provider = "postgresql"\n}\n${models}`,
  );
  const generated = spawnSync(process.execPath, [join(ROOT, "node_modules", "prisma", "build", "index.js"), "generate", "--schema", schema], {
    cwd: dir,
    encoding: "utf8",
    env: childEnv({ PRISMA_SCHEMA_ENGINE_BINARY: process.execPath, CHECKPOINT_DISABLE: "1", PRISMA_HIDE_UPDATE_MESSAGE: "1" }),
    timeout: 120_000,
  });
  if (generated.status !== 0) throw new Error(`prisma generate failed: ${generated.stdout}\n${generated.stderr}`);
}

/** The tsc of TypeScript `version`, installed into the cache once. */
function tscOf(version: string): string {
  const dir = join(CACHE, `typescript-${version}`);
  installOnce(dir, `typescript@${version}`);
  return join(dir, "node_modules", "typescript", "bin", "tsc");
}

interface Checked {
  /** Errors in the project's own files or in Wassal's declarations. */
  readonly ours: string[];
  /** Errors inside other packages' declarations. */
  readonly theirs: string[];
}

/** Type-checks the project in `dir` with `tsc`. */
function typeCheck(tsc: string, dir: string): Checked {
  const result = spawnSync(process.execPath, [tsc, "-p", ".", "--pretty", "false"], { cwd: dir, encoding: "utf8", env: childEnv({}), timeout: 300_000 });
  const errors = `${result.stdout}${result.stderr}`.split("\n").filter((line) => / error TS\d+:/.test(line));
  if (result.status !== 0 && errors.length === 0) throw new Error(`tsc exited ${result.status} without errors:\n${result.stdout}\n${result.stderr}`);
  const theirs = errors.filter((line) => line.startsWith("node_modules/") && !line.startsWith("node_modules/wassal/"));
  return { ours: errors.filter((line) => !theirs.includes(line)), theirs };
}

let dir = "";
const excluded: string[] = [];

beforeAll(() => {
  requireBuilt("index.js");
  const { tarball } = packTarball();
  dir = installedProject(
    tarball,
    "consumer-types",
    PEERS.map((name) => `${name}@${devVersion(name)}`),
    { ignoreScripts: true },
  );
  writeFileSync(join(dir, "package.json"), JSON.stringify({ ...JSON.parse(readFileSync(join(dir, "package.json"), "utf8")), type: "module" }));
  copyFileSync(join(TYPES, "tsconfig.json"), join(dir, "tsconfig.json"));
  for (const file of readdirSync(TYPES).filter((f) => f.endsWith(".mts"))) copyFileSync(join(TYPES, file), join(dir, file));
  for (const [name, models] of Object.entries(PRISMA_SCHEMAS)) generatePrisma(dir, name, models);

  // The README's blocks, each its own module, after the declarations it assumes.
  mkdirSync(join(dir, "readme"));
  for (const block of typescriptBlocks(readFileSync(join(ROOT, "README.md"), "utf8"))) {
    if (block.notCompiled !== null) {
      excluded.push(`README.md:${block.line} (${block.notCompiled})`);
      continue;
    }
    let context = "";
    if (block.context !== null) {
      const file = join(TYPES, "readme", `${block.context}.mts`);
      if (!existsSync(file)) throw new Error(`README.md:${block.line} is compiled with "${block.context}", but ${file} does not exist`);
      context = readFileSync(file, "utf8");
    }
    // A block that names its file on its first line (`// messages.ts`) is written as that file, so
    // that another block's `import … from "./messages.js"` finds it; the others by their line.
    const named = /^\/\/ ([\w-]+\.ts)\b/.exec(block.code)?.[1];
    const file = named ?? `readme-${block.line}.mts`;
    if (existsSync(join(dir, "readme", file))) throw new Error(`README.md:${block.line} names its file ${file}, which an earlier block named too`);
    writeFileSync(join(dir, "readme", file), `${context}// README.md, the block at line ${block.line}:\n${block.code}`);
  }
  console.log(`README.md: ${readdirSync(join(dir, "readme")).length} TypeScript blocks compiled; not compiled: ${excluded.join("; ") || "none"}`);
}, 300_000);

describe("the README's examples and every data layer's transaction types", () => {
  it("find TypeScript blocks in the README, and few marked as not compiled", () => {
    expect(readdirSync(join(dir, "readme")).length).toBeGreaterThanOrEqual(10);
    expect(excluded.length).toBeLessThanOrEqual(2);
  });

  for (const version of VERSIONS) {
    it(`type-check under TypeScript ${version} (strict, exactOptionalPropertyTypes, nodenext)`, () => {
      const tsc = tscOf(version);
      const reported = spawnSync(process.execPath, [tsc, "--version"], { encoding: "utf8" }).stdout.trim();
      expect(reported).toBe(`Version ${version}`);
      const { ours, theirs } = typeCheck(tsc, dir);
      const packages = [...new Set(theirs.map((line) => /^node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(line)?.[1]))].join(", ");
      console.log(
        `TypeScript ${version}: ${ours.length} errors in the consumer's files and Wassal's declarations; ${theirs.length} inside other packages' declarations${packages === "" ? "" : ` (${packages})`}`,
      );
      expect(ours).toEqual([]);
    }, 600_000);
  }
});
