// `wassal outbox stats | dead | redrive | purge`, in text and with --json, against what a real
// `wassal worker` process left behind: dead messages with clear errors (an unknown message type, a
// malformed payment payload) while the worker carries on with the rest, redrive by id and --all,
// purge in batches, and leases per owner. On a SQLite file, a PostgreSQL schema and a MariaDB database.
//
// Needs `npm run build` first (`npm test` does it).

import { mkdtempSync } from "node:fs";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { ProviderSimulator } from "../../src/payments/provider-simulator.js";
import { cliJson, cliOk, killAll, requireBuiltCli, runCli, SCRIPT_AVAILABLE, startCli, startCliOnTerminal } from "../support/cli.js";
import { mariadbAvailable } from "../support/mariadb.js";
import { postgresAvailable } from "../support/postgres.js";
import { tempDir } from "../support/temp.js";
import { until } from "../support/wait.js";
import { closeTargets, createTarget, expectSettled, logLines, waitForRows, type MessageRow, type StatsJson, type StoreKind, type Target } from "./harness.js";

const PG = await postgresAvailable();
const MARIADB = await mariadbAvailable();
const FILE_TMP = tempDir("wassal-wcli-admin-");
const cwd = () => mkdtempSync(join(FILE_TMP, "cwd-"));
const provider = new ProviderSimulator();

beforeAll(requireBuiltCli);
afterEach(killAll);
afterAll(closeTargets);

interface DeadJson {
  id: string;
  type: string;
  status: string;
  attempts: number;
  lastError: string | null;
}

const count = (rows: readonly MessageRow[], status: string) => rows.filter((r) => r.status === status).length;

