// The lease protocol's Promela model (model/lease.pml), checked exhaustively by SPIN: the protocol
// as the drivers run it must pass every assertion and the progress formula, and each known wrong
// variant (a mutant) must be rejected with a counterexample. Each verifier is generated and
// compiled in a temporary directory, never in the repository. docs/protocol-model.md explains
// the model, its bounds and the mutants.

import { execFileSync, spawnSync } from "node:child_process";
import { copyFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { tempDir } from "../support/temp.js";

const MODEL = join(import.meta.dirname, "..", "..", "model", "lease.pml");

/** True when spin and gcc are installed; otherwise skips loudly, or throws under CI (.ci/run installs both). */
function toolsAvailable(): boolean {
  const missing = ["spin", "gcc"].filter((tool) => spawnSync("sh", ["-c", `command -v ${tool}`]).status !== 0);
  if (missing.length === 0) return true;
  const message = `${missing.join(" and ")} not found. Install them with: apt-get install spin gcc`;
  if (process.env.CI) throw new Error(`CI is set, so the protocol model must be checked: ${message}`);
  console.warn(`\n!!! SKIPPING THE PROTOCOL MODEL: ${message}\n`);
  return false;
}

const available = toolsAvailable();

interface Verification {
  readonly errors: number;
  readonly stored: number;
  readonly transitions: number;
  readonly depth: number;
  readonly seconds: number;
  readonly output: string;
}

/**
 * Generates the verifier for the model with `defines`, compiles it with `cflags` and runs it with
 * `runFlags`. Exact state storage only (COLLAPSE compression, never BITSTATE): a search that
 * finishes has seen every reachable state.
 */
function verify(name: string, defines: readonly string[], cflags: readonly string[], runFlags: readonly string[]): Verification {
  const dir = tempDir(`wassal-spin-${name}-`);
  copyFileSync(MODEL, join(dir, "lease.pml"));
  execFileSync("spin", [...defines.map((d) => `-D${d}`), "-a", "lease.pml"], { cwd: dir, stdio: "pipe" });
  execFileSync("gcc", ["-O2", "-DCOLLAPSE", ...cflags, "-o", "pan", "pan.c"], { cwd: dir, stdio: "pipe" });
  const started = performance.now();
  // pan exits 0 whether or not it found an error: its report says.
  const output = execFileSync("./pan", ["-m2000000", "-w24", ...runFlags], { cwd: dir, encoding: "utf8", maxBuffer: 64 * 1024 * 1024 });
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
    `protocol model ${name}: ${result.errors} error(s), ${result.stored} states stored, ${result.transitions} transitions, depth ${result.depth}, ${seconds.toFixed(1)} s`,
  );
  return result;
}

const SAFETY = ["-DSAFETY"];
// Weak fairness for the progress formula: acceptance cycles (-a) with fairness (-f).
const FAIRNESS = ["-DNFAIR=3"];

describe.skipIf(!available)("the lease protocol, model-checked by SPIN", () => {
  it("holds every safety property for every interleaving within the bounds (fencing, ordering, no stranded key, the concurrency limit, the audit trail and its refused writes)", () => {
    const run = verify("safety", [], SAFETY, []);
    expect(run.errors, run.output).toBe(0);
    expect(run.output, "pan stopped before searching everything").not.toMatch(/Search not completed|max search depth too small/);
    expect(run.stored).toBeGreaterThan(100_000);
  }, 600_000);

  it("makes progress under weak fairness: every message ends processed, dead, cancelled or purged, or waits behind its key's dead holder", () => {
    const run = verify("progress", ["LIVENESS"], FAIRNESS, ["-a", "-f"]);
    expect(run.errors, run.output).toBe(0);
    expect(run.output, "pan stopped before searching everything").not.toMatch(/Search not completed|max search depth too small/);
    expect(run.stored).toBeGreaterThan(10_000);
  }, 600_000);

  // Each known wrong variant must fail: a model check that cannot fail proves nothing.
  it.each([
    ["MUTANT_COMPLETE_NO_TOKEN", "the completion without the token check", /assertion violated \(token\[wm\[w\]\]==wtok\[w\]\)/],
    ["MUTANT_CLAIM_NO_EXPIRY", "the claim without the lease-expiry condition", /assertion violated\s+!\(\(\(status\[\d\]==1\)&&\(left\[\d\]>0\)\)\)/],
    // the assertion that a key has at most one holder
    ["MUTANT_HANDON_EARLY", "the hand-on before the holder's commit", /assertion violated .*keyState\[2\]==0\)\)\)<=1\)/],
    // the assertion that type X has at most LIMIT unexpired leases
    ["MUTANT_RENEW_EXPIRED", "a renew that extends an expired lease", /assertion violated .*left\[2\]>0\)\)\)<=1\)/],
    // the assertion that every refused write has exactly one 'refused' audit row
    ["MUTANT_REFUSED_APART", "the refused write's audit row written by a later step", /assertion violated \(unrecorded==/],
  ])(
    "rejects %s (%s) with a counterexample",
    (mutant, _what, violation) => {
      const run = verify(mutant, [mutant], SAFETY, []);
      expect(run.errors, run.output).toBeGreaterThan(0);
      expect(run.output).toMatch(violation);
      expect(run.output).toMatch(/wrote lease\.pml\.trail/);
    },
    600_000,
  );

  it("rejects MUTANT_ENDLESS_RENEW (a worker that may renew for ever) with an acceptance cycle: the progress formula can fail", () => {
    const run = verify("MUTANT_ENDLESS_RENEW", ["LIVENESS", "MUTANT_ENDLESS_RENEW"], FAIRNESS, ["-a", "-f"]);
    expect(run.errors, run.output).toBeGreaterThan(0);
    expect(run.output).toMatch(/acceptance cycle/);
  }, 600_000);
});
