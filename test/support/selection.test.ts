// The filters that narrow a test file (WASSAL_TEST_STORES, WASSAL_RACE_VARIANTS): a filter that
// names something unknown, or leaves nothing to run, must fail loudly when the file is collected,
// never let it pass with no test run.

import { describe, expect, it } from "vitest";
import { nothingToRun, selectNamed, selectOne, selectRunnable, type Runnable } from "./selection.js";

const VARIANTS = ["complete‖claim", "claim‖complete", "claimMessage inside complete"] as const;
const same = (name: string) => name;

describe("selectNamed", () => {
  it("selects everything when the variable is unset, empty or only separators", () => {
    for (const value of [undefined, "", " ", ",", " , ,"]) expect(selectNamed("WASSAL_RACE_VARIANTS", value, VARIANTS, same)).toEqual([...VARIANTS]);
  });

  it("selects the named items in their own order, ignoring case and spaces", () => {
    expect(selectNamed("WASSAL_RACE_VARIANTS", " CLAIMMESSAGE inside complete , complete‖claim", VARIANTS, same)).toEqual([
      "complete‖claim",
      "claimMessage inside complete",
    ]);
  });

  it("throws on an unknown name, naming the variable, the name and every valid value", () => {
    // "||" for "‖": a typo that used to select nothing and let the race tests pass without racing.
    expect(() => selectNamed("WASSAL_RACE_VARIANTS", "complete||claim", VARIANTS, same)).toThrow(
      'WASSAL_RACE_VARIANTS names unknown value(s) "complete||claim"; valid values: "complete‖claim", "claim‖complete", "claimMessage inside complete"',
    );
    expect(() => selectNamed("WASSAL_RACE_VARIANTS", "complete‖claim,nope", VARIANTS, same)).toThrow(/unknown value\(s\) "nope"/);
  });
});

describe("selectOne", () => {
  const MODES = ["keep", "delete"] as const;
  it("takes the fallback when unset or empty, else the one value named, ignoring case and spaces", () => {
    for (const value of [undefined, "", " ", ","]) expect(selectOne("WASSAL_TEST_ON_COMPLETE", value, MODES, "keep")).toBe("keep");
    expect(selectOne("WASSAL_TEST_ON_COMPLETE", " DELETE ", MODES, "keep")).toBe("delete");
  });

  it("throws on an unknown value, or on more than one, naming the variable and the valid values", () => {
    expect(() => selectOne("WASSAL_TEST_ON_COMPLETE", "purge", MODES, "keep")).toThrow(
      'WASSAL_TEST_ON_COMPLETE names unknown value(s) "purge"; valid values: "keep", "delete"',
    );
    expect(() => selectOne("WASSAL_TEST_ON_COMPLETE", "keep,delete", MODES, "keep")).toThrow(
      'WASSAL_TEST_ON_COMPLETE names 2 values ("keep", "delete"); it takes one of "keep", "delete"',
    );
  });
});

describe("nothingToRun", () => {
  it("names the variable, its value, why, and the valid values", () => {
    expect(nothingToRun("WASSAL_RACE_VARIANTS", "gated claim", VARIANTS, "gated claim runs only on PostgreSQL").message).toBe(
      'WASSAL_RACE_VARIANTS ("gated claim") leaves no test to run here: gated claim runs only on PostgreSQL; valid values: "complete‖claim", "claim‖complete", "claimMessage inside complete"',
    );
    expect(nothingToRun("WASSAL_TEST_STORES", undefined, ["sqlite"], "why").message).toMatch(/^WASSAL_TEST_STORES \(unset\) leaves no test to run here: why;/);
  });
});

describe("selectRunnable", () => {
  const stores = (postgresUp: boolean): Runnable[] => [{ name: "sqlite" }, { name: "postgres", available: async () => postgresUp }];
  const names = (items: readonly Runnable[]) => items.map((item) => item.name);

  it("keeps what is selected and available", async () => {
    expect(names(await selectRunnable("WASSAL_TEST_STORES", undefined, stores(true)))).toEqual(["sqlite", "postgres"]);
    expect(names(await selectRunnable("WASSAL_TEST_STORES", undefined, stores(false)))).toEqual(["sqlite"]);
    expect(names(await selectRunnable("WASSAL_TEST_STORES", "postgres", stores(true)))).toEqual(["postgres"]);
  });

  it("throws, instead of returning nothing, when the selection leaves nothing available", async () => {
    await expect(selectRunnable("WASSAL_TEST_STORES", "postgres", stores(false))).rejects.toThrow(
      'WASSAL_TEST_STORES ("postgres") leaves no test to run here: postgres is not available; valid values: "sqlite", "postgres"',
    );
  });

  it("throws on an unknown store", async () => {
    await expect(selectRunnable("WASSAL_TEST_STORES", "sqlite,mysql", stores(true))).rejects.toThrow(
      'WASSAL_TEST_STORES names unknown value(s) "mysql"; valid values: "sqlite", "postgres"',
    );
  });
});
