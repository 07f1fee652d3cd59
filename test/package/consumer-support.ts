// Helpers of the tests that use the package as a user installs it: pack it, install the tarball
// into a fresh project, write and type-check the consumer there, and run it.

import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT } from "../support/cli.js";
import { childEnv } from "../support/env.js";
import { tempDir } from "../support/temp.js";

const CONSUMER = join(ROOT, "test", "package", "consumer");
const TSC = join(ROOT, "node_modules", "typescript", "bin", "tsc");
export const BIN = join(ROOT, "node_modules", ".bin");
/** The same versions the repository's lock file pins, so that npm finds them in its cache. */
export const devVersion = (name: string): string => {
  const manifest = JSON.parse(readFileSync(join(ROOT, "node_modules", name, "package.json"), "utf8")) as { version: string };
  return manifest.version;
};

/**
 * Runs `command` to its end and returns its output; throws with its output when it fails, and says
 * so when it ran out of time (`timeoutMs`, 4 minutes unless given).
 */
export function run(command: string, args: readonly string[], cwd: string, env: Readonly<Record<string, string>> = {}, timeoutMs = 240_000): string {
  const started = Date.now();
  const result = spawnSync(command, args, { cwd, env: childEnv(env), encoding: "utf8", timeout: timeoutMs });
  const timedOut = (result.error as NodeJS.ErrnoException | undefined)?.code === "ETIMEDOUT";
  if (timedOut)
    throw new Error(
      `${command} ${args.join(" ")} was stopped after ${Math.round((Date.now() - started) / 1000)} s, its time limit:\n${result.stdout}\n${result.stderr}`,
    );
  if (result.status !== 0) throw new Error(`${command} ${args.join(" ")} exited ${result.status}:\n${result.stdout}\n${result.stderr}`);
  return result.stdout;
}

/** The consumer (`file`, as consumer.mts), and its CommonJS twin: the part below "// main" wrapped in an async function. */
function writeConsumer(dir: string, file: string): void {
  const source = readFileSync(join(CONSUMER, file), "utf8");
  const [head, main] = source.split("// main\n");
  if (head === undefined || main === undefined) throw new Error(`${file} has no // main line`);
  writeFileSync(join(dir, "consumer.mts"), source);
  writeFileSync(
    join(dir, "consumer.cts"),
    `${head.replace('MODULE: Report["module"] = "esm"', 'MODULE: Report["module"] = "cjs"')}void (async () => {\n${main}})();\n`,
  );
  writeFileSync(join(dir, "tsconfig.json"), readFileSync(join(CONSUMER, "tsconfig.json")));
}

/** A fresh project with the tarball, @types/node and `extra` installed; returns its folder. */
export function installedProject(tarball: string, name: string, extra: readonly string[], { ignoreScripts = false } = {}): string {
  const dir = join(tempDir("wassal-consumer-"), name);
  mkdirSync(dir);
  writeFileSync(join(dir, "package.json"), JSON.stringify({ name, private: true, version: "1.0.0" }));
  run(
    "npm",
    [
      "install",
      "--prefer-offline",
      "--no-audit",
      "--no-fund",
      "--loglevel=error",
      tarball,
      `@types/node@${devVersion("@types/node")}`,
      ...extra,
      ...(ignoreScripts ? ["--ignore-scripts"] : []),
    ],
    dir,
  );
  return dir;
}

/** A fresh project with the tarball and `extra` installed, and the consumer `consumer` (in test/package/consumer/); returns its folder. */
export function project(tarball: string, name: string, extra: readonly string[], { ignoreScripts = false, consumer = "consumer.mts" } = {}): string {
  const dir = installedProject(tarball, name, extra, { ignoreScripts });
  writeConsumer(dir, consumer);
  run(process.execPath, [TSC, "-p", "."], dir);
  return dir;
}

/** Installs `pkg` into the folder `dir` (once: a finished folder is kept; a half-made one is replaced), with `env` for the install. */
export function installOnce(dir: string, pkg: string, env: Readonly<Record<string, string>> = {}): void {
  if (existsSync(join(dir, "done"))) return;
  const building = `${dir}.building-${process.pid}`;
  rmSync(building, { recursive: true, force: true });
  mkdirSync(building, { recursive: true });
  writeFileSync(join(building, "package.json"), JSON.stringify({ name: "cache", private: true, allowScripts: { "better-sqlite3": true } }));
  // A native build for another Node (better-sqlite3 from source) takes about 100 s alone on 2 cores, 4 minutes and more on a busy machine.
  run("npm", ["install", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error", pkg], building, env, 540_000);
  writeFileSync(join(building, "done"), "");
  rmSync(dir, { recursive: true, force: true });
  renameSync(building, dir);
}

/** A ```ts (or ```typescript) block of a Markdown file: where it starts, its code, and what its comment line says of it. */
export interface CodeBlock {
  /** The line of its opening fence (1-based). */
  readonly line: number;
  /** Its code as written (a block indented in a list loses that indent). */
  readonly code: string;
  /** `<!-- compiled with: NAME -->` on the line before: the declarations it assumes, in test/package/types/readme/NAME.mts. */
  readonly context: string | null;
  /** `<!-- not compiled: WHY -->` on the line before: why it is not compiled. */
  readonly notCompiled: string | null;
}

/** The TypeScript code blocks of `markdown`. */
export function typescriptBlocks(markdown: string): CodeBlock[] {
  const lines = markdown.split("\n");
  const blocks: CodeBlock[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)```(ts|typescript)\s*$/.exec(lines[i] ?? "");
    if (open === null) {
      if (/^\s*```/.test(lines[i] ?? "")) {
        // Another language's block: skip to its closing fence.
        for (i++; i < lines.length && !/^\s*```\s*$/.test(lines[i] ?? ""); i++);
      }
      continue;
    }
    const indent = open[1] ?? "";
    const start = i;
    const code: string[] = [];
    for (i++; i < lines.length && !/^\s*```\s*$/.test(lines[i] ?? ""); i++) code.push((lines[i] ?? "").replace(new RegExp(`^${indent}`), ""));
    let before = start - 1;
    while (before >= 0 && (lines[before] ?? "").trim() === "") before--;
    const comment = (lines[before] ?? "").trim();
    blocks.push({
      line: start + 1,
      code: `${code.join("\n")}\n`,
      context: /^<!-- compiled with: ([\w-]+) -->$/.exec(comment)?.[1] ?? null,
      notCompiled: /^<!-- not compiled: (.+) -->$/.exec(comment)?.[1] ?? null,
    });
  }
  return blocks;
}

export interface Report {
  readonly module: string;
  readonly store: string;
  readonly status: string;
  readonly handled: string[];
  readonly otherStore: string;
}

/** Runs the compiled consumer `file` with `node` (default: this Node) and returns its report. */
export function consume(dir: string, file: string, env: Readonly<Record<string, string>>, node = process.execPath): Report {
  return JSON.parse(run(node, [join("out", file)], dir, env).trim()) as Report;
}

/** Packs dist/ as it is (npm test builds first) into a temporary folder: the tarball and its file list. */
export function packTarball(): { readonly tarball: string; readonly files: string[] } {
  const packDir = tempDir("wassal-pack-");
  const packed = JSON.parse(execFileSync("npm", ["pack", "--ignore-scripts", "--json", "--pack-destination", packDir], { cwd: ROOT, encoding: "utf8" })) as [
    { filename: string; files: { path: string }[] },
  ];
  return { tarball: join(packDir, packed[0].filename), files: packed[0].files.map((f) => f.path) };
}
