// Runs lab scenarios: sets up the backend, runs, renders the report with its header, saves it
// under Reports/<series>/ (Reports/Session-15/, say), and removes the temporary database.

import { mkdirSync, rmdirSync, rmSync, statSync, type Stats, writeFileSync } from "node:fs";
import { redactSecrets } from "../outbox/redact.js";
import { renderHtmlReport } from "./html-report.js";
import { dirname, join, resolve } from "node:path";
import type { LabBackend } from "./backend.js";
import type { ScenarioMetrics } from "./metrics.js";
import type { Check } from "./report.js";
import type { Scenario } from "./scenario.js";
import { competingWorkersNoClaim } from "./scenarios/competing-workers-no-claim.js";
import { durableReconciliation, inMemoryReconciliation } from "./scenarios/durable-reconciliation.js";
import { outboxLeasing } from "./scenarios/outbox-leasing.js";
import { dualWrite, transactionalOutbox } from "./scenarios/transactional-outbox.js";
import { paymentEventsByKey, paymentEventsUnordered } from "./scenarios/payment-events.js";
import { SqliteLabBackend } from "./sqlite-backend.js";
import { ServerLabBackend } from "./server-backend.js";
import { InvalidArgumentError } from "../outbox/errors.js";
import { isServer } from "./stores/places.js";

/** Every scenario, lesson by lesson, BEFORE first. */
export const SCENARIOS: readonly Scenario[] = [
  inMemoryReconciliation,
  durableReconciliation,
  dualWrite,
  transactionalOutbox,
  competingWorkersNoClaim,
  outboxLeasing,
  paymentEventsUnordered,
  paymentEventsByKey,
];

export function findScenario(name: string): Scenario | undefined {
  return SCENARIOS.find((s) => s.name === name);
}

export interface LabRunOptions {
  /** Reports go to <reportsDir>/Reports/<series>/, e.g. Reports/Session-15/ (default: the working directory). */
  readonly reportsDir?: string;
  /**
   * A PostgreSQL URL (the run gets a temporary schema there), or a SQLite file to run on
   * instead of a temporary one (kept afterwards). Default: a temporary SQLite file.
   */
  readonly db?: string;
  /** Keep the temporary database (SQLite file or PostgreSQL schema). */
  readonly keepDb?: boolean;
  /**
   * Called with the run's clean-up while it runs (and with null once it is done), so a caller
   * that is interrupted (Ctrl-C) can remove the temporary database before it exits.
   */
  readonly onCleanup?: (cleanup: (() => Promise<string>) | null) => void;
}

export interface LabRunResult {
  readonly scenario: string;
  readonly passed: boolean;
  /** Where the report was saved, or null if saving failed (see reportError). */
  readonly reportPath: string | null;
  readonly reportError: string | null;
  readonly databasePath: string;
  readonly databaseFate: string;
  readonly checks: readonly Check[];
  readonly metrics: ScenarioMetrics;
  readonly text: string;
}

function stamp(at: Date): string {
  const iso = at.toISOString(); // 2026-11-29T12:10:00.123Z
  return `${iso.slice(0, 10).replaceAll("-", "")}-${iso.slice(11, 19).replaceAll(":", "")}-${iso.slice(20, 23)}`;
}

/** The HTML twin of a text report: the same path, ending .html. */
export function htmlReportPath(reportPath: string): string {
  return reportPath.replace(/\.txt$/, ".html");
}

export function reportPathFor(scenario: Scenario, reportsDir: string, at: Date): string {
  return join(resolve(reportsDir), "Reports", scenario.series, `${scenario.reportStem}-RunReport-${stamp(at)}.txt`);
}

/**
 * Creates a folder and its missing parents, one level at a time, and returns the first it created
 * (undefined when it existed). Not mkdirSync's { recursive: true }: under a pseudo file system
 * such as /proc, where mkdir answers ENOENT, that retries forever and never returns.
 */
function makeFolders(folder: string): string | undefined {
  const missing: string[] = [];
  for (let dir = resolve(folder); ; dir = dirname(dir)) {
    let stat: Stats | undefined;
    try {
      stat = statSync(dir);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "ENOENT" || dirname(dir) === dir) throw error;
    }
    if (stat !== undefined) {
      if (!stat.isDirectory()) throw new Error(`${dir} is not a directory`);
      break;
    }
    missing.unshift(dir);
  }
  for (const dir of missing) mkdirSync(dir);
  return missing[0];
}

