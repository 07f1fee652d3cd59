// Built-in retention (startRetention): every interval, the rows older than each age go through the
// store's purges, in bounded batches; young and unfinished rows stay; one pass at a time; a failed
// pass is retried at the next interval; stop() ends a pass after its current batch; two runners on
// one database share the work. Run against every store, on a manual clock.

import { afterEach, expect, it } from "vitest";
import { InvalidArgumentError } from "../../src/outbox/errors.js";
import { MIN_INBOX_RETENTION_MS, type Retention, type RetentionPass, startRetention } from "../../src/outbox/retention.js";
import type { OutboxStore } from "../../src/outbox/store.js";
import type { PurgeOptions } from "../../src/outbox/types.js";
import { describeEachStore, enqueueMessage, useStoreHarness } from "../conformance/stores.js";
import type { ManualClock } from "../../src/outbox/clock.js";

const DAY = 86_400_000;
const HOUR = 3_600_000;

/** Enqueues `count` messages in one transaction and completes them: `count` processed rows, processed now. */
async function processed(store: OutboxStore<unknown>, count: number): Promise<void> {
  await store.transaction((tx) =>
    store.enqueueMany(
      tx,
      Array.from({ length: count }, (_, n) => ({ type: "test.done", payload: { n } })),
    ),
  );
  const leases = await store.claim("test-worker", { limit: count, leaseMs: 60_000 });
  expect(leases).toHaveLength(count);
  await store.completeMany(leases.map((lease) => ({ lease })));
}

/** Collects the passes a retention reports; `next(n)` waits for the n-th. */
function passLog() {
  const passes: RetentionPass[] = [];
  let waiting: (() => void)[] = [];
  return {
    passes,
    onPass: (pass: RetentionPass) => {
      passes.push(pass);
      const woken = waiting;
      waiting = [];
      for (const wake of woken) wake();
    },
    async next(n: number): Promise<RetentionPass> {
      while (passes.length < n) await new Promise<void>((resolve) => waiting.push(resolve));
      return passes[n - 1] as RetentionPass;
    },
  };
}

/** Resolves once the retention sleeps on the clock (its pass is over), so advancing it wakes that sleep. */
async function idle(clock: ManualClock): Promise<void> {
  while (clock.sleeping === 0) await new Promise<void>((resolve) => setImmediate(resolve));
}

