import { defineConfig } from "vitest/config";
import { RequireTestsRan } from "./test/support/require-tests-ran.js";

export default defineConfig({
  test: {
    // Real databases and real processes: give slow machines room, never sleep in tests instead.
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: "forks",
    // Two test files at a time, also on a 2-core machine (vitest's default there is one): the files
    // wait on databases, brokers and child processes most of the time, and each keeps to its own
    // schema, files, ports and stream names. The whole suite, 2 cores: 238 s with two against about
    // 400 s with one; with two CPU-bound processes beside it, 423 s against about 930 s.
    maxWorkers: 2,
    // A run that tests nothing fails: a file filter matching no file (vitest's own check), and a
    // name filter or selection leaving every test skipped (RequireTestsRan).
    passWithNoTests: false,
    reporters: ["default", new RequireTestsRan()],
    projects: [
      // Everything, with stores that keep a completed message as a processed row (the default).
      { extends: true, test: { name: "wassal", include: ["test/**/*.test.ts"] } },
      // The conformance suite and the model test again, with stores that delete a message's row
      // on completion (onComplete "delete"): the same protocol must hold in both modes.
      {
        extends: true,
        test: {
          name: "delete-on-complete",
          include: ["test/conformance/**/*.test.ts", "test/model/**/*.test.ts"],
          // Already tests both modes side by side.
          exclude: ["test/conformance/on-complete.test.ts"],
          env: { WASSAL_TEST_ON_COMPLETE: "delete" },
        },
      },
    ],
  },
});
