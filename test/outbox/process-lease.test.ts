// processLease reports every attempt it starts as finished, whatever happens to it.

import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { ManualClock } from "../../src/outbox/clock.js";
import type { OutboxEvent } from "../../src/outbox/events.js";
import { processLease } from "../../src/outbox/process-lease.js";
import { SqliteOutboxStore } from "../../src/stores/sqlite/sqlite-outbox-store.js";
import { tempDir } from "../support/temp.js";

const dir = tempDir();
const stores: SqliteOutboxStore[] = [];
afterEach(async () => {
  for (const store of stores.splice(0)) await store.close();
});

async function setup(name: string) {
  const clock = new ManualClock();
  const store = new SqliteOutboxStore({ path: join(dir, `${name}.db`), clock });
  stores.push(store);
  await store.migrate();
  await store.transaction((tx) => store.enqueue(tx, { type: "t", payload: { n: 1 } }));
  const [lease] = await store.claim("w", { limit: 1, leaseMs: 1000 });
  if (!lease) throw new Error("nothing claimed");
  const events: OutboxEvent[] = [];
  store.events.subscribe((e) => events.push(e));
  return { clock, store, lease, events };
}

describe("processLease", () => {
  it("reports a completed attempt with the handler's summary", async () => {
    const { clock, store, lease, events } = await setup("ok");
    const { result } = await processLease(store, lease, async () => ({ summary: "done" }), clock);
    expect(result.outcome).toBe("completed");
    expect(events.map((e) => e.type)).toEqual(["processing-started", "completed", "processing-finished"]);
    expect(events.at(-1)).toMatchObject({ type: "processing-finished", result: "completed", detail: "done" });
  });

  it("completes the message when the handler returns nothing (undefined or, from JavaScript, null)", async () => {
    for (const returned of [undefined, null]) {
      const { clock, store, lease, events } = await setup(`returns-${String(returned)}`);
      const { result, summary } = await processLease(store, lease, async () => returned as undefined, clock);
      expect(result.outcome).toBe("completed");
      expect(summary).toBe("");
      expect(events.at(-1)).toMatchObject({ type: "processing-finished", result: "completed" });
      expect(await store.getMessage(lease.messageId)).toMatchObject({ status: "processed", attempts: 1 });
    }
  });

  it("reports a failed attempt when the handler throws, and lets the error through", async () => {
    const { clock, store, lease, events } = await setup("handler-throws");
    await expect(
      processLease(
        store,
        lease,
        async () => {
          throw new Error("provider down");
        },
        clock,
      ),
    ).rejects.toThrow("provider down");
    expect(events.map((e) => e.type)).toEqual(["processing-started", "processing-finished"]);
    expect(events.at(-1)).toMatchObject({ result: "failed", detail: "provider down" });
    expect((await store.getMessage(lease.messageId))?.status).toBe("processing");
  });

  it("reports a failed attempt when the business write throws, and commits nothing", async () => {
    const { clock, store, lease, events } = await setup("finalize-throws");
    const handler = async () => ({
      finalize: () => {
        throw new Error("constraint");
      },
    });
    await expect(processLease(store, lease, handler, clock)).rejects.toThrow("constraint");
    expect(events.map((e) => e.type)).toEqual(["processing-started", "processing-finished"]);
    expect(events.at(-1)).toMatchObject({ result: "failed", detail: "business write failed: constraint" });
    expect((await store.getMessage(lease.messageId))?.status).toBe("processing");
  });

  it("reports a lease-lost attempt when the lease was reclaimed meanwhile", async () => {
    const { clock, store, lease, events } = await setup("lost");
    clock.advance(1000);
    await store.claim("other", { limit: 1, leaseMs: 1000 });
    const { result } = await processLease(store, lease, async () => ({ summary: "late" }), clock);
    expect(result.outcome).toBe("lease-lost");
    expect(events.at(-1)).toMatchObject({ type: "processing-finished", result: "lease-lost" });
  });
});