/** The store, with purgeProcessed's batches seen (onProgress) and, optionally, each call intercepted first. */
function watched(store: OutboxStore<unknown>, before?: (call: number, options: PurgeOptions) => Promise<void> | void) {
  const progress: number[] = [];
  let calls = 0;
  const proxy = new Proxy(store, {
    get(target, property) {
      if (property === "purgeProcessed") {
        return async (cutoff: Date, options: PurgeOptions = {}) => {
          calls += 1;
          await before?.(calls, options);
          return target.purgeProcessed(cutoff, {
            ...options,
            onProgress: (n) => {
              progress.push(n);
              options.onProgress?.(n);
            },
          });
        };
      }
      const value: unknown = Reflect.get(target, property);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  return { store: proxy, progress, calls: () => calls };
}

let running: Retention[] = [];
afterEach(async () => {
  await Promise.all(running.map((r) => r.stop()));
  running = [];
});
function started(retention: Retention): Retention {
  running.push(retention);
  return retention;
}

describeEachStore("built-in retention", (factory) => {
  const ctx = useStoreHarness(factory);

  it("deletes processed rows older than the age in bounded batches; young processed rows and pending ones stay", async () => {
    const { store, clock } = ctx();
    await processed(store, 35); // old: processed at the start
    for (let n = 0; n < 4; n += 1) await enqueueMessage(store, { type: "test.waiting" }); // old, but pending
    clock.advance(6 * DAY);
    await processed(store, 3); // young: one day old at the pass below
    clock.advance(DAY + 1);

    const log = passLog();
    const seen = watched(store);
    started(startRetention(seen.store, { processed: 7 * DAY, batchSize: 10, clock, onPass: log.onPass }));
    const pass = await log.next(1);

    expect(pass.failure).toBeUndefined();
    expect(pass.stopped).toBe(false);
    expect(pass.deleted).toEqual({ processed: 35 });
    expect(pass.cutoffs.processed).toEqual(new Date(clock.now().getTime() - 7 * DAY));
    expect(seen.progress).toEqual([10, 20, 30, 35]); // four batches of at most 10: never one unbounded delete
    expect(await store.countByStatus()).toEqual({ pending: 4, processing: 0, processed: 3, dead: 0, cancelled: 0 });
  });

  it("purges each kind given by its own age: dead, audit and inbox rows too; a kind left out stays", async () => {
    const { store, clock } = ctx();
    await enqueueMessage(store, { type: "test.poison" });
    await store.fail((await store.claim("test-worker", { limit: 1, leaseMs: 60_000 }))[0]!, new Error("poison"), "dead");
    await processed(store, 2);
    await store.transaction((tx) => store.receive(tx, "old-delivery"));
    clock.advance(40 * DAY);
    await enqueueMessage(store, { type: "test.poison" });
    await store.fail((await store.claim("test-worker", { limit: 1, leaseMs: 60_000 }))[0]!, new Error("poison"), "dead");
    await store.transaction((tx) => store.receive(tx, "young-delivery"));
    clock.advance(HOUR);
    const auditOld = (await store.auditTrail()).filter((row) => row.at.getTime() < clock.now().getTime() - 30 * DAY).length;
    expect(auditOld).toBeGreaterThan(0);
    const auditAll = (await store.auditTrail()).length;

    const log = passLog();
    started(startRetention(store, { dead: 30 * DAY, audit: 30 * DAY, inbox: 30 * DAY, clock, onPass: log.onPass }));
    const pass = await log.next(1);

    expect(pass.failure).toBeUndefined();
    expect(pass.deleted).toEqual({ dead: 1, audit: auditOld, inbox: 1 });
    expect(await store.countByStatus()).toEqual({ pending: 0, processing: 0, processed: 2, dead: 1, cancelled: 0 }); // processed: no age given
    expect((await store.auditTrail()).length).toBe(auditAll - auditOld);
    // The purged id is new again; the young one is still known.
    expect(await store.transaction((tx) => store.receive(tx, "young-delivery"))).toBe(false);
    expect(await store.transaction((tx) => store.receive(tx, "old-delivery"))).toBe(true);
  });

  it("runs again every interval: rows that grew old meanwhile go at the next pass, and nothing runs before it", async () => {
    const { store, clock } = ctx();
    await processed(store, 5);
    clock.advance(3 * DAY);
    await processed(store, 2);
    clock.advance(4 * DAY + 1);

    const log = passLog();
    started(startRetention(store, { processed: 7 * DAY, intervalMs: HOUR, clock, onPass: log.onPass }));
    expect((await log.next(1)).deleted).toEqual({ processed: 5 });
    await idle(clock);
    clock.advance(HOUR - 1);
    await new Promise<void>((resolve) => setImmediate(resolve));
    expect(log.passes).toHaveLength(1); // not due yet
    clock.advance(3 * DAY); // the sleep ends; the two younger rows are now older than 7 days
    expect((await log.next(2)).deleted).toEqual({ processed: 2 });
    expect((await store.countByStatus()).processed).toBe(0);
  });

  it("never runs two passes at once: time passing during a slow pass starts no second one", async () => {
    const { store, clock } = ctx();
    await processed(store, 3);
    clock.advance(2 * DAY);
    let release: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let inPurge = 0;
    let most = 0;
    const seen = watched(store, async () => {
      inPurge += 1;
      most = Math.max(most, inPurge);
      await gate;
      inPurge -= 1;
    });
    const log = passLog();
    started(startRetention(seen.store, { processed: DAY, intervalMs: 1_000, clock, onPass: log.onPass }));
    while (seen.calls() === 0) await new Promise<void>((resolve) => setImmediate(resolve));
    for (let n = 0; n < 10; n += 1) {
      clock.advance(10_000); // ten intervals pass while the first pass is held
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
    expect(seen.calls()).toBe(1);
    release();
    expect((await log.next(1)).deleted).toEqual({ processed: 3 });
    await idle(clock);
    expect(most).toBe(1);
    expect(log.passes).toHaveLength(1);
  });

  it("stop() during a pass lets the batch in progress commit and starts no other batch or pass", async () => {
    const { store, clock } = ctx();
    await processed(store, 35);
    await enqueueMessage(store, { type: "test.poison" });
    await store.fail((await store.claim("test-worker", { limit: 1, leaseMs: 60_000 }))[0]!, new Error("poison"), "dead");
    clock.advance(8 * DAY);

    const log = passLog();
    let stopping: Promise<void> | undefined;
    let retention: Retention | undefined;
    const seen = watched(store, (_call, options) => {
      const report = options.onProgress;
      // Stop once the first batch has committed (its report), as a SIGTERM in the middle of a pass would.
      (options as { onProgress?: (n: number) => void }).onProgress = (n) => {
        report?.(n);
        stopping ??= retention?.stop();
      };
    });
    retention = started(startRetention(seen.store, { processed: 7 * DAY, dead: 7 * DAY, batchSize: 10, intervalMs: HOUR, clock, onPass: log.onPass }));
    const pass = await log.next(1);
    await stopping;

    expect(pass.stopped).toBe(true);
    expect(pass.deleted).toEqual({ processed: 10 }); // dead rows not even started
    expect(seen.progress).toEqual([10]);
    expect(await store.countByStatus()).toMatchObject({ processed: 25, dead: 1 });
    expect(clock.sleeping).toBe(0); // no next pass waits
    clock.advance(DAY);
    await new Promise<void>((resolve) => setImmediate(resolve));
    expect(log.passes).toHaveLength(1);
  });

  it("a failed pass is reported, and the next interval tries again", async () => {
    const { store, clock } = ctx();
    await processed(store, 4);
    clock.advance(2 * DAY);
    const seen = watched(store, (call) => {
      if (call === 1) throw new Error("connection lost");
    });
    const log = passLog();
    started(startRetention(seen.store, { processed: DAY, intervalMs: 60_000, clock, onPass: log.onPass }));
    const failed = await log.next(1);
    expect(failed.failure?.kind).toBe("processed");
    expect(String(failed.failure?.error)).toContain("connection lost");
    expect((await store.countByStatus()).processed).toBe(4);
    await idle(clock);
    clock.advance(60_000);
    const retried = await log.next(2);
    expect(retried.failure).toBeUndefined();
    expect(retried.deleted).toEqual({ processed: 4 });
  });

  it("two runners on one database at once (another connection each) delete every old row once, neither failing", async () => {
    const { store, clock, harness } = ctx();
    await processed(store, 1000);
    await processed(store, 1000);
    clock.advance(2 * DAY);
    await processed(store, 5); // young
    const other = await harness.connect();
    const logs = [passLog(), passLog()];
    started(startRetention(store, { processed: DAY, batchSize: 7, clock, onPass: logs[0]!.onPass }));
    started(startRetention(other, { processed: DAY, batchSize: 7, clock, onPass: logs[1]!.onPass }));
    const [a, b] = await Promise.all(logs.map((log) => log.next(1)));
    expect(a?.failure).toBeUndefined();
    expect(b?.failure).toBeUndefined();
    expect((a?.deleted.processed ?? 0) + (b?.deleted.processed ?? 0)).toBe(2000);
    expect((await store.countByStatus()).processed).toBe(5);
  });
});

it("refuses an inbox age under an hour, an age that is not > 0, and no age at all, starting nothing", () => {
  const store = {} as OutboxStore<unknown>;
  expect(() => startRetention(store, { inbox: MIN_INBOX_RETENTION_MS - 1 })).toThrow(InvalidArgumentError);
  expect(() => startRetention(store, { inbox: 10 * 60_000 })).toThrow(/at least 3600000 ms \(1 hour\).*applied twice/);
  expect(() => startRetention(store, { processed: 0 })).toThrow(/processed must be a number of milliseconds > 0/);
  expect(() => startRetention(store, { dead: Number.NaN })).toThrow(InvalidArgumentError);
  expect(() => startRetention(store, {})).toThrow(/at least one age/);
  expect(() => startRetention(store, { processed: DAY, batchSize: 0 })).toThrow(/batchSize/);
});
