// The dashboard over HTTP, without a browser: what each page holds, what it refuses (401, 403,
// 404), the CSRF guard on actions, escaping, live events, and the command's bad input (exit 2).
// The browser tests (dashboard-browser.test.ts) follow the pages as a user does.

import { createServer, type Server } from "node:net";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { dashboardApp, isLoopback } from "../../src/dashboard/dashboard.js";
import { ManualClock } from "../../src/outbox/clock.js";
import type { Lease } from "../../src/outbox/types.js";
import { SqliteOutboxStore } from "../../src/stores/sqlite/sqlite-outbox-store.js";
import { killAll, requireBuiltCli, runCli, startCli } from "../support/cli.js";
import { tempDir } from "../support/temp.js";

const dir = tempDir("wassal-dashboard-http-");
const TOKEN = "s3cret-token-of-24-chars";
const EVIL = '<script>window.__pwned = 1</script><img src=x onerror="alert(1)">';
let store: SqliteOutboxStore;
const clock = new ManualClock(new Date("2026-12-01T09:00:00.000Z"));
const ids: Record<"reclaimed" | "dead" | "evil", string> = { reclaimed: "", dead: "", evil: "" };

beforeAll(async () => {
  requireBuiltCli();
  store = new SqliteOutboxStore({ path: join(dir, "outbox.db"), audit: true, clock });
  await store.migrate();
  const enqueue = (type: string, payload: unknown, extra: object = {}) =>
    store.transaction((tx) => store.enqueue(tx, { type, payload: payload as never, ...extra }));
  // Reclaimed after expiry, with the stale owner's write refused.
  ids.reclaimed = (await enqueue("payment.reconcile", { n: 1 }, { dedupeKey: "PAY-1" })).id;
  const [stale] = await store.claim("Worker-A", { limit: 1, leaseMs: 500 });
  clock.advance(600);
  const [fresh] = await store.claim("Worker-B", { limit: 1, leaseMs: 30_000 });
  await store.complete(stale as Lease);
  await store.complete(fresh as Lease);
  // Dead, holding its ordering key.
  ids.dead = (await enqueue("payment.refund", { n: 2 }, { key: "order-9" })).id;
  await enqueue("payment.refund", { n: 3 }, { key: "order-9" });
  const [doomed] = await store.claim("Worker-C", { limit: 1, leaseMs: 30_000 });
  await store.fail(doomed as Lease, new Error(EVIL), "dead");
  // Markup everywhere a user controls: payload, header, keys.
  ids.evil = (await enqueue("note", { html: EVIL }, { headers: { "x-note": EVIL }, dedupeKey: "evil-<b>1</b>" })).id;
});

afterAll(async () => {
  await killAll();
  await store.close();
});

function app(options: { allowActions?: boolean; token?: string } = {}) {
  return dashboardApp({ store, database: "test.db", now: () => clock.now().getTime(), ...options }).app;
}

const get = (a: ReturnType<typeof app>, path: string, headers: Record<string, string> = {}) => a.request(`http://127.0.0.1${path}`, { headers });

