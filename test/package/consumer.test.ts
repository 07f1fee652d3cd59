// The package as a user installs it: `npm pack`, the tarball installed into a fresh project, a
// consumer type-checked with strict settings and run, as ES module and as CommonJS, on each store.
// The PostgreSQL project installs pg alone: it compiles nothing native, and asking it for the
// SQLite store gets the named error saying what to install. publint and arethetypeswrong check the
// package's manifest and types.

import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { requireBuilt, ROOT } from "../support/cli.js";
import { childEnv } from "../support/env.js";
import { freshSchema, postgresAvailable, TEST_DATABASE_URL } from "../support/postgres.js";
import { tempDir } from "../support/temp.js";

const CONSUMER = join(ROOT, "test", "package", "consumer");
const TSC = join(ROOT, "node_modules", "typescript", "bin", "tsc");
const BIN = join(ROOT, "node_modules", ".bin");
/** The same versions the repository's lock file pins, so that npm finds them in its cache. */
const devVersion = (name: string): string => {
  const manifest = JSON.parse(readFileSync(join(ROOT, "node_modules", name, "package.json"), "utf8")) as { version: string };
  return manifest.version;
};

function run(command: string, args: readonly string[], cwd: string, env: Readonly<Record<string, string>> = {}): string {
  const result = spawnSync(command, args, { cwd, env: childEnv(env), encoding: "utf8", timeout: 240_000 });
  if (result.status !== 0) throw new Error(`${command} ${args.join(" ")} exited ${result.status}:\n${result.stdout}\n${result.stderr}`);
  return result.stdout;
}

/** The consumer, and its CommonJS twin: the part below "// main" wrapped in an async function. */
function writeConsumer(dir: string): void {
  const source = readFileSync(join(CONSUMER, "consumer.mts"), "utf8");
  const [head, main] = source.split("// main\n");
  if (head === undefined || main === undefined) throw new Error("consumer.mts has no // main line");
  writeFileSync(join(dir, "consumer.mts"), source);
  writeFileSync(
    join(dir, "consumer.cts"),
    `${head.replace('MODULE: Report["module"] = "esm"', 'MODULE: Report["module"] = "cjs"')}void (async () => {\n${main}})();\n`,
  );
  writeFileSync(join(dir, "tsconfig.json"), readFileSync(join(CONSUMER, "tsconfig.json")));
}

/** A fresh project with the tarball and `extra` installed; returns its folder. */
function project(tarball: string, name: string, extra: readonly string[], { ignoreScripts = false } = {}): string {
  const dir = join(tempDir("wassal-consumer-"), name);
  mkdirSync(dir);
  writeFileSync(join(dir, "package.json"), JSON.stringify({ name, private: true, version: "1.0.0" }));
  run(
    "npm",
    [
      "install",
      "--prefer-offline",
      "--no-audit",
      "--no-fund",
      "--loglevel=error",
      tarball,
      `@types/node@${devVersion("@types/node")}`,
      ...extra,
      ...(ignoreScripts ? ["--ignore-scripts"] : []),
    ],
    dir,
  );
  writeConsumer(dir);
  run(process.execPath, [TSC, "-p", "."], dir);
  return dir;
}

interface Report {
  readonly module: string;
  readonly store: string;
  readonly status: string;
  readonly handled: string[];
  readonly otherStore: string;
}

function consume(dir: string, file: string, env: Readonly<Record<string, string>>): Report {
  return JSON.parse(run(process.execPath, [join("out", file)], dir, env).trim()) as Report;
}

let tarball = "";

beforeAll(() => {
  requireBuilt("index.js");
  const packDir = tempDir("wassal-pack-");
  // dist/ is built already (npm test builds first): pack it as it is.
  const packed = JSON.parse(execFileSync("npm", ["pack", "--ignore-scripts", "--json", "--pack-destination", packDir], { cwd: ROOT, encoding: "utf8" })) as [
    { filename: string; files: { path: string }[] },
  ];
  tarball = join(packDir, packed[0].filename);
  const files = packed[0].files.map((f) => f.path);
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
});
