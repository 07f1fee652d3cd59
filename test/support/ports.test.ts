// freePort (src/chaos/ports.ts): a port reserved with a lock file until released, so servers that
// need their port on the command line never share one across parallel test files or runs.

import { existsSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect, it } from "vitest";
import { freePort, releasePort } from "../../src/chaos/ports.js";

const lockOf = (port: number) => join(tmpdir(), "wassal-ports", `${port}.lock`);

it("reserves a port with a lock file naming this process, listenable now, below the ephemeral range, until released", async () => {
  const port = await freePort();
  try {
    expect(port).toBeGreaterThanOrEqual(20_000);
    expect(port).toBeLessThan(32_768);
    expect(readFileSync(lockOf(port), "utf8").trim()).toBe(String(process.pid));
    const server = createServer();
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(port, "127.0.0.1", () => resolve());
    });
    await new Promise((resolve) => server.close(resolve));
  } finally {
    releasePort(port);
  }
  expect(existsSync(lockOf(port))).toBe(false);
});

it("never hands out a port that is reserved (here, 300 at once), whoever reserved it", async () => {
  const ports: number[] = [];
  try {
    for (let i = 0; i < 300; i += 1) ports.push(await freePort());
    expect(new Set(ports).size).toBe(ports.length);
  } finally {
    for (const port of ports) releasePort(port);
  }
});
