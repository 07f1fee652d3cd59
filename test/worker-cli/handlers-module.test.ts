// `wassal worker --handlers <file>`: the app's own handlers, from a module, on every store. The
// worker claims only the types its module handles, so another service's messages stay pending
// (never dead-lettered by a stranger); `--types` widens or narrows that. A module may export a
// function that receives the store, for handlers that write through its transaction. A module that
// is missing or exports no handlers, or flags meant for the payments demo, exit 2 with one line.
//
// Needs `npm run build` first (`npm test` does it).

import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { killAll, requireBuiltCli, ROOT, runCli, startCli } from "../support/cli.js";
import { expectNoStack } from "../support/assertions.js";
import { mariadbAvailable } from "../support/mariadb.js";
import { postgresAvailable } from "../support/postgres.js";
import { tempDir } from "../support/temp.js";
import { until } from "../support/wait.js";
import { closeTargets, createTarget, logLines, newTarget, waitForRows, type StoreKind } from "./harness.js";

const PG = await postgresAvailable();
const MARIADB = await mariadbAvailable();
const dir = tempDir("wassal-wcli-handlers-");

beforeAll(requireBuiltCli);
afterEach(killAll);
afterAll(closeTargets);

/** A handlers module: order.ship records its message id in a business row, committed with the completion. */
const SHIPPING = `
export function handlers({ store }) {
  const sqlite = typeof store.db === "object";
  const mariadb = store.kind === "mariadb";
  return {
    "order.ship": async (message) => ({
      summary: "shipped " + message.payload.orderId,
      finalize: (tx) =>
        sqlite
          ? tx.prepare("INSERT INTO shipped (order_id) VALUES (?)").run(message.payload.orderId)
          : mariadb
            ? tx.query("INSERT INTO shipped (order_id) VALUES (?)", [message.payload.orderId])
            : tx.query("INSERT INTO " + store.schema + ".shipped (order_id) VALUES ($1)", [message.payload.orderId]),
    }),
  };
}
`;

for (const kind of ["sqlite", "postgres", "mariadb"] as const satisfies readonly StoreKind[]) {
  describe.runIf(kind === "sqlite" || (kind === "postgres" ? PG : MARIADB))(`${kind}: wassal worker --handlers`, () => {
    it("runs the module's handlers, committing their writes, and leaves another service's types pending; --types adds one to claim", async () => {
      const target = await createTarget(kind, dir);
      const module = join(dir, `shipping-${kind}.mjs`);
      writeFileSync(module, SHIPPING);
      const outbox = await target.open();
      const store = outbox.store;
      const table = kind === "postgres" ? `${(store as unknown as { schema: string }).schema}.shipped` : "shipped";
      let ids: { ship: string; invoice: string };
      try {
        await store.migrate();
        await store.transaction(async (tx) => {
          const sql = `CREATE TABLE ${table} (order_id ${kind === "mariadb" ? "VARCHAR(100)" : "TEXT"} PRIMARY KEY)`;
          if (kind === "sqlite") (tx as { exec(sql: string): void }).exec(sql);
          else await (tx as { query(sql: string): Promise<unknown> }).query(sql);
        });
        ids = await store.transaction(async (tx) => ({
          ship: (await store.enqueue(tx, { type: "order.ship", payload: { orderId: "o-1" } })).id,
          invoice: (await store.enqueue(tx, { type: "billing.invoice", payload: { orderId: "o-1" } })).id,
        }));
      } finally {
        await outbox.close();
      }
      const worker = startCli(["worker", ...target.args, "--handlers", module, "--poll-ms", "50", "--log-level", "info"], { cwd: dir });
      await waitForRows(target, "order.ship processed", (rows) => rows.find((r) => r.id === ids.ship)?.status === "processed", [worker]);
      await worker.waitForStderr(/"worker started"/);
      expect(worker.stderr()).toContain('"types":["order.ship"]');
      // Both were due at once and the worker had 10 free slots: a claim of every type would have
      // taken the invoice with the order. It is untouched.
      expect((await target.messages()).find((r) => r.id === ids.invoice)).toMatchObject({ status: "pending", attempts: 0, lockedBy: null });
      worker.signal("SIGTERM");
      expect((await worker.waitForExit(20_000)).code).toBe(0);

      const check = await target.open();
      try {
        const shipped =
          kind === "sqlite"
            ? (check.store as unknown as { db: { prepare(sql: string): { all(): unknown[] } } }).db.prepare(`SELECT order_id FROM ${table}`).all()
            : kind === "mariadb"
              ? (
                  await (check.store as unknown as { pool: { query(sql: string): Promise<[unknown[], unknown]> } }).pool.query(`SELECT order_id FROM ${table}`)
                )[0]
              : (await (check.store as unknown as { pool: { query(sql: string): Promise<{ rows: unknown[] }> } }).pool.query(`SELECT order_id FROM ${table}`))
                  .rows;
        expect(shipped).toEqual([{ order_id: "o-1" }]);
      } finally {
        await check.close();
      }

      // --types billing.invoice: claimed now; this module has no handler for it, so it is marked dead, saying so.
      const picky = startCli(["worker", ...target.args, "--handlers", module, "--types", "billing.invoice", "--poll-ms", "50", "--log-level", "warn"], {
        cwd: dir,
      });
      const rows = await waitForRows(target, "the invoice dead", (r) => r.find((m) => m.id === ids.invoice)?.status === "dead", [picky]);
      expect(rows.find((m) => m.id === ids.invoice)?.lastError).toMatch(/^UnknownMessageTypeError: no handler for message type "billing\.invoice"/);
      picky.signal("SIGTERM");
      await picky.waitForExit(20_000);
    });
  });
}

