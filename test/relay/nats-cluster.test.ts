// The NATS publisher against a cluster of three nats-servers on loopback (the relay chaos run's
// own), the stream replicated on all three. While the node leading the stream is SIGKILLed and the
// other two elect a new leader, a publish may fail; it must fail as "broker unavailable" (held,
// no attempt spent), never as an ordinary failure that counts towards the message going dead, and
// every message must be in the stream once when the cluster is whole again.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { type ChaosBroker, chaosBroker } from "../../src/chaos/chaos-brokers.js";
import { NatsPublisher } from "../../src/relay/nats.js";
import { BrokerUnavailableError } from "../../src/relay/publisher.js";
import { outgoing } from "./support.js";
import { natsAvailable } from "../support/services.js";

const natsUp = await natsAvailable();
const dir = mkdtempSync(join(tmpdir(), "wassal-nats-cluster-"));
let broker: ChaosBroker | undefined;

afterAll(async () => {
  await broker?.stop();
  await broker?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe.skipIf(!natsUp)("NATS JetStream, a three-node cluster", () => {
  it("publishes through the SIGKILL of the stream leader's node: each failure is 'unavailable', and every message is stored once", async () => {
    broker = await chaosBroker("nats-cluster", dir, "cl", 2_000);
    await broker.start();
    await broker.prepare();
    const subject = broker.destination.replace("{type}", "t");
    const publisher = await NatsPublisher.open({ servers: broker.url.split(","), ackTimeoutMs: 2_000 });
    const signal = new AbortController().signal;
    const failures = new Map<string, number>();
    let n = 0;
    try {
      // Publish one message at a time, each until the broker takes it, while the fault runs.
      const publishOne = async (id: number) => {
        const deadline = Date.now() + 60_000;
        for (;;) {
          if (Date.now() > deadline) throw new Error(`message ${id} was not taken within 60 s: ${JSON.stringify([...failures])}`);
          try {
            return await publisher.publish(outgoing(id, subject), signal);
          } catch (error) {
            const kind = error instanceof BrokerUnavailableError ? "unavailable" : `failed: ${(error as Error).message}`;
            failures.set(kind, (failures.get(kind) ?? 0) + 1);
            await new Promise((resolve) => setTimeout(resolve, 20));
          }
        }
      };
      let faulted = false;
      const fault = broker.fault().then((what) => {
        faulted = true;
        return what;
      });
      while (!faulted) await publishOne(n++);
      for (let more = 0; more < 20; more += 1) await publishOne(n++);
      expect(await fault).toMatch(/^SIGKILLed NATS node\d \(the stream's leader\)/);
    } finally {
      await publisher.close();
    }
    // A PubAck that times out is ambiguous (stored or not), and counts as a failure by design; any
    // other failure during the election would spend an attempt of a message the broker never refused.
    expect([...failures.keys()].filter((kind) => kind !== "unavailable" && !/timeout/i.test(kind))).toEqual([]);
    expect(await broker.stored()).toBe(n);
  }, 90_000);
});
