// What every Session 15 scenario starts from: a scenario clock, the provider, one ledger fed by
// every connection's events, and the six payments created through the payments API.

import { ManualClock } from "../outbox/clock.js";
import type { OutboxMessage } from "../outbox/types.js";
import { PaymentsService } from "../payments/payments-service.js";
import { ProviderSimulator } from "../payments/provider-simulator.js";
import type { Payment } from "../payments/types.js";
import type { LabBackend, LabConnection } from "./backend.js";
import { Ledger } from "./ledger.js";
import { labelsFrom, type Labels } from "./report.js";
import { SESSION_15_OUTCOMES, SESSION_15_PAYMENTS } from "./seed.js";

export interface LabWorker<Tx> extends LabConnection<Tx> {
  readonly name: string;
  readonly payments: PaymentsService<Tx>;
}

export interface World<Tx> {
  readonly clock: ManualClock;
  readonly provider: ProviderSimulator;
  readonly ledger: Ledger;
  readonly api: LabWorker<Tx>;
  readonly schema: string;
  readonly seededPayments: readonly Payment[];
  readonly seededMessages: readonly OutboxMessage[];
  readonly labels: Labels;
  /** Opens a new connection for a worker (a separate application instance). */
  connect(name: string): Promise<LabWorker<Tx>>;
}

/** 09:00:00.000 UTC today: the scenario clock's start, like the lesson's report. */
export function scenarioStart(): Date {
  const today = new Date().toISOString().slice(0, 10);
  return new Date(`${today}T09:00:00.000Z`);
}

export async function createWorld<Tx>(backend: LabBackend<Tx>): Promise<World<Tx>> {
  const clock = new ManualClock(scenarioStart());
  const provider = new ProviderSimulator({ outcomes: SESSION_15_OUTCOMES });
  const ledger = new Ledger();
  const connect = async (name: string): Promise<LabWorker<Tx>> => {
    const connection = await backend.connect(clock);
    ledger.attach(connection.store.events);
    const payments = new PaymentsService({ store: connection.store, repository: connection.repository, provider, clock });
    return { ...connection, name, payments };
  };
  const api = await connect("API");
  for (const { outcome: _outcome, ...request } of SESSION_15_PAYMENTS) {
    const { payment } = await api.payments.create(request);
    ledger.note(clock.now(), "API", `create ${payment.idempotencyKey}: payment row + reconciliation message committed together`);
  }
  const seededMessages = await api.store.listMessages();
  return {
    clock,
    provider,
    ledger,
    api,
    schema: await api.store.describeSchema(),
    seededPayments: await api.repository.list(),
    seededMessages,
    labels: labelsFrom(seededMessages),
    connect,
  };
}
