// The reads the dashboard uses to stay small whatever a payload's size, on every store: a
// message's state without payload and headers, and its payload and headers as stored JSON text cut
// to a number of characters, with the whole text's size in bytes.

import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { InvalidArgumentError } from "../../src/outbox/errors.js";
import type { OutboxStore } from "../../src/outbox/store.js";
import { MariaDbOutboxStore } from "../../src/stores/mariadb/mariadb-outbox-store.js";
import { PostgresOutboxStore } from "../../src/stores/postgres/postgres-outbox-store.js";
import { SqliteOutboxStore } from "../../src/stores/sqlite/sqlite-outbox-store.js";
import { freshDatabase, mariadbAvailable, type FreshDatabase } from "../support/mariadb.js";
import { freshSchema, postgresAvailable, TEST_DATABASE_URL } from "../support/postgres.js";
import { tempDir } from "../support/temp.js";

const PG = await postgresAvailable();
const MARIADB = await mariadbAvailable();
/** The MariaDB backend's database, dropped when the file ends. */
let mariadb: FreshDatabase | undefined;
afterAll(async () => {
  await mariadb?.drop();
});
const dir = tempDir("wassal-message-reads-");

const backends = [
  { name: "SQLite", available: true, open: async (): Promise<OutboxStore<unknown>> => new SqliteOutboxStore({ path: join(dir, "reads.db") }) },
  {
    name: "PostgreSQL",
    available: PG,
    open: async (): Promise<OutboxStore<unknown>> => PostgresOutboxStore.connect({ url: TEST_DATABASE_URL, schema: freshSchema("wassal_message_reads") }),
  },
  {
    name: "MariaDB",
    available: MARIADB,
    open: async (): Promise<OutboxStore<unknown>> => {
      mariadb = await freshDatabase();
      return MariaDbOutboxStore.connect({ url: mariadb.url });
    },
  },
];

for (const backend of backends) {
  describe.skipIf(!backend.available)(`message reads without the whole payload (${backend.name})`, () => {
    let store: OutboxStore<unknown>;
    beforeAll(async () => {
      store = await backend.open();
      await store.migrate();
    });
    afterAll(async () => {
      await store.close();
    });

    it("reads a message's state: every field but payload and headers, as getMessage has them", async () => {
      const { id } = await store.transaction((tx) =>
        store.enqueue(tx, { type: "state", payload: { n: 1 }, headers: { "x-a": "1" }, key: "k-1", dedupeKey: "d-1" }),
      );
      const { payload: _payload, headers: _headers, ...whole } = (await store.getMessage(id))!;
      expect(await store.getMessageState(id)).toEqual(whole);
      expect(await store.getMessageState("999999999")).toBeUndefined();
      const states = await store.listMessageStates({ status: ["pending"], limit: 10 });
      expect(states.map((m) => m.id)).toEqual((await store.listMessages({ status: ["pending"], limit: 10 })).map((m) => m.id));
      expect(states.every((m) => !("payload" in m) && !("headers" in m))).toBe(true);
    });

    it("reads the payload and headers as JSON text, cut to a number of characters, with the whole size in bytes", async () => {
      const payload = { text: "é".repeat(1000), n: [1, 2, 3] };
      const { id } = await store.transaction((tx) => store.enqueue(tx, { type: "text", payload }));
      const whole = (await store.getMessageText(id))!;
      expect(JSON.parse(whole.payload.text)).toEqual(payload);
      expect(whole.payload.bytes).toBe(Buffer.byteLength(whole.payload.text));
      expect(whole.payload.cut).toBe(false);
      expect(whole.headers).toEqual({ text: "{}", bytes: 2, cut: false }); // none given
      const cut = (await store.getMessageText(id, { maxChars: 100 }))!;
      expect(cut.payload.text).toBe(whole.payload.text.slice(0, 100)); // characters, not bytes: no é is split
      expect(cut.payload).toMatchObject({ bytes: whole.payload.bytes, cut: true });
      expect(cut.status).toBe("pending");
      expect(await store.getMessageText("999999999", { maxChars: 10 })).toBeUndefined();
      for (const maxChars of [0, -1, 1.5, Number.NaN])
        await expect(store.getMessageText(id, { maxChars }), String(maxChars)).rejects.toThrow(InvalidArgumentError);
    });
  });
}
