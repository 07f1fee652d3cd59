// `wassal dashboard --shard … --shard …`: a sharded outbox's dashboard. At / each shard's counts and
// their sum; under /shard/<n>/ shard n's own dashboard, every link, form and live update of it under
// that path; the token guards every page; --slot with --shard is refused. A real process on real
// SQLite files. Needs `npm run build` first (`npm test` does it).

import { mkdtempSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { startPrivatePostgres } from "../../src/chaos/private-postgres.js";
import { ShardedOutbox } from "../../src/shards/sharded-outbox.js";
import { shardOfKey } from "../../src/shards/key-hash.js";
import { SqliteOutboxStore, type SqliteTx } from "../../src/stores/sqlite/sqlite-outbox-store.js";
import { cliOk, killAll, requireBuiltCli, runCli, startCli } from "../support/cli.js";
import { postgresAvailable } from "../support/postgres.js";
import { tempDir } from "../support/temp.js";
import { until } from "../support/wait.js";

const FILE_TMP = tempDir("wassal-shards-dashboard-");
const cwd = () => mkdtempSync(join(FILE_TMP, "cwd-"));
const TOKEN = "shards-dashboard-token-0123456789";
const pgUp = await postgresAvailable();

beforeAll(requireBuiltCli);
afterEach(killAll);

/** Two SQLite shards holding 10 messages over 10 keys; each shard's message ids. */
async function twoShards(dir: string): Promise<{ paths: string[]; ids: string[][] }> {
  const paths = [0, 1].map((n) => join(dir, `shard-${n}.db`));
  const outbox = new ShardedOutbox<SqliteTx>(paths.map((path) => new SqliteOutboxStore({ path })));
  const ids: string[][] = [[], []];
  try {
    await outbox.migrate();
    for (let n = 0; n < 10; n += 1) {
      const key = `order-${n}`;
      const message = await outbox.enqueue({ type: "order.placed", key, payload: { n } });
      ids[shardOfKey(key, 2)]?.push(message.id);
    }
  } finally {
    await outbox.close();
  }
  return { paths, ids };
}

function dashboard(dir: string, args: readonly string[]) {
  const p = startCli(["dashboard", "--port", "0", ...args], { cwd: dir });
  const url = new Promise<string>((resolve, reject) => {
    p.child.stdout?.on("data", () => {
      const found = /dashboard on (http:\/\/127\.0\.0\.1:\d+\/) \(2 shards, (1 not answering yet, )?(read-only|actions allowed)/.exec(p.stdout());
      if (found?.[1]) resolve(found[1]);
    });
    p.exited.then(() => reject(new Error(`exited: ${p.stderr()}`)), reject);
  });
  return { p, url };
}

describe("wassal dashboard --shard", () => {
  it("sums the shards at /, and serves each shard's own dashboard under /shard/<n>/ with its links there", async () => {
    const dir = cwd();
    const { paths, ids } = await twoShards(dir);
    const { url } = dashboard(dir, [...paths.flatMap((path) => ["--shard", path]), "--allow-actions"]);
    const root = await url;
    const overview = await (await fetch(root)).text();
    expect(overview).toMatch(/<span class="n">10<\/span><span class="label">pending<\/span>/);
    for (const shard of [0, 1]) {
      const row = new RegExp(
        `<tr data-shard="${shard}"><td><a href="/shard/${shard}/">Shard ${shard}</a></td><td>[^<]*shard-${shard}\\.db</td><td data-status="pending">${ids[shard]?.length}</td>`,
      );
      expect(overview).toMatch(row);
    }

    const page = await fetch(`${root}shard/1/`);
    expect(page.status).toBe(200);
    expect((await fetch(`${root}shard/1`)).status).toBe(200);
    const shardPage = await page.text();
    expect(shardPage).toContain('data-fragment="/shard/1/fragments/overview"');
    expect(shardPage).toContain('data-events="/shard/1/events"');
    expect(shardPage).toContain('action="/shard/1/search"');
    expect(shardPage).toContain('<a href="/">All shards</a>');
    // Every link of the shard's pages stays under its path (the stylesheet and script at /assets, "All shards" at /).
    const list = await (await fetch(`${root}shard/1/messages`)).text();
    const hrefs = [...list.matchAll(/(?:href|action)="([^"]*)"/g)].map((m) => m[1] as string);
    expect(hrefs.filter((href) => !href.startsWith("/shard/1/") && href !== "/" && !href.startsWith("/assets/"))).toEqual([]);
    for (const id of ids[1] ?? []) expect(list).toContain(`href="/shard/1/messages/${id}"`);
    expect(list).toContain(`action="/shard/1/messages/${ids[1]?.[0]}/cancel"`);
    // A message of shard 1 by its id there; the same id on shard 0 is shard 0's own message.
    const message = await (await fetch(`${root}shard/1/messages/${ids[1]?.[0]}`)).text();
    expect(message).toContain(`data-fragment="/shard/1/fragments/messages/${ids[1]?.[0]}"`);
    expect((await fetch(`${root}shard/2/`)).status).toBe(404);
    // A form posted through the shard's path acts on that shard: a cancel of shard 1's message.
    const csrf = /name="csrf" value="([^"]+)"/.exec(list)?.[1] ?? "";
    const cancelled = ids[1]?.[0] as string;
    const posted = await fetch(`${root}shard/1/messages/${cancelled}/cancel`, {
      method: "POST",
      redirect: "manual",
      headers: { "content-type": "application/x-www-form-urlencoded", origin: root.replace(/\/$/, "") },
      body: new URLSearchParams({ csrf }).toString(),
    });
    expect([posted.status, posted.headers.get("location")]).toEqual([303, `/shard/1/messages?status=pending&cancelled=${cancelled}`]);
    // Cancelled on shard 1, its page says so (the dashboard audits its actions)…
    const kept = await fetch(`${root}shard/1/messages/${cancelled}`);
    expect(kept.status).toBe(200);
    expect(await kept.text()).toMatch(/status-cancelled">cancelled<\/span>[\s\S]*It was cancelled at [^<]* \(dashboard\), before any worker ran it\./);
    // …and once purged, its page stays, from the audit trail.
    const shard1 = new SqliteOutboxStore({ path: paths[1] as string });
    try {
      expect(await shard1.purgeProcessed(new Date(Date.now() + 60_000))).toBe(1);
    } finally {
      await shard1.close();
    }
    const gone = await fetch(`${root}shard/1/messages/${cancelled}`);
    expect(gone.status).toBe(200);
    expect(await gone.text()).toMatch(/status-gone">gone<\/span>[\s\S]*It was cancelled at [^<]* \(dashboard\), before any worker ran it\./);
    // A shard's error page leads back to that shard's overview; the shards' own 404 to theirs.
    const missing = await fetch(`${root}shard/1/messages/999999999`);
    expect(missing.status).toBe(404);
    expect(await missing.text()).toContain('<a href="/shard/1/">Back to the overview</a>');
    expect(await (await fetch(`${root}nowhere`)).text()).toContain('<a href="/">Back to the overview</a>');
  });

  it("asks every page for the token, the shards' overview and each shard's", async () => {
    const dir = cwd();
    const { paths } = await twoShards(dir);
    const { url } = dashboard(dir, [...paths.flatMap((path) => ["--shard", path]), "--token", TOKEN]);
    const root = await url;
    for (const path of ["", "shard/0", "shard/0/", "shard/1/messages", "shard/1/events"]) expect((await fetch(`${root}${path}`)).status).toBe(401);
    for (const path of ["", "shard/0/", "shard/1/messages"]) {
      expect((await fetch(`${root}${path}`, { headers: { authorization: `Bearer ${TOKEN}` } })).status).toBe(200);
    }
  });

  it("refuses --slot with --shard, and one --shard alone, before opening anything", async () => {
    const dir = cwd();
    const [a, b] = [join(dir, "a.db"), join(dir, "b.db")];
    const slot = await runCli(["dashboard", "--shard", a, "--shard", b, "--slot", "orders_outbox"], { cwd: dir });
    expect([slot.code, slot.stderr]).toEqual([2, expect.stringContaining("--slot watches one outbox's replication slot")]);
    const one = await runCli(["dashboard", "--shard", a], { cwd: dir });
    expect([one.code, one.stderr]).toEqual([2, expect.stringContaining("a sharded outbox has two or more shards")]);
  });
});

describe.runIf(pgUp || process.env.CI)("wassal dashboard --shard, a shard's server down at start (a private PostgreSQL server)", () => {
  it("serves the others at once, shows the one down as not answering (its pages 503), and serves it once it answers", async () => {
    const dir = cwd();
    const { paths } = await twoShards(dir);
    const server = await startPrivatePostgres({ label: "shard-dashboard-down" });
    try {
      await cliOk(["migrate", "--db", server.url], { cwd: dir });
      await server.crash();
      const { p, url } = dashboard(dir, ["--shard", paths[0] as string, "--shard", server.url]);
      const root = await url;
      expect(p.stdout()).toContain("(2 shards, 1 not answering yet, read-only)");
      const overview = await (await fetch(root)).text();
      expect(overview).toContain("1 of 2 shards could not be read");
      expect(overview).toContain("has not answered since the dashboard started");
      expect((await fetch(`${root}shard/0/`)).status).toBe(200);
      const down = await fetch(`${root}shard/1/messages`);
      expect([down.status, down.headers.get("retry-after")]).toEqual([503, "2"]);
      expect(await down.text()).toContain("503: shard 1 does not answer");
      await server.restart();
      await until("shard 1's dashboard once its server answers", async () => (await fetch(`${root}shard/1/`)).status === 200, { timeoutMs: 30_000 });
      expect(await (await fetch(root)).text()).not.toContain("could not be read");
      expect(p.stderr()).toContain("shard answers now");
      p.signal("SIGTERM");
      expect(await p.waitForExit(15_000)).toMatchObject({ code: 0, signal: null });
    } finally {
      server.stop();
    }
  }, 90_000);

  it("every shard down: exits 2 naming the first, as with one outbox", async () => {
    const dir = cwd();
    const server = await startPrivatePostgres({ label: "shard-dashboard-down" });
    try {
      await server.crash();
      const run = await runCli(["dashboard", "--port", "0", "--shard", server.url, "--shard", server.url.replace(/\/test$/, "/other")], { cwd: dir });
      expect(run.code).toBe(2);
      expect(run.stderr).toContain("connection refused");
    } finally {
      server.stop();
    }
  }, 60_000);
});
