// The RabbitMQ publisher against a cluster of three RabbitMQ nodes on loopback (the relay chaos
// run's own), a quorum queue replicated on all three. While the node leading the queue is
// SIGKILLed and the other two elect a new leader, a publish may fail; it must fail as "broker
// unavailable" (held, no attempt spent), never as an ordinary failure that counts towards the
// message going dead, and every message must be in the queue when the cluster is whole again.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import amqp from "amqplib";
import { afterAll, describe, expect, it } from "vitest";
import { type ChaosBroker, chaosBroker } from "../../src/chaos/chaos-brokers.js";
import { RabbitMqPublisher } from "../../src/relay/rabbitmq.js";
import { BrokerUnavailableError } from "../../src/relay/publisher.js";
import { outgoing } from "./support.js";
import { rabbitAvailable } from "../support/services.js";

const rabbitUp = await rabbitAvailable();
const dir = mkdtempSync(join(tmpdir(), "wassal-rabbitmq-cluster-"));
let broker: ChaosBroker | undefined;

afterAll(async () => {
  await broker?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe.skipIf(!rabbitUp)("RabbitMQ, a three-node cluster with a quorum queue", () => {
  it("publishes through the SIGKILL of the queue leader's node: each failure is 'unavailable', and every message is in the queue", async () => {
    broker = await chaosBroker("rabbitmq-cluster", dir, "cl", 2_000);
    await broker.start();
    await broker.prepare();
    const publisher = await RabbitMqPublisher.open({ url: broker.url, confirmTimeoutMs: 5_000 });
    await publisher.connected();
    const signal = new AbortController().signal;
    const failures = new Map<string, number>();
    let n = 0;
    try {
      // Publish one message at a time, each until the broker confirms it, while the fault runs.
      const publishOne = async (id: number) => {
        const deadline = Date.now() + 60_000;
        for (;;) {
          if (Date.now() > deadline) throw new Error(`message ${id} was not confirmed within 60 s: ${JSON.stringify([...failures])}`);
          try {
            return await publisher.publish(outgoing(id, broker?.destination ?? ""), signal);
          } catch (error) {
            const kind = error instanceof BrokerUnavailableError ? "unavailable" : `failed: ${(error as Error).message}`;
            failures.set(kind, (failures.get(kind) ?? 0) + 1);
            await new Promise((resolve) => setTimeout(resolve, 20));
          }
        }
      };
      let faulted = false;
      const fault = broker.fault().finally(() => {
        faulted = true; // a fault that fails ends the publishing too, and fails the test below
      });
      fault.catch(() => undefined);
      while (!faulted) await publishOne(n++);
      for (let more = 0; more < 20; more += 1) await publishOne(n++);
      expect(await fault).toMatch(/^SIGKILLed RabbitMQ wassalcln\d@localhost \(the quorum queue's leader\)/);
    } finally {
      await publisher.close();
    }
    // Any failure but "unavailable" would spend an attempt of a message the broker never refused.
    expect([...failures.keys()].filter((kind) => kind !== "unavailable")).toEqual([]);
    // Every message is in the queue: one copy each, or two of one whose confirm was lost with the
    // connection to the killed node and was published again (a consumer's inbox absorbs those).
    const seen = new Map<string, number>();
    const model = await amqp.connect(broker.url.split(",")[1] as string);
    try {
      const channel = await model.createChannel();
      const queue = broker.destination.split("/")[0] as string; // the run's queue is named as its exchange
      for (;;) {
        const got = await channel.get(queue, { noAck: true });
        if (got === false) break;
        const id = String(got.properties.messageId);
        seen.set(id, (seen.get(id) ?? 0) + 1);
      }
    } finally {
      await model.close();
    }
    expect(seen.size).toBe(n);
    const copies = [...seen.values()].reduce((sum, c) => sum + c, 0);
    expect(copies - n).toBeLessThanOrEqual(failures.get("unavailable") ?? 0);
  }, 240_000);
});
