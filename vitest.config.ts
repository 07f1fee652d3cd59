import { defineConfig } from "vitest/config";
import { RequireTestsRan } from "./test/support/require-tests-ran.js";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // Real databases and real processes: give slow machines room, never sleep in tests instead.
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: "forks",
    // A run that tests nothing fails: a file filter matching no file (vitest's own check), and a
    // name filter or selection leaving every test skipped (RequireTestsRan).
    passWithNoTests: false,
    reporters: ["default", new RequireTestsRan()],
  },
});
