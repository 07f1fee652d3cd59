// Text from the database never drives the operator's terminal. A type, key, dedupe key, owner,
// header or error text holding escape sequences ("\x1b]0;pwned\x07\x1b[2J" retitles and clears a
// terminal) is shown escaped by `outbox dead`, `show`, `stats`, `blocked-keys` and `inbox
// blocked-keys`, on both stores; --json stays valid JSON that gives the values back exactly.
//
// Needs `npm run build` first (`npm test` does it).

import { mkdtempSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Lease } from "../../src/outbox/types.js";
import { requireBuiltCli, runCli } from "../support/cli.js";
import { tempDir } from "../support/temp.js";
import { closeTargets, newTarget, type StoreKind } from "../worker-cli/harness.js";
import { postgresAvailable } from "../support/postgres.js";

const PG = await postgresAvailable();
const dir = tempDir("wassal-hostile-escapes-");

/** Retitles the terminal, clears it, and (C1 CSI, then a right-to-left override) hides what follows. */
const EVIL = "\u001b]0;pwned\u0007\u001b[2J\u009b31m\u202e";

/** No byte a terminal acts on: ESC, BEL, C1 controls, bidi overrides (tab and newline are layout). */
function expectInert(what: string, text: string): void {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is what this test is for
  const found = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/.exec(text);
  expect(
    found,
    `${what} printed a raw control character ${JSON.stringify(found?.[0])} at …${JSON.stringify(text.slice(Math.max(0, (found?.index ?? 0) - 40), (found?.index ?? 0) + 40))}…`,
  ).toBeNull();
}

beforeAll(requireBuiltCli);
afterAll(closeTargets);

for (const kind of ["sqlite", "postgres"] as const satisfies readonly StoreKind[]) {
  describe.runIf(kind === "sqlite" || PG)(`${kind}: hostile text from the database`, () => {
    it("is shown escaped by every command that prints it for people, and exactly by --json", async () => {
      const target = newTarget(kind, dir);
      const outbox = await target.open();
      let deadId = "";
      let waitingId = "";
      try {
        const { store } = outbox;
        await store.transaction(async (tx) => {
          deadId = (
            await store.enqueue(tx, {
              type: `evil.type${EVIL}`,
              payload: { note: `payload${EVIL}` },
              key: `key${EVIL}`,
              dedupeKey: `dedupe${EVIL}`,
              headers: { "x-evil": "header\tvalue" },
            })
          ).id;
          waitingId = (await store.enqueue(tx, { type: `evil.type${EVIL}`, payload: {}, key: `key${EVIL}` })).id;
        });
        const [lease] = await store.claim(`owner${EVIL}`, { limit: 1, leaseMs: 60_000 });
        await store.fail(lease as Lease, new Error(`error${EVIL}\nsecond line`), "dead");
        // One more message held by the hostile owner, so stats lists it.
        await store.transaction((tx) => store.enqueue(tx, { type: "plain", payload: {} }));
        await store.claim(`owner${EVIL}`, { limit: 1, leaseMs: 60_000 });
        // The consuming side: a later number of a hostile key arrives first, so the inbox holds it back.
        await store.transaction((tx) => store.receiveInOrder(tx, { id: "in-2", key: `inbox-key${EVIL}`, keySeq: 2 }));
      } finally {
        await outbox.close();
      }

      const cwd = mkdtempSync(join(dir, "cwd-"));
      const commands = [
        ["outbox", "dead"],
        ["outbox", "show", deadId],
        ["outbox", "stats"],
        ["outbox", "blocked-keys"],
        ["inbox", "blocked-keys"],
      ];
      for (const command of commands) {
        const run = await runCli([...command, ...target.args], { cwd });
        expect(run.code, `${command.join(" ")}: ${run.stderr}`).toBe(0);
        expectInert(command.join(" "), run.stdout);
        expectInert(command.join(" "), run.stderr);
        expect(run.stdout, command.join(" ")).toMatch(/\\x1b|\\u202e/); // shown, as an escape
      }
      // Cancelling the pending message names its hostile type and key, escaped.
      const cancel = await runCli(["outbox", "cancel", waitingId, ...target.args], { cwd });
      expect(cancel.code, cancel.stderr).toBe(0);
      expectInert("outbox cancel", cancel.stdout);
      expect(cancel.stdout).toContain("evil.type\\x1b]0;pwned");
      // The dead message's error stays on its line: its newline is shown, not obeyed.
      const dead = await runCli(["outbox", "dead", ...target.args], { cwd });
      expect(dead.stdout.trim().split("\n")).toHaveLength(1);
      expect(dead.stdout).toContain("error\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m\\u202e\\nsecond line");

      // --json escapes them too, and parses back to the exact values.
      const json = await runCli(["outbox", "show", deadId, ...target.args, "--json"], { cwd });
      expectInert("outbox show --json", json.stdout);
      const shown = JSON.parse(json.stdout) as { type: string; key: string; dedupeKey: string; lastError: string };
      expect(shown).toMatchObject({ type: `evil.type${EVIL}`, key: `key${EVIL}`, dedupeKey: `dedupe${EVIL}` });
      expect(shown.lastError).toContain(`error${EVIL}\nsecond line`);
    });
  });
}
