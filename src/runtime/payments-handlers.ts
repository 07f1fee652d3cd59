// The payments demo's handlers as a handlers module (see handlers-module.ts): what `wassal worker`
// loads when it is given no --handlers, and so what the chaos runs' workers run. Its settings are
// the demo's own flags (--provider-*, --fault-*): the simulated provider's latency, log and
// faults, and injected handler errors. Loaded with --handlers and no settings, it runs the
// reconciliation handler against a provider that answers at once.

import { seededRandom } from "../outbox/seeded-random.js";
import { PaymentsService } from "../payments/payments-service.js";
import { ProviderSimulator } from "../payments/provider-simulator.js";
import { RECONCILE_MESSAGE_TYPE } from "../payments/types.js";
import { paymentsRepositoryFor } from "../stores/open-outbox.js";
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
}

/** The demo's settings (HandlersContext.settings). */
export interface PaymentsHandlerSettings {
  /** Simulated provider latency per call. */
  readonly providerLatencyMs?: number;
  /** Append every provider call to this file (shared by processes; read by the chaos checker). */
  readonly providerLog?: string;
  /** Faults to inject, for chaos runs. */
  readonly faults?: WorkerFaults;
}

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
  return {
    [RECONCILE_MESSAGE_TYPE]:
      errorRate > 0
        ? async (message, handlerContext) => {
            if (chance() < errorRate) throw new InjectedFaultError("injected handler error (chaos)");
            return handler(message, handlerContext);
          }
        : handler,
  };
}

export default handlers;
