// What the Session 13 and 14 scenarios start from: a scenario clock, one ledger, the lab's own
// connection to look at the database, a first instance that runs as a child process and is killed
// (killed-instance.ts), and a fresh instance in the lab's process for after the crash.

import { ManualClock } from "../outbox/clock.js";
import type { OutboxMessage } from "../outbox/types.js";
import { type ProviderCall, ProviderSimulator } from "../payments/provider-simulator.js";
import type { PaymentProvider } from "../payments/payments-service.js";
import type { CreatePaymentRequest, Payment } from "../payments/types.js";
import type { LabBackend, LabConnection } from "./backend.js";
import type { InstanceContext, InstancePlan } from "./instance-work.js";
import { type KilledInstance, runUntilKilled } from "./killed-instance.js";
import { Ledger } from "./ledger.js";
import { SESSION_15_OUTCOMES, SESSION_15_PAYMENTS } from "./seed.js";
import { scenarioStart } from "./world.js";

/** The six payment requests of the Session 15 lab, without their outcomes (the provider decides those). */
export const PAYMENT_REQUESTS: readonly CreatePaymentRequest[] = SESSION_15_PAYMENTS.map(({ idempotencyKey, amount, currency }) => ({
  idempotencyKey,
  amount,
  currency,
}));

/** The rows of both tables at one moment, read through the lab's own connection. */
export interface Snapshot {
  readonly payments: readonly Payment[];
  readonly messages: readonly OutboxMessage[];
}

export interface RestartStage<Tx> {
  readonly clock: ManualClock;
  readonly ledger: Ledger;
  /** The provider as the lab's process sees it (it answers for payments a killed child created). */
  readonly provider: ProviderSimulator;
  readonly schema: string;
  /** Runs an instance as a child process and SIGKILLs it at its plan's crash point. */
  kill(name: string, plan: InstancePlan): Promise<KilledInstance>;
  /** A fresh instance in this process, on a new connection, its events in the ledger. */
  instance(name: string): Promise<InstanceContext<Tx>>;
  snapshot(): Promise<Snapshot>;
  /** Every provider call of the run, in order, with the instance that made it: the killed instances' first, then this process's. */
  providerCalls(): CallBy[];
}

/** A provider call and the instance (and process) that made it. */
export interface CallBy {
  readonly by: string;
  readonly call: ProviderCall;
}

export async function openRestartStage<Tx>(backend: LabBackend<Tx>): Promise<RestartStage<Tx>> {
  const clock = new ManualClock(scenarioStart());
  const ledger = new Ledger();
  // The provider's answers depend only on the key, so this process agrees with the killed one's.
  const provider = new ProviderSimulator({ outcomes: SESSION_15_OUTCOMES, answerUnknownKeys: true });
  const observer: LabConnection<Tx> = await backend.connect(clock);
  const killedCalls: CallBy[] = [];
  const ownCalls: CallBy[] = [];
  /** The shared provider, each call recorded with the instance that made it. */
  const providerFor = (name: string): PaymentProvider => {
    const by = `${name} (lab process, pid ${process.pid})`;
    const record = () => {
      for (const call of provider.log().slice(ownCalls.length)) ownCalls.push({ by, call });
    };
    return {
      createPayment: (request) => provider.createPayment(request).finally(record),
      checkStatus: (key, options) => provider.checkStatus(key, options).finally(record),
    };
  };
  return {
    clock,
    ledger,
    provider,
    schema: await observer.store.describeSchema(),
    async kill(name, plan) {
      ledger.note(clock.now(), "lab", `start ${name} as a child process (node instance-process.js)`);
      const instance = await runUntilKilled({ name, plan, target: backend.target, clockStart: clock.now(), outcomes: SESSION_15_OUTCOMES, ledger });
      for (const call of instance.providerCalls) killedCalls.push({ by: `${name} (pid ${instance.pid})`, call });
      return instance;
    },
    async instance(name) {
      const connection = await backend.connect(clock);
      ledger.attach(connection.store.events);
      return { name, ...connection, provider: providerFor(name), clock, note: (text: string) => ledger.note(clock.now(), name, text) };
    },
    async snapshot() {
      return { payments: await observer.repository.list(), messages: await observer.store.listMessages() };
    },
    providerCalls: () => [...killedCalls, ...ownCalls],
  };
}