describe("wassal worker: the payments demo is a handlers module too", () => {
  it("runs the same reconciliation given as --handlers as by default", async () => {
    const target = newTarget("sqlite", dir);
    await runCli(["payments", "seed", ...target.args, "--count", "5"], { cwd: dir });
    const module = join(ROOT, "dist", "runtime", "payments-handlers.js");
    const worker = startCli(["worker", ...target.args, "--handlers", module, "--poll-ms", "50", "--log-level", "info"], { cwd: dir });
    const rows = await waitForRows(target, "5 reconciled", (r) => r.length === 5 && r.every((m) => m.status === "processed"), [worker]);
    expect(rows.map((m) => m.type)).toEqual(Array(5).fill("payment.reconcile"));
    expect(worker.stderr()).toContain('"types":["payment.reconcile"]');
    worker.signal("SIGTERM");
    expect((await worker.waitForExit(20_000)).code).toBe(0);
  });
});

describe("wassal worker --handlers: a module of batch handlers alone", () => {
  it("takes the batch types, calls the batch handler with a claim's messages, and completes each", async () => {
    const target = newTarget("sqlite", dir);
    const module = join(dir, "batch-mail.mjs");
    writeFileSync(
      module,
      `export const batchHandlers = {
        "mail.send": { maxBatch: 4, handle: async (messages) => messages.map(() => ({ summary: "batch of " + messages.length })) },
      };\n`,
    );
    const outbox = await target.open();
    try {
      await outbox.store.migrate();
      await outbox.store.transaction(async (tx) => {
        for (let n = 0; n < 6; n += 1) await outbox.store.enqueue(tx, { type: "mail.send", payload: { n } });
      });
    } finally {
      await outbox.close();
    }
    const worker = startCli(["worker", ...target.args, "--handlers", module, "--poll-ms", "50", "--log-level", "debug"], { cwd: dir });
    await waitForRows(target, "6 mails processed", (r) => r.length === 6 && r.every((m) => m.status === "processed"), [worker]);
    expect(worker.stderr()).toContain('"types":["mail.send"]');
    // The log line follows the commit: wait for all six, not just for the rows.
    const sizes = await until("six processing-finished lines", () => {
      const lines = logLines(worker.stderr())
        .filter((l) => l.event === "processing-finished")
        .map((l) => String(l.detail));
      return lines.length === 6 && lines;
    });
    expect(sizes.sort()).toEqual(["batch of 2", "batch of 2", "batch of 4", "batch of 4", "batch of 4", "batch of 4"]);
    worker.signal("SIGTERM");
    expect((await worker.waitForExit(20_000)).code).toBe(0);
  });

  it("exits 2 naming a bad batch handler", async () => {
    const target = newTarget("sqlite", dir);
    const module = join(dir, "bad-batch.mjs");
    writeFileSync(module, `export const batchHandlers = { "mail.send": { maxBatch: 0, handle: async () => [] } };\n`);
    const result = await runCli(["worker", ...target.args, "--handlers", module], { cwd: dir });
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/batchHandlers\["mail\.send"\]\.maxBatch must be a whole number from 1 to 1000/);
    expectNoStack(result.stderr);
  });
});

