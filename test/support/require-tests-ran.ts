// A vitest reporter that fails a run in which no test ran: test files were found, but a filter
// (`-t <name pattern>`, a store or variant selection, a skipped service) left every test skipped.
// vitest itself passes such a run. (A file filter that matches no file already fails: the config
// sets passWithNoTests: false.) It is registered in vitest.config.ts next to the default reporter;
// a --reporter given on the command line replaces both.

import type { Reporter, TestModule, TestRunEndReason } from "vitest/node";

export class RequireTestsRan implements Reporter {
  onTestRunEnd(testModules: ReadonlyArray<TestModule>, _errors: unknown, reason: TestRunEndReason): void {
    if (reason !== "passed" || testModules.length === 0) return;
    let ran = 0;
    for (const module of testModules) {
      for (const test of module.children.allTests()) {
        const state = test.result().state;
        if (state === "passed" || state === "failed") ran += 1;
      }
    }
    if (ran > 0) return;
    process.exitCode = 1;
    process.stderr.write(
      `\nFAILED: ${testModules.length} test file(s) collected, but no test ran (every one was skipped or filtered out). Check the -t pattern and the WASSAL_* selection variables.\n\n`,
    );
  }
}