describe("dashboard pages", () => {
  it("shows counts per state, leases, blocked keys and dead messages with their last error, escaped", async () => {
    const response = await get(app(), "/");
    expect(response.status).toBe(200);
    const page = await response.text();
    expect(page).toMatch(/data-status="processed"><span class="n">1<\/span>/);
    expect(page).toMatch(/data-status="dead"><span class="n">1<\/span>/);
    expect(page).toMatch(/data-status="pending"><span class="n">2<\/span>/);
    expect(page).toContain(`<tr data-key="order-9">`);
    expect(page).toContain(`<tr data-message="${ids.dead}">`);
    expect(page).not.toContain("<script>window");
    expect(page).toContain("&lt;script&gt;window.__pwned = 1&lt;/script&gt;");
    expect(response.headers.get("content-security-policy")).toContain("script-src 'self'");
    expect(page).not.toMatch(/<form class="action"/); // read-only: no action is offered
  });

  it("draws a message's timeline from its audit trail: the expired lease, the reclaim and the refused write", async () => {
    const page = await (await get(app(), `/messages/${ids.reclaimed}`)).text();
    const bars = [...page.matchAll(/data-owner="([^"]*)" data-token="(\d+)" data-from="([^"]+)" data-to="([^"]+)" data-end="(\w+)"/g)].map((m) => m.slice(1));
    expect(bars).toEqual([
      ["Worker-A", "1", "2026-12-01T09:00:00.000Z", "2026-12-01T09:00:00.500Z", "expired"],
      ["Worker-B", "2", "2026-12-01T09:00:00.600Z", "2026-12-01T09:00:00.600Z", "completed"],
    ]);
    expect(page).toMatch(/<g class="mark mark-refused" data-kind="refused" data-at="2026-12-01T09:00:00.600Z" data-owner="Worker-A">/);
    expect(page).toContain('<tr class="audit-refused" data-action="refused" data-owner="Worker-A" data-token="1"');
  });

  it("shows a payload, header, key and error holding markup as text", async () => {
    const page = await (await get(app(), `/messages/${ids.evil}`)).text();
    expect(page).not.toMatch(/<script>window|<img src=x|<b>1<\/b>/);
    expect(page).toContain("&lt;img src=x onerror=");
    expect(page).toContain("evil-&lt;b&gt;1&lt;/b&gt;");
    const dead = await (await get(app(), `/messages/${ids.dead}`)).text();
    expect(dead).toContain('<pre class="last-error">Error: &lt;script&gt;window.__pwned = 1&lt;/script&gt;');
  });

  it("finds messages by id, dedupe key or ordering key", async () => {
    const byKey = await (await get(app(), "/search?q=order-9")).text();
    expect([...byKey.matchAll(/<tr data-message="(\d+)">/g)].map((m) => m[1])).toHaveLength(2);
    const byDedupe = await (await get(app(), `/search?q=${encodeURIComponent("evil-<b>1</b>")}`)).text();
    expect([...byDedupe.matchAll(/<tr data-message="(\d+)">/g)].map((m) => m[1])).toEqual([ids.evil]);
    expect((await get(app(), "/search?q=")).status).toBe(400);
  });

  it("answers 404 with a page for a message that does not exist, or an id that is not one", async () => {
    for (const path of ["/messages/999999", "/messages/not-an-id", "/messages/0", "/fragments/messages/999999", "/nowhere"]) {
      const response = await get(app(), path);
      expect(response.status, path).toBe(404);
      expect(await response.text(), path).toContain("404: not found");
    }
  });

  it("streams a change event when a message page's content changes, a refused write included", async () => {
    const id = (await store.transaction((tx) => store.enqueue(tx, { type: "live", payload: 1, dedupeKey: "live-1" }))).id;
    const live = dashboardApp({ store, database: "test.db", now: () => clock.now().getTime(), pollMs: 20 }).app;
    const response = await get(live, `/events?message=${id}`);
    expect(response.headers.get("content-type")).toContain("text/event-stream");
    const reader = response.body!.getReader();
    const next = async () => new TextDecoder().decode((await reader.read()).value);
    expect(await next()).toContain("event: change"); // what the page shows now
    const [stale] = await store.claim("Worker-X", { limit: 1, leaseMs: 100, types: ["live"] });
    expect(await next()).toContain("event: change"); // claimed
    clock.advance(100);
    await store.claim("Worker-Y", { limit: 1, leaseMs: 30_000, types: ["live"] });
    expect(await next()).toContain("event: change"); // reclaimed
    expect((await store.complete(stale as Lease)).outcome).toBe("lease-lost");
    expect(await next()).toContain("event: change"); // refused: only the audit trail changed
    await reader.cancel();
  });
});

