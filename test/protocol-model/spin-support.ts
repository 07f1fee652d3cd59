// Runs SPIN on a Promela model in model/ for the protocol-model tests (spin.test.ts for
// model/lease.pml, relay-spin.test.ts for model/relay.pml): each verifier is generated and compiled
// in a temporary directory, never in the repository. docs/protocol-model.md explains the models.

import { execFileSync, spawnSync } from "node:child_process";
import { copyFileSync } from "node:fs";
import { basename, join } from "node:path";
import { tempDir } from "../support/temp.js";

/** True when spin and gcc are installed; otherwise skips loudly, or throws under CI (.ci/run installs both). */
export function toolsAvailable(): boolean {
  const missing = ["spin", "gcc"].filter((tool) => spawnSync("sh", ["-c", `command -v ${tool}`]).status !== 0);
  if (missing.length === 0) return true;
  const message = `${missing.join(" and ")} not found. Install them with: apt-get install spin gcc`;
  if (process.env.CI) throw new Error(`CI is set, so the protocol model must be checked: ${message}`);
  console.warn(`\n!!! SKIPPING THE PROTOCOL MODEL: ${message}\n`);
  return false;
}

/** The path of a model in model/. */
export function modelPath(file: string): string {
  return join(import.meta.dirname, "..", "..", "model", file);
}

export interface Verification {
  readonly errors: number;
  readonly stored: number;
  readonly transitions: number;
  readonly depth: number;
  readonly seconds: number;
  readonly output: string;
}

export interface VerifyOptions {
  /** Printed before each run's numbers. */
  readonly label: string;
  /** COLLAPSE state compression (default true); false stores each state whole, faster where it compresses little. */
  readonly collapse?: boolean;
  /** pan's hash table: 2^hashBits slots (default 24). */
  readonly hashBits?: number;
}

/**
 * Generates the verifier for `model` with `defines`, compiles it with `cflags` and runs it with
 * `runFlags`. Exact state storage only (COLLAPSE compression or none, never BITSTATE): a search
 * that finishes has seen every reachable state.
 */
export function verify(
  model: string,
  name: string,
  defines: readonly string[],
  cflags: readonly string[],
  runFlags: readonly string[],
  options: VerifyOptions,
): Verification {
  const file = basename(model);
  const dir = tempDir(`wassal-spin-${name}-`);
  copyFileSync(model, join(dir, file));
  execFileSync("spin", [...defines.map((d) => `-D${d}`), "-a", file], { cwd: dir, stdio: "pipe" });
  const compression = (options.collapse ?? true) ? ["-DCOLLAPSE"] : [];
  execFileSync("gcc", ["-O2", ...compression, ...cflags, "-o", "pan", "pan.c"], { cwd: dir, stdio: "pipe" });
  const started = performance.now();
  // pan exits 0 whether or not it found an error: its report says.
  const output = execFileSync("./pan", ["-m2000000", `-w${options.hashBits ?? 24}`, ...runFlags], {
    cwd: dir,
    encoding: "utf8",
    maxBuffer: 64 * 1024 * 1024,
  });
  const seconds = (performance.now() - started) / 1000;
  const number = (pattern: RegExp): number => {
    const match = pattern.exec(output);
    if (match === null) throw new Error(`pan's report for ${name} has no ${pattern}:\n${output}`);
    return Number(match[1]);
  };
  const result = {
    errors: number(/errors: (\d+)/),
    stored: number(/([\d.e+]+) states, stored/),
    transitions: number(/([\d.e+]+) transitions/),
    depth: number(/depth reached (\d+)/),
    seconds,
    output,
  };
  console.log(
    `${options.label} ${name}: ${result.errors} error(s), ${result.stored} states stored, ${result.transitions} transitions, depth ${result.depth}, ${seconds.toFixed(1)} s`,
  );
  return result;
}

/** pan's report says it stopped before searching everything. */
export const INCOMPLETE = /Search not completed|max search depth too small/;

export const SAFETY = ["-DSAFETY"];
// Weak fairness for the progress formula: acceptance cycles (-a) with fairness (-f).
export const FAIRNESS = ["-DNFAIR=3"];
