// `wassal dashboard --db <mariadb url>`: the command on a MariaDB database with the audit trail
// on, drawing a message's timeline (the expired lease, the reclaim and the stale owner's refused
// write) and the overview, as dashboard-http.test.ts checks them on SQLite.
//
// Needs `npm run build` first (`npm test` does it).

import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { ManualClock } from "../../src/outbox/clock.js";
import type { Lease } from "../../src/outbox/types.js";
import { MariaDbOutboxStore } from "../../src/stores/mariadb/mariadb-outbox-store.js";
import { killAll, requireBuiltCli, startCli } from "../support/cli.js";
import { freshDatabase, mariadbAvailable, type FreshDatabase } from "../support/mariadb.js";
import { tempDir } from "../support/temp.js";

const MARIADB = await mariadbAvailable();
const dir = tempDir("wassal-dashboard-mariadb-");

describe.skipIf(!MARIADB)("wassal dashboard on MariaDB", () => {
  let database: FreshDatabase;
  let store: MariaDbOutboxStore;
  const clock = new ManualClock(new Date("2026-12-01T09:00:00.000Z"));
  const ids = { reclaimed: "", dead: "" };

  beforeAll(async () => {
    requireBuiltCli();
    database = await freshDatabase();
    store = await MariaDbOutboxStore.connect({ url: database.url, audit: true, clock });
    await store.migrate();
    // Reclaimed after expiry, with the stale owner's completion refused.
    ids.reclaimed = (await store.transaction((tx) => store.enqueue(tx, { type: "payment.reconcile", payload: { n: 1 }, dedupeKey: "PAY-1" }))).id;
    const [stale] = await store.claim("Worker-A", { limit: 1, leaseMs: 500 });
    clock.advance(600);
    const [fresh] = await store.claim("Worker-B", { limit: 1, leaseMs: 30_000 });
    expect(fresh?.reclaimedFrom).toBe("Worker-A");
    expect(await store.complete(stale as Lease)).toMatchObject({ outcome: "lease-lost" }); // refused, and audited
    expect(await store.complete(fresh as Lease)).toMatchObject({ outcome: "completed" });
    // Dead, holding its ordering key.
    ids.dead = (await store.transaction((tx) => store.enqueue(tx, { type: "payment.refund", payload: { n: 2 }, key: "order-9" }))).id;
    await store.transaction((tx) => store.enqueue(tx, { type: "payment.refund", payload: { n: 3 }, key: "order-9" }));
    const [doomed] = await store.claim("Worker-C", { limit: 1, leaseMs: 30_000 });
    await store.fail(doomed as Lease, new Error("card declined <b>twice</b>"), "dead");
  });

  afterEach(killAll);
  afterAll(async () => {
    await killAll();
    await store?.close();
    await database?.drop();
  });

  /** Starts `wassal dashboard` on the database and resolves to the URL it says it serves on. */
  function serve() {
    const p = startCli(["dashboard", "--db", database.url, "--port", "0"], { cwd: dir });
    const url = new Promise<string>((resolve, reject) => {
      p.child.stdout?.on("data", () => {
        const found = /dashboard on (http:\/\/127\.0\.0\.1:\d+\/) \((read-only|actions allowed)\)/.exec(p.stdout());
        if (found?.[1]) resolve(found[1]);
      });
      p.exited.then(() => reject(new Error(`exited: ${p.stderr()}`)), reject);
    });
    return { p, url };
  }

  it("draws the reclaimed message's timeline from the audit trail (the expired lease, the reclaim, the refused write) and the overview", async () => {
    const { p, url: served } = serve();
    const url = await served;

    const response = await fetch(`${url}messages/${ids.reclaimed}`);
    expect(response.status).toBe(200);
    const page = await response.text();
    const bars = [...page.matchAll(/data-owner="([^"]*)" data-token="(\d+)" data-from="([^"]+)" data-to="([^"]+)" data-end="(\w+)"/g)].map((m) => m.slice(1));
    expect(bars).toEqual([
      ["Worker-A", "1", "2026-12-01T09:00:00.000Z", "2026-12-01T09:00:00.500Z", "expired"],
      ["Worker-B", "2", "2026-12-01T09:00:00.600Z", "2026-12-01T09:00:00.600Z", "completed"],
    ]);
    expect(page).toMatch(/<g class="mark mark-refused" data-kind="refused" data-at="2026-12-01T09:00:00.600Z" data-owner="Worker-A">/);
    expect(page).toContain('<tr class="audit-refused" data-action="refused" data-owner="Worker-A" data-token="1"');

    const overview = await (await fetch(url)).text();
    expect(overview).toMatch(/data-status="processed"><span class="n">1<\/span>/);
    expect(overview).toMatch(/data-status="dead"><span class="n">1<\/span>/);
    expect(overview).toMatch(/data-status="pending"><span class="n">1<\/span>/);
    expect(overview).toContain(`<tr data-key="order-9">`);
    expect(overview).toContain(`<tr data-message="${ids.dead}">`);
    expect(overview).toContain("card declined &lt;b&gt;twice&lt;/b&gt;");
    expect(overview).not.toMatch(/<form class="action"/); // read-only

    // An absent message is a 404, not a store error.
    expect((await fetch(`${url}messages/999999999`)).status).toBe(404);

    p.signal("SIGTERM");
    expect((await p.waitForExit(15_000)).code).toBe(0);
  });
});
