// The PostgreSQL server's CPU time, read from /proc, for the runs of the throughput and payments
// tables: the postmaster's own time, the time of every process it has now (backends, walwriter,
// checkpointer, background writer, autovacuum), and the time of its children that have exited
// (the kernel adds a reaped child's time to its parent's cutime and cstime, and the postmaster
// reaps every backend). So the difference between two readings counts a backend that lived only
// between them, as the run's worker connections do. Counted alike for every system on the server.
// Limits: the whole server, so any other client's work in the same window counts too; ticks of
// USER_HZ (10 ms) per process, and the user/system split is the kernel's sampled estimate; only a
// server on this machine, in this PID namespace (elsewhere: null, and the tables show "–").
//
// The MariaDB server (mariadb runs) is one process: its own time, every thread's (processCpu).
//
// Also any process's CPU time by name (processesNamed, listeningOn, processTicks): the brokers of
// the relay section, which the bench does not start.

import { readdirSync, readFileSync, readlinkSync } from "node:fs";
import pg from "pg";

export interface CpuTime {
  readonly userUs: number;
  readonly systemUs: number;
}

/** USER_HZ is 100 on every Linux this runs on: one tick is 10,000 µs. */
const TICK_US = 10_000;

/** ppid, utime, stime, cutime, cstime of a process, or null when it is gone. */
function stat(pid: number): { comm: string; ppid: number; utime: number; stime: number; cutime: number; cstime: number } | null {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return null;
  }
  // "pid (comm) state ppid …": comm may hold spaces and parentheses, so split after its last ")".
  const close = text.lastIndexOf(")");
  const fields = text.slice(close + 2).split(" ");
  const field = (n: number) => Number(fields[n - 3]); // n: the field's number in proc(5), counted from 1
  return { comm: text.slice(text.indexOf("(") + 1, close), ppid: field(4), utime: field(14), stime: field(15), cutime: field(16), cstime: field(17) };
}

/** The postmaster's PID, when the server at `url` runs on this machine (our connection's backend is a process here named postgres), else null. */
export async function locatePostmaster(url: string): Promise<number | null> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ pid: number }>("SELECT pg_backend_pid() AS pid");
    const backend = stat(rows[0]?.pid ?? 0);
    if (backend?.comm !== "postgres") return null;
    const postmaster = stat(backend.ppid);
    return postmaster?.comm === "postgres" ? backend.ppid : null;
  } catch {
    return null;
  } finally {
    await client.end();
  }
}

/** The postmaster's current children (take this before a run's processes connect, for settleBackends). */
export function serverChildren(postmaster: number): number[] {
  return childrenOf(postmaster).pids;
}

/** The postmaster's current children, and their CPU ticks summed. */
function childrenOf(postmaster: number): { pids: number[]; utime: number; stime: number } {
  const found = { pids: [] as number[], utime: 0, stime: 0 };
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    const s = stat(Number(entry));
    if (s?.ppid !== postmaster) continue;
    found.pids.push(Number(entry));
    found.utime += s.utime;
    found.stime += s.stime;
  }
  return found;
}

/**
 * The server's CPU time so far: postmaster, its live children, its reaped children; null if it is
 * gone. A child that exits between the scan of the children and the postmaster's read is counted
 * twice: take readings while no backend is ending (before the run's "go", after settleBackends).
 */
export function serverCpu(postmaster: number): CpuTime | null {
  const children = childrenOf(postmaster);
  const own = stat(postmaster);
  if (!own) return null;
  return { userUs: (children.utime + own.utime + own.cutime) * TICK_US, systemUs: (children.stime + own.stime + own.cstime) * TICK_US };
}

/**
 * One process's own CPU time so far, every thread's (utime and stime of /proc/<pid>/stat): the
 * MariaDB server, one process whose connections are threads (so nothing is reaped, unlike the
 * postmaster's backends); null when it is gone. Ticks of USER_HZ, as serverCpu.
 */
export function processCpu(pid: number): CpuTime | null {
  const s = stat(pid);
  return s === null ? null : { userUs: s.utime * TICK_US, systemUs: s.stime * TICK_US };
}

/**
 * One process's CPU time so far in µs, from /proc/<pid>/schedstat (the scheduler's nanoseconds,
 * not USER_HZ ticks: fine enough for one statement of one backend; the statements section), or
 * null when the process is not visible from here or the kernel keeps no schedstat.
 */
