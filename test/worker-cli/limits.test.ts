// Flow control across real processes: three `wassal worker` processes, ten slots each, work one
// type limited to 2 leases at once and 15 claims in any second; one is killed (SIGKILL) midway.
// Every message is processed, and the audit trail shows the limits held throughout (judged by
// src/chaos/limit-checks.ts). Unlimited, the three would hold up to 30 leases at once. And
// `wassal limit` set/list/remove, with bad input named.
//
// Needs `npm run build` first (`npm test` does it).

import { join } from "node:path";
import { writeFileSync } from "node:fs";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { judgeLimits } from "../../src/chaos/limit-checks.js";
import { cliJson, killAll, requireBuiltCli, runCli, startCli } from "../support/cli.js";
import { expectNoStack } from "../support/assertions.js";
import { postgresAvailable } from "../support/postgres.js";
import { tempDir } from "../support/temp.js";
import { until } from "../support/wait.js";
import { closeTargets, createTarget, type StoreKind } from "./harness.js";

const PG = await postgresAvailable();
const dir = tempDir("wassal-wcli-limits-");
const LEASE_MS = 1_500;
const COUNT = 40;

beforeAll(requireBuiltCli);
afterEach(killAll);
afterAll(closeTargets);

const SLOW = `
export const handlers = { slow: async () => { await new Promise((resolve) => setTimeout(resolve, 40)); } };
`;

for (const kind of ["sqlite", "postgres"] as const satisfies readonly StoreKind[]) {
  describe.runIf(kind === "sqlite" || PG)(`${kind}: a limited type worked by several worker processes`, () => {
    it("never holds more leases than its concurrency nor makes more claims than its rate, through a kill", async () => {
      const target = await createTarget(kind, dir);
      const module = join(dir, `slow-${kind}.mjs`);
      writeFileSync(module, SLOW);
      await runCli(["migrate", ...target.args], { cwd: dir });
      await cliJson(["limit", "set", "slow", ...target.args, "--concurrency", "2", "--rate", "15/1s"], { cwd: dir });
      const outbox = await target.open();
      try {
        await outbox.store.transaction(async (tx) => {
          for (let n = 0; n < COUNT; n += 1) await outbox.store.enqueue(tx, { type: "slow", payload: { n } });
        });
        const start = () =>
          startCli(["worker", ...target.args, "--handlers", module, "--concurrency", "10", "--lease-ms", String(LEASE_MS), "--audit"], { cwd: dir });
        const workers = [start(), start(), start()];
        await Promise.all(workers.map((w) => w.waitForStderr(/"worker started"/, 30_000)));
        const processed = async () => (await target.counts()).processed;
        await until("ten processed", async () => (await processed()) >= 10, { timeoutMs: 30_000 });
        workers[0]?.signal("SIGKILL");
        await until("every message processed", async () => (await processed()) === COUNT, { timeoutMs: 60_000 });
        for (const w of workers.slice(1)) w.signal("SIGTERM");
        for (const w of workers.slice(1)) expect((await w.waitForExit(20_000)).code).toBe(0);

        const trail = await outbox.store.auditTrail();
        const report = judgeLimits(trail, new Map([["slow", { concurrency: 2, rate: { count: 15, intervalMs: 1_000 } }]]), () => "slow", LEASE_MS);
        expect(report.excesses).toEqual([]);
        expect(report.peaks.slow?.running).toBe(2); // reached, not passed
        expect(report.peaks.slow?.perInterval).toBeGreaterThanOrEqual(10);
        expect(report.peaks.slow?.perInterval).toBeLessThanOrEqual(15);
        expect(trail.filter((e) => e.action === "complete")).toHaveLength(COUNT);
      } finally {
        await outbox.close();
      }
    }, 120_000);
  });
}

describe("wassal limit", () => {
  it("sets, lists and removes limits, and names bad input with exit 2", async () => {
    const target = await createTarget("sqlite", dir);
    await runCli(["migrate", ...target.args], { cwd: dir });
    const set = await cliJson<{ type: string; concurrency: number | null; rate: unknown }>(["limit", "set", "email.send", ...target.args, "--rate", "100/1m"], {
      cwd: dir,
    });
    expect(set).toMatchObject({ type: "email.send", concurrency: null, rate: { count: 100, intervalMs: 60_000 } });
    await cliJson(["limit", "set", "report.build", ...target.args, "--concurrency", "2", "--rate", "10/1h"], { cwd: dir });
    const listed = await runCli(["limit", "list", ...target.args], { cwd: dir });
    expect(listed.stdout).toBe("email.send\tconcurrency -\trate 100/1m\nreport.build\tconcurrency 2\trate 10/1h\n");

    const bad: [string[], RegExp][] = [
      [["limit", "set", "x", ...target.args], /give --concurrency <n>, --rate <count\/interval> or both/],
      [["limit", "set", "x", ...target.args, "--concurrency", "0"], /expected a whole number from 1 to 100000/],
      [["limit", "set", "x", ...target.args, "--rate", "-5/1s"], /expected claims per interval as count\/duration/],
      [["limit", "set", "x", ...target.args, "--rate", "5/10ms"], /expected an interval from 100ms to 1d/],
      [["limit", "remove", "nope", ...target.args], /message type "nope" has no limit in this outbox; the limited types: "email.send", "report.build"/],
    ];
    for (const [args, message] of bad) {
      const result = await runCli(args, { cwd: dir });
      expect(result.code, args.join(" ")).toBe(2);
      expect(result.stderr).toMatch(message);
      expectNoStack(result.stderr);
    }
    expect(await cliJson(["limit", "remove", "email.send", ...target.args], { cwd: dir })).toEqual({ removed: "email.send" });
    expect((await runCli(["limit", "list", ...target.args], { cwd: dir })).stdout).toBe("report.build\tconcurrency 2\trate 10/1h\n");
    expect((await runCli(["limit", "--help"], { cwd: dir })).stdout).toMatch(/flow control across processes/);
  });
});
