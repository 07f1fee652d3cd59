// The must-hold "after `npm install && npm start`, every `npx wassal …` line in the README runs".
//
// Which lines: every line of a fenced code block in README.md that runs `npx wassal` (after
// optional `NAME=value` variables), and every line of such a block that starts with `wassal `.
// Inline code in the prose (`npx wassal inbox unblock <key> …`) is grammar, not a command, and is
// not taken. Each line runs as `npx wassal` runs it after `npm start`: `node dist/cli/main.js`
// with the same argv (the bin's own check is test/package/bin.test.ts), in one temporary folder
// shared by all lines in README order (so `payments seed` comes before the worker that works it
// and the dashboard that shows it), after the SUBSTITUTIONS below.
//
// What "runs" means:
//   - a command that ends: its exit code is 0, or N when the line's comment says "exit N";
//   - a long-running one (worker, relay, dashboard): it says "ready" on its IPC channel (as to a
//     supervisor), then SIGTERM stops it with exit 0;
//   - a chaos run (minutes by design): it is still running after CHAOS_UP_MS, having started its
//     processes; SIGTERM then stops it and removes what it started, with exit 1 (as its --help says).
// A line this cannot run fails the test; one that must not run here goes in EXCLUDED with a reason,
// and an entry of EXCLUDED that matches no README line fails the test too.

import { type ChildProcess, spawn } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CLI, requireBuiltCli, ROOT } from "../support/cli.js";
import { childEnv } from "../support/env.js";
import { TEST_MARIADB_URL } from "../support/mariadb.js";
import { freshSchema, TEST_DATABASE_URL, withClient } from "../support/postgres.js";
import { tempDir } from "../support/temp.js";

/** A README line, as found. */
interface ReadmeLine {
  readonly number: number;
  /** The line without its comment, trimmed. */
  readonly command: string;
  readonly comment: string;
}

/** Lines that must not run here, by their command (without the comment): the reason. */
const EXCLUDED: Readonly<Record<string, string>> = {
  "npx wassal outbox unblock --db app.db order-42 --skip":
    "an example on a key a dead message holds: with none, it refuses (exit 2, naming `outbox blocked-keys`); test/cli covers it",
  'npx wassal outbox cancel  --db app.db 44 45 --reason "order withdrawn"':
    "an example on pending messages 44 and 45: whether they are still pending here depends on how far the workers above got; test/worker-cli/outbox-admin.test.ts covers it",
  "npx wassal relay --db postgres://app@db/app --from-wal --to nats://127.0.0.1:4222 --destination 'events.{type}'":
    "needs PostgreSQL with wal_level = logical, which the shared test server does not run (it would exit 2 naming wal_level); test/relay/wal-relay.test.ts runs the same command on a private server",
  "npx wassal outbox redrive --db app.db 42 43":
    "an example on dead messages 42 and 43: with them pending, it refuses (exit 2) and moves nothing; test/cli covers it",
};

const schema = freshSchema("wassal_readme");
const WEBHOOK_SECRET = `whsec_${Buffer.from("readme-commands-test-secret-32by").toString("base64")}`;

/**
 * The placeholders and the addresses of the README's machines, and what each becomes here. Every
 * server is the test's own (PostgreSQL, MariaDB, NATS on their usual local ports).
 */
const SUBSTITUTIONS: readonly (readonly [RegExp, string, string])[] = [
  [/postgres:\/\/app@db:5432\/app/g, TEST_DATABASE_URL, "the README's app database: the test PostgreSQL"],
  [/--schema wassal\b/g, `--schema ${schema}`, "its schema: one of this run's own (dropped after)"],
  [/postgres:\/\/…/g, `${TEST_DATABASE_URL} --schema ${schema}`, "any PostgreSQL outbox: the one migrated above"],
  [/postgres:\/\/postgres@127\.0\.0\.1:5432\/test/g, TEST_DATABASE_URL, "the test PostgreSQL (WASSAL_TEST_DATABASE_URL)"],
  [/mysql:\/\/root@127\.0\.0\.1:3306\/test/g, TEST_MARIADB_URL, "the test MariaDB (WASSAL_TEST_MARIADB_URL)"],
  [/whsec_…/g, WEBHOOK_SECRET, "a webhook secret: a valid one"],
  [/(wassal dashboard .*?)--port \d+/g, "$1--port 0", "a fixed port: a free one (never assume a port is free)"],
  [/(wassal dashboard (?:(?!--port).)*)$/g, "$1 --port 0", "the default port 4300: a free one"],
];

/** The handlers module the README's worker lines name: the README's shape, without its app's shipping service. */
const HANDLERS_MJS = `export function handlers() {
  return { "order.ship": async () => ({}) };
}
`;

const LONG_RUNNING = new Set(["worker", "relay", "dashboard"]);
const CHAOS_UP_MS = 5_000;
/**
 * A chaos line's test: up 5 s, then stopped. A run stopped while its broker boots stops once the
 * boot is done (a RabbitMQ node's: about 8 s quiet, seen past 50 s on a loaded machine), so it gets
 * more than the default minute.
 */
const CHAOS_LINE_MS = 150_000;

function readmeLines(): ReadmeLine[] {
  const lines = readFileSync(join(ROOT, "README.md"), "utf8").split("\n");
  const found: ReadmeLine[] = [];
  let fenced = false;
  lines.forEach((line, index) => {
    if (line.startsWith("```")) {
      fenced = !fenced;
      return;
    }
    if (!fenced || !(/^(?:[A-Z_]+=\S+\s+)*npx wassal\s/.test(line.trim()) || line.startsWith("wassal "))) return;
    const [command, comment] = splitComment(line);
    found.push({ number: index + 1, command: command.trim(), comment: comment.trim() });
  });
  return found;
}

