// A `wassal worker` process that is SIGKILLed mid-batch loses nothing (its leases expire and
// another worker finishes the work), and one that is stopped with SIGTERM either finishes its
// in-flight messages within the grace period or releases them for another worker at once. A
// second signal exits at once with 130. On a SQLite file, a PostgreSQL schema and a MariaDB database.
//
// Needs `npm run build` first (`npm test` does it).

import { spawn } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { ProviderSimulator } from "../../src/payments/provider-simulator.js";
import { CLI, cliJson, killAll, requireBuiltCli, startCli, type CliProcess } from "../support/cli.js";
import { mariadbAvailable } from "../support/mariadb.js";
import { postgresAvailable } from "../support/postgres.js";
import { tempDir } from "../support/temp.js";
import {
  closeTargets,
  createTarget,
  countsOf,
  expectSettled,
  logLines,
  newTarget,
  waitForRows,
  type MessageRow,
  type StoreKind,
  type Target,
} from "./harness.js";

const PG = await postgresAvailable();
const MARIADB = await mariadbAvailable();
const FILE_TMP = tempDir("wassal-wcli-crash-");
const cwd = () => mkdtempSync(join(FILE_TMP, "cwd-"));
const provider = new ProviderSimulator();

beforeAll(requireBuiltCli);
afterEach(killAll);
afterAll(closeTargets);

async function seed(target: Target, dir: string, count: number): Promise<void> {
  const seeded = await cliJson<{ created: number }>(["payments", "seed", ...target.args, "--count", String(count), "--synchronous", "NORMAL"], { cwd: dir });
  expect(seeded.created).toBe(count);
}

function worker(target: Target, dir: string, name: string, options: Record<string, string | number>, logLevel = "warn"): CliProcess {
  const args = ["worker", ...target.args, "--name", name, "--log-level", logLevel];
  for (const [option, value] of Object.entries(options)) args.push(`--${option}`, String(value));
  return startCli(args, { cwd: dir });
}

const processing = (rows: readonly MessageRow[]) => rows.filter((r) => r.status === "processing");

