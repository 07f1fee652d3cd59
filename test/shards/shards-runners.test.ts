// `wassal worker --shard … --shard …` and `wassal relay --shard …`: one process works every shard
// of a sharded outbox, one worker or relay per shard (named <name>-shard<n>), and its metrics
// carry each shard's series under shard="<n>". Bad lists are refused with exit 2 before anything
// opens. Real processes, real SQLite files, the real NATS server. Needs `npm run build` first.

import { existsSync, mkdtempSync } from "node:fs";
import { join } from "node:path";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startPrivatePostgres } from "../../src/chaos/private-postgres.js";
import { databasePlace } from "../../src/cli/shared-options.js";
import { ShardedOutbox } from "../../src/shards/sharded-outbox.js";
import { shardOfKey } from "../../src/shards/key-hash.js";
import { openOutbox } from "../../src/stores/open-outbox.js";
import { SqliteOutboxStore, type SqliteTx } from "../../src/stores/sqlite/sqlite-outbox-store.js";
import { cliOk, killAll, requireBuiltCli, runCli, startCli } from "../support/cli.js";
import { TEST_NATS_URL, natsAvailable } from "../support/services.js";
import { postgresAvailable } from "../support/postgres.js";
import { tempDir } from "../support/temp.js";
import { until } from "../support/wait.js";
import { logLines } from "../worker-cli/harness.js";

const natsUp = await natsAvailable();
const pgUp = await postgresAvailable();
const FILE_TMP = tempDir("wassal-shards-runners-");
const cwd = () => mkdtempSync(join(FILE_TMP, "cwd-"));

beforeAll(requireBuiltCli);
afterEach(killAll);

/** Enqueues `count` messages over 12 keys into a sharded outbox of these SQLite files; returns how many went to each shard. */
async function enqueueSharded(paths: readonly string[], count: number, type = "order.paid"): Promise<number[]> {
  const outbox = new ShardedOutbox<SqliteTx>(paths.map((path) => new SqliteOutboxStore({ path })));
  try {
    await outbox.migrate();
    for (let n = 0; n < count; n += 1) await outbox.enqueue({ type, key: `order-${n % 12}`, payload: { n } });
  } finally {
    await outbox.close();
  }
  return paths.map((_, shard) => Array.from({ length: count }, (_, n) => `order-${n % 12}`).filter((key) => shardOfKey(key, paths.length) === shard).length);
}

async function processedOn(path: string): Promise<number> {
  const opened = await openOutbox(path, { mustExist: true });
  try {
    return (await opened.store.countByStatus()).processed;
  } finally {
    await opened.close();
  }
}

