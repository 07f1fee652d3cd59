// `wassal worker --on-complete delete` and `wassal relay --on-complete delete`, through real
// processes: each completed message's row is gone, what is not theirs stays, the start-up line
// says the mode, and a mode that is neither keep nor delete is refused before anything opens.
//
// Needs `npm run build` first (`npm test` does it).

import { existsSync, mkdtempSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { openOutbox } from "../../src/stores/open-outbox.js";
import { errorLine } from "../support/assertions.js";
import { type CliProcess, killAll, requireBuiltCli, runCli, startCli } from "../support/cli.js";
import { TEST_NATS_URL, natsAvailable } from "../support/services.js";
import { tempDir } from "../support/temp.js";
import { until } from "../support/wait.js";
import { closeTargets, logLines, newTarget, type Target } from "./harness.js";

const FILE_TMP = tempDir("wassal-wcli-on-complete-");
const cwd = () => mkdtempSync(join(FILE_TMP, "cwd-"));
const natsUp = await natsAvailable();

beforeAll(requireBuiltCli);
afterEach(killAll);
afterAll(closeTargets);

/** A SQLite outbox with 20 messages of test.work and 1 of test.elsewhere (a type nothing here takes). */
async function seeded(): Promise<Target> {
  const target = newTarget("sqlite", FILE_TMP);
  const outbox = await openOutbox(target.db);
  try {
    await outbox.store.transaction((tx) =>
      outbox.store.enqueueMany(tx, [
        ...Array.from({ length: 20 }, (_, n) => ({ type: "test.work", payload: { n }, key: `k${n % 3}` })),
        { type: "test.elsewhere", payload: { n: -1 } },
      ]),
    );
  } finally {
    await outbox.close();
  }
  return target;
}

/** The first log line with this message, once it is written whole. */
function logLine(process: CliProcess, msg: string) {
  return until(`a "${msg}" log line`, () => {
    if (process.exit()) throw new Error(`the process exited early: ${JSON.stringify(process.exit())}; ${process.stderr()}`);
    const whole = process.stderr().slice(0, process.stderr().lastIndexOf("\n") + 1);
    return logLines(whole).find((line) => line.msg === msg) ?? false;
  });
}

describe("--on-complete", () => {
  it("wassal worker --on-complete delete: every message it handled is gone, the others stay, and the start-up line says so", async () => {
    const target = await seeded();
    const dir = cwd();
    const handlers = join(dir, "handlers.mjs");
    writeFileSync(handlers, 'export default { "test.work": async () => {} };\n');
    const worker = startCli(["worker", ...target.args, "--handlers", handlers, "--on-complete", "delete", "--poll-ms", "50", "--log-level", "info"], {
      cwd: dir,
    });
    expect((await logLine(worker, "worker started")).onComplete).toBe("delete");
    await until("the worker to finish test.work", async () => (await target.counts()).pending === 1 && (await target.counts()).processing === 0);
    expect(await target.counts()).toEqual({ pending: 1, processing: 0, processed: 0, dead: 0, cancelled: 0 });
    expect((await target.messages()).map((m) => m.type)).toEqual(["test.elsewhere"]);
    worker.signal("SIGTERM");
    expect((await worker.waitForExit(20_000)).code).toBe(0);
  });

  it.runIf(natsUp)("wassal relay --on-complete delete: every message it published is gone", async () => {
    const target = await seeded();
    const dir = cwd();
    const stream = `WASSAL_ON_COMPLETE_${process.pid}`;
    const nc = await connect({ servers: TEST_NATS_URL });
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: stream, subjects: [`${stream}.>`] });
    try {
      const relay = startCli(
        ["relay", ...target.args, "--to", TEST_NATS_URL, "--destination", `${stream}.{type}`, "--types", "test.work", "--on-complete", "delete"],
        { cwd: dir },
      );
      expect((await logLine(relay, "relay started")).onComplete).toBe("delete");
      await until("the relay to publish test.work", async () => (await target.counts()).pending === 1 && (await target.counts()).processing === 0);
      expect((await target.messages()).map((m) => m.type)).toEqual(["test.elsewhere"]);
      expect((await jsm.streams.info(stream)).state.messages).toBe(20);
      relay.signal("SIGTERM");
      expect((await relay.waitForExit(20_000)).code).toBe(0);
    } finally {
      await jsm.streams.delete(stream).catch(() => undefined);
      await nc.close();
    }
  });

  it("a mode that is neither keep nor delete exits 2 naming both, before anything opens", async () => {
    const dir = cwd();
    const db = join(dir, "never.db");
    const runs = await Promise.all([
      runCli(["worker", "--db", db, "--on-complete", "purge"], { cwd: dir }),
      runCli(["relay", "--db", db, "--to", "nats://127.0.0.1:1", "--destination", "x.{type}", "--on-complete", "Delete"], { cwd: dir }),
    ]);
    for (const run of runs) expect({ code: run.code, stdout: run.stdout }).toEqual({ code: 2, stdout: "" });
    expect(runs.map((run) => errorLine(run.stderr))).toEqual([
      "error: option '--on-complete <mode>' argument 'purge' is invalid. expected one of keep, delete",
      "error: option '--on-complete <mode>' argument 'Delete' is invalid. expected one of keep, delete",
    ]);
    expect(existsSync(db)).toBe(false);
  });
});