/**
 * Makes sure the report can be saved before anything runs, and leaves no trace: creates the
 * report's folder, writes a probe file there (a real write: permission bits alone do not tell, for
 * root or on a read-only mount), then removes the probe and every folder it created. A run that
 * could only fail to save at its end is refused at its start instead.
 */
export function prepareReportFolder(reportPath: string): void {
  const folder = join(reportPath, "..");
  const probe = join(folder, `.wassal-write-check-${process.pid}`);
  let created: string | undefined;
  try {
    created = makeFolders(folder);
    writeFileSync(probe, "");
    rmSync(probe);
  } catch (error) {
    throw new InvalidArgumentError(
      `cannot save reports in ${folder}: ${(error as Error).message}; give a reports directory this process can create and write (nothing was run)`,
    );
  } finally {
    // Remove only the folders made here, deepest first, and only while empty: a concurrent run may
    // have put its report in one of them meanwhile.
    for (let dir = folder; created !== undefined && dir.length >= created.length; dir = dirname(dir)) {
      try {
        rmdirSync(dir);
      } catch {
        break;
      }
    }
  }
}

/** Checks, before any of them runs, that every scenario's report can be saved under `reportsDir`. */
export function checkReportsDir(scenarios: readonly Scenario[], reportsDir: string): void {
  for (const scenario of scenarios) prepareReportFolder(reportPathFor(scenario, reportsDir, new Date()));
}

export async function createBackend(scenario: Scenario, options: LabRunOptions): Promise<LabBackend<unknown>> {
  if (options.db !== undefined && isServer(options.db)) {
    return (await ServerLabBackend.open(options.db, options.keepDb ?? false)) as LabBackend<unknown>;
  }
  return new SqliteLabBackend({
    label: scenario.name,
    keep: options.keepDb ?? false,
    ...(options.db === undefined ? {} : { path: options.db }),
  }) as LabBackend<unknown>;
}

export async function runScenario(scenario: Scenario, options: LabRunOptions = {}): Promise<LabRunResult> {
  const startedAt = new Date();
  const path = reportPathFor(scenario, options.reportsDir ?? process.cwd(), startedAt);
  prepareReportFolder(path);
  const backend = await createBackend(scenario, options);
  let outcome: Awaited<ReturnType<Scenario["run"]>>;
  let databaseFate: string;
  let disposed: Promise<string> | undefined;
  const dispose = () => (disposed ??= backend.dispose());
  options.onCleanup?.(dispose);
  try {
    outcome = await scenario.run(backend);
  } finally {
    databaseFate = await dispose();
    options.onCleanup?.(null);
  }
  const header = [
    `Wassal payments lab: ${scenario.name} (${scenario.phase}: ${scenario.title})`,
    `  ${scenario.summary}`,
    "",
    `run started   ${startedAt.toISOString()}`,
    `store         ${backend.description}`,
    `database      ${backend.location}`,
  ].join("\n");
  const footer = [
    "",
    `database      ${databaseFate}`,
    `result        ${outcome.passed ? "PASSED" : "FAILED"}: ${outcome.checks.filter((c) => c.passed).length} of ${outcome.checks.length} checks passed`,
  ].join("\n");
  const text = redactSecrets(`${header}\n${outcome.body}${footer}\n`);

  let reportPath: string | null = path;
  let reportError: string | null = null;
  try {
    makeFolders(join(path, ".."));
    writeFileSync(path, text);
    // The same report as a page that opens from the file (html-report.ts).
    writeFileSync(htmlReportPath(path), renderHtmlReport(text, `${scenario.name}: ${outcome.passed ? "PASSED" : "FAILED"}`, outcome.figures));
  } catch (error) {
    reportPath = null;
    reportError = `could not save the report to ${path}: ${(error as Error).message}`;
  }
  return {
    scenario: scenario.name,
    passed: outcome.passed,
    reportPath,
    reportError,
    databasePath: backend.location,
    databaseFate,
    checks: outcome.checks,
    metrics: outcome.metrics,
    text,
  };
}
