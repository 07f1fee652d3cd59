// The dashboard and the HTML lab report in a real browser (Debian's Chromium, driven by
// playwright-core). The database has real traffic: a real worker process drains seeded payments
// with injected handler errors (retries, dead messages), and a scripted lease expiry leaves a
// reclaim and a refused stale write. Screenshots go to test-screenshots/ (git-ignored).
//
// Needs `npm run build` first (`npm test` does it) and Chromium (`.ci/run` installs it).

import { readdirSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RunningDashboard, startDashboard } from "../../src/dashboard/dashboard.js";
import { ManualClock } from "../../src/outbox/clock.js";
import type { AuditEntry, Lease } from "../../src/outbox/types.js";
import { SqliteOutboxStore } from "../../src/stores/sqlite/sqlite-outbox-store.js";
import { type Browser, CHROMIUM, launchBrowser } from "../support/browser.js";
import { killAll, requireBuiltCli, runCli, startCli } from "../support/cli.js";
import { tempDir } from "../support/temp.js";
import { until } from "../support/wait.js";

const dir = tempDir("wassal-dashboard-browser-");
const db = join(dir, "outbox.db");
const EVIL = "<script>window.__pwned = 'payload'</script>";
const EVIL_HEADER = '<img src="x" onerror="window.__pwned = \'header\'">';

let store: SqliteOutboxStore;
let readOnly: RunningDashboard;
let acting: RunningDashboard;
let browser: Browser;
const ids = { reclaimed: "", evil: "" };

