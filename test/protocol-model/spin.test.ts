// The lease protocol's Promela model (model/lease.pml), checked exhaustively by SPIN: the protocol
// as the drivers run it must pass every assertion and the progress formula, and each known wrong
// variant (a mutant) must be rejected with a counterexample. Each verifier is generated and
// compiled in a temporary directory, never in the repository. docs/protocol-model.md explains
// the model, its bounds and the mutants.

import { describe, expect, it } from "vitest";
import { FAIRNESS, INCOMPLETE, SAFETY, toolsAvailable, type Verification, modelPath, verify as verifyModel } from "./spin-support.js";

const MODEL = modelPath("lease.pml");

const available = toolsAvailable();

function verify(name: string, defines: readonly string[], cflags: readonly string[], runFlags: readonly string[]): Verification {
  return verifyModel(MODEL, name, defines, cflags, runFlags, { label: "protocol model" });
}

describe.skipIf(!available)("the lease protocol, model-checked by SPIN", () => {
  it("holds every safety property for every interleaving within the bounds (fencing, ordering, no stranded key, the concurrency limit, the audit trail and its refused writes)", () => {
    const run = verify("safety", [], SAFETY, []);
    expect(run.errors, run.output).toBe(0);
    expect(run.output, "pan stopped before searching everything").not.toMatch(INCOMPLETE);
    expect(run.stored).toBeGreaterThan(100_000);
  }, 600_000);

  it("makes progress under weak fairness: every message ends processed, dead, cancelled or purged, or waits behind its key's dead holder", () => {
    const run = verify("progress", ["LIVENESS"], FAIRNESS, ["-a", "-f"]);
    expect(run.errors, run.output).toBe(0);
    expect(run.output, "pan stopped before searching everything").not.toMatch(INCOMPLETE);
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
