// The end-to-end chaos run (`wassal chaos relay`) inside `npm test`: real `wassal relay` processes
// killed and paused past their lease, a broker of the run's own (a NATS server on each store, a
// RabbitMQ node on SQLite) stopped and started mid-run, and a consumer applying through the inbox.
// And the judge that reads the result: shown each fault it must catch.

import fc from "fast-check";
import { beforeAll, describe, expect, it } from "vitest";
import { countInversions, judgeRelayChaos } from "../../src/chaos/relay-chaos.js";
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
  const OUT_OF_ORDER = ["keys: effects committed out of enqueue order", "keys: pairs of effects in reverse enqueue order"];

  it("passes one effect per message in each key's order (keys may interleave)", () => {
    expect(failing(["2", "1", "3"])).toEqual([]);
  });

  it("catches a lost message, a double effect, an effect out of its key's order, and a message a relay never completed", () => {
    expect(failing(["1", "2"])).toEqual(["messages with no effect at the consumer (lost)"]);
    expect(failing(["1", "2", "3", "3"])).toEqual(["messages with more than one effect"]);
    expect(failing(["3", "2", "1"])).toEqual(OUT_OF_ORDER);
    expect(failing(["1", "2", "3"], { unpublished: 1 })).toEqual(["outbox messages not completed by a relay"]);
    expect(failing(["1", "2", "3", "9"])).toEqual(["effects of messages never enqueued"]);
    expect(judgeRelayChaos({ ...evidence, effects: ["3", "2", "1"] }).examples).toContain(
      "key a: message 1 (enqueued #1) had its effect after message 3's (enqueued #3, later)",
    );
  });

  /** Five messages of key "k" (ids "1" … "5", enqueued in that order) and the judge's order figures for `effects`. */
  const orderOf = (effects: string[]) => {
    const five = ["1", "2", "3", "4", "5"].map((id) => ({ id, key: "k" }));
    const { rows } = judgeRelayChaos({ ...evidence, expected: 5, enqueued: five, streamMessages: 5, effects });
    const observed = (name: string) => rows.find((r) => r.name === name)?.observed;
    return {
      late: observed("keys: effects committed out of enqueue order"),
      pairs: observed("keys: pairs of effects in reverse enqueue order"),
      keys: observed("keys with an effect out of enqueue order"),
    };
  };

  it("counts every effect that came after a later message of its key, and every inverted pair, not one per key", () => {
    expect(orderOf(["1", "2", "3", "4", "5"])).toEqual({ late: 0, pairs: 0, keys: 0 });
    // A message held back and applied last: one late effect, four pairs.
    expect(orderOf(["2", "3", "4", "5", "1"])).toEqual({ late: 1, pairs: 4, keys: 1 });
    // A later message applied first (the consumer restarted past what its predecessor held): four late effects, four pairs.
    expect(orderOf(["5", "1", "2", "3", "4"])).toEqual({ late: 4, pairs: 4, keys: 1 });
    // Reversed: four late, ten pairs.
    expect(orderOf(["5", "4", "3", "2", "1"])).toEqual({ late: 4, pairs: 10, keys: 1 });
    // Two separate inversions in one key both count.
    expect(orderOf(["2", "1", "4", "3", "5"])).toEqual({ late: 2, pairs: 2, keys: 1 });
  });

  it("counts out-of-order effects over every key, and no more than 10 examples however many there are", () => {
    const many = Array.from({ length: 40 }, (_, i) => ({ id: String(i + 1), key: `k${i % 4}` }));
    // Each key's messages applied in reverse: 9 late effects and 45 pairs per key.
    const effects = [...many].reverse().map((m) => m.id);
    const { rows, examples } = judgeRelayChaos({ ...evidence, expected: 40, enqueued: many, streamMessages: 40, effects });
    const observed = (name: string) => rows.find((r) => r.name === name)?.observed;
    expect(observed("keys: effects committed out of enqueue order")).toBe(36);
    expect(observed("keys: pairs of effects in reverse enqueue order")).toBe(180);
    expect(observed("keys with an effect out of enqueue order")).toBe(4);
    expect(examples).toHaveLength(10);
  });

  it("counts inversions as the pairs a brute-force count finds", () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: 20 }), { maxLength: 60 }), (values) => {
        let pairs = 0;
        for (let i = 0; i < values.length; i += 1) for (let j = i + 1; j < values.length; j += 1) if ((values[i] as number) > (values[j] as number)) pairs += 1;
        expect(countInversions(values)).toBe(pairs);
      }),
    );
  });

  it("reports the consumer processes' faults and what they absorbed as figures, not checks", () => {
    const { rows } = judgeRelayChaos({
      ...evidence,
      effects: ["1", "2", "3"],
      consumerDuplicates: 7,
      consumerStarts: 4,
      consumerKills: 3,
      consumerPauses: 2,
      consumerTerminated: 0,
    });
    const info = Object.fromEntries(rows.filter((r) => r.expected === "info").map((r) => [r.name, r.observed]));
    expect(info).toMatchObject({
      "duplicate deliveries absorbed by the consumer's inbox (reported)": 7,
      "consumer processes started (restarts included)": 4,
      "consumer processes SIGKILLed and restarted": 3,
      "consumer processes SIGSTOPped past the ack wait": 2,
      "messages a consumer gave up (reported)": 0,
    });
    expect(rows.every((r) => r.ok)).toBe(true);
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