for (const kind of ["sqlite", "postgres", "mariadb"] as const satisfies readonly StoreKind[]) {
  describe.runIf(kind === "sqlite" || (kind === "postgres" ? PG : MARIADB))(`${kind}: crashes and shutdowns`, () => {
    it("SIGKILL mid-batch loses nothing: after the leases expire another worker finishes, and only the in-flight messages were tried twice", async () => {
      const target = await createTarget(kind, FILE_TMP);
      const dir = cwd();
      const COUNT = 60;
      await seed(target, dir, COUNT);

      // 8 leases of 1 s at a time, each handler 200 ms: the worker is always holding some.
      const a = worker(target, dir, "doomed", { "lease-ms": 1000, "provider-latency-ms": 200, concurrency: 8, "poll-ms": 100 });
      await waitForRows(target, "the first worker to hold leases", (rows) => processing(rows).length >= 4, [a]);
      a.signal("SIGKILL");
      const killed = await a.waitForExit(5_000);
      expect(killed.signal).toBe("SIGKILL");

      // The state the dead worker left: some processed, several held under leases nobody will renew.
      const frozen = await target.messages();
      const inFlight = processing(frozen);
      expect(inFlight.length, `messages in flight at the kill: ${JSON.stringify(countsOf(frozen))}`).toBeGreaterThan(0);
      expect(inFlight.every((m) => m.lockedBy === "doomed" && m.attempts === 1 && m.leaseToken === 1)).toBe(true);
      const doneByA = new Set(frozen.filter((m) => m.status === "processed").map((m) => m.id));
      expect(doneByA.size).toBeLessThan(COUNT - inFlight.length); // mid-batch: work was left to do

      // The rescuer logs every claim (trace), so its reclaims of the dead worker's leases can be checked.
      const b = worker(target, dir, "rescuer", { "lease-ms": 5000, concurrency: 8, "poll-ms": 100 }, "trace");
      const final = await waitForRows(target, "every message processed", (rows) => rows.every((r) => r.status === "processed"), [b], 20_000);
      b.signal("SIGTERM");
      expect((await b.waitForExit(10_000)).code).toBe(0);
      const logs = logLines(b.stderr());
      expect(
        logs.filter((l) => l.level >= 40),
        "warnings or errors from the rescuer",
      ).toEqual([]);

      // It took over exactly the dead worker's leases, each only once its lease had expired.
      const reclaims = logs.filter((l) => l.event === "claim-won" && l.reclaimedFrom !== null);
      expect(reclaims.map((l) => l.reclaimedFrom)).toEqual(inFlight.map(() => "doomed"));
      expect(reclaims.map((l) => l.messageId).sort()).toEqual(inFlight.map((m) => m.id).sort());
      for (const r of reclaims) {
        const held = inFlight.find((m) => m.id === r.messageId)!;
        expect(Date.parse(String(r.at)), `reclaim of ${held.id} before its lease expired`).toBeGreaterThanOrEqual(held.lockedUntil!);
      }

      expect(countsOf(final)).toEqual({ processed: COUNT });
      const inFlightIds = new Set(inFlight.map((m) => m.id));
      for (const m of final) {
        if (inFlightIds.has(m.id)) {
          // Reclaimed after the lease expired: a second claim, a second attempt, the rescuer's.
          expect(m, `in-flight message ${m.id}`).toMatchObject({ lockedBy: "rescuer", attempts: 2, leaseToken: 2 });
        } else if (doneByA.has(m.id)) {
          expect(m, `message ${m.id} finished before the kill`).toMatchObject({ lockedBy: "doomed", attempts: 1, leaseToken: 1 });
        } else {
          expect(m, `message ${m.id} never started before the kill`).toMatchObject({ lockedBy: "rescuer", attempts: 1, leaseToken: 1 });
        }
      }
      const payments = await target.payments();
      expect(payments).toHaveLength(COUNT);
      expectSettled(payments, (key) => provider.outcomeFor(key));
    });

    it("SIGTERM with handlers shorter than --grace-ms: exit 0 after they finish, their messages processed", async () => {
      const target = await createTarget(kind, FILE_TMP);
      const dir = cwd();
      await seed(target, dir, 4);
      const a = worker(target, dir, "patient", { concurrency: 4, "provider-latency-ms": 1000, "grace-ms": 20_000, "lease-ms": 30_000 }, "info");
      await waitForRows(target, "all four messages in flight", (rows) => processing(rows).length === 4, [a]);
      a.signal("SIGTERM");
      const exit = await a.waitForExit(15_000);
      expect({ code: exit.code, signal: exit.signal }).toEqual({ code: 0, signal: null });

      const rows = await target.messages();
      expect(rows.map((m) => ({ status: m.status, lockedBy: m.lockedBy, attempts: m.attempts }))).toEqual(
        Array.from({ length: 4 }, () => ({ status: "processed", lockedBy: "patient", attempts: 1 })),
      );
      expectSettled(await target.payments(), (key) => provider.outcomeFor(key));
      const messages = logLines(a.stderr()).map((l) => l.msg);
      expect(messages).toContain("stopping: no new claims; finishing or releasing in-flight messages");
      expect(messages.at(-1)).toBe("worker stopped");
      expect(logLines(a.stderr()).filter((l) => l.level >= 40)).toEqual([]);
    });

    it("SIGTERM with handlers longer than --grace-ms: exit 0, in-flight messages released to pending, and another worker takes them at once", async () => {
      const target = await createTarget(kind, FILE_TMP);
      const dir = cwd();
      await seed(target, dir, 4);
      // Handlers that take 60 s (longer than the test may run) and leases of 10 minutes: what follows
      // can happen only if the worker releases the messages at the end of its grace period, without
      // waiting for its handlers or its leases.
      const a = worker(target, dir, "hasty", { concurrency: 4, "provider-latency-ms": 60_000, "grace-ms": 100, "lease-ms": 600_000 });
      await waitForRows(target, "all four messages in flight", (rows) => processing(rows).length === 4, [a]);
      a.signal("SIGTERM");

      // Released after the grace period while the handlers still run: pending, no owner, the
      // claim's attempt taken back. (A worker that waited for its handlers would never get here.)
      const released = await waitForRows(target, "the in-flight messages to be released", (rows) => {
        if (rows.some((r) => r.status === "processed")) throw new Error(`a handler finished before the release: ${JSON.stringify(rows)}`);
        return rows.every((r) => r.status === "pending");
      });
      expect(released.map((m) => ({ lockedBy: m.lockedBy, attempts: m.attempts, leaseToken: m.leaseToken }))).toEqual(
        Array.from({ length: 4 }, () => ({ lockedBy: null, attempts: 0, leaseToken: 1 })),
      );

      // Another worker takes them at once: the first one's leases had 10 minutes to run, so it can
      // take them only because they were given back.
      const b = worker(target, dir, "successor", { concurrency: 4, "poll-ms": 100 });
      const done = await waitForRows(target, "the successor to process them", (rows) => rows.every((r) => r.status === "processed"), [b]);
      expect(done.map((m) => ({ lockedBy: m.lockedBy, attempts: m.attempts, leaseToken: m.leaseToken }))).toEqual(
        Array.from({ length: 4 }, () => ({ lockedBy: "successor", attempts: 1, leaseToken: 2 })),
      );

      // The first worker exits 0 and wrote nothing after releasing.
      const exit = await a.waitForExit(15_000);
      expect({ code: exit.code, signal: exit.signal }).toEqual({ code: 0, signal: null });
      expect(logLines(a.stderr()).filter((l) => l.level >= 40)).toEqual([]);
      expect((await target.messages()).every((m) => m.status === "processed" && m.lockedBy === "successor")).toBe(true);
      expectSettled(await target.payments(), (key) => provider.outcomeFor(key));
      b.signal("SIGTERM");
      expect((await b.waitForExit(10_000)).code).toBe(0);
    });

    it("a second signal during a long shutdown exits at once with 130, leaving the leases to expire", async () => {
      const target = await createTarget(kind, FILE_TMP);
      const dir = cwd();
      await seed(target, dir, 2);
      const a = worker(target, dir, "stubborn", { concurrency: 2, "provider-latency-ms": 20_000, "grace-ms": 60_000, "lease-ms": 30_000 }, "info");
      await waitForRows(target, "both messages in flight", (rows) => processing(rows).length === 2, [a]);
      a.signal("SIGTERM");
      await a.waitForStderr("stopping: no new claims");
      const sent = a.signal("SIGINT");
      const exit = await a.waitForExit(5_000);
      expect({ code: exit.code, signal: exit.signal }).toEqual({ code: 130, signal: null });
      expect(exit.at - sent).toBeLessThan(3_000);
      expect(logLines(a.stderr()).some((l) => l.level === 40 && /second signal: exiting at once/.test(l.msg))).toBe(true);
      // Nothing released, nothing written: the messages stay held until their leases expire.
      const rows = await target.messages();
      expect(rows.map((m) => ({ status: m.status, lockedBy: m.lockedBy, attempts: m.attempts }))).toEqual(
        Array.from({ length: 2 }, () => ({ status: "processing", lockedBy: "stubborn", attempts: 1 })),
      );
      expect((await target.payments()).every((p) => p.status === "Pending")).toBe(true);
    });
  });
}

