// The end-to-end chaos run (`wassal chaos relay`) inside `npm test`: real `wassal relay` processes
// killed and paused past their lease, a broker of the run's own (a NATS server on each store, a
// RabbitMQ node on SQLite) stopped and started mid-run, and a consumer applying through the inbox.
// And the judge that reads the result: shown each fault it must catch.

import { beforeAll, describe, expect, it } from "vitest";
import { judgeRelayChaos } from "../../src/chaos/relay-chaos.js";
import { requireBuiltCli, ROOT, runCli } from "../support/cli.js";
import { postgresAvailable, TEST_DATABASE_URL } from "../support/postgres.js";
import { requireService } from "../support/services.js";

const PG = await postgresAvailable();
// The run starts a nats-server of its own; the shared one answering says the binary is installed.
const NATS = await requireService(
  "NATS",
  "nats://127.0.0.1:4222",
  "start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server",
);

// The same for RabbitMQ: the run starts a node of its own (about 8 s), and restarts only that one.
const RABBIT = await requireService("RabbitMQ", "amqp://127.0.0.1:5672", "rabbitmq-server -detached");

beforeAll(requireBuiltCli);

describe("the relay chaos run's judge", () => {
  const enqueued = [
    { id: "1", key: "a" },
    { id: "2", key: "b" },
    { id: "3", key: "a" },
  ];
  const evidence = { expected: 3, enqueued, unpublished: 0, streamMessages: 3, consumerDuplicates: 0 };
  const failing = (effects: string[], extra: Partial<typeof evidence> = {}) =>
    judgeRelayChaos({ ...evidence, ...extra, effects })
      .rows.filter((r) => !r.ok)
      .map((r) => r.name);

  it("passes one effect per message in each key's order (keys may interleave)", () => {
    expect(failing(["2", "1", "3"])).toEqual([]);
  });

  it("catches a lost message, a double effect, an effect out of its key's order, and a message a relay never completed", () => {
    expect(failing(["1", "2"])).toEqual(["messages with no effect at the consumer (lost)"]);
    expect(failing(["1", "2", "3", "3"])).toEqual(["messages with more than one effect"]);
    expect(failing(["3", "2", "1"])).toEqual(["keys: effects committed out of enqueue order"]);
    expect(failing(["1", "2", "3"], { unpublished: 1 })).toEqual(["outbox messages not completed by a relay"]);
    expect(failing(["1", "2", "3", "9"])).toEqual(["effects of messages never enqueued"]);
    expect(judgeRelayChaos({ ...evidence, effects: ["3", "2", "1"] }).examples).toContain("key a: message 1's effect came after message 3's, enqueued later");
  });
});

interface RelayChaosJson {
  passed: boolean;
  figures: { kills: number; relayStarts: number; brokerRestarts: number; consumerApplied: number };
  rows: { name: string; observed: number; ok: boolean }[];
  examples: string[];
}

const ARGS = [
  "--relays",
  "2",
  "--messages",
  "600",
  "--rate",
  "300",
  "--keys",
  "20",
  "--lease-ms",
  "500",
  "--kill-every",
  "200",
  "--pause-every",
  "600",
  "--seed",
  "3",
];

/**
 * How long one run may take. Quiet, the RabbitMQ run takes about 30 s (its node starts twice, about
 * 8 s each); on a loaded machine it was seen past 60 s, so the runs get their own limit.
 */
const RUN_MS = 150_000;

async function runRelayChaos(extra: readonly string[]): Promise<RelayChaosJson> {
  const run = await runCli(["chaos", "relay", "--json", ...ARGS, ...extra], { cwd: ROOT, timeoutMs: RUN_MS - 10_000 });
  let result: RelayChaosJson;
  try {
    result = JSON.parse(run.stdout) as RelayChaosJson;
  } catch {
    throw new Error(`chaos relay printed no JSON (exit ${run.code}): ${run.stderr.slice(-2000)}`);
  }
  expect(result.examples).toEqual([]);
  expect(result.passed).toBe(true);
  expect(run.code).toBe(0);
  // The faults happened: relays killed (and restarted), the broker stopped and started.
  expect(result.figures.kills).toBeGreaterThanOrEqual(1);
  expect(result.figures.relayStarts).toBe(2 + result.figures.kills);
  expect(result.figures.brokerRestarts).toBe(1);
  expect(result.figures.consumerApplied).toBe(600);
  return result;
}

describe.skipIf(!NATS)("wassal chaos relay (short)", () => {
  it(
    "sqlite: relays killed and paused, the broker restarted: every message one effect, in each key's order",
    async () => {
      await runRelayChaos([]);
    },
    RUN_MS,
  );

  it.skipIf(!PG)(
    "postgres: the same faults, the same result",
    async () => {
      await runRelayChaos(["--store", TEST_DATABASE_URL]);
    },
    RUN_MS,
  );
});

describe.skipIf(!RABBIT)("wassal chaos relay --broker rabbitmq (short)", () => {
  it(
    "sqlite: relays killed and paused, the run's own RabbitMQ node restarted: every message one effect, in each key's order",
    async () => {
      await runRelayChaos(["--broker", "rabbitmq"]);
    },
    RUN_MS,
  );
});