describe("dashboard access", () => {
  it("with a token: 401 and nothing else for none or a wrong one; a bearer header or the cookie /?token= sets lets in", async () => {
    const guarded = app({ token: TOKEN });
    for (const headers of [{}, { authorization: "Bearer wrong-token-wrong-token" }, { cookie: "wassal_dashboard=nope" }]) {
      const response = await get(guarded, "/", headers);
      expect(response.status).toBe(401);
      expect(await response.text()).toBe("401 Unauthorized\n");
    }
    expect((await get(guarded, `/messages/${ids.reclaimed}?token=wrong`)).status).toBe(401);
    expect((await get(guarded, "/", { authorization: `Bearer ${TOKEN}` })).status).toBe(200);
    const visit = await get(guarded, `/messages/${ids.reclaimed}?token=${TOKEN}`);
    expect(visit.status).toBe(303);
    expect(visit.headers.get("location")).toBe(`/messages/${ids.reclaimed}`);
    const cookie = visit.headers.get("set-cookie") ?? "";
    expect(cookie).toMatch(/HttpOnly/);
    expect(cookie).toMatch(/SameSite=Strict/);
    expect((await get(guarded, "/", { cookie: cookie.split(";")[0]! })).status).toBe(200);
  });

  it("refuses actions when they are off, and without the page's CSRF token or from another origin when on", async () => {
    const form = (body: Record<string, string>, headers: Record<string, string> = {}) => ({
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", origin: "http://127.0.0.1", ...headers },
      body: new URLSearchParams(body).toString(),
    });
    const readOnly = app();
    expect((await readOnly.request(`http://127.0.0.1/messages/${ids.dead}/redrive`, form({ csrf: "x" }))).status).toBe(403);
    expect((await readOnly.request("http://127.0.0.1/keys/order-9/skip", form({ csrf: "x" }))).status).toBe(403);

    const acting = app({ allowActions: true });
    const page = await (await get(acting, `/messages/${ids.dead}`)).text();
    const csrf = /name="csrf" value="([^"]+)"/.exec(page)?.[1];
    expect(csrf).toBeDefined();
    expect((await acting.request(`http://127.0.0.1/messages/${ids.dead}/redrive`, form({ csrf: "forged" }))).status).toBe(403);
    const crossSite = await acting.request(`http://127.0.0.1/messages/${ids.dead}/redrive`, form({ csrf: csrf! }, { origin: "http://evil.example" }));
    expect(crossSite.status).toBe(403);
    expect((await store.getMessage(ids.dead))?.status).toBe("dead"); // nothing was done
    const done = await acting.request(`http://127.0.0.1/messages/${ids.dead}/redrive`, form({ csrf: csrf! }));
    expect(done.status).toBe(303);
    expect((await store.getMessage(ids.dead))?.status).toBe("pending");
  });

  it("without a token, answers only to its own names: a page that rebinds its name to 127.0.0.1 gets 403", async () => {
    const open = app();
    expect((await open.request("http://rebind.attacker.example:4300/")).status).toBe(403);
    expect((await open.request(`http://rebind.attacker.example:4300/messages/${ids.reclaimed}`)).status).toBe(403);
    for (const host of ["127.0.0.1:4300", "localhost:4300", "[::1]:4300"]) expect((await open.request(`http://${host}/`)).status, host).toBe(200);
    // With a token the cookie cannot travel to another name, so any name may be used (a public address).
    expect((await app({ token: TOKEN }).request("http://dashboard.example.com/", { headers: { authorization: `Bearer ${TOKEN}` } })).status).toBe(200);
  });

  it("sends the token's visitor back to the same page, never to another site", async () => {
    for (const path of ["//evil.example/", "/\\evil.example/"]) {
      const response = await get(app({ token: TOKEN }), `${path}?token=${TOKEN}`);
      expect(response.status).toBe(303);
      expect(response.headers.get("location"), path).toBe("/evil.example/");
    }
  });

  it("answers bad search text with 400, not 500", async () => {
    const response = await get(app(), "/search?q=a%00b");
    expect(response.status).toBe(400);
  });

  it("knows loopback addresses", () => {
    expect(["127.0.0.1", "127.1.2.3", "::1", "localhost"].every(isLoopback)).toBe(true);
    expect(["0.0.0.0", "10.0.0.1", "::", "example.com"].some(isLoopback)).toBe(false);
  });
});

