// What a lab scenario is, and what one run of it produces.

import type { LabBackend } from "./backend.js";
import type { ScenarioMetrics } from "./metrics.js";
import type { Check } from "./report.js";
import type { Timeline } from "../observability/timeline.js";

/** A timeline the HTML report draws below the text of one of its sections. */
export interface ReportFigure {
  /** The section it belongs to, by its title as given to ReportBuilder.section. */
  readonly section: string;
  readonly caption: string;
  readonly timeline: Timeline;
}

export interface ScenarioRun {
  readonly passed: boolean;
  readonly checks: readonly Check[];
  readonly metrics: ScenarioMetrics;
  /** The full text report (without the header the runner adds). */
  readonly body: string;
  readonly verdict: string;
  /** Timelines drawn in the HTML report (the text report has its own table of the same events). */
  readonly figures?: readonly ReportFigure[];
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
