// Group commit: several completions in one transaction, so one lost lease or one failing business
// write rolls back alone while its neighbours commit. The guarded updates share one statement and
// the business writes run without savepoints; a write that throws sends the others round again,
// each in a savepoint of its own.

import { expect, it } from "vitest";
import { InvalidArgumentError } from "../../src/outbox/errors.js";
import { finalizeTogether } from "../../src/outbox/write-together.js";
import { claimNext, describeEachStore, enqueueMessages, expectFinished, useStoreHarness } from "./stores.js";

const LEASE_MS = 1_000;

describeEachStore("group commit (completeMany)", (factory) => {
  const ctx = useStoreHarness(factory);

  it("commits every held lease of the group with its business write", async () => {
    const { store, clock, harness } = ctx();
    await enqueueMessages(store, clock, 3);
    const leases = await store.claim("worker-a", { limit: 3, leaseMs: LEASE_MS });
    const results = await store.completeMany(
      leases.map((lease) => ({ lease, finalize: (tx: unknown) => harness.businessWrite(tx, `done-${lease.messageId}`) })),
    );
    expect(results.map((r) => [r.outcome, r.messageId])).toEqual(leases.map((l) => ["completed", l.messageId]));
    for (const lease of leases) {
      await expectFinished(store, factory, lease.messageId);
      expect(await harness.countBusinessRows(`done-${lease.messageId}`)).toBe(1);
    }
  });

  it("rolls back a lost lease and a failing business write alone; their neighbours commit", async () => {
    const { store, clock, harness } = ctx();
    await enqueueMessages(store, clock, 3);
    const stale = await claimNext(store, "worker-a", LEASE_MS);
    const [b, c] = await store.claim("worker-a", { limit: 2, leaseMs: LEASE_MS * 10 });
    clock.advance(LEASE_MS);
    const fresh = await claimNext(store, "worker-b", LEASE_MS); // reclaims the stale one
    expect(fresh.messageId).toBe(stale.messageId);

    const results = await store.completeMany([
      { lease: stale, finalize: (tx: unknown) => harness.businessWrite(tx, "stale") },
      {
        lease: b!,
        finalize: async (tx: unknown) => {
          await harness.businessWrite(tx, "b");
          throw new Error("constraint violated");
        },
      },
      { lease: c!, finalize: (tx: unknown) => harness.businessWrite(tx, "c") },
    ]);
    expect(results.map((r) => r.outcome)).toEqual(["lease-lost", "failed", "completed"]);
    expect((results[1] as { error: Error }).error.message).toBe("constraint violated");
    expect(await harness.countBusinessRows("stale")).toBe(0);
    expect(await harness.countBusinessRows("b")).toBe(0);
    expect(await harness.countBusinessRows("c")).toBe(1);
    expect((await store.getMessage(b!.messageId))?.status).toBe("processing"); // still b's to fail or retry
    await expectFinished(store, factory, c!.messageId);
    expect(await store.getMessage(stale.messageId)).toMatchObject({ status: "processing", lockedBy: "worker-b", leaseToken: fresh.token });
    const completions = (await store.auditTrail()).filter((e) => e.action === "complete");
    expect(completions.map((e) => e.messageId)).toEqual([c!.messageId]);
  });

  it("survives a business write the database refuses (on PostgreSQL that aborts the transaction): only its member is undone", async () => {
    const { store, clock, harness } = ctx();
    await enqueueMessages(store, clock, 3);
    const [a, b, c] = await store.claim("worker-a", { limit: 3, leaseMs: LEASE_MS });
    const results = await store.completeMany([
      { lease: a!, finalize: (tx: unknown) => harness.businessWrite(tx, "a") },
      // NOT NULL violation, raised by the database itself after a write that succeeded.
      {
        lease: b!,
        finalize: async (tx: unknown) => {
          await harness.businessWrite(tx, "b");
          await harness.businessWrite(tx, null as unknown as string);
        },
      },
      { lease: c!, finalize: (tx: unknown) => harness.businessWrite(tx, "c") },
    ]);
    expect(results.map((r) => r.outcome)).toEqual(["completed", "failed", "completed"]);
    expect([await harness.countBusinessRows("a"), await harness.countBusinessRows("b"), await harness.countBusinessRows("c")]).toEqual([1, 0, 1]);
    expect((await store.getMessage(b!.messageId))?.status).toBe("processing");
    await expectFinished(store, factory, c!.messageId);
  });

  it("runs each business write once when all succeed; after a failure the members run again, the failed one does not", async () => {
    const { store, clock, harness } = ctx();
    await enqueueMessages(store, clock, 5);
    const leases = await store.claim("worker-a", { limit: 5, leaseMs: LEASE_MS });
    const calls: string[] = [];
    const write = (label: string) => (tx: unknown) => {
      calls.push(label);
      return harness.businessWrite(tx, label);
    };
    const fail = (label: string) => async () => {
      calls.push(label);
      throw new Error(`${label} refused`);
    };
    const [a, b, c, d, e] = leases;
    const first = await store.completeMany([
      { lease: a!, finalize: write("a") },
      { lease: b!, finalize: write("b") },
    ]);
    expect(first.map((r) => r.outcome)).toEqual(["completed", "completed"]);
    expect(calls).toEqual(["a", "b"]);

    calls.length = 0;
    const results = await store.completeMany([
      { lease: c!, finalize: write("c") },
      { lease: d!, finalize: fail("d") },
      { lease: e!, finalize: fail("e") },
    ]);
    expect(results.map((r) => r.outcome)).toEqual(["completed", "failed", "failed"]);
    expect(results.slice(1).map((r) => (r as { error: Error }).error.message)).toEqual(["d refused", "e refused"]);
    // c's first run was rolled back with d's failure; d is not run again; e fails in its own savepoint.
    expect(calls).toEqual(["c", "d", "c", "e"]);
    expect([await harness.countBusinessRows("c"), await harness.countBusinessRows("d"), await harness.countBusinessRows("e")]).toEqual([1, 0, 0]);
    await expectFinished(store, factory, c!.messageId);
    expect((await store.getMessage(d!.messageId))?.status).toBe("processing");
    expect((await store.getMessage(e!.messageId))?.status).toBe("processing");
    const completions = (await store.auditTrail()).filter((entry) => entry.action === "complete");
    expect(completions.map((entry) => entry.messageId).sort()).toEqual([a!.messageId, b!.messageId, c!.messageId].sort());
  });

  it("fails the only member with a business write alone when it throws, and commits the members without one", async () => {
    const { store, clock } = ctx();
    await enqueueMessages(store, clock, 3);
    const [a, b, c] = await store.claim("worker-a", { limit: 3, leaseMs: LEASE_MS });
    const results = await store.completeMany([
      { lease: a! },
      {
        lease: b!,
        finalize: async () => {
          throw new Error("b refused");
        },
      },
      { lease: c! },
    ]);
    expect(results.map((r) => r.outcome)).toEqual(["completed", "failed", "completed"]);
    expect((await store.getMessage(b!.messageId))?.status).toBe("processing");
  });

  it("writes the members that share a writer (finalizeTogether) in one call; a failing shared write sends each member round alone", async () => {
    const { store, clock, harness } = ctx();
    await enqueueMessages(store, clock, 6);
    const leases = await store.claim("worker-a", { limit: 6, leaseMs: LEASE_MS });
    const calls: string[][] = [];
    const writer = async (tx: unknown, labels: readonly string[]) => {
      calls.push([...labels]);
      for (const label of labels) {
        if (label.startsWith("bad")) throw new Error(`${label} refused`);
        await harness.businessWrite(tx, label);
      }
    };
    const [a, b, c, d, e, f] = leases;
    const own = (tx: unknown) => {
      calls.push(["own"]);
      return harness.businessWrite(tx, "own");
    };
    const first = await store.completeMany([
      { lease: a!, finalize: finalizeTogether(writer, "a") },
      { lease: b!, finalize: own },
      { lease: c!, finalize: finalizeTogether(writer, "c") },
    ]);
    expect(first.map((r) => r.outcome)).toEqual(["completed", "completed", "completed"]);
    expect(calls).toEqual([["a", "c"], ["own"]]); // one call for a and c, at a's place
    expect(await harness.countBusinessRows("a")).toBe(1);

    calls.length = 0;
    const second = await store.completeMany([
      { lease: d!, finalize: finalizeTogether(writer, "d") },
      { lease: e!, finalize: finalizeTogether(writer, "bad-e") },
      { lease: f!, finalize: finalizeTogether(writer, "f") },
    ]);
    expect(second.map((r) => r.outcome)).toEqual(["completed", "failed", "completed"]);
    expect((second[1] as { error: Error }).error.message).toBe("bad-e refused");
    expect(calls).toEqual([["d", "bad-e", "f"], ["d"], ["bad-e"], ["f"]]);
    expect([await harness.countBusinessRows("d"), await harness.countBusinessRows("f")]).toEqual([1, 1]);
    expect((await store.getMessage(e!.messageId))?.status).toBe("processing");
  });

  it("refuses a finalizeTogether without a writer function, naming what it takes", () => {
    expect(() => finalizeTogether(undefined as unknown as () => void, "x")).toThrow(InvalidArgumentError);
    expect(() => finalizeTogether("write" as unknown as () => void, "x")).toThrow(
      /needs a writer function, \(tx, items\) => …, made once and shared \(got string\)/,
    );
  });

  it("runs a finalizeTogether write alone as a one-item call when its completion is alone", async () => {
    const { store, clock, harness } = ctx();
    await enqueueMessages(store, clock, 1);
    const lease = await claimNext(store, "worker-a", LEASE_MS);
    const calls: (readonly string[])[] = [];
    const result = await store.complete(
      lease,
      finalizeTogether(async (tx: unknown, labels: readonly string[]) => {
        calls.push(labels);
        for (const label of labels) await harness.businessWrite(tx, label);
      }, "solo"),
    );
    expect(result.outcome).toBe("completed");
    expect(calls).toEqual([["solo"]]);
    expect(await harness.countBusinessRows("solo")).toBe(1);
  });

  it("refuses a lease whose token no claim could have issued, before writing anything", async () => {
    const { store, clock, harness } = ctx();
    await enqueueMessages(store, clock, 2);
    const [a, b] = await store.claim("worker-a", { limit: 2, leaseMs: LEASE_MS });
    const forged = { ...b!, token: 1.5 };
    await expect(store.completeMany([{ lease: a!, finalize: (tx: unknown) => harness.businessWrite(tx, "a") }, { lease: forged }])).rejects.toThrow(
      InvalidArgumentError,
    );
    await expect(store.complete(forged)).rejects.toThrow(/lease\.token must be a whole number >= 1 \(got 1\.5\)/);
    await expect(store.renew(forged, LEASE_MS)).rejects.toThrow(InvalidArgumentError);
    await expect(store.fail(forged, new Error("x"), "dead")).rejects.toThrow(InvalidArgumentError);
    await expect(store.release(forged)).rejects.toThrow(InvalidArgumentError);
    expect(await harness.countBusinessRows("a")).toBe(0);
    expect((await store.getMessage(a!.messageId))?.status).toBe("processing");
    expect((await store.getMessage(b!.messageId))?.status).toBe("processing");
  });

  it("reports each outcome on the event stream, and an empty group does nothing", async () => {
    const { store, clock } = ctx();
    await enqueueMessages(store, clock, 2);
    const leases = await store.claim("worker-a", { limit: 2, leaseMs: LEASE_MS });
    const events: string[] = [];
    store.events.subscribe((e) => events.push(`${e.type}:${"messageId" in e ? e.messageId : ""}`));
    expect(await store.completeMany([])).toEqual([]);
    await store.completeMany(leases.map((lease) => ({ lease })));
    expect(events).toEqual(leases.map((l) => `completed:${l.messageId}`));
  });
});