for (const kind of ["sqlite", "postgres", "mariadb"] as const satisfies readonly StoreKind[]) {
  describe.runIf(kind === "sqlite" || (kind === "postgres" ? PG : MARIADB))(`${kind}: wassal outbox`, () => {
    // One outbox for the sequence below (each step starts from where the previous one left it).
    let target: Target;
    let dir: string;
    let unknownId: string;
    let malformedId: string;

    it("a worker marks an unknown type and a malformed payload dead at their first attempt (retrying cannot fix them), with clear errors, and keeps processing the rest", async () => {
      target = await createTarget(kind, FILE_TMP);
      dir = cwd();
      // Two messages the CLI cannot make, enqueued through the library, ahead of the payments.
      const outbox = await target.open();
      try {
        await outbox.store.transaction(async (tx) => {
          unknownId = (await outbox.store.enqueue(tx, { type: "test.unknown", payload: { hello: "world" } })).id;
          malformedId = (await outbox.store.enqueue(tx, { type: "payment.reconcile", payload: { paymentId: 42 } })).id;
        });
      } finally {
        await outbox.close();
      }
      await cliOk(["payments", "seed", ...target.args, "--count", "30"], { cwd: dir });

      // --types: the worker claims the unknown type too (by default it would leave it pending), and marks it dead.
      const w = startCli(
        [
          "worker",
          ...target.args,
          "--name",
          "ops-worker",
          "--types",
          "payment.reconcile,test.unknown",
          "--max-attempts",
          "5",
          "--poll-ms",
          "100",
          "--log-level",
          "warn",
        ],
        { cwd: dir },
      );
      await waitForRows(target, "30 processed and 2 dead", (rows) => count(rows, "processed") === 30 && count(rows, "dead") === 2, [w]);

      // Still running: payments created now are processed too.
      await cliOk(["payments", "seed", ...target.args, "--count", "5", "--start", "31"], { cwd: dir });
      await waitForRows(target, "35 processed", (rows) => count(rows, "processed") === 35, [w]);
      expect(w.exit()).toBeUndefined();
      w.signal("SIGTERM");
      expect((await w.waitForExit(10_000)).code).toBe(0);

      // The worker logged each dead message once, as an error naming the message and the cause; nothing else.
      const logs = logLines(w.stderr());
      expect(logs.map((l) => [l.level, l.msg, l.messageId])).toEqual(
        expect.arrayContaining([
          [50, "dead", unknownId],
          [50, "dead", malformedId],
        ]),
      );
      expect(logs).toHaveLength(2);

      const rows = await target.messages();
      const unknown = rows.find((r) => r.id === unknownId)!;
      const malformed = rows.find((r) => r.id === malformedId)!;
      expect(unknown).toMatchObject({ status: "dead", attempts: 1, lockedBy: "ops-worker" });
      expect(unknown.lastError).toBe(
        `UnknownMessageTypeError: no handler for message type "test.unknown" (this worker handles: payment.reconcile); register one, then redrive the message`,
      );
      expect(malformed).toMatchObject({ status: "dead", attempts: 1, lockedBy: "ops-worker" });
      expect(malformed.lastError).toMatch(
        new RegExp(
          `^InvalidPayloadError: message ${malformedId} has an invalid payment\\.reconcile payload: expected string fields paymentId and idempotencyKey`,
        ),
      );
      expect(rows.filter((r) => r.type === "payment.reconcile" && r.id !== malformedId).every((r) => r.status === "processed" && r.attempts === 1)).toBe(true);
      expectSettled(await target.payments(), (key) => provider.outcomeFor(key));
    });

    it("stats: counts by state and no leases, in text and --json", async () => {
      const [stats, text] = await Promise.all([
        cliJson<StatsJson>(["outbox", "stats", ...target.args], { cwd: dir }),
        cliOk(["outbox", "stats", ...target.args], { cwd: dir }),
      ]);
      expect(stats.counts).toEqual({ pending: 0, processing: 0, processed: 35, dead: 2, cancelled: 0 });
      expect(stats).toMatchObject({ oldestPendingCreatedAt: null, oldestPendingAgeMs: null, leasesByOwner: [], expiredLeases: 0, pendingByType: [] });
      expect(stats.db).toContain(kind === "postgres" ? "(schema " : target.db);
      expect(Number.isNaN(Date.parse(stats.now))).toBe(false);

      const lines = text.trimEnd().split("\n");
      expect(lines[0]).toMatch(/^outbox .+ at \d{4}-\d\d-\d\dT/);
      expect(lines.slice(1)).toEqual([
        "  pending 0   processing 0   processed 35   dead 2   cancelled 0",
        "  pending by type: none",
        "  oldest pending: none",
        "  expired leases: 0",
        "  leases by owner: none",
      ]);
    });

    it("dead: lists the dead messages with their last errors, in text and --json", async () => {
      const [plain, json, limited] = await Promise.all([
        cliOk(["outbox", "dead", ...target.args], { cwd: dir }),
        cliJson<DeadJson[]>(["outbox", "dead", ...target.args], { cwd: dir }),
        cliOk(["outbox", "dead", ...target.args, "--limit", "1"], { cwd: dir }),
      ]);
      const text = plain.trimEnd().split("\n");
      expect(text).toHaveLength(2);
      expect(text[0]).toBe(
        `${unknownId}\ttest.unknown\t-\tattempts 1\tUnknownMessageTypeError: no handler for message type "test.unknown" (this worker handles: payment.reconcile); register one, then redrive the message`,
      );
      expect(text[1]).toMatch(
        new RegExp(`^${malformedId}\\tpayment\\.reconcile\\t-\\tattempts 1\\tInvalidPayloadError: message ${malformedId} has an invalid`),
      );

      expect(json.map((m) => ({ id: m.id, type: m.type, status: m.status, attempts: m.attempts }))).toEqual([
        { id: unknownId, type: "test.unknown", status: "dead", attempts: 1 },
        { id: malformedId, type: "payment.reconcile", status: "dead", attempts: 1 },
      ]);
      expect(json[0]!.lastError).toContain("UnknownMessageTypeError");
      expect(json[1]!.lastError).toContain("InvalidPayloadError");

      expect(limited.trimEnd().split("\n")).toEqual([text[0]]);
    });

    it("redrive <id> and redrive --all move dead messages back to pending, attempts reset", async () => {
      expect(await cliOk(["outbox", "redrive", ...target.args, unknownId], { cwd: dir })).toBe("1 dead message moved back to pending\n");
      let rows = await target.messages();
      expect(rows.find((r) => r.id === unknownId)).toMatchObject({ status: "pending", attempts: 0, lockedBy: null });
      expect(rows.find((r) => r.id === malformedId)).toMatchObject({ status: "dead", attempts: 1 });
      const stats = await cliJson<StatsJson>(["outbox", "stats", ...target.args], { cwd: dir });
      expect(stats.counts).toEqual({ pending: 1, processing: 0, processed: 35, dead: 1, cancelled: 0 });
      expect(stats.oldestPendingAgeMs).toBeGreaterThanOrEqual(0);

      // A processed message is not dead and an absent id names nothing: neither moves, each is
      // named with the reason, and the exit code says not everything named was moved.
      const processedId = rows.find((r) => r.status === "processed")!.id;
      const partial = await runCli(["outbox", "redrive", ...target.args, processedId, "999999", malformedId, "--json"], { cwd: dir });
      expect(partial.code).toBe(1);
      expect(JSON.parse(partial.stdout)).toEqual({
        redriven: 1,
        notMoved: [
          { messageId: processedId, status: "processed" },
          { messageId: "999999", status: "missing" },
        ],
      });
      const text = await runCli(["outbox", "redrive", ...target.args, processedId, "999999"], { cwd: dir });
      expect([text.code, text.stdout, text.stderr]).toEqual([
        1,
        "0 dead messages moved back to pending\n",
        `wassal: message ${processedId} not moved: it is processed, and only dead messages are redriven\nwassal: message 999999 not moved: no such message\n`,
      ]);
      // Past the 64-bit range: refused as bad input on both stores (exit 2), before anything is written.
      const huge = await runCli(["outbox", "redrive", ...target.args, "9223372036854775808"], { cwd: dir });
      expect([huge.code, huge.stderr.split("\n")[0]]).toEqual([
        2,
        'wassal: a message id must be a whole number from 1 to 9223372036854775807 written in decimal (got "9223372036854775808"); see the dead messages\' ids with: wassal outbox dead',
      ]);

      expect(await cliJson(["outbox", "redrive", ...target.args, "--all"], { cwd: dir })).toEqual({ redriven: 0, notMoved: [] });
      rows = await target.messages();
      expect(rows.filter((r) => r.id === unknownId || r.id === malformedId).map((r) => [r.status, r.attempts])).toEqual([
        ["pending", 0],
        ["pending", 0],
      ]);
      expect(count(rows, "dead")).toBe(0);
      expect(count(rows, "processed")).toBe(35);
      expect(await cliOk(["outbox", "redrive", ...target.args, "--all"], { cwd: dir })).toBe("0 dead messages moved back to pending\n");
      expect(await cliOk(["outbox", "dead", ...target.args], { cwd: dir })).toBe("no dead messages\n");
    });

    it("purge --processed-before deletes processed rows in batches, reports the count, and leaves the rest", async () => {
      // Everything was processed moments ago: nothing is older than an hour.
      const none = await cliJson<{ processed: { deleted: number; before: string } }>(["outbox", "purge", ...target.args, "--processed-before", "1h"], {
        cwd: dir,
      });
      expect(Object.keys(none)).toEqual(["processed"]);
      expect(none.processed.deleted).toBe(0);
      expect(Date.now() - Date.parse(none.processed.before)).toBeGreaterThan(3_500_000);
      expect(count(await target.messages(), "processed")).toBe(35);

      // 35 rows, 7 per batch: on a terminal the progress shows each batch.
      const args = ["outbox", "purge", ...target.args, "--processed-before", "0s", "--batch-size", "7"];
      if (SCRIPT_AVAILABLE) {
        const p = startCliOnTerminal(args, { cwd: dir });
        const exit = await p.waitForExit(20_000);
        expect(exit.code).toBe(0);
        const out = p.stdout().replaceAll("\r\n", "\n");
        const progress = [...out.matchAll(/\rdeleted (\d+)…/g)].map((m) => Number(m[1]));
        expect(progress.slice(0, 5)).toEqual([7, 14, 21, 28, 35]);
        expect(progress.every((n) => n === 35 || progress.indexOf(n) < 5)).toBe(true);
        expect(out).toMatch(/\ndeleted 35 processed messages processed before \d{4}-\d\d-\d\dT[\d:.]+Z\n$/);
      } else {
        // Under CI the progress must be seen: .ci/run installs `script`.
        if (process.env.CI)
          throw new Error("CI is set, so the purge's progress must be observed on a terminal, and `script` (util-linux; Debian's bsdutils) is missing");
        console.warn("!!! `script` is missing: purge batches are not observed, only the total");
        expect(await cliOk(args, { cwd: dir })).toMatch(/^deleted 35 processed messages processed before /);
      }
      const rows = await target.messages();
      expect(rows.map((r) => [r.id, r.status])).toEqual([
        [unknownId, "pending"],
        [malformedId, "pending"],
      ]);
      expect(await cliOk(["outbox", "purge", ...target.args, "--processed-before", "0s"], { cwd: dir })).toMatch(
        /^deleted 0 processed messages processed before /,
      );
    });

    it("the redriven messages are claimable again: a worker takes them at once (and marks them dead again)", async () => {
      const w = startCli(
        [
          "worker",
          ...target.args,
          "--name",
          "second-look",
          "--types",
          "payment.reconcile,test.unknown",
          "--max-attempts",
          "1",
          "--poll-ms",
          "100",
          "--log-level",
          "warn",
        ],
        { cwd: dir },
      );
      const rows = await waitForRows(target, "both dead again", (r) => count(r, "dead") === 2, [w], 10_000);
      expect(rows.map((r) => [r.status, r.attempts, r.lockedBy, r.leaseToken])).toEqual([
        ["dead", 1, "second-look", 2],
        ["dead", 1, "second-look", 2],
      ]);
      w.signal("SIGTERM");
      expect((await w.waitForExit(10_000)).code).toBe(0);
    });

    it("purge --dead-before and --audit-before: retention for dead messages and the audit trail, each reported", async () => {
      const kept = await cliJson<Record<string, { deleted: number }>>(["outbox", "purge", ...target.args, "--dead-before", "1h", "--audit-before", "1h"], {
        cwd: dir,
      });
      expect([kept.dead?.deleted, kept.audit?.deleted]).toEqual([0, 0]);
      expect(count(await target.messages(), "dead")).toBe(2);
      const text = await cliOk(["outbox", "purge", ...target.args, "--dead-before", "0s", "--audit-before", "0s"], { cwd: dir });
      expect(text).toMatch(/^deleted 2 dead messages marked dead before \S+Z\ndeleted \d+ audit rows? written before \S+Z\n$/);
      expect(count(await target.messages(), "dead")).toBe(0);
    });

    it("purge --inbox-before: retention for the inbox's ids, reported; recent ids stay", async () => {
      const fresh = await createTarget(kind, FILE_TMP);
      const outbox = await fresh.open();
      try {
        await outbox.store.transaction(async (tx) => {
          for (const id of ["m-1", "m-2", "m-3"]) expect(await outbox.store.receive(tx, id, { source: "orders" })).toBe(true);
        });
      } finally {
        await outbox.close();
      }
      const kept = await cliJson<Record<string, { deleted: number }>>(["outbox", "purge", ...fresh.args, "--inbox-before", "1h"], { cwd: dir });
      expect(kept.inbox?.deleted).toBe(0);
      const text = await cliOk(["outbox", "purge", ...fresh.args, "--inbox-before", "0s"], { cwd: dir });
      expect(text).toMatch(/^deleted 3 inbox ids received before \S+Z\n$/);
      const reopened = await fresh.open();
      try {
        // Purged: the same id is new again.
        expect(await reopened.store.transaction((tx) => reopened.store.receive(tx, "m-1", { source: "orders" }))).toBe(true);
      } finally {
        await reopened.close();
      }
    });

    it("show <id>: the whole message with its envelope, in text and --json; an absent id exits 2", async () => {
      const fresh = await createTarget(kind, FILE_TMP);
      const outbox = await fresh.open();
      let id: string;
      try {
        const message = await outbox.store.transaction((tx) =>
          outbox.store.enqueue(tx, {
            type: "order.paid",
            key: "order-42",
            headers: { "x-correlation-id": "c-1", "content-type": "application/json" },
            destination: "orders.events",
            payload: { orderId: "order-42" },
          }),
        );
        id = message.id;
      } finally {
        await outbox.close();
      }
      const json = await cliJson<Record<string, unknown>>(["outbox", "show", ...fresh.args, id], { cwd: dir });
      expect(json).toMatchObject({
        id,
        type: "order.paid",
        key: "order-42",
        destination: "orders.events",
        headers: { "x-correlation-id": "c-1", "content-type": "application/json" },
        payload: { orderId: "order-42" },
        status: "pending",
      });
      const text = await cliOk(["outbox", "show", ...fresh.args, id], { cwd: dir });
      expect(text).toContain(`message ${id}  order.paid  pending\n  key          order-42\n  destination  orders.events\n`);
      expect(text).toMatch(
        /headers {6}(x-correlation-id: c-1\n {15}content-type: application\/json|content-type: application\/json\n {15}x-correlation-id: c-1)\n/,
      );
      const absent = await runCli(["outbox", "show", ...fresh.args, "999999"], { cwd: dir });
      expect([absent.code, absent.stdout, absent.stderr.split("\n")[0]]).toEqual([
        2,
        "",
        "wassal: no message 999999 in this outbox; list dead ones with: wassal outbox dead",
      ]);
    });

    it("blocked-keys lists a key a dead message holds; unblock --skip and --redrive free it; a key not blocked exits 2", async () => {
      const fresh = await createTarget(kind, FILE_TMP);
      const outbox = await fresh.open();
      let deadId: string;
      try {
        for (const label of ["a1", "a2", "b1", "b2"]) {
          await outbox.store.transaction((tx) => outbox.store.enqueue(tx, { type: "test.key", key: label[0] as string, payload: { label } }));
        }
        const leases = await outbox.store.claim("ops", { limit: 10, leaseMs: 600_000 });
        for (const lease of leases) await outbox.store.fail(lease, new Error(`poison ${(lease.message.payload as { label: string }).label}`), "dead");
        deadId = leases[0]!.messageId;
      } finally {
        await outbox.close();
      }
      const listed = await cliJson<{ key: string; messageId: string; waiting: number; lastError: string }[]>(["outbox", "blocked-keys", ...fresh.args], {
        cwd: dir,
      });
      expect(listed.map((b) => [b.key, b.waiting, b.lastError])).toEqual([
        ["a", 1, "Error: poison a1"],
        ["b", 1, "Error: poison b1"],
      ]);
      expect(await cliOk(["outbox", "blocked-keys", ...fresh.args], { cwd: dir })).toMatch(
        /^a\tmessage \d+ \(test\.key\) dead since \S+Z\t1 waiting\tError: poison a1\nb\t/,
      );
      expect(await cliOk(["outbox", "unblock", ...fresh.args, "a", "--skip"], { cwd: dir })).toBe(
        `key a: message ${deadId} skipped (still dead); the next message of the key may go\n`,
      );
      expect(await cliJson(["outbox", "unblock", ...fresh.args, "b", "--redrive"], { cwd: dir })).toMatchObject({ key: "b", action: "redrive" });
      expect(await cliOk(["outbox", "blocked-keys", ...fresh.args], { cwd: dir })).toBe("no blocked keys\n");
      const rows = await fresh.messages();
      expect(rows.map((r) => r.status)).toEqual(["dead", "pending", "pending", "pending"]);
      const notBlocked = await runCli(["outbox", "unblock", ...fresh.args, "a", "--skip"], { cwd: dir });
      expect([notBlocked.code, notBlocked.stdout, notBlocked.stderr.split("\n")[0]]).toEqual([
        2,
        "",
        'wassal: ordering key "a" is not blocked (no dead message holds it); see the blocked keys with: wassal outbox blocked-keys',
      ]);
      const neither = await runCli(["outbox", "unblock", ...fresh.args, "a"], { cwd: dir });
      expect([neither.code, neither.stderr.split("\n")[0]]).toEqual([2, "wassal: choose one: --redrive or --skip"]);
    });

    it("cancel <ids…>: marks pending messages cancelled (--on-complete delete: deletes them), hands a key holder's key on; running (without --running) and unknown ids are refused (exit 1), bad ids exit 2", async () => {
      const fresh = await createTarget(kind, FILE_TMP);
      const here = cwd();
      const outbox = await fresh.open();
      const id: Record<string, string> = {};
      try {
        for (const label of ["a1", "a2", "u1", "u2", "run"]) {
          const key = label.startsWith("a") ? "a" : undefined;
          const message = await outbox.store.transaction((tx) =>
            outbox.store.enqueue(tx, { type: "test.cancel", payload: { label }, ...(key === undefined ? {} : { key }) }),
          );
          id[label] = message.id;
        }
        const running = await outbox.store.claimMessage("ops", id.run as string, { leaseMs: 600_000 });
        expect(running.outcome).toBe("claimed");
      } finally {
        await outbox.close();
      }
      expect(await cliOk(["outbox", "cancel", ...fresh.args, id.a1 as string, id.u1 as string, "--reason", "test"], { cwd: here })).toBe(
        `message ${id.a1} (test.cancel) cancelled; key a handed on to its next message\nmessage ${id.u1} (test.cancel) cancelled\n`,
      );
      const json = await runCli(["outbox", "cancel", ...fresh.args, id.u2 as string, id.run as string, "999999", "--json", "--on-complete", "delete"], {
        cwd: here,
      });
      expect(json.code).toBe(1);
      const report = JSON.parse(json.stdout) as { cancelled: { messageId: string }[]; notCancelled: { messageId: string; code: string }[] };
      expect(report.cancelled.map((c) => c.messageId)).toEqual([id.u2]);
      expect(report.notCancelled.map((n) => [n.messageId, n.code])).toEqual([
        [id.run, "MESSAGE_RUNNING"],
        ["999999", "MESSAGE_NOT_FOUND"],
      ]);
      const text = await runCli(["outbox", "cancel", ...fresh.args, id.run as string], { cwd: here });
      expect([text.code, text.stdout]).toEqual([1, ""]);
      expect(text.stderr).toMatch(new RegExp(`^wassal: message ${id.run} not cancelled: message ${id.run} is running \\(leased by "ops"`));
      const bad = await runCli(["outbox", "cancel", ...fresh.args, "abc"], { cwd: here });
      expect([bad.code, bad.stderr.split("\n")[0]]).toEqual([
        2,
        'wassal: a message id must be a whole number from 1 to 9223372036854775807 written in decimal (got "abc")',
      ]);
      // Kept as cancelled, naming the cancel; u2, cancelled with --on-complete delete, is gone.
      const rows = await fresh.messages();
      expect(rows.map((r) => [r.id, r.status, r.lockedBy])).toEqual([
        [id.a1, "cancelled", "cancel: test"],
        [id.a2, "pending", null],
        [id.u1, "cancelled", "cancel: test"],
        [id.run, "processing", "ops"],
      ]);
      const twice = await runCli(["outbox", "cancel", ...fresh.args, id.u1 as string], { cwd: here });
      expect([twice.code, twice.stderr]).toEqual([
        1,
        expect.stringMatching(new RegExp(`^wassal: message ${id.u1} not cancelled: message ${id.u1} was already cancelled`)),
      ]);
      const badMode = await runCli(["outbox", "cancel", ...fresh.args, id.a2 as string, "--on-complete", "drop"], { cwd: here });
      expect([badMode.code, badMode.stderr]).toEqual([2, expect.stringMatching(/keep.*delete/)]);
      // The key moved on: a2 is claimable now.
      const after = await fresh.open();
      try {
        expect((await after.store.claim("w", { limit: 10, leaseMs: 1000 })).map((l) => l.messageId)).toEqual([id.a2]);
      } finally {
        await after.close();
      }
      // With --running, the running one is cancelled too: its run's owner is named.
      expect(await cliOk(["outbox", "cancel", ...fresh.args, id.run as string, "--running"], { cwd: here })).toBe(
        `message ${id.run} (test.cancel) cancelled; its run by ops is refused and aborted\n`,
      );
      expect((await fresh.messages()).map((r) => [r.id, r.status])).toEqual([
        [id.a1, "cancelled"],
        [id.a2, "processing"], // claimed above
        [id.u1, "cancelled"],
        [id.run, "cancelled"],
      ]);
      const stats = await cliOk(["outbox", "stats", ...fresh.args], { cwd: here });
      expect(stats).toMatch(/pending 0 {3}processing 1 {3}processed 0 {3}dead 0 {3}cancelled 3/);
      const help = await cliOk(["outbox", "cancel", "--help"], { cwd: here });
      expect(help).toMatch(/Without --running, a running \(leased\) message is refused/);
      expect(help).toMatch(/--running/);
      expect(help).toMatch(/--reason <text>/);
      expect(help).toMatch(/--on-complete <mode>/);
    });

    it("stats: leases held and expired per owner, in text and --json", async () => {
      const fresh = await createTarget(kind, FILE_TMP);
      const outbox = await fresh.open();
      try {
        await outbox.store.transaction(async (tx) => {
          for (let n = 0; n < 4; n += 1) await outbox.store.enqueue(tx, { type: "test.lease", payload: { n } });
        });
        expect(await outbox.store.claim("ops-a", { limit: 2, leaseMs: 600_000 })).toHaveLength(2);
        const [short] = await outbox.store.claim("ops-b", { limit: 1, leaseMs: 100 });
        expect(short).toBeDefined();
        await until("ops-b's lease to expire", async () => (await outbox.store.stats()).expiredLeases === 1, { timeoutMs: 5_000 });
      } finally {
        await outbox.close();
      }
      const [stats, plain] = await Promise.all([
        cliJson<StatsJson>(["outbox", "stats", ...fresh.args], { cwd: dir }),
        cliOk(["outbox", "stats", ...fresh.args], { cwd: dir }),
      ]);
      expect(stats.counts).toEqual({ pending: 1, processing: 3, processed: 0, dead: 0, cancelled: 0 });
      expect(stats.leasesByOwner).toEqual([
        { owner: "ops-a", held: 2, expired: 0 },
        { owner: "ops-b", held: 0, expired: 1 },
      ]);
      expect(stats.expiredLeases).toBe(1);
      expect(stats.oldestPendingAgeMs).toBeGreaterThanOrEqual(0);
      expect(stats.pendingByType).toEqual([{ type: "test.lease", count: 1 }]);

      const text = plain.trimEnd().split("\n");
      expect(text[1]).toBe("  pending 1   processing 3   processed 0   dead 0   cancelled 0");
      expect(text.slice(2, 4)).toEqual(["  pending by type:", "    test.lease: 1"]);
      expect(text[4]).toMatch(/^ {2}oldest pending: [\d.]+ (ms|s|min|h) old$/);
      expect(text.slice(5)).toEqual(["  expired leases: 1", "  leases by owner:", "    ops-a: 2 held, 0 expired", "    ops-b: 0 held, 1 expired"]);
    });
  });
}
