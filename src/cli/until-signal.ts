// Runs a long-lived command (a worker, a relay) until SIGTERM or SIGINT. Signals are handled from
// before it starts: one that arrives while it is starting stops it gracefully once started,
// instead of killing it with leases held. The first signal stops gracefully (finish or release
// in-flight work, exit 0); a second one exits at once (130).

import type { Logger } from "pino";
import { EXIT } from "./exit-codes.js";

export interface Running {
  /** Graceful stop. */
  stop(): Promise<void>;
  /** Logged as the first signal arrives (what is in flight, how long the grace is). */
  stoppingDetail(): Record<string, unknown>;
}

/** What is logged when signals arrive; the defaults speak of messages in flight (a worker, a relay). */
export interface StoppingWords {
  /** Logged at the first signal. */
  readonly stopping: string;
  /** Logged at a second signal, before exiting at once. */
  readonly interrupted: string;
}

const HOLDS_MESSAGES: StoppingWords = {
  stopping: "stopping: no new claims; finishing or releasing in-flight messages",
  interrupted: "second signal: exiting at once; leases of unfinished messages will expire",
};

export async function runUntilSignal(logger: Logger, what: string, start: () => Promise<Running>, words: StoppingWords = HOLDS_MESSAGES): Promise<void> {
  let signals = 0;
  let stopRequested: NodeJS.Signals | undefined;
  let stopNow: ((signal: NodeJS.Signals) => void) | undefined;
  const onSignal = (signal: NodeJS.Signals) => {
    signals += 1;
    if (signals > 1) {
      logger.warn({ signal }, words.interrupted);
      logger.flush();
      process.exit(EXIT.interrupted);
    }
    if (stopNow) stopNow(signal);
    else stopRequested = signal;
  };
  process.on("SIGTERM", onSignal);
  process.on("SIGINT", onSignal);
  const running = await start();
  // A supervisor that started us with an IPC channel (a Node parent, pm2's wait_ready) hears
  // "ready" once we are claiming; the channel must not keep the process alive by itself.
  if (process.send) {
    process.send("ready");
    process.channel?.unref();
  }
  await new Promise<void>((resolve) => {
    stopNow = (signal) => {
      logger.info({ signal, ...running.stoppingDetail() }, words.stopping);
      running.stop().then(
        () => {
          logger.info(`${what} stopped`);
          logger.flush();
          // Nothing of ours is left running; do not wait for stray timers or sockets.
          process.exit(process.exitCode ?? EXIT.ok);
        },
        (error: unknown) => {
          logger.error({ error: String(error) }, "error while stopping");
          process.exitCode = EXIT.failed;
          resolve();
        },
      );
    };
    if (stopRequested !== undefined) stopNow(stopRequested);
  });
}