export function backendCpuUs(pid: number): number | null {
  try {
    const us = Number(readFileSync(`/proc/${pid}/schedstat`, "utf8").split(" ")[0]) / 1000;
    return Number.isFinite(us) ? us : null;
  } catch {
    return null;
  }
}

/**
 * Waits (up to `timeoutMs`) until the postmaster's children that are alive now but were not in
 * `before` (taken before the run's processes started) have exited: the backends of the run's connections end a moment after their client, and
 * their time reaches the postmaster's cutime only once it has reaped them. Backends that appear
 * after this call (another client's) are not waited for.
 */
export async function settleBackends(postmaster: number, before: readonly number[], timeoutMs = 1_000): Promise<void> {
  const known = new Set(before);
  const ending = new Set(childrenOf(postmaster).pids.filter((pid) => !known.has(pid)));
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline && childrenOf(postmaster).pids.some((pid) => ending.has(pid))) {
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/**
 * The PIDs of the processes whose name (comm) is `name`, e.g. "nats-server" or "beam.smp" (the
 * brokers of the relay section): found by name, since the bench does not start them. Empty off Linux.
 */
export function processesNamed(name: string): number[] {
  let entries: string[];
  try {
    entries = readdirSync("/proc");
  } catch {
    return [];
  }
  return entries.filter((entry) => /^\d+$/.test(entry) && stat(Number(entry))?.comm === name).map(Number);
}

/** The inodes of the TCP sockets listening on `port` (any address, IPv4 or IPv6), from /proc/net/tcp and tcp6. */
function listeningInodes(port: number): Set<string> {
  const inodes = new Set<string>();
  for (const file of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    let text: string;
    try {
      text = readFileSync(file, "utf8");
    } catch {
      continue;
    }
    for (const line of text.split("\n").slice(1)) {
      // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode …; st 0A is LISTEN
      const fields = line.trim().split(/\s+/);
      const local = fields[1]?.split(":").at(-1);
      if (local !== undefined && Number.parseInt(local, 16) === port && fields[3] === "0A" && fields[9] !== undefined) inodes.add(fields[9]);
    }
  }
  return inodes;
}

/**
 * Of `pids`, those that hold a socket listening on `port`: the broker the bench talks to, not
 * another server of the same name (a test's own nats-server) nor a short-lived one (RabbitMQ's CLI
 * tools run beam.smp too). All of `pids` when none can be told apart that way (descriptors not
 * readable, or the port held by another process, as a container's proxy).
 */
export function listeningOn(pids: readonly number[], port: number): number[] {
  const inodes = listeningInodes(port);
  const holders = pids.filter((pid) => {
    try {
      return readdirSync(`/proc/${pid}/fd`).some((fd) => {
        try {
          const link = readlinkSync(`/proc/${pid}/fd/${fd}`);
          return link.startsWith("socket:[") && inodes.has(link.slice(8, -1));
        } catch {
          return false;
        }
      });
    } catch {
      return false;
    }
  });
  return holders.length > 0 ? holders : [...pids];
}

/** Each process's CPU ticks so far (user + system, every thread), from /proc/<pid>/stat; a process gone is left out. */
export function processTicks(pids: readonly number[]): Map<number, number> {
  const ticks = new Map<number, number>();
  for (const pid of pids) {
    const s = stat(pid);
    if (s !== null) ticks.set(pid, s.utime + s.stime);
  }
  return ticks;
}

/** The CPU µs between two readings of processTicks, over the processes in both; null when none is. Ticks of USER_HZ (10 ms) each. */
export function ticksBetweenUs(before: ReadonlyMap<number, number>, after: ReadonlyMap<number, number>): number | null {
  let ticks = 0;
  let found = false;
  for (const [pid, then] of before) {
    const now = after.get(pid);
    if (now === undefined) continue;
    found = true;
    ticks += now - then;
  }
  return found ? ticks * TICK_US : null;
}

/** The CPU a server spent between two readings, per unit of work (µs): null when either reading is missing. */
export function cpuUsPer(before: CpuTime | null, after: CpuTime | null, units: number): number | null {
  return before === null || after === null ? null : (after.userUs + after.systemUs - before.userUs - before.systemUs) / units;
}
