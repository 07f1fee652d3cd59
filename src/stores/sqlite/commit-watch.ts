// How a SQLite store hears other processes' commits: SQLite has no notifications, so a store
// watches two files (inotify) and looks at the database when either changes.
//
// - The -wal file: every commit, through any library or program, writes to it, but before the
//   commit is visible (the flush to disk and the -shm index update follow it, and make no file
//   event). So a look after that write that sees nothing yet looks again on a timer, and Node's
//   timers tick in whole milliseconds.
// - The wake file, next to the database: a store writes one byte to it once a commit through its
//   own connection that enqueued or handed a key on has returned, when the commit is visible, so
//   one look at once sees it. (Enqueues through another library's connection write none.)
//
// The wake file beside the -wal watch, measured (both checkouts, 4 rounds in turn of `node
// bench/.build/run.js --sections latency --stores sqlite-FULL,sqlite-NORMAL`): enqueue → handler start from
// another process, p50 1.91–2.05 → 0.69–0.93 ms, p99 5.24 / 7.26 / 5.03 / 4.43 → 3.32 / 4.76 / 3.46
// / 3.47 ms. Nothing here can fail a commit: a wake file that cannot be created or written leaves
// the -wal watch, and polling, to wake the others.

import { closeSync, constants, fchmodSync, type FSWatcher, fstatSync, openSync, statSync, watch, writeSync } from "node:fs";
import { setImmediate as setImmediatePromise, setTimeout as setTimeoutPromise } from "node:timers/promises";

/** The wake file of a database file: next to it, as its -wal and -shm files are. */
export function wakeFilePath(databasePath: string): string {
  return `${databasePath}-wassal-wake`;
}

/**
 * After a write to the -wal file: look at once, then again after these waits until a look sees a
 * commit (about 135 ms in all). With synchronous=FULL the flush after the write takes a few
 * milliseconds, so the first 11 ms are looked at every 1–2 ms. Tried first: doubling waits (0, 1,
 * 2, 4, 8, …). A commit that became visible just after the look at 3 ms waited until 7 ms, and the
 * other-process wake-up's p99 on FULL was 5.3 ms (`npm run bench -- --sections latency`). A look is
 * one indexed read, about 10 µs.
 */
export const LOOK_AGAIN_MS: readonly number[] = [0, 1, 1, 1, 1, 1, 2, 2, 2, 4, 8, 16, 32, 64];

const ONE_BYTE = new Uint8Array([1]);

/**
 * Opens the wake file (flags: O_RDONLY or O_WRONLY), creating it if missing with the database
 * file's own permissions, as SQLite gives its -wal and -shm files (users who share a database
 * through a group share its wake file too), and never following a symbolic link. Null where it
 * cannot be opened (a read-only directory, no permission).
 */
function openWakeFile(databasePath: string, flags: number): number | null {
  let fd: number;
  try {
    fd = openSync(wakeFilePath(databasePath), flags | constants.O_CREAT | constants.O_NOFOLLOW, 0o600);
  } catch {
    return null;
  }
  try {
    // Only a file this process just created has the 0600 above: set the database's mode on it.
    if ((fstatSync(fd).mode & 0o777) === 0o600) {
      const wanted = statSync(databasePath).mode & 0o666;
      if (wanted !== 0o600) fchmodSync(fd, wanted);
    }
  } catch {
    // The database file is gone or not ours to read: the file keeps the mode it has.
  }
  return fd;
}

/** A connection's side that writes: a byte at offset 0 per wake-up, the file held open until close. */
export class WakeFileWriter {
  readonly #databasePath: string;
  /** undefined: not opened yet; null: cannot be opened or written here, never tried again; closed: after close(). */
  #fd: number | null | undefined;
  #closed = false;

  constructor(databasePath: string) {
    this.#databasePath = databasePath;
  }

