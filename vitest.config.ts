import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // Real databases and real processes: give slow machines room, never sleep in tests instead.
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: "forks",
  },
});
