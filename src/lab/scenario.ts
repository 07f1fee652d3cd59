// What a lab scenario is, and what one run of it produces.

import type { LabBackend } from "./backend.js";
import type { ScenarioMetrics } from "./metrics.js";
import type { Check } from "./report.js";

export interface ScenarioRun {
  readonly passed: boolean;
  readonly checks: readonly Check[];
  readonly metrics: ScenarioMetrics;
  /** The full text report (without the header the runner adds). */
  readonly body: string;
  readonly verdict: string;
}

export interface Scenario {
  /** The command-line name, e.g. "session-15-outbox-leasing". */
  readonly name: string;
  /** The lesson it belongs to, and the folder its reports go to under Reports/, e.g. "Session-15". */
  readonly series: string;
  /** "BEFORE" or "AFTER". */
  readonly phase: string;
  readonly title: string;
  /** The report file's stem, e.g. "Session-15-Outbox-Leasing". */
  readonly reportStem: string;
  readonly summary: string;
  run<Tx>(backend: LabBackend<Tx>): Promise<ScenarioRun>;
}
