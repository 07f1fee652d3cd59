// `wassal worker --retain-*` and `wassal relay --retain-*`: the built-in retention, through real
// processes on a SQLite file. Old processed rows go without any `wassal outbox purge` run; young
// ones and pending ones stay; the start-up line says the retention in effect; the deleted rows are
// counted in the metrics; a bad duration is refused with exit 2, naming the option.
//
// Needs `npm run build` first (`npm test` does it).

import { mkdtempSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { ManualClock } from "../../src/outbox/clock.js";
import type { OutboxStore } from "../../src/outbox/store.js";
import { openOutbox } from "../../src/stores/open-outbox.js";
import { errorLine } from "../support/assertions.js";
import { type CliProcess, killAll, requireBuiltCli, runCli, startCli } from "../support/cli.js";
import { TEST_NATS_URL, natsAvailable } from "../support/services.js";
import { tempDir } from "../support/temp.js";
import { until } from "../support/wait.js";
import { closeTargets, logLines, newTarget, type Target } from "./harness.js";

const FILE_TMP = tempDir("wassal-wcli-retention-");
const cwd = () => mkdtempSync(join(FILE_TMP, "cwd-"));
const HOUR = 3_600_000;
const natsUp = await natsAvailable();

beforeAll(requireBuiltCli);
afterEach(killAll);
afterAll(closeTargets);

async function processed(store: OutboxStore<unknown>, count: number): Promise<void> {
  await store.transaction((tx) =>
    store.enqueueMany(
      tx,
      Array.from({ length: count }, (_, n) => ({ type: "test.done", payload: { n } })),
    ),
  );
  const leases = await store.claim("seeder", { limit: count, leaseMs: 60_000 });
  await store.completeMany(leases.map((lease) => ({ lease })));
}

/** A SQLite outbox with 12 messages processed 2 hours ago, 2 processed now, and 1 pending (a type no one handles). */
async function seeded(): Promise<Target> {
  const target = newTarget("sqlite", FILE_TMP);
  const past = await openOutbox(target.db, { clock: new ManualClock(Date.now() - 2 * HOUR) });
  try {
    await processed(past.store, 12);
    await past.store.transaction((tx) => past.store.enqueue(tx, { type: "test.elsewhere", payload: {} }));
  } finally {
    await past.close();
  }
  const now = await openOutbox(target.db);
  try {
    await processed(now.store, 2);
  } finally {
    await now.close();
  }
  expect(await target.counts()).toEqual({ pending: 1, processing: 0, processed: 14, dead: 0, cancelled: 0 });
  return target;
}

/** A handlers module for a type none of the rows has: the worker claims nothing. */
function handlersModule(dir: string): string {
  const file = join(dir, "handlers.mjs");
  writeFileSync(file, 'export default { "test.noop": async () => {} };\n');
  return file;
}

/** The first log line with this message, once it is written whole. */
function logLine(process: CliProcess, msg: string) {
  return until(`a "${msg}" log line`, () => {
    if (process.exit()) throw new Error(`the process exited early: ${JSON.stringify(process.exit())}; ${process.stderr()}`);
    const whole = process.stderr().slice(0, process.stderr().lastIndexOf("\n") + 1);
    return logLines(whole).find((line) => line.msg === msg) ?? false;
  });
}

describe("built-in retention", () => {
  it("wassal worker --retain-processed 1h purges the rows processed 2 hours ago on its own; young and pending rows stay; the start-up line and the metrics say so", async () => {
    const target = await seeded();
    const dir = cwd();
    const worker = startCli(
      [
        "worker",
        ...target.args,
        "--handlers",
        handlersModule(dir),
        "--retain-processed",
        "1h",
        "--retention-interval",
        "2s",
        "--metrics-port",
        "0",
        "--log-level",
        "info",
      ],
      { cwd: dir },
    );
    const started = await logLine(worker, "worker started");
    expect(started.retention).toEqual({ processed: "1h", every: "2s" });
    const purged = await logLine(worker, "retention purged old rows");
    expect(purged.deleted).toEqual({ processed: 12 });
    expect(await target.counts()).toEqual({ pending: 1, processing: 0, processed: 2, dead: 0, cancelled: 0 });

    const metrics = await (await fetch(String(started.metrics))).text();
    expect(metrics).toMatch(/^wassal_retention_purged_total\{kind="processed"\} 12$/m);

    worker.signal("SIGTERM");
    expect((await worker.waitForExit(20_000)).code).toBe(0);
    expect(await target.counts()).toEqual({ pending: 1, processing: 0, processed: 2, dead: 0, cancelled: 0 });
  });

  it("without a --retain-* option nothing is purged, and the start-up line says retention is off", async () => {
    const target = await seeded();
    const dir = cwd();
    const worker = startCli(["worker", ...target.args, "--handlers", handlersModule(dir), "--retention-interval", "1s", "--log-level", "info"], {
      cwd: dir,
    });
    expect((await logLine(worker, "worker started")).retention).toBe("off");
    worker.signal("SIGTERM");
    expect((await worker.waitForExit(20_000)).code).toBe(0);
    expect(worker.stderr()).not.toContain("retention purged");
    expect((await target.counts()).processed).toBe(14);
  });

  it.runIf(natsUp)("wassal relay --retain-processed purges too", async () => {
    const target = await seeded();
    const dir = cwd();
    const relay = startCli(
      ["relay", ...target.args, "--to", TEST_NATS_URL, "--destination", "retention.{type}", "--retain-processed", "90m", "--log-level", "info"],
      { cwd: dir },
    );
    const purged = await logLine(relay, "retention purged old rows");
    expect(purged.deleted).toEqual({ processed: 12 });
    expect((await logLine(relay, "relay started")).retention).toEqual({ processed: "90m", every: "10m" });
    expect((await target.counts()).processed).toBe(2);
    relay.signal("SIGTERM");
    expect((await relay.waitForExit(20_000)).code).toBe(0);
  });

  it("a bad --retain-* value exits 2 naming the option and the valid forms, before anything opens", async () => {
    const dir = cwd();
    const db = join(dir, "never.db");
    const [format, inbox, zero, relayInbox, interval] = await Promise.all([
      runCli(["worker", "--db", db, "--retain-processed", "7x"], { cwd: dir }),
      runCli(["worker", "--db", db, "--retain-inbox", "10m"], { cwd: dir }),
      runCli(["worker", "--db", db, "--retain-dead", "0s"], { cwd: dir }),
      runCli(["relay", "--db", db, "--to", "nats://127.0.0.1:4222", "--retain-inbox", "30m"], { cwd: dir }),
      runCli(["worker", "--db", db, "--retain-audit", "30d", "--retention-interval", "soon"], { cwd: dir }),
    ]);
    for (const run of [format, inbox, zero, relayInbox, interval]) expect({ code: run.code, stdout: run.stdout }).toEqual({ code: 2, stdout: "" });
    expect(errorLine(format.stderr)).toBe(
      "error: option '--retain-processed <duration>' argument '7x' is invalid. expected a duration such as 500ms, 30s, 15m, 12h, 7d or 2w",
    );
    expect(errorLine(inbox.stderr)).toBe(
      "error: option '--retain-inbox <duration>' argument '10m' is invalid. expected a duration of at least 1h (an inbox id must outlive every redelivery of its message, or it is applied twice), such as 12h, 7d or 2w",
    );
    expect(errorLine(zero.stderr)).toBe(
      "error: option '--retain-dead <duration>' argument '0s' is invalid. expected a duration of at least 1s, such as 30s, 15m, 12h, 7d or 2w",
    );
    expect(errorLine(relayInbox.stderr)).toMatch(/^error: option '--retain-inbox <duration>' argument '30m' is invalid/);
    expect(errorLine(interval.stderr)).toMatch(/^error: option '--retention-interval <duration>' argument 'soon' is invalid/);
  });
});