describeEachStore("group commit without business writes", (factory) => {
  const ctx = useStoreHarness(factory);

  it("completes the held leases of the group and refuses the stale one, auditing only what committed", async () => {
    const { store, clock } = ctx();
    await enqueueMessages(store, clock, 3);
    const stale = await claimNext(store, "worker-a", LEASE_MS);
    const [b, c] = await store.claim("worker-a", { limit: 2, leaseMs: LEASE_MS * 10 });
    clock.advance(LEASE_MS);
    const fresh = await claimNext(store, "worker-b", LEASE_MS);
    const results = await store.completeMany([{ lease: b! }, { lease: stale }, { lease: c! }]);
    expect(results.map((r) => [r.outcome, r.messageId])).toEqual([
      ["completed", b!.messageId],
      ["lease-lost", stale.messageId],
      ["completed", c!.messageId],
    ]);
    expect(await store.getMessage(stale.messageId)).toMatchObject({ status: "processing", leaseToken: fresh.token });
    const completions = (await store.auditTrail()).filter((e) => e.action === "complete");
    expect(completions.map((e) => [e.messageId, e.token, e.owner]).sort()).toEqual(
      [
        [b!.messageId, b!.token, "worker-a"],
        [c!.messageId, c!.token, "worker-a"],
      ].sort(),
    );
  });
});

