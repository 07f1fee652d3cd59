// Structured logs (pino) from the outbox's event stream: problems at warn, progress at debug.

import { pino, type Logger, type LevelWithSilent } from "pino";
import type { EventHub } from "../outbox/events.js";
import { redactSecrets } from "../outbox/redact.js";

export type { Logger } from "pino";

export const LOG_LEVELS: readonly LevelWithSilent[] = ["fatal", "error", "warn", "info", "debug", "trace", "silent"];

/** A JSON logger writing to stderr (stdout stays free for command output); no line carries a URL's secret or a known secret value. */
export function createLogger(level: LevelWithSilent = "info", name = "wassal"): Logger {
  return pino({ name, level, hooks: { streamWrite: redactSecrets } }, pino.destination(2));
}

/** Logs each event at a level that matches how much an operator needs to see it. Returns a detach function. */
export function logEvents(events: EventHub, logger: Logger): () => void {
  return events.subscribe((event) => {
    const { type, at, ...fields } = event;
    const data = { event: type, at: at.toISOString(), ...fields };
    switch (type) {
      case "lease-lost":
      case "retry-scheduled":
        logger.warn(data, type);
        break;
      case "dead":
      case "store-error":
        logger.error(data, type);
        break;
      case "owners-reaped":
        logger.info(data, "owners-reaped: their heartbeat stopped; their leases were expired for the next claim");
        break;
      case "schedule-fired":
        logger.info(data, "schedule-fired: the tick's message was enqueued");
        break;
      case "schedule-skipped":
        logger.warn(
          data,
          event.reason === "too-late"
            ? "schedule-skipped: ticks found later than the schedule's backfillMs (no scheduler ran then) were passed over"
            : "schedule-skipped: the tick's message was in the outbox already (the clock went back)",
        );
        break;
      case "released":
      case "completed":
      case "processing-finished":
        logger.debug(data, type);
        break;
      default:
        logger.trace(data, type);
    }
  });
}