describe("wassal worker --handlers: a mistyped type", () => {
  it("warns at start, naming the pending type it is likely meant to be and how many wait", async () => {
    const target = newTarget("sqlite", dir);
    const module = join(dir, "typo.mjs");
    writeFileSync(module, 'export default { "order.placd": async () => ({}) };\n');
    const outbox = await target.open();
    try {
      await outbox.store.migrate();
      await outbox.store.transaction(async (tx) => {
        for (let n = 0; n < 3; n += 1) await outbox.store.enqueue(tx, { type: "order.placed", payload: { n } });
      });
    } finally {
      await outbox.close();
    }
    const worker = startCli(["worker", ...target.args, "--handlers", module, "--poll-ms", "50", "--log-level", "info"], { cwd: dir });
    await worker.waitForStderr(/"worker started"/);
    worker.signal("SIGTERM");
    expect((await worker.waitForExit(20_000)).code).toBe(0);
    const warning = logLines(worker.stderr()).find((line) => line.level === 40 && line.type === "order.placd");
    expect(warning).toMatchObject({ msg: "order.placd: did you mean order.placed? 3 pending (nothing of order.placd is)", meant: "order.placed", pending: 3 });
    expect(worker.stderr()).toContain('"takes":["order.placd"]');
  });
});

describe("wassal worker --handlers: a handler past its maximum processing time", () => {
  it("fails the attempt with ProcessingTimeoutError (the module's perType) and the worker carries on", async () => {
    const target = newTarget("sqlite", dir);
    const module = join(dir, "hanging.mjs");
    writeFileSync(
      module,
      `export const perType = { "report.hang": { maxProcessingMs: 300, retry: { maxAttempts: 1 } } };
export default {
  "report.hang": () => new Promise(() => {}),
  "report.quick": async () => ({ summary: "done" }),
};
`,
    );
    const outbox = await target.open();
    let ids: { hang: string; quick: string };
    try {
      await outbox.store.migrate();
      ids = await outbox.store.transaction(async (tx) => ({
        hang: (await outbox.store.enqueue(tx, { type: "report.hang", payload: 1 })).id,
        quick: (await outbox.store.enqueue(tx, { type: "report.quick", payload: 2 })).id,
      }));
    } finally {
      await outbox.close();
    }
    // --grace-ms 100: the hanging handler keeps its slot until it returns, which it never does.
    const worker = startCli(["worker", ...target.args, "--handlers", module, "--poll-ms", "50", "--grace-ms", "100", "--log-level", "warn"], { cwd: dir });
    const rows = await waitForRows(target, "the hanging report dead", (r) => r.find((m) => m.id === ids.hang)?.status === "dead", [worker]);
    expect(rows.find((m) => m.id === ids.hang)?.lastError).toMatch(
      /^ProcessingTimeoutError: the handler for message type "report\.hang" ran longer than its maximum processing time of 300 ms/,
    );
    expect(rows.find((m) => m.id === ids.quick)?.status).toBe("processed");
    worker.signal("SIGTERM");
    expect((await worker.waitForExit(20_000)).code).toBe(0);
  });
});

