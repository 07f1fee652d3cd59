// The relay and inbox's Promela model (model/relay.pml), checked exhaustively by SPIN: relays
// publishing through a broker that redelivers in any order, consumers applying through one inbox,
// must keep every message's effect exactly once, lose none and keep each key's order, and make
// progress; each known wrong variant (a mutant) must be rejected with a counterexample. Each
// verifier is generated and compiled in a temporary directory, never in the repository.
// docs/protocol-model.md, part "The relay and the inbox", explains the model, its bounds and the
// mutants.

import { describe, expect, it } from "vitest";
import { FAIRNESS, INCOMPLETE, SAFETY, toolsAvailable, type Verification, modelPath, verify as verifyModel } from "./spin-support.js";

const MODEL = modelPath("relay.pml");

const available = toolsAvailable();

// Most of this model's state is global variables, which COLLAPSE compresses by about a tenth: each
// state is stored whole instead (exact all the same), with a hash table sized for the bigger runs.
function verify(name: string, defines: readonly string[], cflags: readonly string[], runFlags: readonly string[], hashBits = 24): Verification {
  return verifyModel(MODEL, name, defines, cflags, runFlags, { label: "relay model", collapse: false, hashBits });
}

function expectComplete(run: Verification, atLeast: number): void {
  expect(run.errors, run.output).toBe(0);
  expect(run.output, "pan stopped before searching everything").not.toMatch(INCOMPLETE);
  expect(run.stored).toBeGreaterThan(atLeast);
}

describe.skipIf(!available)("the relay and the inbox, model-checked by SPIN", () => {
  // REDRIVE adds the operator's redrive to the model as the code runs it; every interleaving
  // without a redrive is one of these, so this run covers the model built without it too.
  it("holds exactly once, nothing lost and each key's order for every interleaving, with redrives and a broker that keeps every publish (RabbitMQ, webhooks)", () => {
    expectComplete(verify("safety-redrive", ["REDRIVE"], SAFETY, [], 26), 1_000_000);
  }, 600_000);

  it("holds them with redrives and a broker whose duplicate window drops a re-publish with the same number (NATS, the Redis relay)", () => {
    expectComplete(verify("safety-redrive-dedupe", ["REDRIVE", "BROKER_DEDUPE"], SAFETY, [], 26), 1_000_000);
  }, 600_000);

  // The bound at which MUTANT_DEDUPE_BY_ID fails (a third claim, after the redrive), on key A's two
  // messages alone: the three messages at this bound are more than 185 million states.
  it("holds them on key A with 3 claims per message, redrives and the duplicate window: a key's number always reaches the broker", () => {
    expectComplete(verify("safety-redrive-dedupe-3-claims", ["REDRIVE", "BROKER_DEDUPE", "MAXCLAIMS=3", "KEY_ONLY"], SAFETY, []), 100_000);
  }, 600_000);

  it("makes progress under weak fairness: every message is applied or dead in the outbox, or waits behind its key's dead holder", () => {
    expectComplete(verify("progress", ["LIVENESS"], FAIRNESS, ["-a", "-f"]), 10_000);
  }, 600_000);

  // Each known wrong variant must fail: a model check that cannot fail proves nothing.
  it.each<[string, string, RegExp, string[]?]>([
    ["MUTANT_EFFECT_APART", "the effect and the inbox record in two transactions", /assertion violated \(effects\[2\]<=1\)/],
    ["MUTANT_NO_KEY_TURN", "the key's applied number read without taking its turn", /assertion violated \(applied>=appliedMax\)/],
    // the assertion that a completed message is not lost
    ["MUTANT_COMPLETE_BEFORE_PUBLISH", "the completion before the publish", /assertion violated \(\(\(\(\(\(effects\[2\]>0\)/],
    ["MUTANT_ACK_BEFORE_COMMIT", "the copy acknowledged when delivered", /assertion violated \(\(\(\(\(\(effects\[2\]>0\)/],
    // the assertion that a copy is acknowledged only after its effect committed
    ["MUTANT_NO_LATE", "a number the key has passed taken as a duplicate whatever its id", /assertion violated \(effects\[cm\[c\]\]>0\)/],
    // the assertion that the number a completion hands its key on past reached the broker
    [
      "MUTANT_DEDUPE_BY_ID",
      "the broker's duplicate window keyed by the id alone, at the 3-claim bound on key A",
      /assertion violated \( !\(\(rm\[r\]<2\)\)\|\|numReached\[rseq\[r\]\]\)/,
      ["REDRIVE", "BROKER_DEDUPE", "MAXCLAIMS=3", "KEY_ONLY"],
    ],
  ])(
    "rejects %s (%s) with a counterexample",
    (mutant, _what, violation, bounds = []) => {
      const run = verify(mutant, [...bounds, mutant], SAFETY, []);
      expect(run.errors, run.output).toBeGreaterThan(0);
      expect(run.output).toMatch(violation);
      expect(run.output).toMatch(/wrote relay\.pml\.trail/);
    },
    600_000,
  );

  it("rejects MUTANT_SKIP_PASSES_NEXT (an outbox skip that passes its number + 1 on) with an acceptance cycle: the progress formula can fail", () => {
    const run = verify("MUTANT_SKIP_PASSES_NEXT", ["LIVENESS", "MUTANT_SKIP_PASSES_NEXT"], FAIRNESS, ["-a", "-f"]);
    expect(run.errors, run.output).toBeGreaterThan(0);
    expect(run.output).toMatch(/acceptance cycle/);
  }, 600_000);
});
