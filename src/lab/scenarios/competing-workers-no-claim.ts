// BEFORE: two application instances run the naive outbox loop on the same durable outbox.
// Both load every pending row before either processes (a two-party barrier makes the race
// certain), so every message is processed twice, and the final rows still look perfect.

import { publish } from "../../outbox/events.js";
import { unleasedAccess } from "../stores/lab-stores.js";
import type { LabBackend } from "../backend.js";
import { computeMetrics } from "../metrics.js";
import {
  check,
  renderChecks,
  renderClaimLedger,
  renderMessages,
  renderMetrics,
  renderOwnership,
  renderPayments,
  renderProcessingLedger,
  renderTimeline,
  ReportBuilder,
} from "../report.js";
import type { Scenario, ScenarioRun } from "../scenario.js";
import { createWorld, type LabWorker } from "../world.js";

/** Lets `parties` callers through together, once all have arrived. */
function barrier(parties: number): () => Promise<void> {
  let arrived = 0;
  let open: () => void = () => undefined;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return () => {
    arrived += 1;
    if (arrived === parties) open();
    return opened;
  };
}

async function run<Tx>(backend: LabBackend<Tx>): Promise<ScenarioRun> {
  const world = await createWorld(backend);
  const { clock, ledger, provider, labels } = world;
  const createCallsBefore = provider.createCalls();
  const loaded: Record<string, number> = {};
  const arrive = barrier(2);

  const naiveWorker = async (worker: LabWorker<Tx>) => {
    const pending = await unleasedAccess(worker.store, clock).loadPending();
    loaded[worker.name] = pending.length;
    ledger.note(clock.now(), worker.name, `load pending rows -> ${pending.length} (${pending.map((m) => labels(m.id)).join(", ")}); nothing marked yet`);
    ledger.note(clock.now(), worker.name, "wait at the barrier until the other instance has loaded too");
    await arrive();
    for (const message of pending) {
      publish(worker.store.events, {
        type: "processing-started",
        at: clock.now(),
        owner: worker.name,
        messageId: message.id,
        token: null,
        attempt: message.attempts,
      });
      const { outcome, finalize } = await worker.payments.reconcile(message);
      await unleasedAccess(worker.store, clock).markProcessed(message.id, finalize);
      publish(worker.store.events, {
        type: "processing-finished",
        at: clock.now(),
        owner: worker.name,
        messageId: message.id,
        token: null,
        result: "unguarded-write",
        detail: outcome.status,
      });
    }
  };

  const workers = [await world.connect("Worker-A"), await world.connect("Worker-B")];
  await Promise.all(workers.map(naiveWorker));

  const finalPayments = await world.api.repository.list();
  const finalMessages = await world.api.store.listMessages();
  const metrics = computeMetrics({
    ledger,
    provider,
    seededPayments: world.seededPayments,
    seededMessages: world.seededMessages,
    finalPayments,
    finalMessages,
    rowsLoadedByWorker: loaded,
    paymentCreationsInWorkers: provider.createCalls() - createCallsBefore,
    leased: false,
  });
  const m = metrics;
  const finalLooksClean =
    m.outboxProcessed === 6 &&
    m.outboxPending === 0 &&
    m.outboxProcessing === 0 &&
    m.paid === 4 &&
    m.failed === 2 &&
    m.stillPending === 0 &&
    m.duplicatePaymentRows === 0 &&
    m.duplicateOutboxRows === 0 &&
    m.fakeSuccesses === 0;
  const checks = [
    check(
      "6 payments and 6 pending messages seeded",
      m.paymentsSeeded === 6 && m.pendingMessagesSeeded === 6,
      `${m.paymentsSeeded} / ${m.pendingMessagesSeeded}`,
    ),
    check(
      "both workers loaded the whole pending snapshot",
      loaded["Worker-A"] === 6 && loaded["Worker-B"] === 6,
      `Worker-A ${loaded["Worker-A"] ?? 0}, Worker-B ${loaded["Worker-B"] ?? 0}`,
    ),
    check(
      "12 processing attempts for 6 unique messages",
      m.processingAttempts === 12 && m.uniqueMessagesProcessed === 6,
      `${m.processingAttempts} attempts, ${m.uniqueMessagesProcessed} unique`,
    ),
    check("every message was processed more than once", m.messagesProcessedMoreThanOnce === 6, `${m.messagesProcessedMoreThanOnce} of 6`),
    check("the provider was asked twice per payment", m.providerStatusChecks === 12, `${m.providerStatusChecks} status checks`),
    check("final rows: 4 Paid / 2 Failed / 0 pending", m.paid === 4 && m.failed === 2 && m.stillPending === 0, `${m.paid} / ${m.failed} / ${m.stillPending}`),
    check(
      "final outbox: 6 processed / 0 pending / 0 processing",
      m.outboxProcessed === 6 && m.outboxPending === 0 && m.outboxProcessing === 0,
      `${m.outboxProcessed} / ${m.outboxPending} / ${m.outboxProcessing}`,
    ),
    check(
      "no duplicate payment or outbox rows",
      m.duplicatePaymentRows === 0 && m.duplicateOutboxRows === 0,
      `${m.duplicatePaymentRows} / ${m.duplicateOutboxRows}`,
    ),
    check("no payment created by a worker", m.paymentCreationsInWorkers === 0, String(m.paymentCreationsInWorkers)),
    check("no fake success (Paid has the provider's id, Failed has none)", m.fakeSuccesses === 0, String(m.fakeSuccesses)),
    check(
      "the final rows alone hide the duplication",
      finalLooksClean && m.messagesProcessedMoreThanOnce > 0,
      finalLooksClean ? `rows look perfect, yet the ledger shows ${m.messagesProcessedMoreThanOnce} messages done twice` : "final rows are not clean",
    ),
  ];
  const passed = checks.every((c) => c.passed);
  const verdict = passed
    ? "VERDICT: DURABLE, BUT NOT OWNED: BOTH WORKERS DID ALL THE WORK ❌\n" +
      "Every message survived and every row ends right, yet each of the 6 messages was processed twice\n" +
      "and the provider answered 12 status checks instead of 6. Only the separate ledgers show it.\n" +
      "(The scenario passes: every check confirmed the race it exists to show.)"
    : `VERDICT: THE DEMONSTRATION DID NOT GO AS EXPECTED: ${checks.filter((c) => !c.passed).length} check(s) failed (marked FAIL above).`;

  const report = new ReportBuilder()
    .section("Schema, as the database reports it", world.schema)
    .section("Seeded payments", renderPayments(world.seededPayments))
    .section("Seeded outbox messages", renderMessages(world.seededMessages, labels))
    .section("Timeline", renderTimeline(ledger, labels))
    .section("Per-message ownership", renderOwnership(finalMessages, ledger, labels, false))
    .section("Claim ledger (no claims: the naive loop never takes ownership)", renderClaimLedger(ledger))
    .section("Processing ledger", renderProcessingLedger(ledger, labels))
    .section("Final payments", renderPayments(finalPayments))
    .section("Metrics", renderMetrics(metrics))
    .section("Checks", renderChecks(checks))
    .section("Verdict", verdict);
  return { passed, checks, metrics, body: report.toString(), verdict };
}

export const competingWorkersNoClaim: Scenario = {
  name: "session-15-competing-workers-no-claim",
  series: "Session-15",
  phase: "BEFORE",
  title: "Competing workers without claims",
  reportStem: "Session-15-Competing-Workers-No-Claim",
  summary: "two instances load the same pending rows and both process all of them",
  run,
};
