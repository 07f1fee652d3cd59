// Running the built `wassal` CLI (node dist/cli/main.js) as real processes: short commands run to
// their end, and long-running ones (workers) the test signals, reads and waits for. Every process
// started here gets a scrubbed environment (see env.ts) and is tracked, so a test file that calls
// `killAll` after each test leaves nothing running.
//
// Needs `npm run build` first (`npm test` does it).

import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { expect } from "vitest";
import { childEnv } from "./env.js";
import { until, within } from "./wait.js";

/** The repository's root folder. */
export const ROOT = fileURLToPath(new URL("../../", import.meta.url));
/** The built CLI. */
export const CLI = join(ROOT, "dist", "cli", "main.js");

/** Throws when `dist/<relativePath>` was not built (call it once, in beforeAll). */
export function requireBuilt(relativePath: string): void {
  const path = join(ROOT, "dist", relativePath);
  if (!existsSync(path)) throw new Error(`${path} is missing: run \`npm run build\` before these tests (npm test does)`);
}

/** Throws when the CLI was not built (call it once, in beforeAll). */
export function requireBuiltCli(): void {
  requireBuilt(join("cli", "main.js"));
}

export interface CliOptions {
  /** The working directory. */
  readonly cwd: string;
  /** TMPDIR for the process (where the lab puts its temporary databases); inherited when absent. */
  readonly tmp?: string;
  /** Variables to set, after the scrubbing (so they may set a scrubbed one on purpose). */
  readonly env?: Readonly<Record<string, string>>;
  /**
   * Run without the power to ignore file permissions: as root (where tests usually run here),
   * through `setpriv` with every capability dropped, so a file's and a directory's mode apply as
   * they would to any user; as anyone else, unchanged.
   */
  readonly unprivileged?: boolean;
  /** Node's own options before the CLI's path (e.g. ["--import", "./instrumentation.mjs"]). */
  readonly nodeArgs?: readonly string[];
  /** The Node binary to run the CLI with (default: this process's). */
  readonly node?: string;
}

const IS_ROOT = process.getuid?.() === 0;
const SETPRIV = ["/usr/bin/setpriv", "/bin/setpriv"].find((path) => existsSync(path));

/** Whether `unprivileged` can be honoured here (root needs setpriv, from util-linux). */
export const UNPRIVILEGED_AVAILABLE = !IS_ROOT || SETPRIV !== undefined;

function command(args: readonly string[], options: CliOptions): [string, string[]] {
  const node = [...(options.nodeArgs ?? []), CLI, ...args];
  if (!options.unprivileged || !IS_ROOT) return [options.node ?? process.execPath, node];
  if (SETPRIV === undefined) throw new Error("running as root without setpriv (util-linux): cannot drop the capability that ignores file permissions");
  return [SETPRIV, ["--bounding-set=-all", "--inh-caps=-all", process.execPath, ...node]];
}

export interface Exit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  /** performance.now() when the process ended. */
  readonly at: number;
}

export interface CliProcess {
  readonly args: readonly string[];
  readonly child: ChildProcess;
  readonly pid: number;
  stdout(): string;
  stderr(): string;
  /** Resolves when the process has ended and its output is closed. */
  readonly exited: Promise<Exit>;
  /** The exit, once it happened. */
  exit(): Exit | undefined;
  /** Sends a signal (unless the process has ended); returns performance.now() at the moment it was sent. */
  signal(signal: NodeJS.Signals): number;
  /** Waits for the exit, failing after `timeoutMs` (the process is left for `killAll` to kill). */
  waitForExit(timeoutMs: number): Promise<Exit>;
  /** Waits until stderr contains `text`. */
  waitForStderr(text: string | RegExp, timeoutMs?: number): Promise<void>;
}

const live = new Set<CliProcess>();

function envFor(options: CliOptions): NodeJS.ProcessEnv {
  return childEnv({ ...(options.tmp === undefined ? {} : { TMPDIR: options.tmp }), ...options.env });
}

/** Starts `node dist/cli/main.js …args`. Killed by `killAll` if still running. */
export function startCli(args: readonly string[], options: CliOptions): CliProcess {
  const [file, argv] = command(args, options);
  return track(args, spawn(file, argv, { cwd: options.cwd, env: envFor(options), stdio: ["ignore", "pipe", "pipe"] }));
}

