// A relay chaos run's RabbitMQ cluster: three nodes on loopback, each with its own AMQP and
// distribution ports, data folder and log, found by one another through an epmd of the run's own
// (on a free port), so that nothing touches a shared node or the machine's epmd. The queue is a
// quorum queue: its messages are replicated on all three nodes by Raft, and a publish is confirmed
// once a majority has it. The mid-run fault SIGKILLs the node that leads the queue, so the other
// two elect a new leader while the relays publish, and then starts it again; it rejoins the
// cluster and catches up by itself.
//
// The nodes are started from RabbitMQ's own scripts (Debian: /usr/lib/rabbitmq/bin), not the
// /usr/sbin wrappers, which switch to the rabbitmq user: every file is the run's, under its folder,
// with a private HOME holding the run's Erlang cookie. The first node starts alone; the other two
// find it through classic peer discovery (their config names all three) and join it. Started at the
// same moment, each would find no other node up yet and start a cluster of its own.
//
// Times on this project's 2-core machine: the first node up in about 11 s, the two others in about
// 10 s more; a killed leader is replaced in under a second; a restarted node is back in 7–10 s.

import { type ChildProcess, execFile, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { importOptional } from "../outbox/optional.js";
import type { ChaosConsumerBroker } from "./consumer-process.js";
import { freePort, releasePort, waitForPort } from "./ports.js";

const run = promisify(execFile);

/** Where Debian (and RabbitMQ's generic Unix package) keep the scripts that run as the caller. */
const DEBIAN_BIN = "/usr/lib/rabbitmq/bin";
const bin = (name: string) => (existsSync(join(DEBIAN_BIN, name)) ? join(DEBIAN_BIN, name) : name);

/** How long a node may take to boot (it is slower on a loaded machine). */
const BOOT_MS = 120_000;

interface RabbitNode {
  readonly name: string;
  readonly port: number;
  readonly distPort: number;
  readonly dir: string;
  child?: ChildProcess | undefined;
}

/** The cluster's broker, in the shape chaos-brokers.ts's ChaosBroker gives every broker. */
export interface RabbitCluster {
  readonly name: "rabbitmq-cluster";
  readonly url: string;
  readonly destination: string;
  readonly consumer: ChaosConsumerBroker;
  readonly closesWhileStarting: true;
  start(): Promise<void>;
  stop(): Promise<void>;
  fault(): Promise<string>;
  prepare(): Promise<void>;
  stored(): Promise<number | null>;
  close(): Promise<void>;
}

export async function rabbitClusterBroker(dir: string, runId: string): Promise<RabbitCluster> {
  const amqp = await importOptional<typeof import("amqplib")>("amqplib", "the relay chaos run");
  const epmdPort = await freePort();
  const nodes: RabbitNode[] = [];
  for (let n = 0; n < 3; n += 1) {
    nodes.push({ name: `wassal${runId}n${n}@localhost`, port: await freePort(), distPort: await freePort(), dir: join(dir, `node${n}`) });
  }
  const home = join(dir, "home");
  mkdirSync(home, { recursive: true });
  writeFileSync(join(home, ".erlang.cookie"), randomBytes(16).toString("hex"), { mode: 0o400 });
  const noEnvFile = join(dir, "rabbitmq-env.conf");
  writeFileSync(noEnvFile, ""); // so that the machine's /etc/rabbitmq/rabbitmq-env.conf is not read
  const peers = nodes.map((node, i) => `cluster_formation.classic_config.nodes.${i + 1} = ${node.name}`).join("\n");
  for (const node of nodes) {
    mkdirSync(node.dir, { recursive: true });
    writeFileSync(
      join(node.dir, "rabbitmq.conf"),
      `listeners.tcp.1 = 127.0.0.1:${node.port}\ncluster_formation.peer_discovery_backend = classic_config\n${peers}\n`,
    );
    writeFileSync(join(node.dir, "enabled_plugins"), "[].\n");
  }
  const envOf = (node: RabbitNode): NodeJS.ProcessEnv => ({
    ...process.env,
    HOME: home,
    ERL_EPMD_PORT: String(epmdPort),
    ERL_EPMD_ADDRESS: "127.0.0.1",
    RABBITMQ_CONF_ENV_FILE: noEnvFile,
    RABBITMQ_NODENAME: node.name,
    RABBITMQ_NODE_IP_ADDRESS: "127.0.0.1",
    RABBITMQ_NODE_PORT: String(node.port),
    RABBITMQ_DIST_PORT: String(node.distPort),
    RABBITMQ_CONFIG_FILE: join(node.dir, "rabbitmq.conf"),
    RABBITMQ_ENABLED_PLUGINS_FILE: join(node.dir, "enabled_plugins"),
    RABBITMQ_MNESIA_BASE: join(node.dir, "mnesia"),
    RABBITMQ_LOG_BASE: join(node.dir, "log"),
    RABBITMQ_PID_FILE: join(node.dir, "pid"),
    RABBITMQ_FEATURE_FLAGS_FILE: join(node.dir, "feature_flags"),
    RABBITMQ_PLUGINS_EXPAND_DIR: join(node.dir, "plugins"),
    RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS: "-kernel inet_dist_use_interface {127,0,0,1}",
  });
  const urls = nodes.map((node) => `amqp://guest:guest@127.0.0.1:${node.port}`);
  const exchange = `chaos-${runId}`;
  const queue = `chaos-${runId}`;
  let epmd: ChildProcess | undefined;
  /** Set by close(): nothing more is started (a start still under way when the run is interrupted). */
  let closed = false;

  const ctl = async (node: RabbitNode, args: readonly string[], timeoutMs = 30_000): Promise<string> => {
    if (closed) throw new Error("the run's RabbitMQ cluster was closed");
    // In the node's folder: a CLI that crashes writes its erl_crash.dump there, not in the caller's.
    const { stdout } = await run(bin("rabbitmqctl"), ["-q", "-n", node.name, ...args], { env: envOf(node), cwd: node.dir, timeout: timeoutMs });
    return stdout;
  };
  const exitedEarly = (node: RabbitNode, child: ChildProcess): Error | undefined => {
    if (child.exitCode === null && child.signalCode === null) return undefined;
    let tail = "";
    try {
      tail = readFileSync(join(node.dir, "out.log"), "utf8").trim().split("\n").slice(-3).join(" / ");
    } catch {
      // no log yet
    }
    return new Error(`RabbitMQ node ${node.name} exited while starting (${tail || "no output"}); its log is in ${join(node.dir, "log")}`);
  };
  /** Starts a node's server and waits until it has booted (rabbitmqctl await_startup answers). */
  const startNode = async (node: RabbitNode): Promise<void> => {
    if (closed) throw new Error("the run's RabbitMQ cluster was closed while it started");
    // Its output goes to out.log (a boot failure is told there, before the log folder exists).
    const out = openSync(join(node.dir, "out.log"), "w");
    // A process group of its own: the script, the Erlang VM and its helpers are stopped together.
    let child: ChildProcess;
    try {
      child = spawn(bin("rabbitmq-server"), [], { env: envOf(node), cwd: node.dir, detached: true, stdio: ["ignore", out, out] });
    } finally {
      closeSync(out);
    }
    child.once("error", () => undefined);
    node.child = child;
    const deadline = Date.now() + BOOT_MS;
    for (;;) {
      if (closed) throw new Error("the run's RabbitMQ cluster was closed while it started");
      const early = exitedEarly(node, child);
      if (early) throw early;
      try {
        // It refuses (exit 69) until the node has registered with epmd; then it waits for the boot.
        await ctl(node, ["await_startup", "--timeout", "60"], 70_000);
        return;
      } catch (error) {
        if (Date.now() > deadline) throw new Error(`RabbitMQ node ${node.name} did not start within ${BOOT_MS / 1000} s`, { cause: error });
        await new Promise((resolve) => setTimeout(resolve, 300));
      }
    }
  };
  /** Signals a process group; false when it is gone. */
  const signalGroup = (pid: number, signal: NodeJS.Signals): boolean => {
    try {
      process.kill(-pid, signal);
      return true;
    } catch {
      return false;
    }
  };
  /**
   * Stops a node's whole process group (SIGTERM: a clean stop; SIGKILL: a crash) and waits until
   * its AMQP port is closed; a group still there 30 s after the signal is SIGKILLed. The node stays
   * known (and is SIGKILLed at this process's exit) until it is gone.
   */
  const stopNode = async (node: RabbitNode, signal: NodeJS.Signals): Promise<void> => {
    const child = node.child;
    if (child?.pid === undefined) return;
    const pid = child.pid;
    const alive = child.exitCode === null && child.signalCode === null;
    const exited = alive ? new Promise((resolve) => child.once("exit", resolve)) : Promise.resolve();
    signalGroup(pid, signal);
    const late = setTimeout(() => signalGroup(pid, "SIGKILL"), 30_000);
    try {
      await exited;
      // The VM may outlive the script by a moment (and is SIGKILLed with its group at 30 s): its
      // AMQP port closes when it is gone.
      await waitForPort(node.port, false, `RabbitMQ node ${node.name}`, 40_000);
      if (node.child === child) node.child = undefined;
    } finally {
      clearTimeout(late);
    }
  };
  // Killed or stopped by a second signal (process.exit), the run leaves no node behind: every
  // node's group and the epmd are SIGKILLed as this process exits (a SIGKILL of it cannot be helped).
  const killAtExit = () => {
    for (const node of nodes) if (node.child?.pid !== undefined) signalGroup(node.child.pid, "SIGKILL");
    epmd?.kill("SIGKILL");
  };
  process.once("exit", killAtExit);
  const running = () => nodes.filter((node) => node.child !== undefined);
  /** The node leading the quorum queue now, as a running node sees it. */
  const leader = async (): Promise<string | undefined> => {
    const asked = running()[0];
    if (asked === undefined) return undefined;
    const text = await ctl(asked, ["list_queues", "name", "leader", "--formatter", "json"]);
    const rows = JSON.parse(text.slice(text.indexOf("["))) as { name: string; leader: string }[];
    return rows.find((row) => row.name === queue)?.leader;
  };

  return {
    name: "rabbitmq-cluster",
    url: urls.join(","),
    destination: `${exchange}/events`,
    // Every consumer process consumes the same quorum queue, through any node.
    consumer: { kind: "rabbitmq", url: urls.join(","), queue },
    closesWhileStarting: true,
    async start() {
      if (closed) throw new Error("the run's RabbitMQ cluster was closed");
      if (epmd === undefined) {
        epmd = spawn("epmd", ["-port", String(epmdPort), "-address", "127.0.0.1"], { stdio: "ignore" });
        epmd.once("error", () => undefined);
        await waitForPort(epmdPort, true, "epmd (Erlang's, installed with RabbitMQ)", 15_000);
      }
      const [first, ...others] = nodes as [RabbitNode, ...RabbitNode[]];
      if (first.child === undefined) await startNode(first);
      await Promise.all(others.filter((node) => node.child === undefined).map(startNode));
      const status = JSON.parse(await ctl(first, ["cluster_status", "--formatter", "json"])) as { running_nodes?: string[] };
      const joined = status.running_nodes ?? [];
      if (!nodes.every((node) => joined.includes(node.name))) {
        throw new Error(`the run's RabbitMQ nodes did not form one cluster (${first.name} sees ${joined.join(", ") || "none"})`);
      }
    },
    async stop() {
      const stopped = await Promise.allSettled(nodes.map((node) => stopNode(node, "SIGTERM")));
      const failed = stopped.find((result): result is PromiseRejectedResult => result.status === "rejected");
      if (failed !== undefined) throw failed.reason;
    },
    async fault() {
      const before = await leader();
      const victim = nodes.find((node) => node.name === before) ?? (running()[0] as RabbitNode);
      const killedAt = performance.now();
      await stopNode(victim, "SIGKILL");
      // The others elect a leader among themselves; asked every 200 ms (each ask takes a moment).
      let after: string | undefined;
      for (const deadline = Date.now() + 30_000; Date.now() < deadline && !closed; ) {
        after = await leader().catch(() => undefined);
        if (after !== undefined && after !== victim.name) break;
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
      const elected = (performance.now() - killedAt) / 1000;
      const restartAt = performance.now();
      await startNode(victim);
      const back = (performance.now() - restartAt) / 1000;
      const was = before === victim.name ? " (the quorum queue's leader)" : "";
      // rabbitmqctl takes about a second to answer, so the election's time is an upper bound.
      const leading =
        after === undefined || after === victim.name
          ? "no new leader was seen within 30 s"
          : `${after} was seen leading the queue ${elected.toFixed(1)} s later`;
      return `SIGKILLed RabbitMQ ${victim.name}${was}; ${leading}; the node was back in the cluster ${back.toFixed(1)} s after its restart`;
    },
    async prepare() {
      const model = await amqp.connect(urls[0] as string);
      try {
        const channel = await model.createChannel();
        await channel.assertExchange(exchange, "direct", { durable: true });
        // Replicated on every node: a publish is confirmed once a majority of them has it.
        await channel.assertQueue(queue, { durable: true, arguments: { "x-queue-type": "quorum" } });
        await channel.bindQueue(queue, exchange, "events");
      } finally {
        await model.close();
      }
    },
    stored: async () => null,
    async close() {
      closed = true;
      try {
        const stopped = await Promise.allSettled(nodes.map((node) => stopNode(node, "SIGKILL")));
        const failed = stopped.find((result): result is PromiseRejectedResult => result.status === "rejected");
        if (failed !== undefined) throw failed.reason;
      } finally {
        epmd?.kill("SIGKILL");
        epmd = undefined;
        // An Erlang VM that found no epmd on the port starts one as a daemon (a node booting just as
        // ours stopped): ask whatever epmd is left on the port to end too.
        await run("epmd", ["-port", String(epmdPort), "-kill"], { timeout: 10_000 }).catch(() => undefined);
        for (const node of nodes) {
          releasePort(node.port);
          releasePort(node.distPort);
        }
        releasePort(epmdPort);
        process.removeListener("exit", killAtExit);
      }
    },
  };
}
