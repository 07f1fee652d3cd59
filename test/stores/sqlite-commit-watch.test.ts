// How a SQLite store hears other processes' commits (commit-watch.ts): a commit that made work
// claimable writes the wake file once it has returned, and a write to that file makes a watcher
// look at once, with or without the -wal watch beside it. (That a worker in another process is
// woken end to end is test/worker-cli/wakeups.test.ts; how much sooner, the bench's latency rows.)

import { appendFileSync, chmodSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterEach, expect, it } from "vitest";
import { WakeFileWriter, wakeFilePath, watchCommits, type CommitWatch } from "../../src/stores/sqlite/commit-watch.js";
import { SqliteOutboxStore } from "../../src/stores/sqlite/sqlite-outbox-store.js";
import { tempDir } from "../support/temp.js";
import { until } from "../support/wait.js";

const stores: SqliteOutboxStore[] = [];
const watches: CommitWatch[] = [];
afterEach(async () => {
  for (const watch of watches.splice(0)) watch.close();
  for (const store of stores.splice(0)) await store.close();
});

async function freshStore(): Promise<{ store: SqliteOutboxStore; path: string }> {
  const path = join(tempDir("wassal-commit-watch-"), "outbox.db");
  const store = new SqliteOutboxStore({ path });
  stores.push(store);
  await store.migrate();
  return { store, path };
}

/** The wake file's byte: the test sets it to 0, and a poke writes 1. */
const wakeByte = (path: string) => readFileSync(wakeFilePath(path))[0];
const clearWakeByte = (path: string) => writeFileSync(wakeFilePath(path), new Uint8Array([0]));

it("a commit that enqueues writes the wake file after it returns; claims and completions that hand no key on do not", async () => {
  const { store, path } = await freshStore();
  clearWakeByte(path);
  await store.transaction(async (tx) => {
    await store.enqueue(tx, { type: "t", payload: 1 });
    expect(wakeByte(path), "not before the commit: a look then would not see it").toBe(0);
  });
  expect(wakeByte(path)).toBe(1);

  clearWakeByte(path);
  const [lease] = await store.claim("w", { limit: 10, leaseMs: 30_000 });
  if (!lease) throw new Error("the message was not claimed");
  await store.complete(lease);
  expect(wakeByte(path), "nothing became claimable").toBe(0);

  await store.transaction((tx) =>
    store.enqueueMany(tx, [
      { type: "t", payload: 2 },
      { type: "t", payload: 3 },
    ]),
  );
  expect(wakeByte(path)).toBe(1);

  clearWakeByte(path);
  await expect(
    store.transaction(async (tx) => {
      await store.enqueue(tx, { type: "t", payload: 4 });
      throw new Error("rolled back");
    }),
  ).rejects.toThrow("rolled back");
  expect(wakeByte(path), "a rolled-back enqueue made nothing claimable").toBe(0);
});

it("a completion that hands its key on to a waiting message writes the wake file", async () => {
  const { store, path } = await freshStore();
  await store.transaction((tx) =>
    store.enqueueMany(tx, [
      { type: "t", payload: 1, key: "k" },
      { type: "t", payload: 2, key: "k" },
    ]),
  );
  const [first, ...others] = await store.claim("w", { limit: 10, leaseMs: 30_000 });
  if (!first) throw new Error("the key's first message was not claimed");
  expect(others, "the second waits behind the first").toEqual([]);
  clearWakeByte(path);
  await store.complete(first);
  expect(wakeByte(path)).toBe(1);
});

it("a commit through a connection that is not Wassal's (no wake file written) still wakes a store's listener, through the -wal watch", async () => {
  const path = join(tempDir("wassal-commit-watch-"), "outbox.db");
  // A directory where the wake file would be: it can be neither written nor watched as a file, so
  // only the -wal watch can wake the listener.
  mkdirSync(wakeFilePath(path));
  const store = new SqliteOutboxStore({ path });
  stores.push(store);
  await store.migrate();
  let woken = 0;
  const stop = await store.onNewMessages(() => {
    woken += 1;
  });
  const other = new Database(path);
  try {
    other.prepare("INSERT INTO outbox_messages (type, payload, created_at, available_at) VALUES ('t', '1', ?, ?)").run(Date.now(), Date.now());
  } finally {
    other.close();
  }
  await until("the listener woken", () => woken >= 1, { timeoutMs: 10_000, intervalMs: 5 });
  await stop();
});