/** Whether `script` (util-linux) is there to give a process a terminal. */
export const SCRIPT_AVAILABLE = existsSync("/usr/bin/script") || existsSync("/bin/script");

/**
 * Runs the CLI under `script`, so that its stdin, stdout and stderr are a terminal (as for a
 * person at a shell): what it prints only for terminals becomes visible. Output is merged.
 */
export function startCliOnTerminal(args: readonly string[], options: CliOptions): CliProcess {
  const command = [process.execPath, CLI, ...args].map(shellQuote).join(" ");
  return track(args, spawn("script", ["-qec", command, "/dev/null"], { cwd: options.cwd, env: envFor(options), stdio: ["ignore", "pipe", "pipe"] }));
}

function shellQuote(word: string): string {
  return `'${word.replaceAll("'", `'\\''`)}'`;
}

function track(args: readonly string[], child: ChildProcess): CliProcess {
  let out = "";
  let err = "";
  child.stdout!.setEncoding("utf8").on("data", (chunk: string) => (out += chunk));
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (err += chunk));
  let ended: Exit | undefined;
  const exited = new Promise<Exit>((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code, signal) => {
      ended = { code, signal, at: performance.now() };
      live.delete(handle);
      resolve(ended);
    });
  });
  const handle: CliProcess = {
    args,
    child,
    pid: child.pid ?? -1,
    stdout: () => out,
    stderr: () => err,
    exited,
    exit: () => ended,
    signal(signal) {
      const at = performance.now();
      if (ended === undefined) child.kill(signal);
      return at;
    },
    waitForExit(timeoutMs) {
      return within(() => `wassal ${args.join(" ")} to exit; stderr: ${err.slice(-2000)}`, exited, timeoutMs);
    },
    async waitForStderr(text, timeoutMs = 15_000) {
      await until(
        `stderr of wassal ${args.join(" ")} to show ${String(text)}`,
        () => {
          if (typeof text === "string" ? err.includes(text) : text.test(err)) return true;
          if (ended) throw new Error(`wassal ${args.join(" ")} exited (${JSON.stringify(ended)}) before printing ${String(text)}; stderr: ${err.slice(-2000)}`);
          return false;
        },
        { timeoutMs },
      );
    },
  };
  live.add(handle);
  return handle;
}

/** SIGKILLs every process these helpers started that is still running, and waits for them (afterEach). */
export async function killAll(): Promise<void> {
  const left = [...live];
  for (const p of left) p.child.kill("SIGKILL");
  await Promise.all(left.map((p) => p.exited.catch(() => undefined)));
}

export interface CliResult {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * Runs a CLI command to its end (a failure if it is still running after `timeoutMs`, default 45 s:
 * then it is sent SIGTERM, so that it stops what it started, such as a chaos run's servers, and
 * SIGKILLed if it has not exited 20 s later).
 */
export async function runCli(args: readonly string[], options: CliOptions & { readonly timeoutMs?: number }): Promise<CliResult> {
  const p = startCli(args, options);
  let exited = false;
  try {
    const exit = await p.waitForExit(options.timeoutMs ?? 45_000);
    exited = true;
    return { code: exit.code, signal: exit.signal, stdout: p.stdout(), stderr: p.stderr() };
  } finally {
    if (!exited) {
      p.signal("SIGTERM");
      await p.waitForExit(20_000).catch(() => undefined);
    }
    p.signal("SIGKILL");
  }
}

/** Runs a CLI command that must succeed (exit 0, nothing on stderr); returns its stdout. */
export async function cliOk(args: readonly string[], options: CliOptions & { readonly timeoutMs?: number }): Promise<string> {
  const result = await runCli(args, options);
  expect(result, `wassal ${args.join(" ")}`).toMatchObject({ code: 0, signal: null, stderr: "" });
  return result.stdout;
}

/** Runs a CLI command with --json that must succeed; returns its parsed output. */
export async function cliJson<T = unknown>(args: readonly string[], options: CliOptions & { readonly timeoutMs?: number }): Promise<T> {
  return JSON.parse(await cliOk([...args, "--json"], options)) as T;
}
