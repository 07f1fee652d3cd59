// The whole machine's busy CPU time (every process: the system under test, its broker, its
// database, the kernel), read from /proc/stat, so that a run's cost per message counts what the
// bench process's own CPU does not. Linux only; elsewhere the reading is null.

import { readFileSync } from "node:fs";

/** Busy CPU microseconds summed over all cores since boot (user, nice, system, irq, softirq, steal), or null. */
export function machineBusyUs(): number | null {
  try {
    const first = readFileSync("/proc/stat", "utf8").split("\n", 1)[0] ?? "";
    const [label, user, nice, system, , , irq, softirq, steal] = first.trim().split(/\s+/);
    if (label !== "cpu") return null;
    const ticks = [user, nice, system, irq, softirq, steal].reduce((sum, field) => sum + Number(field ?? 0), 0);
    // USER_HZ is 100 on every Linux this runs on (the kernel reports clock ticks in it).
    return Number.isFinite(ticks) ? ticks * 10_000 : null;
  } catch {
    return null;
  }
}
