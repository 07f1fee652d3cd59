// The payments demo's handlers as a handlers module (see handlers-module.ts): what `wassal worker`
// loads when it is given no --handlers, and so what the chaos runs' workers run. Its settings are
// the demo's own flags (--provider-*, --fault-*): the simulated provider's latency, log and
// faults, and injected handler errors. Loaded with --handlers and no settings, it runs the
// reconciliation handler against a provider that answers at once.

import { spawnSync } from "node:child_process";
import { writeSync } from "node:fs";
import { seededRandom } from "../outbox/seeded-random.js";
import { PaymentsService } from "../payments/payments-service.js";
import { ProviderSimulator } from "../payments/provider-simulator.js";
import { RECONCILE_MESSAGE_TYPE } from "../payments/types.js";
import { paymentsRepositoryFor } from "../lab/stores/lab-stores.js";
import type { HandlerMap, HandlersContext } from "./handlers-module.js";

export interface WorkerFaults {
  readonly seed: number;
  /** Share of handler runs that throw before calling the provider. */
  readonly handlerErrorRate?: number;
  readonly providerFailureRate?: number;
  /** Share of status checks that time out after the provider answered. */
  readonly providerTimeoutRate?: number;
  readonly latencySpikeRate?: number;
  readonly latencySpikeMs?: number;
  /**
   * After the first handler run, block this process (its event loop, so no heartbeat renews the
   * lease) until another worker has taken the message, then return: the completion that follows is
   * a stale one, and must be refused. The database is looked at through `wassal outbox show`.
   */
  readonly stallFirst?: { readonly db: string; readonly schema?: string };
}

/** The demo's settings (HandlersContext.settings). */
export interface PaymentsHandlerSettings {
  /** Simulated provider latency per call. */
  readonly providerLatencyMs?: number;
  /** Append every provider call to this file (shared by processes; read by the chaos checker). */
  readonly providerLog?: string;
  /** Faults to inject, for chaos runs. */
  readonly faults?: WorkerFaults;
  /** Also handle the chaos run's every-second schedule (PULSE_MESSAGE_TYPE), as a no-op. */
  readonly pulse?: boolean;
}

/**
 * The type of the chaos run's schedule: an every-second pulse that its workers fire while they run
 * and complete with nothing to do (given `pulse`: `wassal worker --lab-pulse`), so that the run
 * can check each tick enqueued once through kills.
 */
export const PULSE_MESSAGE_TYPE = "lab.pulse";

const pulse = async () => ({ summary: "pulse" });

/** An error a chaos run injects into a handler. */
export class InjectedFaultError extends Error {
  override name = "InjectedFaultError";
}

export function handlers(context: HandlersContext): HandlerMap {
  const settings = (context.settings ?? {}) as PaymentsHandlerSettings;
  const faults = settings.faults;
  const provider = new ProviderSimulator({
    answerUnknownKeys: true,
    keep: "counts", // a worker runs for days and reads none of the calls back: its memory must not grow with them
    latencyMs: settings.providerLatencyMs ?? 0,
    ...(settings.providerLog === undefined ? {} : { logFile: settings.providerLog }),
    ...(faults === undefined
      ? {}
      : {
          randomFaults: {
            seed: faults.seed,
            ...(faults.providerFailureRate === undefined ? {} : { statusFailureRate: faults.providerFailureRate }),
            ...(faults.providerTimeoutRate === undefined ? {} : { statusTimeoutAfterSuccessRate: faults.providerTimeoutRate }),
            ...(faults.latencySpikeRate === undefined ? {} : { latencySpikeRate: faults.latencySpikeRate }),
            ...(faults.latencySpikeMs === undefined ? {} : { latencySpikeMs: faults.latencySpikeMs }),
          },
        }),
  });
  const handler = new PaymentsService({ store: context.store, repository: paymentsRepositoryFor(context.store), provider }).handler();
  const errorRate = faults?.handlerErrorRate ?? 0;
  const chance = seededRandom((faults?.seed ?? 0) ^ 0x5bd1e995);
  const erring: typeof handler =
    errorRate > 0
      ? async (message, handlerContext) => {
          if (chance() < errorRate) throw new InjectedFaultError("injected handler error (chaos)");
          return handler(message, handlerContext);
        }
      : handler;
  const stall = faults?.stallFirst;
  const pulses = settings.pulse ? { [PULSE_MESSAGE_TYPE]: pulse } : {};
  if (stall === undefined) return { [RECONCILE_MESSAGE_TYPE]: erring, ...pulses };
  let stalled = false;
  return {
    [RECONCILE_MESSAGE_TYPE]: async (message, handlerContext) => {
      const result = await erring(message, handlerContext);
      if (!stalled) {
        stalled = true;
        stallUntilTaken(stall, message.id, handlerContext.lease.token);
      }
      return result;
    },
    ...pulses,
  };
}

/** The log line's event when a stall begins (see stallUntilTaken). */
export const STALL_MARK = "stall-first-begins";

/** The longest a stall waits for another worker to take the message. */
const STALL_LIMIT_MS = 120_000;

/**
 * Blocks the whole process until the message is no longer held under `token` (another worker
 * reclaimed it after the lease ran out, or finished it), looking every 200 ms through the CLI.
 */
function stallUntilTaken(target: { readonly db: string; readonly schema?: string }, messageId: string, token: number): void {
  const pause = new Int32Array(new SharedArrayBuffer(4));
  // Said on stderr with a synchronous write before the process blocks, so that the chaos run (which
  // reads the log) knows the stall has begun and may start the workers that will take the message.
  writeSync(2, `${JSON.stringify({ event: STALL_MARK, messageId, token })}\n`);
  const cli = process.argv[1] ?? "";
  const args = [cli, "outbox", "show", messageId, "--db", target.db, ...(target.schema === undefined ? [] : ["--schema", target.schema]), "--json"];
  for (const until = Date.now() + STALL_LIMIT_MS; Date.now() < until; ) {
    Atomics.wait(pause, 0, 0, 200);
    const shown = spawnSync(process.execPath, args, { encoding: "utf8" });
    if (shown.status !== 0) continue;
    const message = JSON.parse(shown.stdout) as { status: string; leaseToken: number | string };
    if (message.status !== "processing" || Number(message.leaseToken) !== token) return;
  }
}

export default handlers;
