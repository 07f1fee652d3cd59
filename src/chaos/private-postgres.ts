// A PostgreSQL server of a run's own, for what the shared server cannot give or must not suffer:
// a setting it does not have (autovacuum on for the bench, wal_level=logical for the WAL relay),
// or a crash (`pg_ctl stop -m immediate`) and a restart in the middle of a chaos run. initdb into
// a temporary directory (trust authentication, as the postgres user when we run as root), a port
// reserved with freePort(), a "test" database. stop() shuts it down and removes its directory; it
// also runs on exit and on SIGINT, SIGTERM and SIGHUP, so a Ctrl-C leaves nothing behind. The
// shared server is never touched.
//
// Binaries: the given directory, else `pg_config --bindir`, else the directory of a running
// server's own postgres binary (so the same version), else initdb, pg_ctl and createdb from the PATH.

import { execFile, spawnSync } from "node:child_process";
import { appendFileSync, chownSync, existsSync, mkdtempSync, readFileSync, readlinkSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { freePort, releasePort } from "./ports.js";

/** Signals that stop the server before the process ends. */
const SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP"] as const;

export interface PrivatePostgresOptions {
  /** The directory of initdb and pg_ctl (default: see postgresBinaries). */
  readonly bin?: string | null;
  /** postgresql.conf settings besides PostgreSQL's defaults (listen_addresses is 127.0.0.1; the port is the reserved one). */
  readonly settings?: Readonly<Record<string, string>>;
  /** Names the temporary directory (wassal-<label>-…) and the errors (default "pg"). */
  readonly label?: string;
  /**
   * Stop the server on SIGINT, SIGTERM and SIGHUP, then end the process as the signal would
   * (default true). False for a caller that handles those signals itself and calls stop() (a chaos
   * run, which must report its interruption); the server is still stopped at the process's exit.
   */
  readonly onSignals?: boolean;
}

export interface PrivatePostgres {
  /** postgres://postgres@127.0.0.1:<port>/test */
  readonly url: string;
  readonly port: number;
  /** Where its binaries came from. */
  readonly bin: string;
  /** How long initdb, start and createdb took, in seconds. */
  readonly startSeconds: number;
  /** Stops it the way a power cut would (`pg_ctl stop -m immediate`): no checkpoint, crash recovery at the next start. */
  crash(): Promise<void>;
  /** Starts it again on the same port and directory, and resolves once it accepts connections. */
  restart(): Promise<void>;
  /** Whether it is running (not crashed, not stopped). */
  readonly running: boolean;
  /** Stops the server and removes its directory. Synchronous (it also runs from exit and signal handlers); a second call does nothing. */
  stop(): void;
}

/** The directory holding initdb and pg_ctl, or null for the PATH. */
export function postgresBinaries(given: string | undefined | null, postmaster: number | null = null): string | null {
  if (given !== undefined && given !== null) return given;
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

export async function startPrivatePostgres(options: PrivatePostgresOptions = {}): Promise<PrivatePostgres> {
  const started = performance.now();
  const label = options.label ?? "pg";
  const bin = postgresBinaries(options.bin);
  const asRoot = process.getuid?.() === 0;
  const dir = mkdtempSync(join(tmpdir(), `wassal-${label}-`));
  const data = join(dir, "data");
  const log = join(dir, "server.log");
  const tool = (name: string) => (bin === null ? name : join(bin, name));
  /** Runs a PostgreSQL tool (as the postgres user when we are root); throws with its output when it fails. */
  const run = (name: string, args: readonly string[]) => {
    const [command, ...rest] = asRoot ? ["runuser", "-u", "postgres", "--", tool(name), ...args] : [tool(name), ...args];
    const result = spawnSync(command as string, rest, { cwd: dir, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
    if (result.error) throw new Error(`private PostgreSQL (${label}): ${command} failed to run: ${result.error.message}`);
    if (result.status !== 0)
      throw new Error(`private PostgreSQL (${label}): ${name} ${args.join(" ")} exited ${result.status}: ${(result.stderr || result.stdout).trim()}`);
    return result.stdout;
  };
  /** As run, without blocking the event loop (a crash or a restart in the middle of a run). */
  const runAsync = (name: string, args: readonly string[]) =>
    new Promise<void>((resolve, reject) => {
      const [command, ...rest] = asRoot ? ["runuser", "-u", "postgres", "--", tool(name), ...args] : [tool(name), ...args];
      execFile(command as string, rest, { cwd: dir, encoding: "utf8" }, (error, stdout, stderr) => {
        if (error) reject(new Error(`private PostgreSQL (${label}): ${name} ${args.join(" ")} failed: ${(stderr || stdout || error.message).trim()}`));
        else resolve();
      });
    });
  const lastLogLines = () => (existsSync(log) ? readFileSync(log, "utf8").split("\n").slice(-10).join("\n") : "");
  let running = false;
  let stopped = false;
  let port = 0;
  const stop = () => {
    if (stopped) return;
    stopped = true;
    process.off("exit", stop);
    if (onSignals) for (const signal of SIGNALS) process.off(signal, onSignal);
    if (running) {
      try {
        run("pg_ctl", ["stop", "-D", data, "-m", "fast", "-w", "-t", "60"]);
      } catch (error) {
        process.stderr.write(`${error instanceof Error ? error.message : String(error)}; stopping it immediately\n`);
        try {
          run("pg_ctl", ["stop", "-D", data, "-m", "immediate", "-w", "-t", "30"]);
        } catch {
          // gone already (a Ctrl-C reaches the whole process group): nothing left to stop
        }
      }
      running = false;
    } else if (port !== 0) {
      // Crashed, or a restart under way: stop whatever may be coming up before its folder goes.
      try {
        run("pg_ctl", ["stop", "-D", data, "-m", "immediate", "-w", "-t", "30"]);
      } catch {
        // not running: nothing to stop
      }
    }
    if (port !== 0) releasePort(port);
    rmSync(dir, { recursive: true, force: true });
  };
  // Ctrl-C and the like: stop the server, then end as the signal would have.
  const onSignal = (signal: NodeJS.Signals) => {
    stop();
    process.kill(process.pid, signal);
  };
  process.on("exit", stop);
  const onSignals = options.onSignals ?? true;
  if (onSignals) for (const signal of SIGNALS) process.once(signal, onSignal);
  const start = () => {
    try {
      run("pg_ctl", ["start", "-D", data, "-l", log, "-w", "-t", "60", "-o", `-p ${port}`]);
    } catch (error) {
      throw new Error(`${error instanceof Error ? error.message : String(error)}\n${lastLogLines()}`);
    }
    running = true;
  };
  try {
    if (asRoot) {
      const id = (flag: string) => Number(spawnSync("id", [flag, "postgres"], { encoding: "utf8" }).stdout.trim());
      const [uid, gid] = [id("-u"), id("-g")];
      if (!Number.isInteger(uid) || uid <= 0) throw new Error(`private PostgreSQL (${label}): we run as root and there is no postgres user to run the server`);
      chownSync(dir, uid, gid);
    }
    // --no-sync: initdb's own files need not reach the disk (the server is thrown away); the server itself runs with fsync on.
    run("initdb", ["-D", data, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"]);
    const settings = { ...options.settings, listen_addresses: "127.0.0.1", unix_socket_directories: dir };
    const conf = Object.entries(settings).map(([name, value]) => `${name} = '${value}'`);
    appendFileSync(join(data, "postgresql.conf"), `\n# wassal: a private server (${label})\n${conf.join("\n")}\n`);
    port = await freePort();
    start();
    run("createdb", ["-h", "127.0.0.1", "-p", String(port), "-U", "postgres", "test"]);
    return {
      url: `postgres://postgres@127.0.0.1:${port}/test`,
      port,
      bin: bin ?? "(PATH)",
      startSeconds: (performance.now() - started) / 1000,
      async crash() {
        if (!running || stopped) return;
        running = false;
        await runAsync("pg_ctl", ["stop", "-D", data, "-m", "immediate", "-w", "-t", "30"]);
      },
      async restart() {
        if (stopped) throw new Error(`private PostgreSQL (${label}) was stopped for good`);
        if (running) return;
        try {
          await runAsync("pg_ctl", ["start", "-D", data, "-l", log, "-w", "-t", "60", "-o", `-p ${port}`]);
        } catch (error) {
          throw new Error(`${error instanceof Error ? error.message : String(error)}\n${lastLogLines()}`);
        }
        running = true;
        // Stopped for good while it started: stop what came up (its folder is gone or going).
        if (stopped) {
          running = false;
          await runAsync("pg_ctl", ["stop", "-D", data, "-m", "immediate", "-w", "-t", "30"]).catch(() => undefined);
        }
      },
      get running() {
        return running;
      },
      stop,
    };
  } catch (error) {
    stop();
    throw error;
  }
}
