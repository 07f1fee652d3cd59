// Recurring schedules across real processes: four `wassal worker` processes fire one handlers
// module's every-second schedule, two are killed (SIGKILL) midway and one comes back, and every
// tick still enqueues exactly one message: no tick twice (no process logs a tick another one
// fired, and none finds a tick's message there already, which would mean the compare-and-set let
// two through), no tick missing between the first and the last. And `wassal schedule`
// add/list/remove, with bad input named.
//
// Needs `npm run build` first (`npm test` does it).

import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { type CliProcess, cliJson, killAll, requireBuiltCli, runCli, startCli } from "../support/cli.js";
import { expectNoStack } from "../support/assertions.js";
import { postgresAvailable } from "../support/postgres.js";
import { tempDir } from "../support/temp.js";
import { until } from "../support/wait.js";
import { closeTargets, createTarget, logLines, type StoreKind } from "./harness.js";

const PG = await postgresAvailable();
const dir = tempDir("wassal-wcli-schedules-");

beforeAll(requireBuiltCli);
afterEach(killAll);
afterAll(closeTargets);

const PULSE = `
export const handlers = { pulse: async () => undefined };
export const schedules = {
  pulse: { cron: "* * * * * *", message: { type: "pulse", payload: { from: "module" } } },
};
`;

/** The ticks each schedule-fired log line names, from every process's log. */
function loggedTicks(processes: readonly CliProcess[]): { fired: string[]; skipped: number } {
  const lines = processes.flatMap((p) => logLines(p.stderr()));
  return {
    fired: lines.filter((l) => l.event === "schedule-fired").map((l) => String(l.tick)),
    skipped: lines.filter((l) => l.event === "schedule-skipped").length,
  };
}

for (const kind of ["sqlite", "postgres"] as const satisfies readonly StoreKind[]) {
  describe.runIf(kind === "sqlite" || PG)(`${kind}: a schedule fired by several worker processes`, () => {
    it("enqueues each tick once while workers are killed and started, with no tick missing", async () => {
      const target = await createTarget(kind, dir);
      const module = join(dir, `pulse-${kind}.mjs`);
      writeFileSync(module, PULSE);
      const start = () => startCli(["worker", ...target.args, "--handlers", module, "--log-level", "info"], { cwd: dir });
      const first = start();
      await first.waitForStderr(/"worker started"/, 30_000); // migrated and the schedule added, once
      const workers = [first, start(), start(), start()];
      await Promise.all(workers.map((w) => w.waitForStderr(/"worker started"/, 30_000)));
      const fired = async () => (await target.messages()).filter((m) => m.type === "pulse").length;
      await until("three ticks fired", async () => (await fired()) >= 3, { timeoutMs: 30_000 });
      workers[0]?.signal("SIGKILL");
      workers[1]?.signal("SIGKILL");
      const back = start();
      workers.push(back);
      const before = await fired();
      await until("four more ticks fired after the kills", async () => (await fired()) >= before + 4, { timeoutMs: 30_000 });
      for (const w of workers.slice(2)) w.signal("SIGTERM");
      for (const w of workers.slice(2)) expect((await w.waitForExit(20_000)).code).toBe(0);

      const outbox = await target.open();
      let ticks: string[];
      try {
        const messages = (await outbox.store.listMessages()).filter((m) => m.type === "pulse");
        ticks = messages.map((m) => (m.dedupeKey ?? "").replace(/^schedule:pulse:/, "")).sort();
        for (const m of messages) expect(m.headers).toMatchObject({ "wassal-schedule": "pulse" });
        expect(await outbox.store.schedules()).toMatchObject([{ name: "pulse", cron: "* * * * * *", message: { type: "pulse", payload: { from: "module" } } }]);
      } finally {
        await outbox.close();
      }
      // One message per second from the first tick to the last: none twice (the dedupe keys are
      // distinct) and none missing.
      expect(new Set(ticks).size).toBe(ticks.length);
      const firstTick = Date.parse(ticks[0] as string);
      expect(ticks).toEqual(ticks.map((_, i) => new Date(firstTick + i * 1000).toISOString()));
      // Every tick a process logged, once across all of them (a killed process may have died before
      // logging one it committed), and no tick found with its message there already.
      const logged = loggedTicks(workers);
      expect(new Set(logged.fired).size).toBe(logged.fired.length);
      expect(logged.fired.every((t) => ticks.includes(t))).toBe(true);
      expect(logged.fired.length).toBeGreaterThanOrEqual(ticks.length - 2);
      expect(logged.skipped).toBe(0);
    }, 120_000);
  });
}

