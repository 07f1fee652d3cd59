// Local TCP ports for the servers a chaos run (or a test) starts for itself: a free one, and
// whether something accepts connections on one yet (or still).

import { createConnection, createServer } from "node:net";
import { InvalidArgumentError } from "../outbox/errors.js";

/** A port on 127.0.0.1 that was free a moment ago (listen on 0, read the port, close). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => (typeof address === "object" && address ? resolve(address.port) : reject(new Error("no port"))));
    });
  });
}

/** Whether something accepts a TCP connection on 127.0.0.1:port now. */
export function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: "127.0.0.1", port });
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}

/** Waits until the port accepts connections (`open`) or no longer does, for at most `ms`; `what` names the server in the error. */
export async function waitForPort(port: number, open: boolean, what: string, ms: number): Promise<void> {
  const by = performance.now() + ms;
  while ((await accepts(port)) !== open) {
    if (performance.now() > by) throw new InvalidArgumentError(`${what} did not ${open ? "start" : "stop"} within ${ms / 1000} s`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
