// The brokers a relay chaos run starts for itself, each on a free port with a data folder of its
// own, so that the run can stop and start it at will without touching a shared one: a nats-server
// with JetStream, a cluster of three of them with the stream on all three, a RabbitMQ node, a
// cluster of three with a quorum queue on all three (rabbitmq-cluster.ts), or a redis-server whose
// append-only file survives its restart.
// Each says where the relays publish (--to, --destination) and what the consumer processes
// consume (see consumer-process.ts).

import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { importOptional } from "../outbox/optional.js";
import type { ChaosConsumerBroker } from "./consumer-process.js";
import { freePort, waitForPort } from "./ports.js";
import { rabbitClusterBroker } from "./rabbitmq-cluster.js";

export type ChaosBrokerName = "nats" | "nats-cluster" | "rabbitmq" | "rabbitmq-cluster" | "redis";
export const CHAOS_BROKERS: readonly ChaosBrokerName[] = ["nats", "nats-cluster", "rabbitmq", "rabbitmq-cluster", "redis"];

/** A broker of the run's own: its own port and data folder, stopped and started at will. */
export interface ChaosBroker {
  readonly name: ChaosBrokerName;
  /** The relays' --to URL. */
  readonly url: string;
  /** The relays' --destination. */
  readonly destination: string;
  start(): Promise<void>;
  /**
   * True when close() may be called while start() is still under way (it then stops what was
   * started and starts nothing more): the run stops waiting for the start at a signal.
   */
  readonly closesWhileStarting?: boolean;
  /** Stops it (gracefully); what it keeps on disk stays for the next start. */
  stop(): Promise<void>;
  /**
   * The mid-run fault: one server stops and comes back. A single server is stopped for a second
   * and started again; a cluster's node holding the stream's leader is SIGKILLed and restarted.
   * Returns what it did, for the run's progress.
   */
  fault(): Promise<string>;
  /** Creates where the messages go (a stream; an exchange and a durable queue; a stream and its group). */
  prepare(): Promise<void>;
  /** What the consumer processes consume. */
  readonly consumer: ChaosConsumerBroker;
  /** Messages the broker stored, when it keeps them after consumption (a stream); else null. */
  stored(): Promise<number | null>;
  /** Closes the run's own connection to it and removes what it keeps outside the run's folder. */
  close(): Promise<void>;
}

/** Starts nothing yet: `start()` does. `dir` is the broker's data folder (inside the run's). */
export function chaosBroker(name: ChaosBrokerName, dir: string, runId: string, ackWaitMs: number): Promise<ChaosBroker> {
  if (name === "nats") return natsBroker(dir, runId, ackWaitMs);
  if (name === "nats-cluster") return natsClusterBroker(dir, runId, ackWaitMs);
  if (name === "rabbitmq") return rabbitBroker(runId);
  if (name === "rabbitmq-cluster") return rabbitClusterBroker(dir, runId);
  return redisBroker(dir, runId);
}

/** Stops a child server (SIGTERM, or SIGKILL for a crash) and waits for it to exit. */
async function terminate(child: ChildProcess | undefined, signal: NodeJS.Signals = "SIGTERM"): Promise<void> {
  if (child === undefined || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once("exit", resolve));
  child.kill(signal);
  await exited;
}

/** A single server's fault: stopped for a second, then started again. */
async function restart(broker: { stop(): Promise<void>; start(): Promise<void> }, name: string): Promise<string> {
  await broker.stop();
  await new Promise((resolve) => setTimeout(resolve, 1_000));
  await broker.start();
  return `stopped the ${name} broker for a second and started it again`;
}

