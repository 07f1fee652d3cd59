// Runs one bench child script twice in this process: first on a warm-up store of its own, untimed
// and unreported, then on the run's store as usual ("ready", the wait for "go", the report). The
// second run meets code V8 has already compiled and optimised, and a library already loaded, as a
// worker that has been running for a while does; without it a short run measures mostly warm-up
// (about 185 ms of CPU per Wassal worker process, about 60 ms per raw loop: see
// docs/performance-history.md, round 3).
//   WASSAL_BENCH_WARM_UP='["<db>","<schema>"]' node bench/.build/warm-child.js <script> <args…>
// The JSON list replaces the script's leading arguments (the database, and the schema where the
// script takes one) for the warm-up; the rest of <args…> is the same for both runs.
// The script runs as a second module instance (its URL with a query): its own top-level state
// starts afresh, while the modules it imports (Wassal, the drivers, the peers) are shared.

import { setWarmingUp } from "./child-report.js";

const [script, ...args] = process.argv.slice(2);
const warmUp = JSON.parse(process.env.WASSAL_BENCH_WARM_UP ?? "null") as unknown;
if (!script || !Array.isArray(warmUp) || !warmUp.every((arg): arg is string => typeof arg === "string") || warmUp.length > args.length) {
  throw new Error('usage: WASSAL_BENCH_WARM_UP=\'["<db>","<schema>"]\' warm-child <script> <args…> (the list replaces the leading arguments)');
}
const url = new URL(`./${script}`, import.meta.url);
const argv = (leading: readonly string[]) => [process.argv[0] ?? process.execPath, url.pathname, ...leading, ...args.slice(leading.length)];

process.argv = argv(warmUp);
setWarmingUp(true);
await import(`${url.href}?warm-up`);
setWarmingUp(false);
process.argv = argv([]);
await import(url.href);
