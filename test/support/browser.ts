// Debian's Chromium, driven by playwright-core, for the browser tests. The flags keep a headless
// run from stalling on a closed network; each run gets a fresh profile, removed on close.
// Screenshots go to test-screenshots/ (git-ignored).

import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium, type BrowserContext, type Page } from "playwright-core";

/** The Debian package's binary (the wrapper at /usr/bin/chromium adds noise), or null when it is not installed. */
export const CHROMIUM = ["/usr/lib/chromium/chromium", "/usr/bin/chromium"].find((path) => existsSync(path)) ?? null;

export const SCREENSHOTS = join(import.meta.dirname, "..", "..", "test-screenshots");

export interface Browser {
  readonly context: BrowserContext;
  newPage(): Promise<Page>;
  /** Saves a full-page screenshot as test-screenshots/<name>.png. */
  screenshot(page: Page, name: string): Promise<void>;
  close(): Promise<void>;
}

export async function launchBrowser(): Promise<Browser> {
  if (CHROMIUM === null) throw new Error("Chromium is not installed: apt-get install -y chromium (.ci/run does)");
  const profile = mkdtempSync(join(tmpdir(), "wassal-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  return {
    context,
    newPage: () => context.newPage(),
    async screenshot(page, name) {
      mkdirSync(SCREENSHOTS, { recursive: true });
      await page.screenshot({ path: join(SCREENSHOTS, `${name}.png`), fullPage: true });
    },
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}
