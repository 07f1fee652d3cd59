// A broker server of the test's own (its own port, and a data folder of its own when it keeps
// one), which a test can stop and start again without disturbing the shared instance other test
// files use: `nats-server` and `redis-server` start in a fraction of a second.

import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { accepts, freePort } from "../../src/chaos/ports.js";
import { until } from "./wait.js";

export class PrivateServer {
  readonly url: string;
  readonly #command: string;
  readonly #args: readonly string[];
  readonly #port: number;
  readonly #dir: string;
  #process: ChildProcess | undefined;

  private constructor(scheme: string, command: string, args: (port: number, dir: string) => readonly string[], port: number, dir: string) {
    this.url = `${scheme}://127.0.0.1:${port}`;
    this.#command = command;
    this.#port = port;
    this.#dir = dir;
    this.#args = args(port, dir);
  }

  /** nats-server with JetStream, its store in a folder of its own. */
  static nats(): Promise<PrivateServer> {
    return PrivateServer.#start("nats", "nats-server", (port, dir) => ["-a", "127.0.0.1", "-p", String(port), "-js", "-sd", dir]);
  }

  /** redis-server keeping nothing on disk. */
  static redis(): Promise<PrivateServer> {
    return PrivateServer.#start("redis", "redis-server", (port, dir) => [
      "--bind",
      "127.0.0.1",
      "--port",
      String(port),
      "--save",
      "",
      "--appendonly",
      "no",
      "--dir",
      dir,
    ]);
  }

  static async #start(scheme: string, command: string, args: (port: number, dir: string) => readonly string[]): Promise<PrivateServer> {
    const server = new PrivateServer(scheme, command, args, await freePort(), mkdtempSync(join(tmpdir(), `wassal-${scheme}-`)));
    await server.resume();
    return server;
  }

  /** Stops the server (SIGTERM); what it keeps on disk stays. */
  async pause(): Promise<void> {
    const child = this.#process;
    this.#process = undefined;
    if (child === undefined || child.exitCode !== null) return;
    const exited = new Promise((resolve) => child.once("exit", resolve));
    child.kill("SIGTERM");
    await exited;
  }

  /** Starts it again on the same port and folder, and waits until it accepts connections. */
  async resume(): Promise<void> {
    this.#process = spawn(this.#command, [...this.#args], { stdio: "ignore" });
    await until(`${this.#command} on ${this.url}`, () => accepts(this.#port), { timeoutMs: 10_000, intervalMs: 10 });
  }

  /** Stops it and removes its folder. */
  async stop(): Promise<void> {
    await this.pause();
    rmSync(this.#dir, { recursive: true, force: true });
  }
}
