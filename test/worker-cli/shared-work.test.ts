// Two `wassal worker` processes on one database share the work: every message is claimed once,
// processed once, by one of them, and both stop cleanly on SIGTERM. On a SQLite file, a
// PostgreSQL schema and a MariaDB database.
//
// Needs `npm run build` first (`npm test` does it).

import { mkdtempSync } from "node:fs";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { ProviderSimulator } from "../../src/payments/provider-simulator.js";
import { cliJson, cliOk, killAll, requireBuiltCli, startCli } from "../support/cli.js";
import { mariadbAvailable } from "../support/mariadb.js";
import { postgresAvailable } from "../support/postgres.js";
import { tempDir } from "../support/temp.js";
import { until } from "../support/wait.js";
import { closeTargets, createTarget, expectSettled, logLines, type StatsJson, type StoreKind } from "./harness.js";

const PG = await postgresAvailable();
const MARIADB = await mariadbAvailable();
const FILE_TMP = tempDir("wassal-wcli-shared-");
const cwd = () => mkdtempSync(join(FILE_TMP, "cwd-"));
const provider = new ProviderSimulator();

beforeAll(requireBuiltCli);
afterEach(killAll);
afterAll(closeTargets);

for (const kind of ["sqlite", "postgres", "mariadb"] as const satisfies readonly StoreKind[]) {
  describe.runIf(kind === "sqlite" || (kind === "postgres" ? PG : MARIADB))(`${kind}: two worker processes`, () => {
    // Fewer on MariaDB: seeding commits each payment on its own, about 20 ms apiece on the test server (2000 took over 40 s).
    const COUNT = kind === "mariadb" ? 400 : 2000;

    it(`split ${COUNT} payments between them, each message claimed and processed exactly once, and both exit 0 on SIGTERM`, async () => {
      const target = await createTarget(kind, FILE_TMP);
      const dir = cwd();
      // --synchronous NORMAL only speeds up seeding the SQLite file (ignored on the servers).
      const seeded = await cliJson<{ created: number }>(["payments", "seed", ...target.args, "--count", String(COUNT), "--synchronous", "NORMAL"], {
        cwd: dir,
        timeoutMs: 40_000,
      });
      expect(seeded.created).toBe(COUNT);

      const names = ["worker-A", "worker-B"];
      const workers = names.map((name) =>
        startCli(["worker", ...target.args, "--name", name, "--log-level", "warn", "--concurrency", "10", "--poll-ms", "200"], { cwd: dir }),
      );

      // Progress through the CLI itself, until every message is processed.
      let last: StatsJson | undefined;
      await until(
        `${COUNT} processed`,
        async () => {
          for (const w of workers) if (w.exit()) throw new Error(`a worker exited early: ${JSON.stringify(w.exit())}; stderr: ${w.stderr()}`);
          last = await cliJson<StatsJson>(["outbox", "stats", ...target.args], { cwd: dir });
          return last.counts.processed === COUNT;
        },
        { timeoutMs: 45_000, intervalMs: 200, last: () => last?.counts },
      );
      expect(last!.counts).toEqual({ pending: 0, processing: 0, processed: COUNT, dead: 0, cancelled: 0 });
      expect(last!.leasesByOwner).toEqual([]);

      // Both stop gracefully and promptly: nothing is in flight, so nothing waits for the grace period.
      const sent = workers.map((w) => w.signal("SIGTERM"));
      const exits = await Promise.all(workers.map((w) => w.waitForExit(10_000)));
      exits.forEach((exit, i) => {
        expect({ worker: names[i], code: exit.code, signal: exit.signal }).toEqual({ worker: names[i], code: 0, signal: null });
        expect(exit.at - sent[i]!, `${names[i]} took too long to stop`).toBeLessThan(5_000);
      });
      // At --log-level warn a clean run says nothing: no lease lost, no retry, no dead message, no store error.
      for (const w of workers) expect(logLines(w.stderr()).map((l) => `${l.msg} ${l.error ?? ""}`)).toEqual([]);

      // Every message: processed, claimed once (token 1, attempt 1), by one of the two workers.
      const messages = await target.messages();
      expect(messages).toHaveLength(COUNT);
      expect(messages.filter((m) => m.status !== "processed" || m.attempts !== 1 || m.leaseToken !== 1 || !names.includes(m.lockedBy ?? ""))).toEqual([]);
      const byWorker = Object.fromEntries(names.map((name) => [name, messages.filter((m) => m.lockedBy === name).length]));
      for (const name of names) expect(byWorker[name], `messages processed by ${name} (split: ${JSON.stringify(byWorker)})`).toBeGreaterThan(0);

      // Every payment settled once, as the provider says, with a transaction id exactly when Paid.
      const payments = await target.payments();
      expect(payments).toHaveLength(COUNT);
      expect(payments.filter((p) => p.status === "Pending")).toEqual([]);
      expectSettled(payments, (key) => provider.outcomeFor(key));
      expect(payments.some((p) => p.status === "Paid") && payments.some((p) => p.status === "Failed")).toBe(true);

      // The listing agrees with the database.
      const listed = (await cliOk(["payments", "list", ...target.args, "--limit", "5"], { cwd: dir })).trim().split("\n");
      expect(listed).toHaveLength(5);
      for (const line of listed) expect(line).toMatch(/^\d+\tPAY-\d{6}\t1000 EUR\t(Paid\tTXN-[0-9A-F]{16}|Failed\t-)$/);
    }, 90_000);
  });
}