async function natsBroker(dir: string, runId: string, ackWaitMs: number): Promise<ChaosBroker> {
  const port = await freePort();
  const url = `nats://127.0.0.1:${port}`;
  const stream = `CHAOS_${runId.toUpperCase()}`;
  const transport = await importOptional<typeof import("@nats-io/transport-node")>("@nats-io/transport-node", "the relay chaos run");
  const jetstream = await importOptional<typeof import("@nats-io/jetstream")>("@nats-io/jetstream", "the relay chaos run");
  let child: ChildProcess | undefined;
  let admin: Awaited<ReturnType<typeof transport.connect>> | undefined;
  return {
    name: "nats",
    url,
    destination: `${stream}.{type}`,
    // Every consumer process binds the same durable consumer (the first one creates it).
    consumer: { kind: "nats", servers: url, stream, durable: "chaos", ackWaitMs },
    async start() {
      child = spawn("nats-server", ["-a", "127.0.0.1", "-p", String(port), "-js", "-sd", dir], { stdio: "ignore" });
      child.once("error", () => undefined);
      await waitForPort(port, true, "nats-server (it must be on the PATH)", 15_000);
    },
    fault(this: ChaosBroker) {
      return restart(this, "NATS");
    },
    async stop() {
      const running = child;
      child = undefined;
      await terminate(running);
    },
    async prepare() {
      admin = await transport.connect({ servers: url, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
      await (await jetstream.jetstreamManager(admin)).streams.add({ name: stream, subjects: [`${stream}.>`] });
    },
    async stored() {
      if (admin === undefined) return null;
      return (await (await jetstream.jetstreamManager(admin)).streams.info(stream)).state.messages;
    },
    async close() {
      await admin?.close();
    },
  };
}

/** One node of the run's NATS cluster: its client and cluster ports and its JetStream folder. */
interface NatsNode {
  readonly name: string;
  readonly port: number;
  readonly clusterPort: number;
  readonly dir: string;
  child?: ChildProcess | undefined;
}

/**
 * Three nats-server processes on loopback, routed to each other as one cluster, each with its own
 * JetStream folder; the stream is replicated on all three. The fault SIGKILLs the node that leads
 * the stream, so the others elect a new leader while the relays publish, and then restarts it.
 */
async function natsClusterBroker(dir: string, runId: string, ackWaitMs: number): Promise<ChaosBroker> {
  const nodes: NatsNode[] = [];
  for (let n = 0; n < 3; n += 1) nodes.push({ name: `node${n}`, port: await freePort(), clusterPort: await freePort(), dir: join(dir, `node${n}`) });
  const servers = nodes.map((node) => `nats://127.0.0.1:${node.port}`);
  const stream = `CHAOS_${runId.toUpperCase()}`;
  const transport = await importOptional<typeof import("@nats-io/transport-node")>("@nats-io/transport-node", "the relay chaos run");
  const jetstream = await importOptional<typeof import("@nats-io/jetstream")>("@nats-io/jetstream", "the relay chaos run");
  let admin: Awaited<ReturnType<typeof transport.connect>> | undefined;
  let faults = 0;
  const startNode = (node: NatsNode): void => {
    const routes = nodes.filter((other) => other !== node).map((other) => `nats://127.0.0.1:${other.clusterPort}`);
    const args = ["-a", "127.0.0.1", "-p", String(node.port), "-js", "-sd", node.dir, "-n", node.name, "--cluster_name", `wassal-${runId}`];
    node.child = spawn("nats-server", [...args, "--cluster", `nats://127.0.0.1:${node.clusterPort}`, "--routes", routes.join(",")], { stdio: "ignore" });
    node.child.once("error", () => undefined);
  };
  const manager = async () => {
    if (admin === undefined) throw new Error("the NATS cluster is not prepared yet");
    return jetstream.jetstreamManager(admin);
  };
  // A request to the cluster times out while it elects a leader (its JetStream meta leader a
  // moment after the routes connect, the stream's after a node is killed): asked again for 30 s.
  const patiently = async <T>(request: () => Promise<T>): Promise<T> => {
    const deadline = Date.now() + 30_000;
    for (;;) {
      try {
        return await request();
      } catch (error) {
        if (Date.now() > deadline) throw error;
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    }
  };
  const streamInfo = () => patiently(async () => (await manager()).streams.info(stream));
  return {
    name: "nats-cluster",
    url: servers.join(","),
    destination: `${stream}.{type}`,
    consumer: { kind: "nats", servers, stream, durable: "chaos", ackWaitMs },
    async start() {
      for (const node of nodes) if (node.child === undefined) startNode(node);
      for (const node of nodes) await waitForPort(node.port, true, `nats-server ${node.name} (it must be on the PATH)`, 15_000);
    },
    async stop() {
      await Promise.all(
        nodes.map(async (node) => {
          const running = node.child;
          node.child = undefined;
          await terminate(running);
        }),
      );
    },
    async fault() {
      const info = await streamInfo();
      const leader = nodes.find((node) => node.name === info.cluster?.leader) ?? (nodes[faults % nodes.length] as NatsNode);
      faults += 1;
      const running = leader.child;
      leader.child = undefined;
      await terminate(running, "SIGKILL");
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      startNode(leader);
      await waitForPort(leader.port, true, `nats-server ${leader.name}`, 15_000);
      return `SIGKILLed NATS ${leader.name}${info.cluster?.leader === leader.name ? " (the stream's leader)" : ""} and restarted it a second later`;
    },
    async prepare() {
      admin = await transport.connect({ servers, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
      await patiently(async () => (await manager()).streams.add({ name: stream, subjects: [`${stream}.>`], num_replicas: 3 }));
    },
    async stored() {
      if (admin === undefined) return null;
      return (await streamInfo()).state.messages;
    },
    async close() {
      await admin?.close();
    },
  };
}

async function rabbitBroker(runId: string): Promise<ChaosBroker> {
  // A folder of its own, outside the run's (private) one: the node runs as the rabbitmq user.
  const dir = mkdtempSync(join(tmpdir(), "wassal-rabbitmq-"));
  try {
    const port = await freePort();
    const distPort = await freePort();
    const node = `wassal-chaos-${runId}@localhost`;
    const url = `amqp://guest:guest@127.0.0.1:${port}`;
    const exchange = `chaos-${runId}`;
    const queue = `chaos-${runId}`;
    writeFileSync(join(dir, "rabbitmq.conf"), `listeners.tcp.local = 127.0.0.1:${port}\n`);
    writeFileSync(join(dir, "enabled_plugins"), "[].\n");
    // Started as root, rabbitmq-server runs as the rabbitmq user, which must own the node's folder.
    if (process.getuid?.() === 0) spawnSync("chown", ["-R", "rabbitmq:rabbitmq", dir], { stdio: "ignore" });
    const env = {
      ...process.env,
      RABBITMQ_NODENAME: node,
      RABBITMQ_CONFIG_FILE: join(dir, "rabbitmq.conf"),
      RABBITMQ_ENABLED_PLUGINS_FILE: join(dir, "enabled_plugins"),
      RABBITMQ_MNESIA_BASE: join(dir, "mnesia"),
      RABBITMQ_MNESIA_DIR: join(dir, "mnesia", "node"),
      RABBITMQ_FEATURE_FLAGS_FILE: join(dir, "feature_flags"),
      RABBITMQ_PLUGINS_EXPAND_DIR: join(dir, "plugins"),
      RABBITMQ_LOG_BASE: join(dir, "log"),
      RABBITMQ_DIST_PORT: String(distPort),
    };
    const amqp = await importOptional<typeof import("amqplib")>("amqplib", "the relay chaos run");
    let started = false;
    return {
      name: "rabbitmq",
      url,
      destination: `${exchange}/events`,
      // Every consumer process consumes the same durable queue.
      consumer: { kind: "rabbitmq", url, queue },
      async start() {
        started = true;
        const child = spawn("rabbitmq-server", [], { env, cwd: dir, stdio: "ignore" });
        child.once("error", () => undefined);
        await waitForPort(port, true, "the run's RabbitMQ node (rabbitmq-server must be on the PATH)", 90_000);
      },
      fault(this: ChaosBroker) {
        return restart(this, "RabbitMQ");
      },
      async stop() {
        if (!started) return;
        started = false;
        spawnSync("rabbitmqctl", ["-n", node, "stop"], { env, stdio: "ignore", timeout: 60_000 });
        await waitForPort(port, false, "the run's RabbitMQ node", 60_000);
      },
      async prepare() {
        const model = await amqp.connect(url);
        try {
          const channel = await model.createChannel();
          await channel.assertExchange(exchange, "direct", { durable: true });
          await channel.assertQueue(queue, { durable: true });
          await channel.bindQueue(queue, exchange, "events");
        } finally {
          await model.close();
        }
      },
      stored: async () => null,
      async close() {
        rmSync(dir, { recursive: true, force: true });
      },
    };
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
}

async function redisBroker(dir: string, runId: string): Promise<ChaosBroker> {
  const port = await freePort();
  const url = `redis://127.0.0.1:${port}`;
  const stream = `chaos-${runId}`;
  const group = "chaos";
  const redis = await importOptional<typeof import("redis")>("redis", "the relay chaos run");
  let child: ChildProcess | undefined;
  let admin: ReturnType<typeof redis.createClient> | undefined;
  return {
    name: "redis",
    url,
    destination: stream,
    // Every consumer process reads through the same group, each under its slot's own name.
    consumer: { kind: "redis", url, stream, group },
    async start() {
      // Every write is in the append-only file, synced before the reply, and nothing else is kept:
      // a stop and start loses nothing (the entries, the group, its pending entries, the markers).
      const args = [
        "--bind",
        "127.0.0.1",
        "--port",
        String(port),
        "--dir",
        dir,
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--save",
        "",
        "--logfile",
        join(dir, "redis.log"),
      ];
      child = spawn("redis-server", args, { stdio: "ignore" });
      child.once("error", () => undefined);
      await waitForPort(port, true, "redis-server (it must be on the PATH)", 15_000);
    },
    fault(this: ChaosBroker) {
      return restart(this, "Redis");
    },
    async stop() {
      const running = child;
      child = undefined;
      await terminate(running);
    },
    async prepare() {
      admin = redis.createClient({ url });
      admin.on("error", () => undefined); // it reconnects by itself across the restart
      await admin.connect();
      await admin.xGroupCreate(stream, group, "0", { MKSTREAM: true }).catch((error: unknown) => {
        if (!String(error).includes("BUSYGROUP")) throw error;
      });
    },
    async stored() {
      if (admin === undefined) return null;
      return await admin.xLen(stream);
    },
    async close() {
      try {
        admin?.destroy(); // nothing of it is pending; a graceful close would wait for a stopped server
      } catch {
        // closed already
      }
    },
  };
}
