// The package as a user installs it: `npm pack`, the tarball installed into a fresh project, a
// consumer type-checked with strict settings and run, as ES module and as CommonJS, on each store.
// The PostgreSQL project installs pg alone: it compiles nothing native, and asking it for the
// SQLite store gets the named error saying what to install; so does the MariaDB project, which
// installs mysql2 alone and runs the README's MariaDB lines. publint and arethetypeswrong check the
// package's manifest and types.

import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { requireBuilt, ROOT } from "../support/cli.js";
import { freshDatabase, mariadbAvailable } from "../support/mariadb.js";
import { freshSchema, postgresAvailable, TEST_DATABASE_URL } from "../support/postgres.js";
import { BIN, consume, devVersion, packTarball, project, run } from "./consumer-support.js";

let tarball = "";

beforeAll(() => {
  requireBuilt("index.js");
  const packed = packTarball();
  tarball = packed.tarball;
  const files = packed.files;
  expect(files).toContain("LICENSE");
  // Every source map that ships carries its sources (nothing points at an unshipped src/).
  for (const map of files.filter((f) => f.endsWith(".js.map"))) {
    const content = JSON.parse(readFileSync(join(ROOT, map), "utf8")) as { sources: string[]; sourcesContent?: (string | null)[] };
    expect(content.sourcesContent?.length, map).toBe(content.sources.length);
    expect(
      content.sourcesContent?.every((text) => typeof text === "string" && text.length > 0),
      map,
    ).toBe(true);
  }
}, 120_000);

describe("the packed package", () => {
  it("passes publint and arethetypeswrong (require of the ES module allowed: Node >= 20.19)", () => {
    expect(run(join(BIN, "publint"), ["--pack", "npm"], ROOT)).toMatch(/All good/);
    // cjs-resolves-to-esm: TypeScript before 5.8 could not type a require() of an ES module; Node
    // >= 20.19 runs one, and the CommonJS consumer below is type-checked and run through it.
    expect(run(join(BIN, "attw"), [tarball, "--ignore-rules", "cjs-resolves-to-esm"], ROOT)).toMatch(/No problems found/);
  }, 120_000);

  it("on SQLite: a strict consumer type-checks, and enqueues and processes a message as ESM and as CommonJS", () => {
    // The repository's own better-sqlite3 (already built), linked, its install script not run again,
    // so the test compiles nothing. The project has no pg.
    const dir = project(tarball, "consumer-sqlite", [join(ROOT, "node_modules", "better-sqlite3")], { ignoreScripts: true });
    for (const [file, module] of [
      ["consumer.mjs", "esm"],
      ["consumer.cjs", "cjs"],
    ] as const) {
      const report = consume(dir, file, { CONSUMER_STORE: "sqlite", CONSUMER_DB: join(dir, `${module}.db`) });
      expect(report).toEqual({
        module,
        store: "sqlite",
        status: "processed",
        handled: ['{"orderId":"order-1"}'],
        otherStore: "MissingClientError: the PostgreSQL store needs the package pg, which is not installed: run npm install pg",
      });
    }
  }, 240_000);

  it("on PostgreSQL with pg alone: nothing native is installed, both module kinds work, and the SQLite store names the package to install", async (context) => {
    if (!(await postgresAvailable())) return context.skip();
    const dir = project(tarball, "consumer-postgres", [`pg@${devVersion("pg")}`]);
    expect(existsSync(join(dir, "node_modules", "better-sqlite3"))).toBe(false);
    const native = readdirSync(join(dir, "node_modules"), { recursive: true, encoding: "utf8" }).filter(
      (f) => f.endsWith(".node") || f.endsWith("binding.gyp"),
    );
    expect(native).toEqual([]);
    for (const module of ["esm", "cjs"] as const) {
      const schema = freshSchema(`consumer_${module}`);
      const report = consume(dir, module === "esm" ? "consumer.mjs" : "consumer.cjs", {
        CONSUMER_STORE: "postgres",
        CONSUMER_DB: TEST_DATABASE_URL,
        CONSUMER_SCHEMA: schema,
      });
      expect(report).toMatchObject({ module, store: "postgres", status: "processed", handled: ['{"orderId":"order-1"}'] });
      expect(report.otherStore).toBe(
        "MissingClientError: the SQLite store needs the package better-sqlite3, which is not installed: run npm install better-sqlite3",
      );
    }
  }, 240_000);

  it("on MariaDB with mysql2 alone: the README's lines type-check and run as ESM and as CommonJS, and the SQLite store names the package to install", async (context) => {
    if (!(await mariadbAvailable())) return context.skip();
    const dir = project(tarball, "consumer-mariadb", [`mysql2@${devVersion("mysql2")}`], { consumer: "consumer-mariadb.mts" });
    expect(existsSync(join(dir, "node_modules", "better-sqlite3"))).toBe(false);
    expect(existsSync(join(dir, "node_modules", "pg"))).toBe(false);
    for (const module of ["esm", "cjs"] as const) {
      const database = await freshDatabase();
      try {
        const report = consume(dir, module === "esm" ? "consumer.mjs" : "consumer.cjs", { CONSUMER_DB: database.url });
        expect(report).toEqual({
          module,
          store: "mariadb",
          status: "processed",
          handled: ['{"orderId":"order-1"}'],
          otherStore: "MissingClientError: the SQLite store needs the package better-sqlite3, which is not installed: run npm install better-sqlite3",
        });
      } finally {
        await database.drop();
      }
    }
  }, 240_000);
});