describeEachStore("group commit: owners written as they are", (factory) => {
  const ctx = useStoreHarness(factory);

  it("audits each member's owner exactly, whatever characters it holds", async () => {
    const { store, clock } = ctx();
    const owners = ['quote " and backslash \\', "comma, {braces} and space", "NULL", "plain", "plain"];
    await enqueueMessages(store, clock, owners.length);
    const leases = [];
    for (const owner of owners) leases.push(await claimNext(store, owner, LEASE_MS));
    const results = await store.completeMany(leases.map((lease) => ({ lease })));
    expect(results.map((r) => r.outcome)).toEqual(owners.map(() => "completed"));
    const completions = (await store.auditTrail()).filter((e) => e.action === "complete");
    expect(completions.map((e) => [e.messageId, e.owner]).sort()).toEqual(leases.map((l, i) => [l.messageId, owners[i]]).sort());
  });
});

describeEachStore("group commit: a stale and a fresh lease of one message", (factory) => {
  const ctx = useStoreHarness(factory);

  it("completes the fresh lease and refuses the stale one when both are in the same group", async () => {
    const { store, clock } = ctx();
    await enqueueMessages(store, clock, 1);
    const stale = await claimNext(store, "worker-a", LEASE_MS);
    clock.advance(LEASE_MS);
    const fresh = await claimNext(store, "worker-a", LEASE_MS);
    const results = await store.completeMany([{ lease: stale }, { lease: fresh }]);
    expect(results.map((r) => r.outcome)).toEqual(["lease-lost", "completed"]);
    const completions = (await store.auditTrail()).filter((e) => e.action === "complete");
    expect(completions.map((e) => e.token)).toEqual([fresh.token]);
  });
});