/** Splits off a shell comment: a `#` after a space, outside quotes. */
function splitComment(line: string): [string, string] {
  let quote: string | undefined;
  for (let i = 0; i < line.length; i += 1) {
    const c = line[i]!;
    if (quote) {
      if (c === quote) quote = undefined;
    } else if (c === "'" || c === '"') quote = c;
    else if (c === "#" && (i === 0 || /\s/.test(line[i - 1]!))) return [line.slice(0, i), line.slice(i + 1)];
  }
  return [line, ""];
}

/** Shell words, with single and double quotes (no expansions: the README uses none). */
function words(text: string): string[] {
  const out: string[] = [];
  let word: string | undefined;
  let quote: string | undefined;
  for (const c of text) {
    if (quote) {
      if (c === quote) quote = undefined;
      else word = (word ?? "") + c;
    } else if (c === "'" || c === '"') {
      quote = c;
      word ??= "";
    } else if (/\s/.test(c)) {
      if (word !== undefined) out.push(word);
      word = undefined;
    } else word = (word ?? "") + c;
  }
  if (quote) throw new Error(`an unclosed quote in: ${text}`);
  if (word !== undefined) out.push(word);
  return out;
}

function substituted(command: string): string {
  let text = command;
  for (const [pattern, replacement] of SUBSTITUTIONS) text = text.replace(pattern, replacement);
  return text;
}

/** The variables and the CLI's argv of a line. */
function parse(command: string): { env: Record<string, string>; argv: string[] } {
  const all = words(substituted(command));
  const env: Record<string, string> = {};
  while (all[0] !== undefined && /^[A-Z_]+=/.test(all[0])) {
    const [name, ...value] = all.shift()!.split("=");
    env[name!] = value.join("=");
  }
  if (all[0] === "npx") all.shift();
  if (all.shift() !== "wassal") throw new Error(`not a wassal command: ${command}`);
  return { env, argv: all };
}

function expectedExit(comment: string): number {
  const said = /\bexit (\d+)/.exec(comment);
  return said ? Number(said[1]) : 0;
}

interface Ran {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

const running = new Set<ChildProcess>();

function start(argv: string[], env: Record<string, string>, cwd: string): { child: ChildProcess; ended: Promise<Ran>; output: () => string } {
  const child = spawn(process.execPath, [CLI, ...argv], { cwd, env: childEnv(env), stdio: ["ignore", "pipe", "pipe", "ipc"] });
  running.add(child);
  let stdout = "";
  let stderr = "";
  child.stdout!.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  const ended = new Promise<Ran>((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code, signal) => {
      running.delete(child);
      resolve({ code, signal, stdout, stderr });
    });
  });
  return { child, ended, output: () => `stdout: ${stdout.slice(-1500)}\nstderr: ${stderr.slice(-1500)}` };
}

function within<T>(promise: Promise<T>, ms: number, what: () => string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise.finally(() => clearTimeout(timer)),
    new Promise<T>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what()}: not within ${ms} ms`)), ms))),
  ]);
}

const LINES = readmeLines();

describe("every `npx wassal` line of the README runs", () => {
  let cwd = "";
  beforeAll(async () => {
    requireBuiltCli();
    cwd = tempDir("wassal-readme-");
    writeFileSync(join(cwd, "handlers.mjs"), HANDLERS_MJS);
    await withClient((client) => client.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`));
  });
  afterAll(async () => {
    for (const child of running) child.kill("SIGKILL");
    await withClient((client) => client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`));
  });

  it("finds the README's commands, and every exclusion names one of them", () => {
    expect(LINES.length).toBeGreaterThan(30);
    const commands = new Set(LINES.map((l) => l.command));
    expect(Object.keys(EXCLUDED).filter((c) => !commands.has(c))).toEqual([]);
  });

  for (const line of LINES) {
    const reason = EXCLUDED[line.command];
    const name = `README line ${line.number}: ${line.command}`;
    if (reason !== undefined) {
      it.skip(`${name} (excluded: ${reason})`, () => undefined);
      continue;
    }
    it(
      name,
      async () => {
        const { env, argv } = parse(line.command);
        const what = () => `README line ${line.number} (wassal ${argv.join(" ")})`;
        const run = start(argv, env, cwd);
        if (argv[0] === "chaos" && !argv.includes("--help")) {
          const early = await Promise.race([run.ended, new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), CHAOS_UP_MS))]);
          expect(early, `${what()} ended early\n${run.output()}`).toBeUndefined();
          run.child.kill("SIGTERM");
          const ran = await within(run.ended, CHAOS_LINE_MS - CHAOS_UP_MS - 10_000, what);
          expect(ran.code, `${what()} after SIGTERM\n${run.output()}`).toBe(1);
          expect(ran.stderr).toContain("stopping the run");
          return;
        }
        if (LONG_RUNNING.has(argv[0]!)) {
          const ready = new Promise<void>((resolve) => run.child.on("message", (m) => m === "ready" && resolve()));
          const first = await within(Promise.race([ready.then(() => "ready" as const), run.ended]), 30_000, what);
          expect(first, `${what()} ended before it was ready\n${run.output()}`).toBe("ready");
          run.child.kill("SIGTERM");
          const ran = await within(run.ended, 30_000, what);
          expect({ code: ran.code, signal: ran.signal }, `${what()} after SIGTERM\n${run.output()}`).toEqual({ code: 0, signal: null });
          return;
        }
        const ran = await within(run.ended, 60_000, what);
        expect(ran.code, `${what()}\n${run.output()}`).toBe(expectedExit(line.comment));
      },
      line.command.includes("wassal chaos ") ? CHAOS_LINE_MS : undefined,
    );
  }
});
