// Shared by the consumers' tests (NATS, RabbitMQ, Redis Streams): what `stop()` does, on the real
// broker. A consumer whose handler fails, with messages held behind the failing one, is stopped:
// no handler call starts after stop() was called, and every message it did not apply comes to the
// next consumer (nothing lost). A consumer whose handler hangs is stopped: stop() returns after its
// grace, while that handler still runs, and that message comes to the next consumer too.
//
// The consumers run on real timers (no clock can be injected), so the tests assert the order of
// events (stop called, stop returned, a handler call started, a hung handler released); the only
// reading of the real clock is a lower bound (stop waited for its grace).

import { expect, it } from "vitest";
import type { ConsumerStats, DeliveredMessage, DeliveryHandler } from "../../src/relay/deliver.js";
import { Inbox } from "../../src/relay/inbox.js";
import type { SqliteOutboxStore } from "../../src/stores/sqlite/sqlite-outbox-store.js";
import { waitUntil } from "../worker/support.js";

export interface StartedConsumer {
  readonly stats: ConsumerStats;
  stop(): Promise<void>;
}

export interface StopScenario {
  /** A fresh source (stream, queue) for one test: what `publish` and `start` take. */
  fresh(): Promise<string>;
  /** Puts messages 1..count on `source`, ids `<source>-<n>`, bodies `{ n }`. */
  publish(source: string, count: number): Promise<void>;
  /** Starts a consumer of `source`; every one started on a source shares its place (durable, queue, group and name). */
  start(
    source: string,
    options: { inbox: Inbox<unknown>; handle: DeliveryHandler<unknown>; retryDelayMs: number; shutdownGraceMs: number },
  ): Promise<StartedConsumer>;
  /** True once the consumer holds `count` messages (delivered, not acknowledged); brokers that hand over one at a time need not say. */
  holds?(source: string, count: number): Promise<boolean>;
  /** The broker redelivers a hung message only after this: so long the last check may wait. */
  readonly redeliveryMs?: number;
}

async function memoryInbox(source: string): Promise<{ inbox: Inbox<unknown>; store: SqliteOutboxStore }> {
  const { SqliteOutboxStore } = await import("../../src/stores/sqlite/sqlite-outbox-store.js");
  const store = new SqliteOutboxStore({ path: ":memory:" });
  await store.migrate();
  return { inbox: new Inbox({ store, source }) as Inbox<unknown>, store };
}

const numberOf = (message: DeliveredMessage) => (message.body as { n: number }).n;

/** The next consumer of `source`, whose handler works: every message comes to it, each once. */
async function nothingLost(scenario: StopScenario, source: string, count: number): Promise<void> {
  const { inbox, store } = await memoryInbox(source);
  const applied: string[] = [];
  const next = await scenario.start(source, { inbox, handle: (m) => void applied.push(m.id), retryDelayMs: 10, shutdownGraceMs: 1_000 });
  try {
    await waitUntil(`all ${count} messages at the next consumer`, () => applied.length >= count, 10_000 + (scenario.redeliveryMs ?? 0));
    expect([...applied].sort()).toEqual(Array.from({ length: count }, (_, i) => `${source}-${i + 1}`).sort());
  } finally {
    await next.stop();
    await store.close();
  }
}

/** The two stop() tests, for one broker's consumer. */
export function stopTests(scenario: StopScenario): void {
  it("stop() with a failing handler and messages held: no handler call starts after stop(), it returns at once, and every message comes to the next consumer unapplied", async () => {
    const source = await scenario.fresh();
    await scenario.publish(source, 5);
    const { inbox, store } = await memoryInbox(source);
    const events: string[] = [];
    const consumer = await scenario.start(source, {
      inbox,
      handle: (message) => {
        events.push(`call ${numberOf(message)}`);
        throw new Error("the handler's database is down");
      },
      // Long enough that the failing message waits between its tries when stop() comes.
      retryDelayMs: 300,
      shutdownGraceMs: 500,
    });
    try {
      await waitUntil("the first message failed once", () => events.length >= 1);
      if (scenario.holds) await waitUntil("the consumer holds the five", () => scenario.holds!(source, 5));
      events.push("stop");
      await consumer.stop();
      events.push("stopped");
      expect(events).toEqual(["call 1", "stop", "stopped"]);
      expect(consumer.stats).toMatchObject({ applied: 0, terminated: 0 });
    } finally {
      await consumer.stop();
      await store.close();
    }
    await nothingLost(scenario, source, 5);
  });

  it("stop() while a handler hangs returns after its grace, with the handler still running; that message comes to the next consumer", async () => {
    const source = await scenario.fresh();
    await scenario.publish(source, 2);
    const { inbox, store } = await memoryInbox(source);
    const events: string[] = [];
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let running = 0;
    const consumer = await scenario.start(source, {
      inbox,
      handle: async (message) => {
        events.push(`call ${numberOf(message)}`);
        running += 1;
        try {
          await released;
          throw new Error("released: rolled back");
        } finally {
          running -= 1;
        }
      },
      retryDelayMs: 50,
      shutdownGraceMs: 500,
    });
    try {
      await waitUntil("the handler hangs", () => running === 1);
      // Released long after the grace; a stop() that waits for the handler returns only after it.
      const releasing = setTimeout(() => {
        events.push("released");
        release();
      }, 3_000);
      events.push("stop");
      const started = performance.now();
      await consumer.stop();
      const took = performance.now() - started;
      events.push("stopped");
      clearTimeout(releasing);
      expect(events).toEqual(["call 1", "stop", "stopped"]);
      expect(took).toBeGreaterThanOrEqual(450); // it waited for its grace (the clock's lower bound only)
      expect(running).toBe(1);
      release();
      await waitUntil("the hung handler ended", () => running === 0);
      expect(events).toEqual(["call 1", "stop", "stopped"]); // the release was the test's own, after: no call after stop
    } finally {
      release();
      await consumer.stop();
    }
    await nothingLost(scenario, source, 2);
    await store.close();
  });
}