  get path(): string {
    return wakeFilePath(this.#databasePath);
  }

  /** Tells every watcher that a commit which enqueued, or handed a key on, is visible now. */
  poke(): void {
    if (this.#closed) return;
    if (this.#fd === undefined) this.#fd = openWakeFile(this.#databasePath, constants.O_WRONLY);
    if (this.#fd === null) return;
    try {
      writeSync(this.#fd, ONE_BYTE, 0, 1, 0);
    } catch {
      // A full disk, an I/O error: the -wal watch and polling still wake the others.
      this.#closeFd();
      this.#fd = null;
    }
  }

  close(): void {
    this.#closed = true;
    this.#closeFd();
  }

  #closeFd(): void {
    const fd = this.#fd;
    this.#fd = undefined;
    if (typeof fd === "number") {
      try {
        closeSync(fd);
      } catch {
        // Already closed: nothing to release.
      }
    }
  }
}

/**
 * Runs `step` once per burst of calls: again after it ends if called meanwhile, never two at once.
 * `idle()` resolves once no step runs or is due.
 */
function coalesced(step: () => Promise<void>): { (): void; idle(): Promise<void> } {
  let running: Promise<void> | undefined;
  let heard = false;
  const run = async () => {
    try {
      while (heard) {
        heard = false;
        try {
          await step();
        } catch {
          // The database could not be read just now (closed, busy recovering): the next event, or
          // polling, catches up.
        }
      }
    } finally {
      running = undefined;
    }
  };
  const call = () => {
    heard = true;
    running ??= run();
  };
  call.idle = async () => {
    while (running !== undefined) await running;
  };
  return call;
}

function watchFile(path: string, onChange: () => void): FSWatcher | undefined {
  try {
    const watcher = watch(path, { persistent: false }, onChange);
    watcher.on("error", () => watcher.close());
    return watcher;
  } catch {
    return undefined;
  }
}

export interface CommitWatch {
  close(): void;
  /** Resolves once no look runs or is due (every follow-up has ended): for tests. */
  settled(): Promise<void>;
}

/**
 * Watches a database file's -wal file and wake file, calling `look` when either changes: `look`
 * reads the database, wakes whoever waits if it found new work, and returns whether another
 * connection's commit had become visible since its previous call. `isOpen` false, or close(),
 * ends a follow-up. Undefined where neither file can be watched (polling is then the only wake-up).
 */
export function watchCommits(databasePath: string, look: () => Promise<boolean>, isOpen: () => boolean): CommitWatch | undefined {
  let closed = false;
  const open = () => !closed && isOpen();
  /** The looks that saw a commit: a -wal follow-up ends at the next one, whichever watch made it. */
  let commitsSeen = 0;
  const counted = async () => {
    const saw = await look();
    if (saw) commitsSeen += 1;
    return saw;
  };
  const onWalWrite = coalesced(async () => {
    const before = commitsSeen;
    for (const delayMs of LOOK_AGAIN_MS) {
      await (delayMs === 0 ? setImmediatePromise() : setTimeoutPromise(delayMs, undefined, { ref: false }));
      if (!open() || commitsSeen !== before || (await counted())) break;
    }
  });
  const onPoke = coalesced(async () => {
    if (open()) await counted();
  });
  const watchers: FSWatcher[] = [];
  const wal = watchFile(`${databasePath}-wal`, onWalWrite);
  if (wal) watchers.push(wal);
  // Watching needs only to read the file; the first watcher creates it if no process has yet.
  let wake = watchFile(wakeFilePath(databasePath), onPoke);
  if (wake === undefined) {
    const fd = openWakeFile(databasePath, constants.O_RDONLY);
    if (fd !== null) {
      closeSync(fd);
      wake = watchFile(wakeFilePath(databasePath), onPoke);
    }
  }
  if (wake) watchers.push(wake);
  if (watchers.length === 0) return undefined;
  return {
    close: () => {
      closed = true;
      for (const watcher of watchers) watcher.close();
    },
    settled: async () => {
      await Promise.all([onWalWrite.idle(), onPoke.idle()]);
    },
  };
}
