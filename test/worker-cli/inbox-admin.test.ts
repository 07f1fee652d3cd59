// `wassal inbox blocked-keys | unblock --skip` on a consumer's SQLite database: a key whose inbox
// holds a later number back is listed (text and --json, by source and age), a skip lets it go on
// from the number held, and bad input exits 2 with a line that says what to do.
//
// Needs `npm run build` first (`npm test` does it).

import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { SqliteOutboxStore } from "../../src/stores/sqlite/sqlite-outbox-store.js";
import { Inbox } from "../../src/relay/inbox.js";
import { cliJson, cliOk, requireBuiltCli, runCli } from "../support/cli.js";
import { tempDir } from "../support/temp.js";

const DIR = tempDir("wassal-inbox-cli-");
beforeAll(requireBuiltCli);

describe("wassal inbox", () => {
  const db = join(DIR, "consumer.db");

  it("lists the keys holding a message back, skips a gap, and refuses what it cannot do", async () => {
    const store = new SqliteOutboxStore({ path: db });
    await store.migrate();
    const orders = new Inbox({ store, source: "orders" });
    await orders.handle({ id: "a-1", key: "acct-1", keySeq: 1 }, () => undefined);
    expect(await orders.handle({ id: "a-4", key: "acct-1", keySeq: 4 }, () => undefined)).toMatchObject({ early: true, waitingFor: 2 });
    expect(await new Inbox({ store, source: "other" }).handle({ id: "b-3", key: "b", keySeq: 3 }, () => undefined)).toMatchObject({ early: true });
    await store.close();

    const text = await cliOk(["inbox", "blocked-keys", "--db", db, "--source", "orders"], { cwd: DIR });
    expect(text).toMatch(/^acct-1\tsource "orders"\twaits for number 2 \(applied up to 1\)\tholds 4 back since \d{4}-/);
    const all = await cliJson<{ key: string; source: string; waitingFor: number; heldSeq: number }[]>(["inbox", "blocked-keys", "--db", db, "--json"], {
      cwd: DIR,
    });
    expect(all.map((b) => [b.source, b.key, b.waitingFor, b.heldSeq])).toEqual([
      ["orders", "acct-1", 2, 4],
      ["other", "b", 1, 3],
    ]);
    expect(await cliOk(["inbox", "blocked-keys", "--db", db, "--older-than", "1h"], { cwd: DIR })).toBe("no key holds a message back\n");

    expect(await cliOk(["inbox", "unblock", "acct-1", "--skip", "--source", "orders", "--db", db], { cwd: DIR })).toBe(
      "key acct-1: numbers 2 to 3 skipped; number 4 is applied when it comes again\n",
    );
    const after = new SqliteOutboxStore({ path: db });
    try {
      const inbox = new Inbox({ store: after, source: "orders" });
      expect(await inbox.handle({ id: "a-4", key: "acct-1", keySeq: 4 }, () => "applied")).toMatchObject({ early: false, result: "applied" });
      expect(await inbox.blockedKeys()).toEqual([]);
    } finally {
      await after.close();
    }

    const notBlocked = await runCli(["inbox", "unblock", "acct-1", "--skip", "--source", "orders", "--db", db], { cwd: DIR });
    expect(notBlocked.code).toBe(2);
    expect(notBlocked.stderr).toContain('ordering key "acct-1" holds nothing back at the inbox (source "orders")');
    const noSkip = await runCli(["inbox", "unblock", "b", "--source", "other", "--db", db], { cwd: DIR });
    expect(noSkip.code).toBe(2);
    expect(noSkip.stderr).toContain("an inbox key is unblocked with --skip");
    const both = await runCli(["inbox", "unblock", "b", "--all", "--skip", "--source", "other", "--db", db], { cwd: DIR });
    expect([both.code, both.stderr]).toEqual([2, "wassal: name one key, or pass --all (not both)\n"]);
    // Every key of a source at once, those waiting longer than an hour first (none), then all.
    expect(await cliOk(["inbox", "unblock", "--all", "--older-than", "1h", "--skip", "--source", "other", "--db", db], { cwd: DIR })).toBe(
      "0 keys skipped past their gaps\n",
    );
    expect(await cliOk(["inbox", "unblock", "--all", "--skip", "--source", "other", "--db", db], { cwd: DIR })).toBe(
      "1 key skipped past their gaps\nb\tnumbers 1 to 2\n",
    );
    expect(await cliOk(["inbox", "blocked-keys", "--db", db], { cwd: DIR })).toBe("no key holds a message back\n");
    const help = await cliOk(["inbox", "unblock", "--help"], { cwd: DIR });
    expect(help).toContain("--skip");
    expect(help).toContain("wassal outbox unblock <key> --redrive");
  });
});
