// Local TCP ports for the servers a chaos run (or a test) starts for itself: a free one, reserved
// until released, and whether something accepts connections on one yet (or still).

import { mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createConnection, createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { InvalidArgumentError } from "../outbox/errors.js";

/**
 * A port on 127.0.0.1 for a server that must be told its port on its command line (nats-server,
 * redis-server, a RabbitMQ node), reserved for this process until releasePort() or its exit.
 *
 * "Listen on 0, close, reuse" races: two test files running at once (or two runs of the suite)
 * can be given the same port, and a port the kernel hands out for listening is also one it hands
 * out as the local end of outgoing connections. So a port is taken:
 * - from 20000–32767, below Linux's ephemeral range (ip_local_port_range, usually 32768–60999;
 *   the range shrinks to stay below it), so no outgoing connection takes it while it is reserved,
 *   including while its server is stopped and started again on it;
 * - with a lock file of its own, created exclusively (O_EXCL) in <tmpdir>/wassal-ports/ and
 *   holding the owner's pid: every process that reserves ports this way (vitest's workers, other
 *   checkouts' test runs, chaos runs) skips a port another holds. A lock whose owner is gone is
 *   skipped too, and removed once an hour old;
 * - only if a listen on it succeeds now (nothing else, outside this scheme, holds it).
 */
export async function freePort(): Promise<number> {
  const dir = join(tmpdir(), "wassal-ports");
  mkdirSync(dir, { recursive: true, mode: 0o777 });
  const [low, high] = portRange();
  for (let attempt = 0; attempt < 200; attempt += 1) {
    const port = low + Math.floor(Math.random() * (high - low));
    const lock = join(dir, `${port}.lock`);
    try {
      writeFileSync(lock, `${process.pid}\n`, { flag: "wx" });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
      forgetStaleLock(lock);
      continue;
    }
    if (await canListen(port)) {
      held.set(port, lock);
      if (held.size === 1) process.once("exit", releaseAll);
      return port;
    }
    rmSync(lock, { force: true });
  }
  throw new Error(`no free port found in ${low}–${high - 1} on 127.0.0.1`);
}

/** Gives a port from freePort() back (its server has stopped for good). */
export function releasePort(port: number): void {
  const lock = held.get(port);
  if (lock === undefined) return;
  held.delete(port);
  rmSync(lock, { force: true });
}

const held = new Map<number, string>();

function releaseAll(): void {
  for (const port of [...held.keys()]) releasePort(port);
}

/** [low, high): 20000–32767, cut to end below the ephemeral range where Linux says where it starts. */
function portRange(): [number, number] {
  let high = 32_768;
  try {
    const ephemeralLow = Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]);
    if (Number.isInteger(ephemeralLow) && ephemeralLow > 21_000) high = Math.min(high, ephemeralLow);
  } catch {
    // not Linux: the default range is below the ephemeral ranges of the others (49152 up)
  }
  return [20_000, high];
}

/** Removes a lock whose owner is gone and that is over an hour old (a younger one may be being taken over right now). */
function forgetStaleLock(lock: string): void {
  try {
    const pid = Number(readFileSync(lock, "utf8").trim());
    if (alive(pid) || Date.now() - statSync(lock).mtimeMs < 3_600_000) return;
    rmSync(lock, { force: true });
  } catch {
    // gone already, or not ours to read: skipped
  }
}

function alive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** Whether a server can listen on 127.0.0.1:port now. */
function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once("error", () => resolve(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
  });
}

/** Whether something accepts a TCP connection on 127.0.0.1:port now. */
export function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: "127.0.0.1", port });
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}

/** Waits until the port accepts connections (`open`) or no longer does, for at most `ms`; `what` names the server in the error. */
export async function waitForPort(port: number, open: boolean, what: string, ms: number): Promise<void> {
  const by = performance.now() + ms;
  while ((await accepts(port)) !== open) {
    if (performance.now() > by) throw new InvalidArgumentError(`${what} did not ${open ? "start" : "stop"} within ${ms / 1000} s`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
