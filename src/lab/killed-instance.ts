// Runs one application instance as a real child process (node on instance-process.js) and kills
// it with SIGKILL at the point its plan names. No timing is involved: the child reports over its
// IPC channel that it has reached the point and then waits there; only then does the lab kill it.
// Everything the child reports on its way (notes, outbox events, provider calls) lands in the
// lab's ledger and call list, so the report shows the killed instance's work like any other.

import { fork } from "node:child_process";
import { fileURLToPath } from "node:url";
import { WassalError } from "../outbox/errors.js";
import type { OutboxEvent } from "../outbox/events.js";
import type { ProviderCall } from "../payments/provider-simulator.js";
import type { DatabaseTarget } from "./backend.js";
import type { InstancePlan } from "./instance-work.js";
import type { Ledger } from "./ledger.js";

/** The lab's one message to the child. */
export interface StartInstance {
  readonly type: "start";
  readonly name: string;
  readonly plan: InstancePlan;
  readonly target: DatabaseTarget;
  /** The scenario clock's time; the child's clock starts there and does not move. */
  readonly clockStart: Date;
  /** The provider's fixed outcomes, so the child's provider answers as the lab's does. */
  readonly outcomes: Readonly<Record<string, "Paid" | "Failed">>;
}

/** What the child reports. The channel uses structured clone ("advanced"), so dates stay dates. */
export type InstanceReport =
  | { readonly type: "note"; readonly at: Date; readonly text: string }
  | { readonly type: "event"; readonly event: OutboxEvent }
  | { readonly type: "provider-call"; readonly call: ProviderCall }
  | { readonly type: "crash-point"; readonly at: Date; readonly where: string; readonly pending: readonly string[] }
  | { readonly type: "failed"; readonly message: string }
  | { readonly type: "finished" };

export interface KilledInstance {
  readonly name: string;
  readonly pid: number;
  /** Where the plan was when the child was killed, in its own words. */
  readonly where: string;
  /** What the child said it still held at that point. */
  readonly pending: readonly string[];
  /** The scenario clock at the crash point. */
  readonly at: Date;
  /** How the process ended, as the operating system reported it. */
  readonly exitCode: number | null;
  readonly signal: NodeJS.Signals | null;
  /** Every provider call the child made, in order. */
  readonly providerCalls: readonly ProviderCall[];
}

const ENTRY = fileURLToPath(new URL("./instance-process.js", import.meta.url));

/** A child that is still running when this process exits is killed with it. */
const running = new Set<ReturnType<typeof fork>>();
let exitHookInstalled = false;

export interface KillOptions {
  readonly name: string;
  readonly plan: InstancePlan;
  readonly target: DatabaseTarget;
  readonly clockStart: Date;
  readonly outcomes: Readonly<Record<string, "Paid" | "Failed">>;
  readonly ledger: Ledger;
  /** A safety net, not a synchronisation: a child that never reaches its point is killed after this long (default 60 s). */
  readonly timeoutMs?: number;
}

/** Starts the instance, waits for its crash point, SIGKILLs it there, and resolves once the process has ended. */
export async function runUntilKilled(options: KillOptions): Promise<KilledInstance> {
  const { name, ledger } = options;
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.once("exit", () => {
      for (const child of running) child.kill("SIGKILL");
    });
  }
  const child = fork(ENTRY, [], { serialization: "advanced", stdio: ["ignore", "ignore", "pipe", "ipc"], execArgv: [] });
  running.add(child);
  let stderr = "";
  child.stderr?.setEncoding("utf8").on("data", (chunk: string) => {
    stderr = (stderr + chunk).slice(-4000);
  });
  const providerCalls: ProviderCall[] = [];
  let crash: Extract<InstanceReport, { type: "crash-point" }> | undefined;
  let failure: string | undefined;
  let finished = false;
  // "close" comes after the exit and after the IPC channel has delivered everything the child sent.
  const closed = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve, reject) => {
    child.once("error", reject);
    child.once("close", (code, signal) => resolve({ code, signal }));
  });
  child.on("message", (report: InstanceReport) => {
    switch (report.type) {
      case "note":
        ledger.note(report.at, name, report.text);
        break;
      case "event":
        ledger.record(report.event);
        break;
      case "provider-call":
        providerCalls.push(report.call);
        break;
      case "crash-point":
        crash = report;
        ledger.note(report.at, name, `reaches its crash point: ${report.where}; waits there`);
        child.kill("SIGKILL");
        ledger.note(report.at, "lab", `SIGKILL sent to ${name} (pid ${child.pid})`);
        break;
      case "failed":
        failure = report.message;
        break;
      case "finished":
        finished = true;
        break;
    }
  });
  const start: StartInstance = {
    type: "start",
    name,
    plan: options.plan,
    target: options.target,
    clockStart: options.clockStart,
    outcomes: options.outcomes,
  };
  child.send(start);
  const watchdog = setTimeout(() => child.kill("SIGKILL"), options.timeoutMs ?? 60_000);
  let exit: { code: number | null; signal: NodeJS.Signals | null };
  try {
    exit = await closed;
  } finally {
    clearTimeout(watchdog);
    running.delete(child);
  }
  if (crash === undefined) {
    const why = failure ?? (finished ? "its plan ended without reaching the crash point" : lastError(stderr));
    throw new WassalError(
      "LAB_INSTANCE_FAILED",
      `lab instance ${name} (pid ${child.pid}) ended before its crash point (exit code ${exit.code}, signal ${exit.signal}): ${why}`,
    );
  }
  ledger.note(crash.at, name, `process ended: ${exit.signal === null ? `exit code ${exit.code}` : `killed by ${exit.signal}`}; its memory is gone`);
  return {
    name,
    pid: child.pid ?? -1,
    where: crash.where,
    pending: crash.pending,
    at: crash.at,
    exitCode: exit.code,
    signal: exit.signal,
    providerCalls,
  };
}

/**
 * What a child's stderr says went wrong: for an uncaught error, the error's line and where it was
 * thrown (Node prints the source line, the error, its stack, and its own version last); otherwise
 * the last line.
 */
export function lastError(stderr: string): string {
  const lines = stderr
    .trim()
    .split("\n")
    .filter((line) => !/^Node\.js v\d/.test(line));
  const frame = lines.findIndex((line) => /^\s+at /.test(line));
  if (frame > 0) return `${lines[frame - 1]?.trim()} (${lines[frame]?.trim()})`;
  return lines.at(-1)?.trim() || "no message";
}