describe("wassal schedule", () => {
  it("adds, lists and removes schedules, and names bad input with exit 2", async () => {
    const target = await createTarget("sqlite", dir);
    await runCli(["migrate", ...target.args], { cwd: dir });
    const added = await cliJson<{ name: string; nextAt: string; timezone: string; message: unknown }>(
      [
        "schedule",
        "add",
        "nightly",
        "0 2 * * *",
        ...target.args,
        "--type",
        "report.build",
        "--payload",
        '{"scope":"daily"}',
        "--timezone",
        "Europe/Oslo",
        "--header",
        "team=ops",
        "--key",
        "reports",
        "--json",
      ],
      { cwd: dir },
    );
    expect(added).toMatchObject({
      name: "nightly",
      timezone: "Europe/Oslo",
      message: { type: "report.build", payload: { scope: "daily" }, key: "reports", headers: { team: "ops" } },
    });
    // 02:00 in Oslo is 01:00 or 00:00 UTC, by the season.
    expect(added.nextAt).toMatch(/T0[01]:00:00\.000Z$/);
    const listed = await runCli(["schedule", "list", ...target.args], { cwd: dir });
    expect(listed.code).toBe(0);
    expect(listed.stdout).toMatch(/^nightly\t0 2 \* \* \* \(Europe\/Oslo\)\tnext \S+\tlast -\ttype report\.build key reports\tbackfill 1m\n$/);

    const badCron = await runCli(["schedule", "add", "x", "61 * * * *", ...target.args, "--type", "t"], { cwd: dir });
    expect(badCron.code).toBe(2);
    expect(badCron.stderr).toContain('the cron expression "61 * * * *" of schedule "x" is not valid (Invalid value for minute: 61)');
    expectNoStack(badCron.stderr);
    const badZone = await runCli(["schedule", "add", "x", "* * * * *", ...target.args, "--type", "t", "--timezone", "Mars/Olympus"], { cwd: dir });
    expect(badZone.code).toBe(2);
    expect(badZone.stderr).toContain("timezone must be an IANA time zone name");
    const badPayload = await runCli(["schedule", "add", "x", "* * * * *", ...target.args, "--type", "t", "--payload", "{nope"], { cwd: dir });
    expect(badPayload.code).toBe(2);
    expect(badPayload.stderr).toContain("--payload <json>' argument '{nope' is invalid. expected JSON");
    const unknown = await runCli(["schedule", "remove", "nope", ...target.args], { cwd: dir });
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('no schedule is named "nope" in this outbox; its schedules: "nightly"');

    const removed = await runCli(["schedule", "remove", "nightly", ...target.args], { cwd: dir });
    expect(removed).toMatchObject({ code: 0, stdout: "schedule nightly removed\n" });
    expect(await cliJson(["schedule", "list", ...target.args, "--json"], { cwd: dir })).toEqual([]);
  });

  it("refuses a handlers module whose schedule has a bad expression before opening the database", async () => {
    const module = join(dir, "bad-schedule.mjs");
    writeFileSync(
      module,
      `export const handlers = { t: async () => undefined };\nexport const schedules = { broken: { cron: "every minute", message: { type: "t", payload: null } } };\n`,
    );
    const db = join(dir, "never-created.db");
    const result = await runCli(["worker", "--db", db, "--handlers", module], { cwd: dir });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(`--handlers ${module}: schedule "broken": the cron expression "every minute" of schedule "broken" is not valid`);
    expectNoStack(result.stderr);
    expect(existsSync(db)).toBe(false);
  });
});