describe("the messages page and cancel", () => {
  const listClock = new ManualClock(new Date("2026-12-02T09:00:00.000Z"));
  let listStore: SqliteOutboxStore;
  const made: Record<string, string> = {};
  beforeAll(async () => {
    listStore = new SqliteOutboxStore({ path: join(dir, "list.db"), audit: true, clock: listClock });
    await listStore.migrate();
    const enqueue = (label: string, extra: object = {}) =>
      listStore.transaction((tx) => listStore.enqueue(tx, { type: "order.placed", payload: { label }, ...extra }));
    for (let n = 1; n <= 5; n += 1) made[`m${n}`] = (await enqueue(`m${n}`)).id;
    made.k1 = (await enqueue("k1", { key: "customer-1" })).id;
    made.k2 = (await enqueue("k2", { key: "customer-1" })).id;
    made.evil = (await listStore.transaction((tx) => listStore.enqueue(tx, { type: EVIL, key: `k${EVIL}`, payload: { html: EVIL } }))).id;
    const [running] = await listStore.claim("Worker-L", { limit: 1, leaseMs: 60_000 }); // m1
    made.running = (running as Lease).messageId;
  });
  afterAll(async () => {
    await listStore.close();
  });
  const listApp = (options: { allowActions?: boolean } = {}) =>
    dashboardApp({ store: listStore, database: "list.db", now: () => listClock.now().getTime(), ...options }).app;
  const rowIds = (page: string) => [...page.matchAll(/<tr data-message="(\d+)" data-status="(\w+)">/g)].map((m) => m[1]);
  const link = (page: string, rel: "next" | "prev") => new RegExp(`rel="${rel}" href="([^"]+)"`).exec(page)?.[1]?.replaceAll("&amp;", "&");

  it("is linked from every page's header, and lists the newest first, each row linking to its message page", async () => {
    expect(await (await get(listApp(), "/")).text()).toContain('<a href="/messages">Messages</a>');
    const response = await get(listApp(), "/messages");
    expect(response.status).toBe(200);
    const page = await response.text();
    expect(rowIds(page)).toEqual([made.evil, made.k2, made.k1, made.m5, made.m4, made.m3, made.m2, made.m1]);
    expect(page).toContain(`<a class="message-link" href="/messages/${made.k1}">#${made.k1}</a>`);
    expect(page).not.toMatch(/<form class="action"/); // read-only
  });

  it("filters by status, type and key, oldest first when asked", async () => {
    expect(rowIds(await (await get(listApp(), "/messages?status=processing")).text())).toEqual([made.running]);
    expect(rowIds(await (await get(listApp(), "/messages?key=customer-1&order=oldest")).text())).toEqual([made.k1, made.k2]);
    expect(rowIds(await (await get(listApp(), `/messages?type=${encodeURIComponent(EVIL)}`)).text())).toEqual([made.evil]);
    expect(rowIds(await (await get(listApp(), "/messages?status=pending&type=order.placed&key=&order=oldest")).text())).toEqual([
      made.m2,
      made.m3,
      made.m4,
      made.m5,
      made.k1,
      made.k2,
    ]);
  });

  it("pages by a cursor: next and previous links keep the filters", async () => {
    const first = await (await get(listApp(), "/messages?status=pending&limit=2")).text();
    expect(rowIds(first)).toEqual([made.evil, made.k2]);
    expect(first).toContain('<span class="page-none">Previous</span>');
    const nextHref = link(first, "next");
    expect(nextHref).toBe(`/messages?status=pending&limit=2&after=${made.k2}`);
    const second = await (await get(listApp(), nextHref!)).text();
    expect(rowIds(second)).toEqual([made.k1, made.m5]);
    const third = await (await get(listApp(), link(second, "next")!)).text();
    expect(rowIds(third)).toEqual([made.m4, made.m3]);
    const back = await (await get(listApp(), link(third, "prev")!)).text();
    expect(rowIds(back)).toEqual([made.k1, made.m5]);
    const last = await (await get(listApp(), link(third, "next")!)).text();
    expect(rowIds(last)).toEqual([made.m2]);
    expect(last).toContain('<span class="page-none">Next</span>');
  });

  it("escapes hostile types and keys, in the rows and in the filter form", async () => {
    const page = await (await get(listApp(), `/messages?type=${encodeURIComponent(EVIL)}&key=${encodeURIComponent(`k${EVIL}`)}`)).text();
    expect(rowIds(page)).toEqual([made.evil]);
    expect(page).not.toContain("<script>window");
    expect(page).not.toContain('<img src=x onerror="alert(1)">');
    expect(page).toContain("&lt;script&gt;window.__pwned = 1&lt;/script&gt;");
    expect(page).toMatch(/<input name="type" value="&lt;script&gt;window.__pwned = 1&lt;\/script&gt;&lt;img src=x onerror=&quot;alert\(1\)&quot;&gt;"/);
  });

  it("answers a bad query parameter with 400 naming it and what is valid", async () => {
    const cases: [string, RegExp][] = [
      ["status=gone", /Parameter &quot;status&quot; must be one of pending, processing, processed, dead, cancelled/],
      ["order=sideways", /Parameter &quot;order&quot; must be &quot;newest&quot; or &quot;oldest&quot;/],
      ["limit=0", /Parameter &quot;limit&quot; must be a whole number from 1 to 500/],
      ["limit=abc", /Parameter &quot;limit&quot; must be a whole number from 1 to 500/],
      ["after=abc", /Parameter &quot;after&quot; must be a message id/],
      ["after=1&before=2", /Give &quot;after&quot; \(the next page\) or &quot;before&quot; \(the previous page\), not both/],
      ["sort=id", /Unknown parameter &quot;sort&quot;: the messages page takes status, type, key, order, limit, after, before, cancelled/],
      ["status=dead&status=pending", /Parameter &quot;status&quot; was given twice/],
      [`type=${"t".repeat(201)}`, /Parameter &quot;type&quot; must be a message type of at most 200 characters/],
    ];
    for (const [query, expected] of cases) {
      const response = await get(listApp(), `/messages?${query}`);
      expect(response.status, query).toBe(400);
      expect(await response.text(), query).toMatch(expected);
    }
  });

  it("with actions on, cancels a pending message from its page or its row (CSRF-guarded); a running one only through its own form (running=1), else 409", async () => {
    const form = (body: Record<string, string>, headers: Record<string, string> = {}) => ({
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", origin: "http://127.0.0.1", ...headers },
      body: new URLSearchParams(body).toString(),
    });
    expect((await listApp().request(`http://127.0.0.1/messages/${made.m5}/cancel`, form({ csrf: "x" }))).status).toBe(403);
    const acting = listApp({ allowActions: true });
    const messagePage = await (await get(acting, `/messages/${made.m5}`)).text();
    expect(messagePage).toContain(`action="/messages/${made.m5}/cancel"`);
    const runningPage = await (await get(acting, `/messages/${made.running}`)).text();
    expect(runningPage).toMatch(
      new RegExp(
        `action="/messages/${made.running}/cancel"><input type="hidden" name="csrf" value="[^"]+"><input type="hidden" name="running" value="1"><button type="submit">Cancel this message \\(abort its run\\)`,
      ),
    );
    const listPage = await (await get(acting, "/messages")).text();
    expect(listPage).toContain(`action="/messages/${made.k1}/cancel"`);
    expect(listPage).toMatch(new RegExp(`action="/messages/${made.running}/cancel">.*name="running" value="1"`));
    const csrf = /name="csrf" value="([^"]+)"/.exec(messagePage)?.[1];
    expect((await acting.request(`http://127.0.0.1/messages/${made.m5}/cancel`, form({ csrf: "forged" }))).status).toBe(403);
    const crossSite = await acting.request(`http://127.0.0.1/messages/${made.m5}/cancel`, form({ csrf: csrf! }, { origin: "http://evil.example" }));
    expect(crossSite.status).toBe(403);
    expect((await listStore.getMessage(made.m5 as string))?.status).toBe("pending"); // nothing was done
    const done = await acting.request(`http://127.0.0.1/messages/${made.m5}/cancel`, form({ csrf: csrf! }));
    expect(done.status).toBe(303);
    expect(done.headers.get("location")).toBe(`/messages?status=pending&cancelled=${made.m5}`);
    expect(await listStore.getMessage(made.m5 as string)).toMatchObject({ status: "cancelled", lockedBy: "cancel: dashboard" });
    expect(await listStore.auditTrail({ messageId: made.m5 as string })).toMatchObject([{ action: "dead", owner: "cancel: dashboard" }]);
    const after = await (await get(acting, done.headers.get("location")!)).text();
    expect(after).toContain(`Message #${made.m5} was cancelled`);
    expect(rowIds(after)).not.toContain(made.m5); // the list of pending messages
    expect(rowIds(await (await get(acting, "/messages?status=cancelled")).text())).toEqual([made.m5]);
    // A cancelled key holder hands its key on: k2 becomes claimable.
    expect((await acting.request(`http://127.0.0.1/messages/${made.k1}/cancel`, form({ csrf: csrf! }))).status).toBe(303);
    const running = await acting.request(`http://127.0.0.1/messages/${made.running}/cancel`, form({ csrf: csrf! }));
    expect(running.status).toBe(409);
    expect(await running.text()).toMatch(/is running \(leased by &quot;Worker-L&quot;/);
    const aborted = await acting.request(`http://127.0.0.1/messages/${made.running}/cancel`, form({ csrf: csrf!, running: "1" }));
    expect(aborted.status).toBe(303);
    expect(await listStore.getMessage(made.running as string)).toMatchObject({ status: "cancelled", lockedBy: "cancel: dashboard", lockedUntil: null });
    // Its page: cancelled while Worker-L ran it, the lease's bar ending there; no action left.
    const cancelledPage = await get(acting, `/messages/${made.running}`);
    expect(cancelledPage.status).toBe(200);
    const cancelledText = await cancelledPage.text();
    expect(cancelledText).toMatch(/status-cancelled">cancelled</);
    expect(cancelledText).toMatch(/It was cancelled at [^<]* \(dashboard\), while Worker-L ran it: that run&#39;s result was refused\./);
    expect(cancelledText).toMatch(/data-owner="Worker-L" data-token="1"[^>]*data-end="cancelled"/);
    expect(cancelledText).toMatch(/data-kind="cancel"/);
    expect(cancelledText).not.toContain(`action="/messages/${made.running}/cancel"`);
    expect((await acting.request("http://127.0.0.1/messages/999999/cancel", form({ csrf: csrf! }))).status).toBe(404);
    const claimed = await listStore.claimMessage("w", made.k2 as string, { leaseMs: 1000 });
    expect(claimed.outcome).toBe("claimed");
  });
});

describe("wassal dashboard (the command)", () => {
  afterEach(killAll);
  const db = () => join(dir, "outbox.db");

  /** Starts `wassal dashboard` and resolves to the URL it says it serves on. */
  function serve(args: readonly string[]) {
    const p = startCli(["dashboard", "--db", db(), "--port", "0", ...args], { cwd: dir });
    const url = new Promise<string>((resolve, reject) => {
      p.child.stdout?.on("data", () => {
        const found = /dashboard on (http:\/\/127\.0\.0\.1:\d+\/) \((read-only|actions allowed)\)/.exec(p.stdout());
        if (found?.[1]) resolve(found[1]);
      });
      p.exited.then(() => reject(new Error(`exited: ${p.stderr()}`)), reject);
    });
    return { p, url };
  }

  it("records a redrive done from the command's dashboard in the audit trail", async () => {
    const id = (await store.transaction((tx) => store.enqueue(tx, { type: "cli.dead", payload: 1 }))).id;
    const [lease] = await store.claim("Worker-D", { limit: 1, leaseMs: 30_000, types: ["cli.dead"] });
    await store.fail(lease as Lease, new Error("boom"), "dead");
    const { p, url: served } = serve(["--allow-actions"]);
    const url = await served;
    const page = await (await fetch(`${url}messages/${id}`)).text();
    const csrf = /name="csrf" value="([^"]+)"/.exec(page)?.[1] ?? "";
    const origin = new URL(url).origin;
    const posted = await fetch(`${url}messages/${id}/redrive`, {
      method: "POST",
      redirect: "manual",
      headers: { "content-type": "application/x-www-form-urlencoded", origin },
      body: new URLSearchParams({ csrf }).toString(),
    });
    expect(posted.status).toBe(303);
    expect((await store.auditTrail({ messageId: id })).map((e) => e.action)).toEqual(["claim", "dead", "redrive"]);
    p.signal("SIGTERM");
    expect((await p.waitForExit(15_000)).code).toBe(0);
  });

  it("with --on-complete delete, a cancel from the command's dashboard deletes the row, audited, as the workers' completions do", async () => {
    const id = (await store.transaction((tx) => store.enqueue(tx, { type: "cli.cancel", payload: 1 }))).id;
    const { p, url: served } = serve(["--allow-actions", "--on-complete", "delete"]);
    const url = await served;
    const page = await (await fetch(`${url}messages/${id}`)).text();
    const csrf = /name="csrf" value="([^"]+)"/.exec(page)?.[1] ?? "";
    const posted = await fetch(`${url}messages/${id}/cancel`, {
      method: "POST",
      redirect: "manual",
      headers: { "content-type": "application/x-www-form-urlencoded", origin: new URL(url).origin },
      body: new URLSearchParams({ csrf }).toString(),
    });
    expect(posted.status).toBe(303);
    expect(await store.getMessage(id)).toBeUndefined(); // kept, it would say cancelled
    expect(await store.auditTrail({ messageId: id })).toMatchObject([{ action: "dead", owner: "cancel: dashboard" }]);
    p.signal("SIGTERM");
    expect((await p.waitForExit(15_000)).code).toBe(0);
  });

  it("serves on a free port, read-only, and says where", async () => {
    const { p, url: served } = serve([]);
    const url = await served;
    const response = await fetch(`${url}messages/${ids.reclaimed}`);
    expect(response.status).toBe(200);
    expect(await response.text()).toContain('data-end="expired"');
    p.signal("SIGTERM");
    expect((await p.waitForExit(15_000)).code).toBe(0);
  });

  it("exits 2 with one line for a port in use, another machine's address without a token, a short token", async () => {
    const busy: Server = createServer();
    await new Promise<void>((resolve) => busy.listen(0, "127.0.0.1", resolve));
    const port = String((busy.address() as { port: number }).port);
    try {
      const cases: [string[], RegExp][] = [
        [["--port", port], /port is already in use; choose another --port/],
        [["--host", "0.0.0.0"], /without a token; give --token/],
        [["--host", "0.0.0.0", "--token", "short"], /at least 16 characters/],
        [["--host", "192.0.2.1", "--token", TOKEN, "--port", "0"], /no such address on this machine/],
      ];
      for (const [args, message] of cases) {
        // "--port 0" first (a later --port wins): no case may depend on the default port (4300) being free.
        const result = await runCli(["dashboard", "--db", db(), "--port", "0", ...args], { cwd: dir });
        expect(result.code, args.join(" ")).toBe(2);
        expect(result.stderr, args.join(" ")).toMatch(message);
        expect(result.stderr.trim().split("\n"), args.join(" ")).toHaveLength(1);
      }
      // A port out of range is a usage error: its line, and the hint to --help.
      const outOfRange = await runCli(["dashboard", "--db", db(), "--port", "70000"], { cwd: dir });
      expect(outOfRange.code).toBe(2);
      expect(outOfRange.stderr).toMatch(/--port/);
      // Refused before the database is opened: a missing file stays missing, and a busy port is found first.
      const missing = join(dir, "never-created.db");
      expect((await runCli(["dashboard", "--db", missing, "--port", port], { cwd: dir })).stderr).toMatch(/port is already in use/);
      expect((await runCli(["dashboard", "--db", missing, "--port", "0", "--host", "0.0.0.0"], { cwd: dir })).code).toBe(2);
      // On a port the OS picks: the default port (4300) may be held by another program (issue 37).
      expect((await runCli(["dashboard", "--db", missing, "--port", "0"], { cwd: dir })).stderr).toMatch(/no database at/);
    } finally {
      busy.close();
    }
  });

  it("has --help with the security rules and examples", async () => {
    const help = await runCli(["dashboard", "--help"], { cwd: dir });
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/--allow-actions/);
    expect(help.stdout).toMatch(/any\s+but\s+loopback\s+requires\s+--token/);
    expect(help.stdout).toMatch(/Exit codes: 0 stopped by a signal, 2 bad input/);
  });
});
