// The bin after a build: `npm run build` deletes dist/ and compiles it again, and tsc writes
// dist/cli/main.js without its execute bit, so the README's `npx wassal …` after `npm start` ended
// in "Permission denied" (exit 127). The build now sets the bit; `npm test` builds first, so this
// sees the build's own output.

import { spawnSync } from "node:child_process";
import { readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { beforeAll, expect, it } from "vitest";
import { CLI, requireBuiltCli, ROOT } from "../support/cli.js";

beforeAll(requireBuiltCli);

it("the build leaves dist/cli/main.js executable, and npx wassal --version runs it", () => {
  expect(statSync(CLI).mode & 0o111).toBe(0o111);
  const version = (JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { version: string }).version;
  const run = spawnSync("npx", ["--no-install", "wassal", "--version"], { cwd: ROOT, encoding: "utf8", timeout: 60_000 });
  expect(run.stderr).toBe("");
  expect(run.status).toBe(0);
  expect(run.stdout.trim()).toBe(version);
});
