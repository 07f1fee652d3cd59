// `wassal worker --metrics-port`: Prometheus metrics over HTTP from a real worker process, checked
// against the work it did. The port is found by the test (listen on 0, close, reuse), since the
// worker does not print the port it picked for --metrics-port 0 unless it logs at info level.
// On a SQLite file, a PostgreSQL schema and a MariaDB database.
//
// Needs `npm run build` first (`npm test` does it).

import { existsSync, mkdtempSync } from "node:fs";
import { createServer, type AddressInfo } from "node:net";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { errorLine } from "../support/assertions.js";
import { cliOk, killAll, requireBuiltCli, startCli } from "../support/cli.js";
import { mariadbAvailable } from "../support/mariadb.js";
import { postgresAvailable } from "../support/postgres.js";
import { tempDir } from "../support/temp.js";
import { until } from "../support/wait.js";
import { closeTargets, createTarget, logLines, newTarget, type StoreKind } from "./harness.js";

const PG = await postgresAvailable();
const MARIADB = await mariadbAvailable();
const FILE_TMP = tempDir("wassal-wcli-metrics-");
const cwd = () => mkdtempSync(join(FILE_TMP, "cwd-"));

beforeAll(requireBuiltCli);
afterEach(killAll);
afterAll(closeTargets);

/** The samples of a Prometheus text exposition: `name{labels}` → value. */
function samples(text: string): Map<string, number> {
  const map = new Map<string, number>();
  for (const line of text.split("\n")) {
    if (line.startsWith("#") || line.trim() === "") continue;
    const match = /^(\S+?(?:\{[^}]*\})?) (\S+)$/.exec(line);
    if (match) map.set(match[1]!, Number(match[2]));
  }
  return map;
}

async function scrape(url: string): Promise<{ status: number; type: string | null; body: string } | undefined> {
  try {
    const response = await fetch(url);
    return { status: response.status, type: response.headers.get("content-type"), body: await response.text() };
  } catch {
    return undefined; // not listening yet
  }
}

for (const kind of ["sqlite", "postgres", "mariadb"] as const satisfies readonly StoreKind[]) {
  describe.runIf(kind === "sqlite" || (kind === "postgres" ? PG : MARIADB))(`${kind}: worker metrics`, () => {
    it("GET /metrics reports claims, completions, handler durations and the queue by state, matching the work done", async () => {
      const target = await createTarget(kind, FILE_TMP);
      const dir = cwd();
      const COUNT = 25;
      await cliOk(["payments", "seed", ...target.args, "--count", String(COUNT)], { cwd: dir });
      // Port 0: the worker listens on a port the OS picks, and says which in its "worker started" line.
      const w = startCli(["worker", ...target.args, "--name", "metered", "--metrics-port", "0", "--log-level", "info", "--poll-ms", "100"], {
        cwd: dir,
      });
      const started = await until('the worker\'s "worker started" line', () => {
        if (w.exit()) throw new Error(`the worker exited early: ${JSON.stringify(w.exit())}; ${w.stderr()}`);
        return logLines(w.stderr().slice(0, w.stderr().lastIndexOf("\n") + 1)).find((l) => l.msg === "worker started") ?? false;
      });
      const url = String(started.metrics);
      expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
      const port = Number(new URL(url).port);
      expect(port).toBeGreaterThan(0);

      await until(`${COUNT} processed`, async () => {
        if (w.exit()) throw new Error(`the worker exited early: ${JSON.stringify(w.exit())}; ${w.stderr()}`);
        return (await target.counts()).processed === COUNT;
      });
      // Completion events are counted as they happen; the scrape that sees them all must come.
      const page = await until(
        "a scrape showing every completion",
        async () => {
          const got = await scrape(url);
          return got && samples(got.body).get("wassal_completions_total") === COUNT ? got : false;
        },
        { timeoutMs: 10_000, intervalMs: 100 },
      );
      expect(page.status).toBe(200);
      expect(page.type).toMatch(/^text\/plain/);
      const m = samples(page.body);
      expect(m.get('wassal_claims_total{result="won"}')).toBe(COUNT);
      expect(m.get('wassal_claims_total{result="blocked"}')).toBe(0);
      expect(m.get("wassal_processing_attempts_total")).toBe(COUNT);
      expect(m.get("wassal_completions_total")).toBe(COUNT);
      expect(m.get("wassal_dead_total")).toBe(0);
      expect(m.get("wassal_retries_total")).toBe(0);
      expect(m.get('wassal_handler_duration_seconds_count{result="completed"}')).toBe(COUNT);
      expect(m.get('wassal_handler_duration_seconds_bucket{le="+Inf",result="completed"}')).toBe(COUNT);
      expect(m.get('wassal_handler_duration_seconds_sum{result="completed"}')).toBeGreaterThan(0);
      expect(m.get('wassal_messages{status="processed"}')).toBe(COUNT);
      expect(m.get('wassal_messages{status="pending"}')).toBe(0);
      expect(m.get('wassal_messages{status="processing"}')).toBe(0);
      expect(m.get('wassal_messages{status="dead"}')).toBe(0);
      expect(page.body).toContain("# TYPE wassal_handler_duration_seconds histogram");
      expect(page.body).toContain("# HELP wassal_claims_total ");
      expect(m.has("process_resident_memory_bytes")).toBe(true);

      // The gauge is read from the database at each scrape: new work shows up as pending or processed.
      await cliOk(["payments", "seed", ...target.args, "--count", "3", "--start", "100"], { cwd: dir });
      await until(
        "the new payments in the gauge",
        async () => {
          const got = await scrape(url);
          return got !== undefined && samples(got.body).get('wassal_messages{status="processed"}') === COUNT + 3;
        },
        { timeoutMs: 10_000, intervalMs: 100 },
      );

      const missing = await scrape(`http://127.0.0.1:${port}/other`);
      expect(missing?.status).toBe(404);

      w.signal("SIGTERM");
      expect((await w.waitForExit(10_000)).code).toBe(0);
      // The port is given back.
      expect(await scrape(url)).toBeUndefined();
    });
  });
}

