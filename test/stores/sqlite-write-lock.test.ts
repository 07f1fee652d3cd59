// The write lock: its figures (transactions run, time the lock was held, for the bench), runSync, the
// flag-marked path for synchronous work, and run, whose AsyncLocalStorage mark (a token per
// transaction, and its promise hooks) holds only while that transaction runs.

import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, expect, it, vi } from "vitest";
import { InvalidArgumentError } from "../../src/outbox/errors.js";
import { SqliteOutboxStore } from "../../src/stores/sqlite/sqlite-outbox-store.js";
import { until } from "../support/wait.js";

const dirs: string[] = [];
const stores: SqliteOutboxStore[] = [];
afterEach(async () => {
  for (const store of stores.splice(0)) await store.close();
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

async function freshStore(): Promise<SqliteOutboxStore> {
  const dir = mkdtempSync(join(tmpdir(), "wassal-lock-"));
  dirs.push(dir);
  const store = new SqliteOutboxStore({ path: join(dir, "outbox.db") });
  stores.push(store); // closed after each test
  await store.migrate();
  return store;
}

it("counts committed and rolled-back write transactions and the time each held the lock", async () => {
  const store = await freshStore();
  const lock = store.writeLock;
  const before = { ...lock.stats };
  await store.transaction((tx) => store.enqueue(tx, { type: "t", payload: 1 }));
  const held = 30;
  await expect(
    store.transaction(async () => {
      const until = performance.now() + held;
      while (performance.now() < until) await new Promise((resolve) => setImmediate(resolve));
      throw new Error("rolled back");
    }),
  ).rejects.toThrow("rolled back");
  expect(lock.stats.transactions - before.transactions).toBe(2);
  expect(lock.stats.heldMs - before.heldMs).toBeGreaterThanOrEqual(held);
  // Only the committed one spent time in COMMIT, and that time is part of what it held.
  const committing = lock.stats.committingMs - before.committingMs;
  expect(committing).toBeGreaterThan(0);
  expect(committing).toBeLessThan(lock.stats.heldMs - before.heldMs - held);
  expect(lock.stats.contended).toBe(before.contended);
});

it("runSync: a transaction started inside its work is refused as nested, and work that returns a promise is refused and rolled back", async () => {
  const store = await freshStore();
  const lock = store.writeLock;
  let inside = false;
  await lock.runSync(() => {
    inside = lock.insideTransaction();
    expect(() => lock.run(() => 1)).toThrow(/started inside another on the same SQLite connection/);
  });
  expect(inside).toBe(true);
  expect(lock.insideTransaction()).toBe(false);
  await expect(lock.runSync(() => Promise.resolve(1) as unknown as number)).rejects.toThrow(/returned a promise; use run\(\)/);
  expect(store.db.inTransaction).toBe(false);
  expect(await lock.runSync(() => 7)).toBe(7);
});

it("run: inside across awaits in each transaction, one after another; a callback armed inside and run after the commit is outside, and may start its own", async () => {
  const store = await freshStore();
  const lock = store.writeLock;
  for (let round = 0; round < 3; round++) {
    const seen: boolean[] = [];
    await lock.run(async () => {
      seen.push(lock.insideTransaction());
      await new Promise((resolve) => setImmediate(resolve));
      seen.push(lock.insideTransaction());
      expect(() => lock.run(() => 1)).toThrow(/started inside another on the same SQLite connection/);
    });
    expect(seen).toEqual([true, true]);
    expect(lock.insideTransaction()).toBe(false);
  }
  // Armed inside, run after the commit: outside (the mark was turned off with the transaction's end).
  let late: Promise<boolean> | undefined;
  await lock.run(() => {
    setImmediate(() => {
      late = lock.insideTransaction() ? Promise.resolve(true) : lock.run(() => false);
    });
  });
  await new Promise((resolve) => setImmediate(resolve));
  expect(await late).toBe(false);
});

it("run: a callback armed inside a transaction is outside once it ended, committed, rolled back or thrown, even while a later transaction runs", async () => {
  const store = await freshStore();
  const lock = store.writeLock;
  const immediate = () => new Promise((resolve) => setImmediate(resolve));
  // Each way a transaction can end; the callback it armed runs after that end.
  const endings: [string, (arm: () => void) => Promise<unknown>][] = [
    ["committed", (arm) => lock.run(() => arm())],
    [
      "rejected after an await",
      (arm) =>
        lock
          .run(async () => {
            arm();
            await Promise.resolve(); // a turn of the microtask queue: the armed callback waits for the next loop turn
            throw new Error("no");
          })
          .catch(() => undefined),
    ],
    [
      "rejected",
      (arm) =>
        lock
          .run(() => {
            arm();
            return Promise.reject(new Error("no"));
          })
          .catch(() => undefined),
    ],
    [
      "thrown synchronously",
      (arm) =>
        lock
          .run(() => {
            arm();
            throw new Error("no");
          })
          .catch(() => undefined),
    ],
  ];
  for (const [ending, end] of endings) {
    let late: Promise<boolean> | undefined;
    await end(() =>
      setImmediate(() => {
        late = lock.insideTransaction() ? Promise.resolve(true) : lock.run(() => false);
      }),
    );
    await immediate();
    expect([ending, await late]).toEqual([ending, false]);
  }
  // Armed inside one transaction, run while the next one's work is running: outside that one.
  let during: boolean | undefined;
  await lock.run(() => {
    setImmediate(() => {
      during = lock.insideTransaction();
    });
  });
  await lock.run(async () => {
    while (during === undefined) await immediate();
    expect(lock.insideTransaction()).toBe(true);
  });
  expect(during).toBe(false);
});

it("waits for another connection's write lock blocking the event loop for 2 ms at most, then takes it once it is free", async () => {
  const holder = await freshStore();
  const path = holder.path;
  const waiter = new SqliteOutboxStore({ path });
  stores.push(waiter);
  // SQLite's own busy handler blocks this process while it sleeps: by default for 2 ms at most.
  expect(waiter.db.pragma("busy_timeout", { simple: true })).toBe(2);

  let release = (): void => undefined;
  const held = holder.transaction(() => new Promise<void>((resolve) => (release = resolve)));
  await new Promise((resolve) => setImmediate(resolve)); // the holder's BEGIN IMMEDIATE has run
  const before = { ...waiter.writeLock.stats };
  // Every BEGIN IMMEDIATE the waiter's connection runs, and whether it ran before the event loop
  // turned once after the call (in the call's own task, blocking the event loop) or later.
  const begins: ("in the call's task" | "later")[] = [];
  let sameTask = true;
  const exec = waiter.db.exec.bind(waiter.db);
  const spy = vi.spyOn(waiter.db, "exec").mockImplementation((sql: string) => {
    if (sql === "BEGIN IMMEDIATE") begins.push(sameTask ? "in the call's task" : "later");
    return exec(sql);
  });
  // The call's task ends at the first timer or immediate after it. A timer armed here, before the
  // call, fires no later than the waiter's first retry timer (armed later, for 1 ms or more), so a
  // retry made from a timer is never taken for one made in the call's task, however late the
  // event loop's next turn comes on a loaded machine.
  const taskEnded = new Promise<void>((resolve) => {
    const end = () => {
      sameTask = false;
      resolve();
    };
    setTimeout(end, 0);
    setImmediate(end);
  });
  const waiting = waiter.transaction((tx) => waiter.enqueue(tx, { type: "t", payload: 1 }));
  try {
    await taskEnded;
    // One refused BEGIN IMMEDIATE in the call's task: the event loop was blocked for one busy_timeout
    // (2 ms, above) at most. (A waiter that retried there, or with a longer busy_timeout, blocks it
    // for longer.) Every further try is made later, from a timer.
    expect(begins).toEqual(["in the call's task"]);
    // The event loop runs while the waiter waits: its timers fire and it tries again, refused each
    // time, and it has not got the lock.
    await until("the waiter's retries", () => begins.length >= 4, { timeoutMs: 10_000, intervalMs: 1 });
    expect(begins.slice(1).every((b) => b === "later")).toBe(true);
    expect(waiter.writeLock.stats.transactions).toBe(before.transactions);
  } finally {
    release(); // a failed check above must not leave the holder's transaction open for afterEach
    await held;
    await waiting;
  }
  expect(waiter.writeLock.stats.contended - before.contended).toBe(1);
  expect(await waiter.countByStatus()).toMatchObject({ pending: 1 });
  spy.mockRestore();
});

it("keeps a busy_timeout it is given", async () => {
  const holder = await freshStore();
  const store = new SqliteOutboxStore({ path: holder.path, busyTimeoutMs: 25 });
  stores.push(store);
  expect(store.db.pragma("busy_timeout", { simple: true })).toBe(25);
});

it("refuses a busyTimeoutMs that is not a whole number of milliseconds >= 0, naming it, before it creates the file", () => {
  const dir = mkdtempSync(join(tmpdir(), "wassal-lock-"));
  dirs.push(dir);
  const path = join(dir, "outbox.db");
  for (const busyTimeoutMs of [-1, 1.5, Number.NaN]) {
    expect(() => new SqliteOutboxStore({ path, busyTimeoutMs })).toThrow(InvalidArgumentError);
    expect(() => new SqliteOutboxStore({ path, busyTimeoutMs })).toThrow(/busyTimeoutMs must be a whole number of milliseconds >= 0/);
  }
  expect(existsSync(path)).toBe(false);
});

it.runIf(process.platform === "linux")(
  "measureHolding: once asked, splits the held time into the process on a CPU, waiting for a core, and the rest",
  async () => {
    const store = await freshStore();
    const lock = store.writeLock;
    const spin = (ms: number) => {
      const until = performance.now() + ms;
      while (performance.now() < until) {
        // Busy: the thread is on a CPU or waiting for one the whole time.
      }
    };
    await lock.run(() => spin(20));
    expect(lock.stats.heldOnCpuMs, "nothing is counted before measureHolding()").toBe(0);
    expect(lock.stats.heldRunnableMs).toBe(0);

    expect(lock.measureHolding()).toBe(true);
    const before = { ...lock.stats };
    await lock.run(() => spin(30));
    const busy = lock.stats.heldOnCpuMs - before.heldOnCpuMs + (lock.stats.heldRunnableMs - before.heldRunnableMs);
    // On a CPU or waiting for one the whole time; half, for a virtual machine's stolen time, which counts as neither.
    expect(busy, "a spinning holder is on a CPU or waiting for one").toBeGreaterThanOrEqual(15);

    const asleep = { ...lock.stats };
    await lock.run(() => new Promise((resolve) => setTimeout(resolve, 30)));
    const held = lock.stats.heldMs - asleep.heldMs;
    expect(held).toBeGreaterThanOrEqual(29);
    expect(lock.stats.heldOnCpuMs - asleep.heldOnCpuMs, "a holder asleep on a timer uses next to no CPU").toBeLessThan(held / 2);

    lock.stopMeasuringHolding();
    const stopped = { ...lock.stats };
    await lock.run(() => spin(5));
    expect(lock.stats.heldOnCpuMs).toBe(stopped.heldOnCpuMs);
    expect(lock.stats.heldRunnableMs).toBe(stopped.heldRunnableMs);
  },
);
