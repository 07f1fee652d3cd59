// A private PostgreSQL cluster for the "postgres-autovacuum" store (throughput, payments, relay): the shared
// server the bench uses runs with autovacuum off (so that nothing analyzes a table during a run),
// which no production server does. This one is PostgreSQL's defaults with autovacuum on: initdb
// into a temporary directory (trust authentication, as the postgres user when the bench runs as
// root), a port the OS says is free, a "test" database; stopped (pg_ctl stop -m fast) and its
// directory removed when the bench ends, also on an error, on Ctrl-C (SIGINT), SIGTERM and SIGHUP.
// The shared server is never touched.
//
// Binaries: --postgres-bin, else `pg_config --bindir`, else the directory of the shared server's
// own postgres binary (so the same version), else initdb, pg_ctl and createdb from the PATH.

import { spawnSync } from "node:child_process";
import { appendFileSync, chownSync, existsSync, mkdtempSync, readFileSync, readlinkSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";

/** Signals that stop the cluster before the bench ends. */
const SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP"] as const;

/** What the cluster's postgresql.conf gets besides PostgreSQL's defaults (its port is given at start). */
export const PRIVATE_SETTINGS: Readonly<Record<string, string>> = {
  autovacuum: "on",
  listen_addresses: "127.0.0.1",
};

export interface PrivatePostgres {
  /** postgres://postgres@127.0.0.1:<port>/test */
  readonly url: string;
  readonly port: number;
  /** Where its binaries came from. */
  readonly bin: string;
  /** How long initdb, start and createdb took, in seconds. */
  readonly startSeconds: number;
  /** Stops the server and removes its directory. Synchronous (it also runs from exit and signal handlers); a second call does nothing. */
  stop(): void;
}

/** The directory holding initdb and pg_ctl, or null for the PATH. */
export function postgresBinaries(given: string | undefined, postmaster: number | null): string | null {
  if (given !== undefined) return given;
  const config = spawnSync("pg_config", ["--bindir"], { encoding: "utf8" });
  const fromConfig = config.status === 0 ? config.stdout.trim() : "";
  if (fromConfig !== "" && existsSync(join(fromConfig, "initdb"))) return fromConfig;
  if (postmaster !== null) {
    try {
      const dir = dirname(readlinkSync(`/proc/${postmaster}/exe`));
      if (existsSync(join(dir, "initdb"))) return dir;
    } catch {
      // not readable from here: the PATH then
    }
  }
  return null;
}

/** A TCP port on 127.0.0.1 that the OS says is free now (it may be taken before the server binds it: start retries). */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", resolve);
  });
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (address === null || typeof address === "string") throw new Error("private PostgreSQL: the OS gave no port");
  return address.port;
}

export async function startPrivatePostgres(bin: string | null): Promise<PrivatePostgres> {
  const started = performance.now();
  const asRoot = process.getuid?.() === 0;
  const dir = mkdtempSync(join(tmpdir(), "wassal-bench-pg-"));
  const data = join(dir, "data");
  const tool = (name: string) => (bin === null ? name : join(bin, name));
  /** Runs a PostgreSQL tool (as the postgres user when we are root); throws with its output when it fails. */
  const run = (name: string, args: readonly string[]) => {
    const [command, ...rest] = asRoot ? ["runuser", "-u", "postgres", "--", tool(name), ...args] : [tool(name), ...args];
    const result = spawnSync(command as string, rest, { cwd: dir, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
    if (result.error) throw new Error(`private PostgreSQL: ${command} failed to run: ${result.error.message}`);
    if (result.status !== 0)
      throw new Error(`private PostgreSQL: ${name} ${args.join(" ")} exited ${result.status}: ${(result.stderr || result.stdout).trim()}`);
    return result.stdout;
  };
  let running = false;
  let stopped = false;
  const stop = () => {
    if (stopped) return;
    stopped = true;
    process.off("exit", stop);
    for (const signal of SIGNALS) process.off(signal, onSignal);
    if (running) {
      try {
        run("pg_ctl", ["stop", "-D", data, "-m", "fast", "-w", "-t", "60"]);
      } catch (error) {
        process.stderr.write(`bench: ${error instanceof Error ? error.message : String(error)}; stopping it immediately\n`);
        try {
          run("pg_ctl", ["stop", "-D", data, "-m", "immediate", "-w", "-t", "30"]);
        } catch {
          // gone already (a Ctrl-C reaches the whole process group): nothing left to stop
        }
      }
    }
    rmSync(dir, { recursive: true, force: true });
  };
  // Ctrl-C and the like: stop the cluster, then end as the signal would have.
  const onSignal = (signal: NodeJS.Signals) => {
    stop();
    process.kill(process.pid, signal);
  };
  process.on("exit", stop);
  for (const signal of SIGNALS) process.once(signal, onSignal);
  try {
    if (asRoot) {
      const id = (flag: string) => Number(spawnSync("id", [flag, "postgres"], { encoding: "utf8" }).stdout.trim());
      const [uid, gid] = [id("-u"), id("-g")];
      if (!Number.isInteger(uid) || uid <= 0) throw new Error("private PostgreSQL: the bench runs as root and there is no postgres user to run the cluster");
      chownSync(dir, uid, gid);
    }
    // --no-sync: initdb's own files need not reach the disk (the cluster is thrown away); the server itself runs with fsync on.
    run("initdb", ["-D", data, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"]);
    const conf = Object.entries({ ...PRIVATE_SETTINGS, unix_socket_directories: dir }).map(([name, value]) => `${name} = '${value}'`);
    appendFileSync(join(data, "postgresql.conf"), `\n# wassal bench: the private cluster of the relay section\n${conf.join("\n")}\n`);
    const log = join(dir, "server.log");
    let port = 0;
    for (let attempt = 1; !running; attempt += 1) {
      port = await freePort();
      try {
        run("pg_ctl", ["start", "-D", data, "-l", log, "-w", "-t", "60", "-o", `-p ${port}`]);
        running = true;
      } catch (error) {
        const text = existsSync(log) ? readFileSync(log, "utf8") : "";
        // Taken between the OS's answer and the server's bind: another port.
        if (attempt < 3 && /could not bind|already in use/i.test(text)) continue;
        throw new Error(`${error instanceof Error ? error.message : String(error)}\n${text.split("\n").slice(-10).join("\n")}`);
      }
    }
    run("createdb", ["-h", "127.0.0.1", "-p", String(port), "-U", "postgres", "test"]);
    return {
      url: `postgres://postgres@127.0.0.1:${port}/test`,
      port,
      bin: bin ?? "(PATH)",
      startSeconds: (performance.now() - started) / 1000,
      stop,
    };
  } catch (error) {
    stop();
    throw error;
  }
}
