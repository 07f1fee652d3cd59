// The delivery routine every consumer shares: the handler's own failures spend attempts and end in
// giving the message up; the consumer's database failing spends none and never gives a message up;
// an acknowledgement or a report that fails does not stop the consumer.

import { describe, expect, it } from "vitest";
import { type ConsumerStats, type DeliveredMessage, deliver } from "../../src/relay/deliver.js";
import type { Inbox } from "../../src/relay/inbox.js";

const message: DeliveredMessage = { id: "m-1", type: "t", key: null, headers: {}, body: {}, source: "s", redelivered: false };
const retry = { maxAttempts: 3, delayMs: 0 };
const fresh = (): ConsumerStats => ({ applied: 0, duplicates: 0, failed: 0, terminated: 0 });

/** An inbox whose transaction fails `storeFailures` times before it runs the effect. */
function inbox(storeFailures: number): Inbox<string> {
  let failures = storeFailures;
  return {
    handle: async (_id: string, effect: (tx: string) => unknown) => {
      if (failures > 0) {
        failures -= 1;
        throw new Error("connection terminated");
      }
      return { duplicate: false, result: await effect("tx") };
    },
  } as unknown as Inbox<string>;
}

function broker() {
  const calls: string[] = [];
  return { calls, ack: () => void calls.push("ack"), giveUp: (reason: string) => void calls.push(`give up: ${reason}`) };
}

describe("deliver", () => {
  it("the consumer's database failing more times than maxAttempts spends no attempt: applied once it works, then acked", async () => {
    const b = broker();
    const stats = fresh();
    const errors: boolean[] = [];
    await deliver(
      message,
      b,
      inbox(10),
      async () => undefined,
      retry,
      stats,
      (_e, _m, final) => errors.push(final),
    );
    expect(b.calls).toEqual(["ack"]);
    expect(stats).toEqual({ applied: 1, duplicates: 0, failed: 0, terminated: 0 });
    expect(errors).toEqual(Array(10).fill(false));
  });

  it("the handler failing maxAttempts times gives the message up, reported as final", async () => {
    const b = broker();
    const stats = fresh();
    const errors: boolean[] = [];
    await deliver(
      message,
      b,
      inbox(0),
      async () => Promise.reject(new Error("bad data")),
      retry,
      stats,
      (_e, _m, final) => errors.push(final),
    );
    expect(b.calls).toEqual(["give up: the handler failed 3 times: bad data"]);
    expect(stats).toEqual({ applied: 0, duplicates: 0, failed: 3, terminated: 1 });
    expect(errors).toEqual([false, false, true]);
  });

  it("a stopping consumer leaves a message waiting on its database unacknowledged (the broker delivers it again)", async () => {
    const b = { ...broker(), stopping: () => true };
    const stats = fresh();
    await deliver(message, b, inbox(1), async () => undefined, retry, stats);
    expect(b.calls).toEqual([]);
    expect(stats.applied).toBe(0);
  });

  it("an acknowledgement and a report that throw do not stop the consumer", async () => {
    const stats = fresh();
    const failingBroker = {
      ack: () => {
        throw new Error("channel closed");
      },
      giveUp: () => undefined,
    };
    await expect(
      deliver(
        message,
        failingBroker,
        inbox(1),
        async () => undefined,
        retry,
        stats,
        () => {
          throw new Error("a report that throws");
        },
      ),
    ).resolves.toBeUndefined();
    expect(stats.applied).toBe(1);
  });
});
