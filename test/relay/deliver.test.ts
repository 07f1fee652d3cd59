// The delivery routine every consumer shares: the handler's own failures spend attempts and end in
// giving the message up; the consumer's database failing spends none and never gives a message up;
// an acknowledgement or a report that fails does not stop the consumer.

import { describe, expect, it } from "vitest";
import { type ConsumerStats, type DeliveredMessage, deliver } from "../../src/relay/deliver.js";
import type { Inbox } from "../../src/relay/inbox.js";

const message: DeliveredMessage = { id: "m-1", type: "t", key: null, keySeq: null, headers: {}, body: {}, source: "s", redelivered: false };
const retry = { maxAttempts: 3, delayMs: 0 };
const fresh = (): ConsumerStats => ({ applied: 0, duplicates: 0, failed: 0, terminated: 0, early: 0, late: 0 });

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
    await deliver(message, b, inbox(10), async () => undefined, retry, stats, { onError: (_e, _m, final) => void errors.push(final) });
    expect(b.calls).toEqual(["ack"]);
    expect(stats).toEqual({ applied: 1, duplicates: 0, failed: 0, terminated: 0, early: 0, late: 0 });
    expect(errors).toEqual(Array(10).fill(false));
  });

  it("the handler failing maxAttempts times gives the message up, reported as final", async () => {
    const b = broker();
    const stats = fresh();
    const errors: boolean[] = [];
    await deliver(message, b, inbox(0), async () => Promise.reject(new Error("bad data")), retry, stats, {
      onError: (_e, _m, final) => void errors.push(final),
    });
    expect(b.calls).toEqual(["give up: the handler failed 3 times: bad data"]);
    expect(stats).toEqual({ applied: 0, duplicates: 0, failed: 3, terminated: 1, early: 0, late: 0 });
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
      deliver(message, failingBroker, inbox(1), async () => undefined, retry, stats, {
        onError: () => {
          throw new Error("a report that throws");
        },
      }),
    ).resolves.toBeUndefined();
    expect(stats.applied).toBe(1);
  });

  describe("a keyed message that arrives before an earlier number of its key", () => {
    const keyed: DeliveredMessage = { ...message, key: "k", keySeq: 7 };
    /** An inbox that answers "early" `times` times (waiting for number 6), then applies the message; it records what it was handed. */
    function orderedInbox(times: number) {
      const handed: unknown[] = [];
      let left = times;
      const fake = {
        handed,
        handle: async (m: unknown, effect: (tx: string) => unknown) => {
          handed.push(m);
          if (left > 0) {
            left -= 1;
            return { duplicate: false, early: true, waitingFor: 6 };
          }
          return { duplicate: false, early: false, result: await effect("tx") };
        },
      };
      return fake as typeof fake & Inbox<string>;
    }

    it("is handed back to come again (defer) where the broker can, without applying or acknowledging it; counted and reported once", async () => {
      const b = { ...broker(), defer: () => void b.calls.push("defer") };
      const stats = fresh();
      const early: number[] = [];
      let ran = 0;
      const fake = orderedInbox(1);
      await deliver(keyed, b, fake, async () => void ran++, retry, stats, { onEarly: (_m, waitingFor) => void early.push(waitingFor) });
      expect(b.calls).toEqual(["defer"]);
      expect(ran).toBe(0);
      expect(stats).toEqual({ applied: 0, duplicates: 0, failed: 0, terminated: 0, early: 1, late: 0 });
      expect(early).toEqual([6]);
      expect(fake.handed).toEqual([keyed]); // the inbox got the key and its number
    });

    it("is held in place and checked again where the broker cannot defer: applied once its turn comes, then acknowledged", async () => {
      const b = broker();
      const stats = fresh();
      const early: number[] = [];
      await deliver(keyed, b, orderedInbox(3), async () => undefined, retry, stats, { onEarly: (_m, n) => void early.push(n) });
      expect(b.calls).toEqual(["ack"]);
      expect(stats).toEqual({ applied: 1, duplicates: 0, failed: 0, terminated: 0, early: 1, late: 0 });
      expect(early).toEqual([6]);
    });

    it("held in place by a stopping consumer, it is given back to the broker at once", async () => {
      let asked = 0; // the consumer stops once the first try has begun: the message is held in place
      const b = { ...broker(), stopping: () => asked++ > 0, giveBack: () => void b.calls.push("give back") };
      const stats = fresh();
      await deliver(keyed, b, orderedInbox(100), async () => undefined, retry, stats);
      expect(b.calls).toEqual(["give back"]);
      expect(stats.early).toBe(1);
    });

    it("taken by a consumer already stopping, it is given back without a try", async () => {
      const b = { ...broker(), stopping: () => true, giveBack: () => void b.calls.push("give back") };
      const stats = fresh();
      let tries = 0;
      await deliver(
        keyed,
        b,
        orderedInbox(100),
        async () => {
          tries += 1;
        },
        retry,
        stats,
      );
      expect(b.calls).toEqual(["give back"]);
      expect(tries).toBe(0);
      expect(stats).toEqual(fresh());
    });
  });

  it("a keyed message given up after maxAttempts lets its key move on: its number is recorded with no effect, then it is given up", async () => {
    const b = broker();
    const stats = fresh();
    const effects: string[] = [];
    let transactions = 0;
    const fake = {
      handle: async (_m: unknown, effect: (tx: string) => unknown) => {
        transactions += 1;
        return { duplicate: false, early: false, result: await effect("tx") };
      },
    } as unknown as Inbox<string>;
    const keyed: DeliveredMessage = { ...message, key: "k", keySeq: 1 };
    await deliver(
      keyed,
      b,
      fake,
      async () => {
        effects.push("handler");
        throw new Error("bad data");
      },
      retry,
      stats,
    );
    // Three tries of the handler, then a fourth transaction that records the number without it.
    expect(effects).toEqual(["handler", "handler", "handler"]);
    expect(transactions).toBe(4);
    expect(b.calls).toEqual(["give up: the handler failed 3 times: bad data"]);
    expect(stats).toMatchObject({ failed: 3, terminated: 1 });
  });

  it("a message applied late (its number given twice) is counted and reported, and acknowledged", async () => {
    const b = broker();
    const stats = fresh();
    const late: string[] = [];
    const fake = {
      handle: async (_m: unknown, effect: (tx: string) => unknown) => ({ duplicate: false, early: false, late: true, result: await effect("tx") }),
    } as unknown as Inbox<string>;
    await deliver({ ...message, key: "k", keySeq: 2 }, b, fake, async () => undefined, retry, stats, { onLate: (m) => void late.push(m.id) });
    expect(b.calls).toEqual(["ack"]);
    expect(stats).toEqual({ applied: 1, duplicates: 0, failed: 0, terminated: 0, early: 0, late: 1 });
    expect(late).toEqual(["m-1"]);
  });

  it("a keyed message given up is given up only once its key's number is recorded: a database failing meanwhile is retried, spending nothing", async () => {
    const b = broker();
    const stats = fresh();
    let recordFailures = 2;
    let calls = 0;
    const fake = {
      handle: async (_m: unknown, effect: (tx: string) => unknown) => {
        calls += 1;
        if (calls > 3 && recordFailures > 0) {
          recordFailures -= 1;
          throw new Error("connection terminated");
        }
        return { duplicate: false, early: false, late: false, result: await effect("tx") };
      },
    } as unknown as Inbox<string>;
    await deliver({ ...message, key: "k", keySeq: 1 }, b, fake, async () => Promise.reject(new Error("bad data")), retry, stats);
    expect(calls).toBe(6); // three tries, two failed records, the record that committed
    expect(b.calls).toEqual(["give up: the handler failed 3 times: bad data"]);
  });
});
