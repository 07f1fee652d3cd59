// The worker's group commit: completions ready in the same turn share one commit; a failing
// business write rejects only its own caller.

import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { ManualClock } from "../../src/outbox/clock.js";
import { CompletionBatcher } from "../../src/outbox/completion-batcher.js";
import { InvalidArgumentError } from "../../src/outbox/errors.js";
import type { Lease } from "../../src/outbox/types.js";
import { SqliteOutboxStore, type SqliteTx } from "../../src/stores/sqlite/sqlite-outbox-store.js";
import { tempDir } from "../support/temp.js";

const dir = tempDir();
const stores: SqliteOutboxStore[] = [];
afterEach(async () => {
  for (const store of stores.splice(0)) await store.close();
});

async function setup(name: string, count: number) {
  const store = new SqliteOutboxStore({ path: join(dir, `${name}.db`), clock: new ManualClock() });
  stores.push(store);
  await store.migrate();
  await store.transaction(async (tx) => {
    tx.exec("CREATE TABLE effects (n INTEGER)");
    for (let n = 0; n < count; n += 1) await store.enqueue(tx, { type: "t", payload: { n } });
  });
  const leases = await store.claim("w", { limit: count, leaseMs: 1000 });
  return { store, leases };
}

describe("CompletionBatcher", () => {
  it("puts the completions of one turn into one commit", async () => {
    const { store, leases } = await setup("one-turn", 5);
    const batcher = new CompletionBatcher(store);
    const results = await Promise.all(leases.map((lease) => batcher.complete(lease, (tx) => void tx.prepare("INSERT INTO effects VALUES (1)").run())));
    expect(results.map((r) => r.outcome)).toEqual(Array(5).fill("completed"));
    expect(batcher.batchSizes).toEqual([5]);
    expect(store.db.prepare("SELECT count(*) FROM effects").pluck().get()).toBe(5);
  });

  it("caps a commit at maxBatch and commits the rest next", async () => {
    const { store, leases } = await setup("capped", 5);
    const batcher = new CompletionBatcher(store, 2);
    await Promise.all(leases.map((lease) => batcher.complete(lease)));
    expect(batcher.batchSizes).toEqual([2, 2, 1]);
  });

  it("rejects only the caller whose business write failed; the others commit", async () => {
    const { store, leases } = await setup("one-fails", 3);
    const batcher = new CompletionBatcher(store);
    const settled = await Promise.allSettled(
      leases.map((lease, i) =>
        batcher.complete(lease, (tx) => {
          if (i === 1) throw new Error("constraint violated");
          tx.prepare("INSERT INTO effects VALUES (?)").run(i);
        }),
      ),
    );
    expect(settled.map((s) => s.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    expect((settled[1] as PromiseRejectedResult).reason).toEqual(new Error("constraint violated"));
    expect(store.db.prepare("SELECT n FROM effects ORDER BY n").pluck().all()).toEqual([0, 2]);
    expect((await store.getMessage(leases[1]!.messageId))?.status).toBe("processing");
  });
  it("sends a lease completed twice to the next group, where it is reported lost; its neighbours commit, and the business write runs once", async () => {
    const { store, leases } = await setup("twice", 3);
    const batcher = new CompletionBatcher(store);
    const write = (n: number) => (tx: SqliteTx) => void tx.prepare("INSERT INTO effects VALUES (?)").run(n);
    const [a, b, c] = leases as [Lease, Lease, Lease];
    const results = await Promise.all([batcher.complete(a, write(1)), batcher.complete(b), batcher.complete(a, write(2)), batcher.complete(c)]);
    expect(results.map((r) => r.outcome)).toEqual(["completed", "completed", "lease-lost", "completed"]);
    expect(batcher.batchSizes).toEqual([2, 2]);
    expect(store.db.prepare("SELECT n FROM effects").pluck().all()).toEqual([1]);
  });

  it("rejects a malformed lease alone, without failing the group around it", async () => {
    const { store, leases } = await setup("malformed", 2);
    const batcher = new CompletionBatcher(store);
    const settled = await Promise.allSettled([
      batcher.complete(leases[0]!),
      batcher.complete({ ...leases[1]!, token: 0 }),
      batcher.complete(leases[1]!, "not a function" as never),
      batcher.complete(leases[1]!),
    ]);
    expect(settled.map((s) => s.status)).toEqual(["fulfilled", "rejected", "rejected", "fulfilled"]);
    expect((settled[1] as PromiseRejectedResult).reason).toBeInstanceOf(InvalidArgumentError);
    expect((settled[2] as PromiseRejectedResult).reason).toEqual(new InvalidArgumentError("finalize must be a function of the transaction (got string)"));
  });
});