it("the wake file is created with the database file's permissions, as SQLite creates its -wal and -shm files", async () => {
  const { store, path } = await freshStore();
  chmodSync(path, 0o660);
  await store.transaction((tx) => store.enqueue(tx, { type: "t", payload: 1 }));
  expect(statSync(wakeFilePath(path)).mode & 0o777).toBe(0o660);
});

it("a write to the wake file makes the watcher look at once, even where there is no -wal file to watch", async () => {
  const path = join(tempDir("wassal-commit-watch-"), "none.db");
  let looks = 0;
  const watch = watchCommits(
    path,
    async () => {
      looks += 1;
      return true;
    },
    () => true,
  );
  if (!watch) throw new Error("the wake file could not be watched");
  watches.push(watch);
  expect(existsSync(`${path}-wal`)).toBe(false);
  expect(existsSync(wakeFilePath(path)), "the first watcher creates the wake file").toBe(true);
  const writer = new WakeFileWriter(path);
  writer.poke();
  writer.close();
  await until("a look after the poke", () => looks >= 1, { timeoutMs: 10_000, intervalMs: 5 });
  expect(looks).toBe(1);
});

it("after a write to the -wal file, it looks again until a look sees a commit, and then no more", async () => {
  const path = join(tempDir("wassal-commit-watch-"), "wal.db");
  writeFileSync(`${path}-wal`, "");
  let looks = 0;
  const watch = watchCommits(
    path,
    async () => {
      looks += 1;
      return looks === 3; // the commit becomes visible at the third look
    },
    () => true,
  );
  if (!watch) throw new Error("the -wal file could not be watched");
  watches.push(watch);
  appendFileSync(`${path}-wal`, "frame");
  await until("three looks", () => looks >= 3, { timeoutMs: 10_000, intervalMs: 5 });
  // The follow-up has ended (it would have gone on through its schedule, 14 looks in all, and
  // settled() waits for that): no look after the one that saw the commit.
  await watch.settled();
  expect(looks).toBe(3);
});

it("a -wal follow-up ends once a look made for the wake file saw the commit", async () => {
  const path = join(tempDir("wassal-commit-watch-"), "both.db");
  writeFileSync(`${path}-wal`, "");
  let looks = 0;
  let finishFirstLook: (saw: boolean) => void = () => undefined;
  const watch = watchCommits(
    path,
    (): Promise<boolean> => {
      looks += 1;
      // The follow-up's first look is held open until the poke's look (the second) has seen the commit.
      if (looks === 1) return new Promise<boolean>((resolve) => (finishFirstLook = resolve));
      return Promise.resolve(looks === 2);
    },
    () => true,
  );
  if (!watch) throw new Error("the files could not be watched");
  watches.push(watch);
  appendFileSync(`${path}-wal`, "frame"); // the commit's write, before it is visible
  await until("the follow-up's first look", () => looks >= 1, { timeoutMs: 10_000, intervalMs: 1 });
  const writer = new WakeFileWriter(path);
  writer.poke(); // the committer's poke, once its commit returned
  writer.close();
  await until("the poke's look", () => looks >= 2, { timeoutMs: 10_000, intervalMs: 1 });
  finishFirstLook(false); // it saw nothing: the commit was not visible yet when it looked
  await watch.settled(); // every follow-up has ended
  // Without the rule the follow-up would look on through its schedule (14 looks in all).
  expect(looks).toBe(2);
});

it("a wake file that cannot be written is skipped: the poke does nothing and throws nothing", () => {
  const writer = new WakeFileWriter(join(tempDir("wassal-commit-watch-"), "no-such-dir", "x.db"));
  expect(() => writer.poke()).not.toThrow();
  expect(existsSync(writer.path)).toBe(false);
  writer.close();
});
