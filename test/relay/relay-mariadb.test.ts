// The relay on the MariaDB store: `wassal chaos relay --store <mariadb url>` (real relay processes
// killed and paused past their lease, the NATS server restarted mid-run, a consumer applying
// through the inbox, each side in a database of its own that the run creates and drops) loses,
// doubles and reorders nothing; and a `wassal relay --db <mariadb url>` process publishes a
// database's keyed messages to NATS JetStream in each key's order, completes them, and stops on
// SIGTERM with exit 0.
//
// Needs `npm run build` first (`npm test` does it).

import { mkdtempSync } from "node:fs";
import { join } from "node:path";
import { jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { openOutbox } from "../../src/stores/open-outbox.js";
import { killAll, requireBuiltCli, ROOT, runCli, startCli } from "../support/cli.js";
import { freshDatabase, mariadbAvailable, TEST_MARIADB_URL, type FreshDatabase } from "../support/mariadb.js";
import { TEST_NATS_URL, natsAvailable } from "../support/services.js";
import { tempDir } from "../support/temp.js";
import { until } from "../support/wait.js";
import { logLines } from "../worker-cli/harness.js";

const MARIADB = await mariadbAvailable();
// The chaos run starts a nats-server of its own; the shared one answering says the binary is installed.
const NATS = await natsAvailable();
const FILE_TMP = tempDir("wassal-relay-mariadb-");

beforeAll(requireBuiltCli);
afterEach(killAll);

interface RelayChaosJson {
  passed: boolean;
  timedOut: boolean;
  settings: { store: string; broker: string };
  figures: { enqueued: number; kills: number; relayStarts: number; brokerRestarts: number; consumerApplied: number };
  rows: { name: string; observed: number; ok: boolean }[];
  examples: string[];
}

/** test/chaos/relay-chaos.test.ts's RELAY_FAULTS: 2 relays, 30 keys; killed every 200 ms and paused past their 500 ms lease every 600 ms. */
const RELAY_FAULTS = ["--relays", "2", "--keys", "30", "--seed", "3", "--lease-ms", "500", "--kill-every", "200", "--pause-every", "600"];
const RUN_MS = 120_000;

describe.skipIf(!MARIADB || !NATS)("wassal chaos relay --store <mariadb url> (short)", () => {
  it(
    "relays killed and paused, the broker restarted: every message one effect, in each key's order",
    async () => {
      const run = await runCli(
        ["chaos", "relay", "--json", "--store", TEST_MARIADB_URL, "--broker", "nats", "--messages", "400", "--rate", "400", ...RELAY_FAULTS],
        {
          cwd: ROOT,
          timeoutMs: RUN_MS - 10_000,
        },
      );
      let result: RelayChaosJson;
      try {
        result = JSON.parse(run.stdout) as RelayChaosJson;
      } catch {
        throw new Error(`chaos relay printed no JSON (exit ${run.code}): ${run.stderr.slice(-2000)}`);
      }
      // Every failed check with its count, and the examples, in one assertion: a failure shows them all.
      expect({ failed: result.rows.filter((r) => !r.ok).map((r) => `${r.name}: ${r.observed}`), examples: result.examples, timedOut: result.timedOut }).toEqual(
        {
          failed: [],
          examples: [],
          timedOut: false,
        },
      );
      expect(result.passed).toBe(true);
      expect(run.code).toBe(0);
      expect(result.settings.broker).toBe("nats");
      expect(result.settings.store).toMatch(/^(mysql|mariadb):\/\//);
      // None lost, none doubled, none out of its key's order.
      const observed = (name: string) => result.rows.find((r) => r.name === name)?.observed;
      expect({
        enqueued: result.figures.enqueued,
        applied: result.figures.consumerApplied,
        lost: observed("messages with no effect at the consumer (lost)"),
        doubled: observed("messages with more than one effect"),
        outOfOrder: observed("keys: effects committed out of enqueue order"),
        reversedPairs: observed("keys: pairs of effects in reverse enqueue order"),
        unpublished: observed("outbox messages not completed by a relay"),
      }).toEqual({ enqueued: 400, applied: 400, lost: 0, doubled: 0, outOfOrder: 0, reversedPairs: 0, unpublished: 0 });
      // The faults happened: relays killed (and restarted), the broker stopped and started.
      expect(result.figures.kills).toBeGreaterThanOrEqual(1);
      expect(result.figures.relayStarts).toBe(2 + result.figures.kills);
      expect(result.figures.brokerRestarts).toBe(1);
    },
    RUN_MS,
  );
});

describe.skipIf(!MARIADB || !NATS)("wassal relay --db <mariadb url> to NATS JetStream", () => {
  let nc: NatsConnection;
  let jsm: JetStreamManager;
  let database: FreshDatabase;
  const stream = `WASSAL_MARIADB_${process.pid}`;

  beforeAll(async () => {
    database = await freshDatabase();
    nc = await connect({ servers: TEST_NATS_URL });
    jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: stream, subjects: [`${stream}.>`] });
  });
  afterAll(async () => {
    await jsm?.streams.delete(stream).catch(() => undefined);
    await nc?.close();
    await database?.drop();
  });

  it("publishes a MariaDB outbox's keyed messages in each key's order, completes them, and stops on SIGTERM with exit 0", async () => {
    const dir = mkdtempSync(join(FILE_TMP, "cwd-"));
    const COUNT = 20;
    const outbox = await openOutbox(database.url);
    try {
      await outbox.store.transaction(async (tx) => {
        for (let n = 0; n < COUNT; n += 1)
          await outbox.store.enqueue(tx, { type: n % 2 ? "order.paid" : "order.created", key: `order-${n % 4}`, payload: { n } });
      });
    } finally {
      await outbox.close();
    }
    const relay = startCli(
      ["relay", "--db", database.url, "--to", TEST_NATS_URL, "--destination", `${stream}.{type}`, "--route", `order.paid=${stream}.paid`],
      {
        cwd: dir,
      },
    );
    await relay.waitForStderr("relay started");
    await until(`${COUNT} messages in the stream`, async () => (await jsm.streams.info(stream)).state.messages === COUNT, {
      timeoutMs: 15_000,
      intervalMs: 20,
    });
    const check = await openOutbox(database.url, { mustExist: true });
    try {
      await until("all processed", async () => (await check.store.countByStatus()).processed === COUNT, { timeoutMs: 15_000, intervalMs: 20 });
      expect(await check.store.countByStatus()).toEqual({ pending: 0, processing: 0, processed: COUNT, dead: 0, cancelled: 0 });
    } finally {
      await check.close();
    }
    const subjects = (await jsm.streams.info(stream, { subjects_filter: ">" })).state.subjects ?? {};
    expect(subjects).toEqual({ [`${stream}.order.created`]: 10, [`${stream}.paid`]: 10 });

    // In the stream's order, each key's messages in enqueue order, numbered 1, 2, … by the store.
    const byKey = new Map<string, { n: number; seq: number }[]>();
    for (let seq = 1; seq <= COUNT; seq += 1) {
      const stored = await jsm.streams.getMessage(stream, { seq });
      if (stored === null) throw new Error(`stream message ${seq} is missing`);
      const key = stored.header.get("Wassal-Key");
      const { n } = stored.json<{ n: number }>();
      byKey.set(key, [...(byKey.get(key) ?? []), { n, seq: Number(stored.header.get("Wassal-Key-Seq")) }]);
    }
    expect(Object.fromEntries(byKey)).toEqual(
      Object.fromEntries([0, 1, 2, 3].map((k) => [`order-${k}`, [0, 1, 2, 3, 4].map((i) => ({ n: k + 4 * i, seq: i + 1 }))])),
    );

    relay.signal("SIGTERM");
    expect(await relay.waitForExit(15_000)).toMatchObject({ code: 0, signal: null });
    const messages = logLines(relay.stderr()).map((l) => l.msg);
    expect(messages).toContain("relay started");
    expect(messages).toContain("relay stopped");
    expect(logLines(relay.stderr()).filter((l) => l.level >= 40)).toEqual([]);
  });
});