/** Each sample of a Prometheus text page, by its name and labels. */
function samples(body: string): Map<string, number> {
  const found = new Map<string, number>();
  for (const line of body.split("\n")) {
    const match = /^([^#\s][^\s]*) (\S+)$/.exec(line);
    if (match) found.set(match[1] as string, Number(match[2]));
  }
  return found;
}

describe("databasePlace: two spellings of one database compare equal", () => {
  it("resolves file paths, and makes a URL's scheme synonyms, host case and default port one; other databases stay apart", () => {
    expect(databasePlace("a.db")).toBe(databasePlace(`${process.cwd()}/x/../a.db`));
    expect(databasePlace("postgres://app:secret@DB-A/app")).toBe(databasePlace("postgresql://other@db-a:5432/app"));
    expect(databasePlace("mysql://root@h/test")).toBe(databasePlace("mariadb://root@h:3306/test"));
    expect(databasePlace("postgres://db-a/app")).not.toBe(databasePlace("postgres://db-a:5433/app"));
    expect(databasePlace("postgres://db-a/app")).not.toBe(databasePlace("postgres://db-a/other"));
    expect(databasePlace("postgres://db-a/app")).not.toBe(databasePlace("postgres://db-b/app"));
    expect(databasePlace("postgres://db-a/app?schema=s1")).not.toBe(databasePlace("postgres://db-a/app?schema=s2"));
  });
});

describe("--shard lists: bad input exits 2 before anything opens", () => {
  for (const command of [["worker"], ["relay", "--to", "nats://127.0.0.1:4222", "--destination", "x"]]) {
    it(`${command[0]}: one --shard, --shard with --db, a shard given twice`, async () => {
      const dir = cwd();
      const [a, b] = [join(dir, "a.db"), join(dir, "b.db")];
      const one = await runCli([...command, "--shard", a], { cwd: dir });
      expect([one.code, one.stderr]).toEqual([2, expect.stringContaining("a sharded outbox has two or more shards")]);
      const both = await runCli([...command, "--db", a, "--shard", a, "--shard", b], { cwd: dir });
      expect([both.code, both.stderr]).toEqual([2, expect.stringContaining("give either --db (one outbox) or --shard once per shard")]);
      const twice = await runCli([...command, "--shard", a, "--shard", b, "--shard", a], { cwd: dir });
      expect([twice.code, twice.stderr]).toEqual([2, expect.stringContaining(`--shard ${a} is given twice`)]);
      // The same file by another path is the same shard.
      const spelled = await runCli([...command, "--shard", a, "--shard", b, "--shard", "./a.db"], { cwd: dir });
      expect([spelled.code, spelled.stderr]).toEqual([2, expect.stringContaining(`--shard ./a.db is given twice (the same database as ${a})`)]);
      expect([existsSync(a), existsSync(b)]).toEqual([false, false]);
    });
  }
});

describe("wassal worker --shard", () => {
  it("works every shard in one process, one worker per shard, with each shard's metrics labelled", async () => {
    const dir = cwd();
    const paths = [0, 1, 2].map((n) => join(dir, `shard-${n}.db`));
    for (const path of paths) await cliOk(["payments", "seed", "--db", path, "--count", "5"], { cwd: dir });
    const worker = startCli(
      ["worker", ...paths.flatMap((path) => ["--shard", path]), "--name", "sharded", "--metrics-port", "0", "--log-level", "info", "--poll-ms", "50"],
      { cwd: dir },
    );
    const started = await until('the "worker started" line', () => {
      if (worker.exit()) throw new Error(`the worker exited early: ${JSON.stringify(worker.exit())}; ${worker.stderr()}`);
      return logLines(worker.stderr().slice(0, worker.stderr().lastIndexOf("\n") + 1)).find((l) => l.msg === "worker started") ?? false;
    });
    expect(started.worker).toEqual(["sharded-shard0", "sharded-shard1", "sharded-shard2"]);
    expect(started.db).toBe(paths.join(", "));
    await until("every shard's payments processed", async () => (await Promise.all(paths.map(processedOn))).every((n) => n === 5), { timeoutMs: 20_000 });
    const body = await until(
      "a scrape with every shard's completions",
      async () => {
        const page = await fetch(String(started.metrics)).then((response) => response.text());
        const m = samples(page);
        return [0, 1, 2].every((shard) => m.get(`wassal_completions_total{shard="${shard}"}`) === 5) ? page : false;
      },
      { timeoutMs: 10_000, intervalMs: 100 },
    );
    const m = samples(body);
    for (const shard of [0, 1, 2]) expect(m.get(`wassal_messages{status="processed",shard="${shard}"}`)).toBe(5);
    expect(body.match(/^# TYPE wassal_completions_total /gm)).toHaveLength(1);
    expect(m.has("process_resident_memory_bytes")).toBe(true);
    worker.signal("SIGTERM");
    expect(await worker.waitForExit(15_000)).toMatchObject({ code: 0, signal: null });
  });
});

describe.runIf(pgUp || process.env.CI)("a shard whose server is down at start (a private PostgreSQL server)", () => {
  it("the worker works the others at once, says which shard does not answer, and takes it on once it answers", async () => {
    const dir = cwd();
    const server = await startPrivatePostgres({ label: "shard-down-test" });
    try {
      const sqlite = join(dir, "shard-0.db");
      await cliOk(["payments", "seed", "--db", sqlite, "--count", "4"], { cwd: dir });
      await cliOk(["payments", "seed", "--db", server.url, "--count", "3"], { cwd: dir });
      await server.crash();
      const worker = startCli(["worker", "--shard", sqlite, "--shard", server.url, "--name", "patient", "--log-level", "info", "--poll-ms", "50"], {
        cwd: dir,
      });
      await until("shard 0's payments processed", async () => (await processedOn(sqlite)) === 4, { timeoutMs: 20_000 });
      // Shard 0 is worked while shard 1 is tried: its lines may come after shard 0's work is done.
      const lines = () => logLines(worker.stderr().slice(0, worker.stderr().lastIndexOf("\n") + 1));
      const started = await until('the "worker started" line', () => lines().find((line) => line.msg === "worker started") ?? false);
      expect(started.worker).toEqual(["patient-shard0", "patient-shard1"]);
      expect(lines().find((line) => line.msg.startsWith("shard does not answer"))).toMatchObject({ shard: 1, db: server.url, level: 40 });
      await server.restart();
      await until("shard 1's payments processed once its server is back", async () => (await processedOn(server.url).catch(() => 0)) === 3, {
        timeoutMs: 30_000,
      });
      expect(logLines(worker.stderr()).some((line) => line.msg === "shard answers now; working it" && line.shard === 1)).toBe(true);
      worker.signal("SIGTERM");
      expect(await worker.waitForExit(15_000)).toMatchObject({ code: 0, signal: null });
    } finally {
      server.stop();
    }
  }, 90_000);

  it("every shard down: the worker exits 2 naming the first, as with one outbox", async () => {
    const dir = cwd();
    const server = await startPrivatePostgres({ label: "shard-down-test" });
    try {
      await server.crash();
      const other = server.url.replace(/\/test$/, "/other");
      const run = await runCli(["worker", "--shard", server.url, "--shard", other], { cwd: dir });
      expect(run.code).toBe(2);
      expect(run.stderr).toContain("connection refused");
    } finally {
      server.stop();
    }
  }, 60_000);
});

describe.runIf(natsUp || process.env.CI)("wassal relay --shard (the real NATS server)", () => {
  let nc: NatsConnection;
  let jsm: JetStreamManager;
  const stream = `WASSAL_SHARDS_${process.pid}`;

  beforeAll(async () => {
    nc = await connect({ servers: TEST_NATS_URL });
    jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: stream, subjects: [`${stream}.>`] });
  });
  afterAll(async () => {
    await jsm?.streams.delete(stream).catch(() => undefined);
    await nc?.close();
  });

  it("publishes every shard's messages from one process and completes them on their shards", async () => {
    const dir = cwd();
    const paths = [0, 1].map((n) => join(dir, `shard-${n}.db`));
    const perShard = await enqueueSharded(paths, 40);
    expect(perShard.every((n) => n > 0)).toBe(true);
    const relay = startCli(
      [
        "relay",
        ...paths.flatMap((path) => ["--shard", path]),
        "--to",
        TEST_NATS_URL,
        "--destination",
        `${stream}.{type}`,
        "--name",
        "fan",
        "--log-level",
        "info",
      ],
      { cwd: dir },
    );
    await relay.waitForStderr("relay started");
    await until("40 messages in the stream", async () => (await jsm.streams.info(stream)).state.messages === 40, { timeoutMs: 15_000, intervalMs: 20 });
    await until("each shard's messages completed", async () => (await Promise.all(paths.map(processedOn))).join() === perShard.join(), { timeoutMs: 15_000 });
    const started = logLines(relay.stderr()).find((line) => line.msg === "relay started");
    expect(started?.relay).toEqual(["fan-shard0", "fan-shard1"]);
    // Each shard numbers its messages from 1: the ids the broker deduplicates on carry the shard.
    const ids = new Set<string>();
    const consumer = await (await import("@nats-io/jetstream")).jetstream(nc).consumers.get(stream);
    for await (const m of await consumer.fetch({ max_messages: 40, expires: 5_000 })) {
      ids.add(String(m.headers?.get("Nats-Msg-Id")));
      if (ids.size === 40) break;
    }
    expect(ids.size).toBe(40);
    expect([...ids].filter((id) => id.startsWith("shard0-")).length).toBe(perShard[0]);
    relay.signal("SIGTERM");
    expect(await relay.waitForExit(15_000)).toMatchObject({ code: 0, signal: null });
    const lines = logLines(relay.stderr());
    expect(lines.find((line) => line.msg.startsWith("stopping:"))?.published).toBe(40);
    expect(lines.map((line) => line.msg)).toContain("relay stopped");
  });
});