describe("wassal worker --handlers: bad input", () => {
  const cases: [string, string, string[], RegExp][] = [
    [
      "a file that does not exist",
      "",
      ["--handlers", "./nope.mjs"],
      /^wassal: --handlers \.\/nope\.mjs: no such file \(.*nope\.mjs\); give the path of a JavaScript module that exports handlers$/,
    ],
    [
      "a module that exports no handlers",
      "export const x = 1;\n",
      [],
      /^wassal: --handlers .*: expected a default export or an export named handlers: .* \(it exports x\)$/,
    ],
    [
      "a handler that is not a function",
      'export default { "order.ship": 42 };\n',
      [],
      /^wassal: --handlers .*: the handler for message type "order\.ship" is not a function \(got number\)$/,
    ],
    ["an empty object", "export default {};\n", [], /^wassal: --handlers .*: exports no handlers \(an empty object\)/],
    [
      "a factory that throws",
      'export function handlers() { throw new Error("no config"); }\n',
      [],
      /^wassal: --handlers .*: its handlers function threw: no config$/,
    ],
    ["a module that fails to load", "export default {\n", [], /^wassal: --handlers .*: could not be loaded: /],
    [
      "flags meant for the payments demo",
      'export default { "order.ship": async () => ({}) };\n',
      ["--provider-latency-ms", "5"],
      /^wassal: --provider-latency-ms configure the payments demo's handler: leave them out with --handlers$/,
    ],
    [
      "a perType export that is not an object",
      'export const perType = 5;\nexport default { "order.ship": async () => ({}) };\n',
      [],
      /^wassal: --handlers .*: its perType export must be an object/,
    ],
    [
      "a perType setting out of range",
      'export const perType = { "order.ship": { concurrency: 0 } };\nexport default { "order.ship": async () => ({}) };\n',
      [],
      /^wassal: perType\["order\.ship"\]\.concurrency must be a whole number >= 1 \(got 0\)$/,
    ],
    [
      "a TypeScript module on a Node that does not strip types (this Node 20; Node 22/24 run it: test/package/node-versions.test.ts)",
      'export default { "order.ship": async (message: { payload: unknown }) => ({}) };\n',
      [],
      /^wassal: --handlers .*\.ts: is TypeScript, and this Node \(v20\.[0-9.]+\) does not strip types: run the worker on Node 22\.18\+, 23\.6\+ or 24 /,
    ],
    ["an empty --types entry", 'export default { "order.ship": async () => ({}) };\n', ["--types", "a,,b"], /--types.*give message types separated by commas/],
    [
      "a type with a handler and a batch handler",
      'export const batchHandlers = { "order.ship": { maxBatch: 5, handle: async () => [] } };\nexport default { "order.ship": async () => ({}) };\n',
      [],
      /^wassal: --handlers .*: its batchHandlers\["order\.ship"\]: "order\.ship" has a handler too; give a type one handler or one batch handler$/,
    ],
  ];
  for (const [what, source, extra, expected] of cases) {
    it(`${what}: exits 2 with one line, and starts no worker`, async () => {
      const module = join(dir, `bad-${what.replaceAll(" ", "-").replace(/[^\w-]/g, "")}${what.startsWith("a TypeScript") ? ".ts" : ".mjs"}`);
      if (source !== "") writeFileSync(module, source);
      const db = join(dir, `bad-${what.replaceAll(" ", "-").replace(/[^\w-]/g, "")}.db`);
      const args = extra[0] === "--handlers" ? extra : ["--handlers", module, ...extra];
      const result = await runCli(["worker", "--db", db, ...args], { cwd: dir });
      expect(result.code, result.stderr).toBe(2);
      expect(result.stderr.trim().split("\n")[0]).toMatch(expected);
      expectNoStack(result.stderr);
      // A module refused before the database was opened leaves nothing behind (the demo flags and
      // --types are parsed earlier still; a perType setting is checked by the worker, after).
      if (!what.startsWith("a perType setting") && !what.startsWith("a factory")) expect(existsSync(db), what).toBe(false);
    });
  }
});
