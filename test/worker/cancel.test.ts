// Cancelling a running message (store.cancel with running: true) while a Worker runs it: through
// the worker's own store its handler's signal aborts at once; through another store (another
// process) at the lease's next renewal. Either way its result, business write included, is refused.

import { expect, it } from "vitest";
import { LeaseLostError } from "../../src/outbox/errors.js";
import { describeEachStore, enqueueMessage, expectCancelled, useStoreHarness } from "../conformance/stores.js";
import { EventLog, useWorkers, waitForSleepers } from "./support.js";

const LEASE_MS = 3_000;
const RENEW_MS = 1_000;
const NEVER_POLL_MS = 1_000_000;

describeEachStore("worker: a running message cancelled", (factory) => {
  const ctx = useStoreHarness(factory);
  const workers = useWorkers(() => ctx().clock);

  for (const through of ["the worker's store", "another store"] as const) {
    it(`aborts the handler's signal (${through === "the worker's store" ? "at once" : "at the next renewal"}) and refuses its result, through ${through}`, async () => {
      const { store, clock, harness } = ctx();
      const log = new EventLog(store);
      const message = await enqueueMessage(store);
      const slow = workers.blocking();
      await workers.start({
        store,
        clock,
        name: "busy-worker",
        handlers: { "test.message": slow.handler },
        leaseMs: LEASE_MS,
        renewIntervalMs: RENEW_MS,
        pollIntervalMs: NEVER_POLL_MS,
        wakeOnNewMessages: false,
      });
      await slow.waitForCalls(1);
      await waitForSleepers(clock, 2); // the claim loop's poll and the handler's heartbeat
      const canceller = through === "the worker's store" ? store : await harness.connect();
      const done = await canceller.cancel(message.id, { running: true, reason: "operator" });
      expect(done.runningOwner).toBe("busy-worker");
      if (through === "another store") {
        expect(slow.call(0).signal.aborted).toBe(false); // this process has not heard of it yet
        clock.advance(RENEW_MS);
        await log.waitFor("lease-lost");
      }
      expect(slow.call(0).signal.aborted).toBe(true);
      expect(slow.call(0).signal.reason).toBeInstanceOf(LeaseLostError);
      expect(String((slow.call(0).signal.reason as Error).message)).toMatch(
        through === "the worker's store" ? /the message was cancelled \(cancel: operator\)/ : /a heartbeat found it gone/,
      );
      // A handler that ignores its signal and returns: its result and business write are refused.
      slow.call(0).release({ finalize: (tx) => harness.businessWrite(tx, "cancelled-result") });
      await log.waitFor("processing-finished");
      expect(log.of("processing-finished").at(-1)).toMatchObject({ messageId: message.id, result: "lease-lost" });
      expect(await harness.countBusinessRows("cancelled-result")).toBe(0);
      await expectCancelled(store, factory, message.id, { lockedBy: "cancel: operator", leaseToken: 1 });
      if (canceller !== store) await (canceller as { close(): Promise<void> }).close();
    });
  }
});
