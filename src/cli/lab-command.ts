// `wassal lab`: parses its arguments and calls the lab; nothing else.

import { Command, Option } from "commander";
import { InvalidArgumentError } from "../outbox/errors.js";
import { checkReportsDir, findScenario, runScenario, SCENARIOS, type LabRunResult } from "../lab/run-lab.js";
import type { Scenario } from "../lab/scenario.js";
import { isServer } from "../lab/stores/places.js";
import { EXIT } from "./exit-codes.js";
import { err, jsonText, out } from "./output.js";

interface LabOptions {
  list?: boolean;
  json?: boolean;
  reports?: string;
  db?: string;
  keepDb?: boolean;
}

function scenarioList(): string {
  return `${SCENARIOS.map((s) => `  ${s.name.padEnd(40)} ${s.phase}: ${s.summary}`).join("\n")}\n  ${"all".padEnd(40)} every scenario above, in order`;
}

function pick(name: string | undefined): Scenario[] {
  if (name === undefined) {
    throw new InvalidArgumentError(`name a scenario to run. Valid names:\n${scenarioList()}`);
  }
  if (name === "all") return [...SCENARIOS];
  const scenario = findScenario(name);
  if (scenario === undefined) {
    throw new InvalidArgumentError(`unknown scenario ${JSON.stringify(name)}. Valid names:\n${scenarioList()}`);
  }
  return [scenario];
}

function asJson(result: LabRunResult) {
  return {
    scenario: result.scenario,
    passed: result.passed,
    reportPath: result.reportPath,
    reportError: result.reportError,
    databasePath: result.databasePath,
    checks: result.checks,
    metrics: result.metrics,
  };
}

export function labCommand(): Command {
  return new Command("lab")
    .description("run the Wassal payments lab: scenarios that show the problem and the fix, check every figure, and save a report")
    .argument("[scenario]", `a scenario name, or "all" (see --list)`)
    .option("--list", "list the scenarios and exit")
    .option(
      "--json",
      'print one JSON object (scenario, passed, reportPath, databasePath, checks, metrics) instead of the text report; with "all", an object holding every scenario\'s',
    )
    .option("--reports <dir>", "save reports under <dir>/Reports/<lesson>/ (Session-13, Session-14, Session-15 or Ordering)", ".")
    .addOption(
      new Option(
        "--db <url-or-path>",
        "a postgres:// or mariadb:// URL (each run gets a temporary schema or database there), or a SQLite file to run on (created if missing, must hold no Wassal tables, kept afterwards); default: a temporary SQLite file",
      ).env("WASSAL_DATABASE_URL"),
    )
    .option("--keep-db", "keep the temporary database (SQLite file or PostgreSQL schema) instead of deleting it")
    .addHelpText(
      "after",
      `\nScenarios:\n${scenarioList()}\n\nExit codes: 0 every check passed, 1 a check failed, 2 bad input (checked before anything runs, including a reports directory that cannot be written), 70 an internal error, 74 the machine failed (disk full, I/O error, out of memory).`,
    )
    .action(async (name: string | undefined, options: LabOptions) => {
      if (options.list) {
        out(`${scenarioList()}\n`);
        return;
      }
      const scenarios = pick(name);
      if (scenarios.length > 1 && options.db !== undefined && !isServer(options.db)) {
        throw new InvalidArgumentError(
          "--db names one database file, and each scenario needs an empty one: run one scenario at a time with --db, or leave --db out for temporary files",
        );
      }
      checkReportsDir(scenarios, options.reports ?? ".");
      const results: LabRunResult[] = [];
      // Ctrl-C (or SIGTERM) mid-run: remove the temporary database, then stop.
      let cleanup: (() => Promise<string>) | null = null;
      const onSignal = (signal: NodeJS.Signals) => {
        const pending = cleanup;
        const done = pending ? pending() : Promise.resolve("nothing to clean up");
        void done
          .then(
            (fate) => err(`wassal: interrupted by ${signal}; ${fate}\n`),
            (error: unknown) => err(`wassal: interrupted by ${signal}; clean-up failed: ${String(error)}\n`),
          )
          .finally(() => process.exit(EXIT.interrupted));
      };
      process.once("SIGINT", onSignal);
      process.once("SIGTERM", onSignal);
      for (const scenario of scenarios) {
        const result = await runScenario(scenario, {
          onCleanup: (next) => {
            cleanup = next;
          },
          reportsDir: options.reports ?? ".",
          keepDb: options.keepDb ?? false,
          ...(options.db === undefined ? {} : { db: options.db }),
        });
        results.push(result);
        if (!options.json) {
          out(result.text);
          out(result.reportPath ? `report        saved to ${result.reportPath}\n\n` : `report        NOT SAVED: ${result.reportError}\n\n`);
        }
        if (result.reportError) err(`wassal: ${result.reportError}\n`);
      }
      const passed = results.every((r) => r.passed);
      if (options.json) {
        const payload = results.length === 1 && name !== "all" ? asJson(results[0] as LabRunResult) : { passed, scenarios: results.map(asJson) };
        out(`${jsonText(payload)}\n`);
      } else if (results.length > 1) {
        out(`${results.map((r) => `${r.passed ? "PASSED" : "FAILED"}  ${r.scenario}`).join("\n")}\n`);
      }
      process.exitCode = passed ? EXIT.ok : EXIT.failed;
    });
}