// Skipped only outside CI when Chromium is missing; under CI (which installs it) a missing browser fails.
describe.skipIf(CHROMIUM === null && !process.env.CI)("the dashboard in a browser", () => {
  beforeAll(async () => {
    requireBuiltCli();
    // Real traffic: 12 payments, drained by a real worker whose handler fails half of its runs.
    const seeded = await runCli(["payments", "seed", "--db", db, "--count", "12"], { cwd: dir });
    expect(seeded.code, seeded.stderr).toBe(0);
    const worker = startCli(
      [
        "worker",
        "--db",
        db,
        "--audit",
        "--fault-handler-error-rate",
        "0.5",
        "--max-attempts",
        "2",
        "--retry-base-ms",
        "0",
        "--poll-ms",
        "20",
        "--log-level",
        "warn",
      ],
      { cwd: dir },
    );
    store = new SqliteOutboxStore({ path: db, audit: true, clock: new ManualClock(new Date()) });
    await until(
      "the worker to finish every payment",
      async () => {
        const counts = await store.countByStatus();
        return counts.pending + counts.processing === 0 && counts.processed + counts.dead === 12;
      },
      { timeoutMs: 60_000 },
    );
    worker.signal("SIGTERM");
    expect((await worker.waitForExit(20_000)).code).toBe(0);

    // A scripted lease expiry on the store's manual clock: Worker-A's lease runs out, Worker-B
    // reclaims, Worker-A's late completion is refused, Worker-B completes.
    const clock = new ManualClock(new Date());
    const scripted = new SqliteOutboxStore({ path: db, audit: true, clock });
    ids.reclaimed = (await scripted.transaction((tx) => scripted.enqueue(tx, { type: "demo.expiry", payload: { n: 1 }, dedupeKey: "expiry-demo" }))).id;
    const [stale] = await scripted.claim("Worker-A", { limit: 1, leaseMs: 500, types: ["demo.expiry"] });
    clock.advance(600);
    const [fresh] = await scripted.claim("Worker-B", { limit: 1, leaseMs: 30_000, types: ["demo.expiry"] });
    expect((await scripted.complete(stale as Lease)).outcome).toBe("lease-lost");
    expect((await scripted.complete(fresh as Lease)).outcome).toBe("completed");
    ids.evil = (
      await scripted.transaction((tx) =>
        scripted.enqueue(tx, { type: "demo.markup", payload: { note: EVIL }, headers: { "x-note": EVIL_HEADER }, dedupeKey: "markup-demo" }),
      )
    ).id;
    await scripted.close();

    readOnly = await startDashboard({ store, database: db, port: 0, pollMs: 100 });
    acting = await startDashboard({ store, database: db, port: 0, pollMs: 100, allowActions: true });
    browser = await launchBrowser();
  }, 120_000);

  afterAll(async () => {
    await browser?.close();
    await readOnly?.close();
    await acting?.close();
    await store?.close();
    await killAll();
  });

  it("follows the overview to a message and its timeline, whose bars match the audit trail", async () => {
    const page = await browser.newPage();
    await page.goto(readOnly.url);
    const counts = await store.countByStatus();
    for (const status of ["processed", "dead", "pending"] as const) {
      await expect.poll(() => page.locator(`[data-status="${status}"] .n`).textContent(), { timeout: 15_000 }).toBe(String(counts[status]));
    }
    await browser.screenshot(page, "dashboard-overview");

    // Search by dedupe key, then follow the result.
    await page.fill('input[name="q"]', "expiry-demo");
    await page.click('form.search button[type="submit"]');
    await page.click(`tr[data-message="${ids.reclaimed}"] a.message-link`);
    await expect.poll(() => page.url(), { timeout: 15_000 }).toMatch(new RegExp(`/messages/${ids.reclaimed}$`));
    const trail = await store.auditTrail({ messageId: ids.reclaimed });
    const bars = await page.locator("svg.timeline g.lease").evaluateAll(datasets);
    expect(bars).toEqual(expectedBars(trail));
    expect(bars.map((b) => [b.owner, b.end])).toEqual([
      ["Worker-A", "expired"],
      ["Worker-B", "completed"],
    ]);
    const refused = trail.find((e) => e.action === "refused");
    await expect
      .poll(() => page.locator(`svg.timeline g.mark-refused[data-owner="Worker-A"]`).getAttribute("data-at"), { timeout: 15_000 })
      .toBe(refused?.at.toISOString());
    await browser.screenshot(page, "dashboard-message-reclaimed");

    // A message the worker retried: one bar per attempt, each as the audit trail says.
    const retried = (await store.listMessages({ status: ["processed", "dead"] })).find((m) => m.attempts === 2);
    expect(retried, "the faulty handler should have made some message take two attempts").toBeDefined();
    await page.goto(`${readOnly.url}messages/${retried!.id}`);
    const retriedBars = await page.locator("svg.timeline g.lease").evaluateAll(datasets);
    expect(retriedBars).toEqual(expectedBars(await store.auditTrail({ messageId: retried!.id })));
    expect(retriedBars[0]?.end).toBe("retry");
    await browser.screenshot(page, "dashboard-message-retried");
    await page.close();
  });

  it("shows a payload and a header holding markup as text, and runs none of it", async () => {
    const page = await browser.newPage();
    const blocked: string[] = [];
    page.on("console", (m) => blocked.push(m.text()));
    await page.goto(`${readOnly.url}messages/${ids.evil}`);
    await expect.poll(() => page.locator("pre.payload").textContent(), { timeout: 15_000 }).toContain(EVIL);
    expect(await page.locator("table.headers td").textContent()).toBe(EVIL_HEADER);
    expect(await page.evaluate(() => (globalThis as unknown as { __pwned?: string }).__pwned)).toBeUndefined();
    expect(await page.locator("main script, main img").count()).toBe(0);
    await page.close();
  });

  it("updates the overview live when the outbox changes, without a reload", async () => {
    const page = await browser.newPage();
    await page.goto(readOnly.url);
    await expect.poll(() => page.locator("#live-status").textContent(), { timeout: 15_000 }).toMatch(/live updates: on/);
    const before = Number(await page.locator('[data-status="pending"] .n').textContent());
    await page.evaluate(() => {
      (globalThis as unknown as { __sameDocument: boolean }).__sameDocument = true;
    });
    await store.transaction((tx) => store.enqueue(tx, { type: "demo.live", payload: { n: 1 } }));
    await expect.poll(() => page.locator('[data-status="pending"] .n').textContent(), { timeout: 15_000 }).toBe(String(before + 1));
    expect(await page.evaluate(() => (globalThis as unknown as { __sameDocument?: boolean }).__sameDocument)).toBe(true); // not reloaded
    await page.close();
  });

  it("redrives a dead message with actions allowed, and offers and accepts none without them", async () => {
    const [dead] = await store.listMessages({ status: ["dead"], limit: 1 });
    expect(dead, "the faulty handler should have left a dead message").toBeDefined();
    const page = await browser.newPage();

    await page.goto(`${readOnly.url}messages/${dead!.id}`);
    expect(await page.locator("form.action").count()).toBe(0);
    const refused = await page.evaluate(
      async (id) => (await fetch(`/messages/${id}/redrive`, { method: "POST", body: new URLSearchParams({ csrf: "x" }) })).status,
      dead!.id,
    );
    expect(refused).toBe(403);
    expect((await store.getMessage(dead!.id))?.status).toBe("dead");

    await page.goto(`${acting.url}messages/${dead!.id}`);
    await browser.screenshot(page, "dashboard-dead-message");
    await page.click('form.action button:has-text("Redrive this message")');
    await expect.poll(() => page.locator("section.message").getAttribute("data-status"), { timeout: 15_000 }).not.toBe("dead");
    expect((await store.getMessage(dead!.id))?.status).not.toBe("dead");
    const last = (await store.auditTrail({ messageId: dead!.id })).at(-1);
    expect(last?.action).toBe("redrive");
    await page.close();
  });

  it("opens the HTML lab report from its file, draws the lease-expiry timeline, and fetches nothing", async () => {
    const reports = tempDir("wassal-report-browser-");
    const run = await runCli(["lab", "session-15-outbox-leasing", "--reports", reports], { cwd: reports, timeoutMs: 120_000 });
    expect(run.code, run.stderr).toBe(0);
    const folder = join(reports, "Reports", "Session-15");
    const file = readdirSync(folder).find((f) => f.endsWith(".html"));
    const page = await browser.newPage();
    const requests: string[] = [];
    page.on("request", (r) => requests.push(r.url()));
    await page.goto(pathToFileURL(join(folder, file!)).href);
    const bars = await page.locator("svg.timeline g.lease").evaluateAll(datasets);
    expect(bars.map((b) => [b.owner, b.token, b.from?.slice(11, 23), b.to?.slice(11, 23), b.end])).toEqual([
      ["Worker-A", "1", "09:00:00.000", "09:00:00.500", "expired"],
      ["Worker-B", "2", "09:00:00.600", "09:00:00.600", "completed"],
    ]);
    expect(await page.locator("svg.timeline g.mark-refused").count()).toBe(1);
    expect(await page.locator("svg.timeline g.mark-blocked").count()).toBe(1);
    expect(await page.locator("svg.timeline").isVisible()).toBe(true);
    expect(requests.every((url) => url.startsWith("file:"))).toBe(true);
    await browser.screenshot(page, "lab-report-leasing");
    await page.close();
  });
});

/** Each element's data- attributes (runs in the page). */
function datasets(elements: unknown[]): Record<string, string>[] {
  return elements.map((e) => ({ ...(e as { dataset: Record<string, string> }).dataset }));
}

/** The bars a timeline of this trail must draw: one per claim, from the claim, ending as the trail says. */
function expectedBars(trail: readonly AuditEntry[]): Record<string, string>[] {
  const claims = trail.filter((e) => e.action === "claim");
  return claims.map((claim, n) => {
    const next = claims[n + 1];
    const end = trail.find((e) => e.token === claim.token && ["complete", "retry", "dead", "release"].includes(e.action));
    const ending =
      end === undefined ? (next === undefined ? null : { to: next.previousLockedUntil, end: "expired" }) : { to: end.at, end: endName(end.action) };
    return {
      owner: claim.owner,
      token: String(claim.token),
      from: claim.at.toISOString(),
      to: (ending?.to ?? claim.at).toISOString(),
      end: ending?.end ?? "held",
    };
  });
}

function endName(action: AuditEntry["action"]): string {
  return ({ complete: "completed", retry: "retry", dead: "dead", release: "released" } as Record<string, string>)[action] ?? action;
}
