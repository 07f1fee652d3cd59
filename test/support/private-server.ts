// A broker server of the test's own (its own port, and a data folder of its own when it keeps
// one), which a test can stop and start again without disturbing the shared instance other test
// files use: `nats-server` and `redis-server` start in a fraction of a second.

import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { accepts, freePort, releasePort } from "../../src/chaos/ports.js";
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
    // The port is reserved for this process (see freePort) until stop(), so no other test file's
    // server takes it, also while this one is paused.
    const server = new PrivateServer(scheme, command, args, await freePort(), mkdtempSync(join(tmpdir(), `wassal-${scheme}-`)));
    try {
      await server.resume();
    } catch (error) {
      await server.stop();
      throw error;
    }
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
    const child = spawn(this.#command, [...this.#args], { stdio: "ignore" });
    this.#process = child;
    // Its own server, not another's: one that exits (e.g. it could not bind the port) fails at once.
    await until(
      `${this.#command} on ${this.url}`,
      async () => {
        if (child.exitCode !== null || child.signalCode !== null)
          throw new Error(`${this.#command} on ${this.url} exited (${child.exitCode ?? child.signalCode}) before it accepted connections`);
        return accepts(this.#port);
      },
      { timeoutMs: 10_000, intervalMs: 10 },
    );
  }

  /** Stops it, removes its folder and gives its port back. */
  async stop(): Promise<void> {
    await this.pause();
    rmSync(this.#dir, { recursive: true, force: true });
    releasePort(this.#port);
  }
}