describe("readiness", () => {
  it('a worker started with an IPC channel sends "ready" once it claims, and the channel does not keep it alive', async () => {
    const target = newTarget("sqlite", FILE_TMP);
    const dir = cwd();
    await seed(target, dir, 2);
    const child = spawn(process.execPath, [CLI, "worker", ...target.args, "--poll-ms", "50"], { cwd: dir, stdio: ["ignore", "ignore", "pipe", "ipc"] });
    try {
      const first = await new Promise<unknown>((resolve, reject) => {
        child.once("message", resolve);
        child.once("exit", (code) => reject(new Error(`worker exited ${code} before it was ready`)));
      });
      expect(first).toBe("ready");
      await waitForRows(target, "both processed", (rows) => rows.every((r) => r.status === "processed"));
      const exit = new Promise<number | null>((resolve) => child.once("exit", resolve));
      child.kill("SIGTERM");
      expect(await exit).toBe(0);
    } finally {
      child.kill("SIGKILL");
    }
  });
});

describe("sqlite: prompt exit after releasing", () => {
  it("exits within 1 s of SIGTERM when --grace-ms is short and handlers are slow", async () => {
    const target = newTarget("sqlite", FILE_TMP);
    const dir = cwd();
    await seed(target, dir, 2);
    const a = worker(target, dir, "lingering", { concurrency: 2, "provider-latency-ms": 2000, "grace-ms": 100 });
    await waitForRows(target, "both messages in flight", (rows) => processing(rows).length === 2, [a]);
    const sent = a.signal("SIGTERM");
    const exit = await a.waitForExit(10_000);
    expect(exit.code).toBe(0);
    expect(exit.at - sent).toBeLessThan(1_000);
  });
});
