// A SQLite store opened with readOnly: it reads what is there, writes nothing (each write is a
// StoreReadOnlyError, and the file stays byte for byte the same), and needs an existing file.

import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { DatabaseOpenError, StoreReadOnlyError } from "../../src/outbox/errors.js";
import { SqliteOutboxStore } from "../../src/stores/sqlite/sqlite-outbox-store.js";
import { tempDir } from "../support/temp.js";

const dir = tempDir("wassal-readonly-store-");

describe("a SQLite store opened read-only", () => {
  it("reads messages and stats, refuses every write with StoreReadOnlyError, and changes nothing", async () => {
    const path = join(dir, "app.db");
    const writer = new SqliteOutboxStore({ path });
    await writer.migrate();
    const message = await writer.transaction((tx) => writer.enqueue(tx, { type: "t", payload: { n: 1 } }));
    await writer.close();
    const bytes = readFileSync(path);

    const reader = new SqliteOutboxStore({ path, readOnly: true });
    try {
      expect(await reader.isInstalled()).toBe(true);
      expect((await reader.getMessage(message.id))?.payload).toEqual({ n: 1 });
      expect((await reader.stats()).counts.pending).toBe(1);
      const writes: [string, () => Promise<unknown>][] = [
        ["migrate", () => reader.migrate()],
        ["transaction", () => reader.transaction(() => 1)],
        ["claim", () => reader.claim("w", { limit: 1, leaseMs: 1000 })],
        ["redrive", () => reader.redrive("all")],
        ["purge", () => reader.purgeProcessed(new Date())],
      ];
      for (const [label, write] of writes) {
        await expect(write(), label).rejects.toThrow(StoreReadOnlyError);
      }
      await expect(reader.claim("w", { limit: 1, leaseMs: 1000 })).rejects.toThrow(/was opened read-only, so nothing can be written through it/);
    } finally {
      await reader.close();
    }
    expect(readFileSync(path).equals(bytes)).toBe(true);
  });

  it("refuses a file that does not exist, and creates none", () => {
    const path = join(dir, "missing.db");
    expect(() => new SqliteOutboxStore({ path, readOnly: true })).toThrow(DatabaseOpenError);
    expect(existsSync(path)).toBe(false);
  });
});