describe("sqlite: metrics port in use", () => {
  it("a worker whose --metrics-port is taken stops at once with one line naming the address, having claimed nothing", async () => {
    const target = newTarget("sqlite", FILE_TMP);
    const dir = cwd();
    await cliOk(["payments", "seed", ...target.args, "--count", "2"], { cwd: dir });
    const holder = createServer();
    await new Promise<void>((resolve) => holder.listen(0, "127.0.0.1", () => resolve()));
    try {
      const port = (holder.address() as AddressInfo).port;
      const w = startCli(["worker", ...target.args, "--metrics-port", String(port), "--log-level", "warn"], { cwd: dir });
      const exit = await w.waitForExit(10_000);
      expect(exit.code).toBe(2);
      expect(exit.signal).toBeNull();
      const line = errorLine(w.stderr());
      expect(line).toMatch(/^wassal: /);
      expect(line).toContain(`127.0.0.1:${port}`);
      expect(line).toMatch(/already in use.*--metrics-port/);
      expect((await target.messages()).map((m) => [m.status, m.attempts])).toEqual([
        ["pending", 0],
        ["pending", 0],
      ]);
    } finally {
      await new Promise<void>((resolve) => holder.close(() => resolve()));
    }
  });
});

describe("sqlite: --metrics-host", () => {
  it("serves on the address given (another loopback address here), and nowhere else", async () => {
    const target = newTarget("sqlite", FILE_TMP);
    const dir = cwd();
    await cliOk(["payments", "seed", ...target.args, "--count", "1"], { cwd: dir });
    const w = startCli(["worker", ...target.args, "--metrics-port", "0", "--metrics-host", "127.0.0.2", "--log-level", "info", "--poll-ms", "100"], {
      cwd: dir,
    });
    await w.waitForStderr(/"worker started"/);
    const started = logLines(w.stderr()).find((l) => l.msg === "worker started");
    const url = String(started?.metrics);
    expect(url).toMatch(/^http:\/\/127\.0\.0\.2:\d+\/metrics$/);
    expect((await scrape(url))?.status).toBe(200);
    expect(await scrape(url.replace("127.0.0.2", "127.0.0.1"))).toBeUndefined();
    w.signal("SIGTERM");
    expect((await w.waitForExit(10_000)).code).toBe(0);
  });

  it("an address this machine does not have: exit 2, one line naming it, nothing claimed", async () => {
    const target = newTarget("sqlite", FILE_TMP);
    const dir = cwd();
    await cliOk(["payments", "seed", ...target.args, "--count", "1"], { cwd: dir });
    const w = startCli(["worker", ...target.args, "--metrics-port", "0", "--metrics-host", "192.0.2.1", "--log-level", "warn"], { cwd: dir });
    const exit = await w.waitForExit(10_000);
    expect(exit.code).toBe(2);
    expect(errorLine(w.stderr())).toBe(
      "wassal: cannot serve metrics on 192.0.2.1: no such address on this machine; give --metrics-host one of its addresses (default 127.0.0.1)",
    );
    expect((await target.messages()).map((m) => m.status)).toEqual(["pending"]);
  });

  it("is refused before the database is opened: a worker or relay given a new file creates nothing", async () => {
    const dir = cwd();
    for (const command of [["worker"], ["relay", "--to", "nats://127.0.0.1:4222", "--destination", "orders.{type}"]]) {
      const db = join(dir, `${command[0]}.db`);
      const w = startCli([...command, "--db", db, "--metrics-port", "0", "--metrics-host", "192.0.2.1", "--log-level", "warn"], { cwd: dir });
      const exit = await w.waitForExit(10_000);
      expect(exit.code, w.stderr()).toBe(2);
      expect(errorLine(w.stderr())).toMatch(/^wassal: cannot serve metrics on 192\.0\.2\.1: no such address on this machine/);
      expect(existsSync(db), `${command[0]} created ${db}`).toBe(false);
    }
  });
});
