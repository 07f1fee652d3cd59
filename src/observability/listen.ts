// Starting a server on a host and port the user chose (the metrics server, the dashboard): the
// errors a user can fix become one clear InvalidArgumentError naming the flag to change.

import { createServer, type Server } from "node:net";
import { InvalidArgumentError } from "../outbox/errors.js";

/** What the messages call the server and its flags, e.g. { what: "metrics", portFlag: "--metrics-port", hostFlag: "--metrics-host" }. */
export interface ListenNames {
  readonly what: string;
  readonly portFlag: string;
  readonly hostFlag: string;
}

/** Resolves once `server` listens on host:port; rejects with a one-line InvalidArgumentError for a busy port, a forbidden one, or an address this machine does not have. */
export function listenOn(server: Server, host: string, port: number, names: ListenNames): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    server.once("error", (error: NodeJS.ErrnoException) => {
      const where = `cannot serve ${names.what} on ${host}:${port}`;
      reject(
        error.code === "EADDRINUSE"
          ? new InvalidArgumentError(`${where}: the port is already in use; choose another ${names.portFlag}, or 0 for any free port`)
          : error.code === "EACCES"
            ? new InvalidArgumentError(`${where}: permission denied; choose another ${names.portFlag} (above 1023), or 0 for any free port`)
            : error.code === "EADDRNOTAVAIL" || error.code === "ENOTFOUND" || error.code === "EAI_AGAIN"
              ? new InvalidArgumentError(
                  `cannot serve ${names.what} on ${host}: no such address on this machine; give ${names.hostFlag} one of its addresses (default 127.0.0.1)`,
                )
              : error,
      );
    });
    server.listen(port, host, () => resolve());
  });
}

/**
 * Checks, before anything else is opened, that a server could listen on host:port: listens with a
 * bare socket server and closes it, so a mistaken flag is refused before a database is touched.
 * (The port can still be taken in between; the real listen then fails the same way.)
 */
export async function checkListenAddress(host: string, port: number, names: ListenNames): Promise<void> {
  const probe = createServer();
  await listenOn(probe, host, port, names);
  await new Promise<void>((resolve) => probe.close(() => resolve()));
}
