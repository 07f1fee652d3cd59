// Session 13: does the reconciliation work outlive the process that holds it? A first instance
// runs as a real child process: it creates the six payments, reconciles two, and is killed with
// SIGKILL while four are still Pending. A fresh instance then starts on the same database.
//
// BEFORE: the work to reconcile each payment sits in an array in the first instance's memory. The
// fresh instance's array is empty, so it does nothing, and the four payments stay Pending for good.
// AFTER: the work is an outbox message committed with each payment. The fresh instance finds the
// four pending messages in the database and reconciles every one.

import { drainOutbox, InMemoryReconciler, paymentsService } from "../instance-work.js";
import type { LabBackend } from "../backend.js";
import { duplicates, messageKey, ProviderCalls } from "../crash-figures.js";
import type { DurabilityMetrics } from "../metrics.js";
import {
  check,
  labelsFrom,
  renderChecks,
  renderMessages,
  renderMetrics,
  renderPayments,
  renderProcessingLedger,
  renderTimeline,
  ReportBuilder,
} from "../report.js";
import { openRestartStage, PAYMENT_REQUESTS } from "../restart-stage.js";
import type { Scenario, ScenarioRun } from "../scenario.js";
import { clockTime, textTable } from "../text-table.js";

/** How many payments the first instance reconciles before it is killed. */
const RECONCILED_BEFORE_CRASH = 2;
/** The scenario clock's step between the crash and the restart (for a readable timeline). */
const RESTART_AFTER_MS = 1_000;

async function run<Tx>(backend: LabBackend<Tx>, durable: boolean): Promise<ScenarioRun> {
  const stage = await openRestartStage(backend);
  const { clock, ledger, provider } = stage;
  const total = PAYMENT_REQUESTS.length;

  // 1. The first instance, a child process, until the lab kills it.
  const killed = await stage.kill(
    "Instance-1",
    durable
      ? { kind: "durable-reconciliation", payments: PAYMENT_REQUESTS, reconcileBeforeCrash: RECONCILED_BEFORE_CRASH }
      : { kind: "in-memory-reconciliation", payments: PAYMENT_REQUESTS, reconcileBeforeCrash: RECONCILED_BEFORE_CRASH },
  );
  const atCrash = await stage.snapshot();
  const durableAtCrash = atCrash.messages.filter((m) => m.status === "pending" || m.status === "processing");

  // 2. A fresh instance on the same database.
  clock.advance(RESTART_AFTER_MS);
  ledger.note(clock.now(), "lab", `start Instance-2 in the lab's own process: a fresh instance on the same database`);
  const fresh = await stage.instance("Instance-2");
  let found: string[];
  if (durable) {
    found = (await fresh.store.listMessages({ status: ["pending"] })).map((m) => messageKey(m) ?? m.id);
    fresh.note(`start: reload the work from the database: ${found.length} pending reconciliation message(s) (${found.join(", ") || "none"})`);
    await drainOutbox(fresh, paymentsService(fresh));
  } else {
    const reconciler = new InMemoryReconciler(fresh);
    found = reconciler.pending();
    fresh.note(`start: the work list in memory holds ${found.length} item(s); nothing to reconcile`);
    while (await reconciler.reconcileNext()) {
      // Drains whatever the list holds (nothing, in a new process).
    }
  }
  ledger.note(clock.now(), "Instance-2", "idle: no reconciliation work left that it knows of");
  const final = await stage.snapshot();

  // 3. Figures, from the rows and the provider's log.
  const calls = new ProviderCalls(stage.providerCalls());
  const pendingAt = (payments: typeof final.payments) => payments.filter((p) => p.status === "Pending");
  const stillPending = pendingAt(final.payments);
  const unfinishedWork = new Set(final.messages.filter((m) => m.status === "pending" || m.status === "processing").map(messageKey));
  const lost = stillPending.filter((p) => !unfinishedWork.has(p.idempotencyKey));
  const paidAtProvider = lost.filter((p) => provider.outcomeFor(p.idempotencyKey) === "Paid");
  const resolvedAt = (payments: typeof final.payments) => payments.length - pendingAt(payments).length;
  const metrics: DurabilityMetrics = {
    paymentsCreated: atCrash.payments.length,
    reconciledBeforeCrash: resolvedAt(atCrash.payments),
    workPendingAtCrash: killed.pending.length,
    killedBy: killed.signal,
    durableWorkAtCrash: durableAtCrash.length,
    workFoundOnRestart: found.length,
    reconciledAfterRestart: resolvedAt(final.payments) - resolvedAt(atCrash.payments),
    providerStatusChecks: calls.statusChecks(),
    paymentsCheckedMoreThanOnce: calls.checkedMoreThanOnce().length,
    paid: final.payments.filter((p) => p.status === "Paid").length,
    failed: final.payments.filter((p) => p.status === "Failed").length,
    stillPending: stillPending.length,
    lostPayments: lost.length,
    paidAtProviderButPendingHere: paidAtProvider.length,
    outboxMessages: final.messages.length,
    outboxProcessed: final.messages.filter((m) => m.status === "processed").length,
    duplicatePaymentRows: duplicates(final.payments, (p) => p.idempotencyKey),
    duplicateOutboxRows: duplicates(final.messages, (m) => m.dedupeKey),
    fakeSuccesses: calls.fakeSuccesses(final.payments).length,
  };
  const m = metrics;
  const keys = (payments: readonly { idempotencyKey: string }[]) => payments.map((p) => p.idempotencyKey).join(", ") || "none";
  const pendingAtCrashKeys = keys(pendingAt(atCrash.payments));
  const toDo = total - RECONCILED_BEFORE_CRASH;

  const common = [
    check(`Instance-1 created ${total} payments`, m.paymentsCreated === total, `${m.paymentsCreated} payment rows after the crash`),
    check(
      `Instance-1 reconciled ${RECONCILED_BEFORE_CRASH}, then was killed with SIGKILL`,
      m.reconciledBeforeCrash === RECONCILED_BEFORE_CRASH && killed.signal === "SIGKILL",
      `${m.reconciledBeforeCrash} reconciled; pid ${killed.pid} ended by ${killed.signal ?? `exit code ${killed.exitCode}`}`,
    ),
    check(
      `it died with ${toDo} reconciliations still to do`,
      m.workPendingAtCrash === toDo && pendingAt(atCrash.payments).length === toDo,
      `its own list: ${killed.pending.join(", ") || "none"}; Pending rows: ${pendingAtCrashKeys}`,
    ),
  ];
  const specific = durable
    ? [
        check(
          `the ${toDo} pending reconciliations survived the crash in the database`,
          m.durableWorkAtCrash === toDo && durableAtCrash.map(messageKey).join(", ") === pendingAtCrashKeys,
          `${m.durableWorkAtCrash} pending message(s): ${durableAtCrash.map(messageKey).join(", ") || "none"}`,
        ),
        check(
          `the fresh instance reloaded all ${toDo} on start`,
          m.workFoundOnRestart === toDo,
          `${m.workFoundOnRestart} found: ${found.join(", ") || "none"}`,
        ),
        check(`it reconciled all ${toDo}`, m.reconciledAfterRestart === toDo, `${m.reconciledAfterRestart} moved out of Pending`),
        check(
          "final rows: 4 Paid / 2 Failed / 0 pending",
          m.paid === 4 && m.failed === 2 && m.stillPending === 0,
          `${m.paid} / ${m.failed} / ${m.stillPending}`,
        ),
        check("nothing lost", m.lostPayments === 0, `${m.lostPayments} payment(s) Pending with no work left to finish them`),
        check(
          `final outbox: ${total} messages, all processed`,
          m.outboxMessages === total && m.outboxProcessed === total,
          `${m.outboxProcessed} of ${m.outboxMessages} processed`,
        ),
        check(
          "one provider status check per payment",
          m.providerStatusChecks === total && m.paymentsCheckedMoreThanOnce === 0,
          `${m.providerStatusChecks} status checks, ${m.paymentsCheckedMoreThanOnce} payment(s) checked twice`,
        ),
      ]
    : [
        check("nothing durable recorded the pending work", m.durableWorkAtCrash === 0, `${m.durableWorkAtCrash} pending outbox message(s) after the crash`),
        check("the fresh instance started with nothing to do", m.workFoundOnRestart === 0, `${m.workFoundOnRestart} item(s) in its memory on start`),
        check(
          `${toDo} payments were never reconciled: lost`,
          m.reconciledAfterRestart === 0 && m.stillPending === toDo && m.lostPayments === toDo,
          `${m.reconciledAfterRestart} reconciled after the restart; still Pending: ${keys(lost)}`,
        ),
        check(
          "some of them the provider has as Paid, yet they show Pending here",
          m.paidAtProviderButPendingHere > 0,
          `${m.paidAtProviderButPendingHere} (${keys(paidAtProvider)})`,
        ),
        check(
          `the provider was asked only about the ${RECONCILED_BEFORE_CRASH} reconciled before the crash`,
          m.providerStatusChecks === RECONCILED_BEFORE_CRASH && m.paymentsCheckedMoreThanOnce === 0,
          `${m.providerStatusChecks} status checks`,
        ),
      ];
  const checks = [
    ...common,
    ...specific,
    check(
      "no duplicate payment or outbox rows",
      m.duplicatePaymentRows === 0 && m.duplicateOutboxRows === 0,
      `${m.duplicatePaymentRows} / ${m.duplicateOutboxRows}`,
    ),
    check("no fake success (Paid has the provider's id, Failed has none)", m.fakeSuccesses === 0, String(m.fakeSuccesses)),
  ];
  const passed = checks.every((c) => c.passed);
  const verdict = !passed
    ? `VERDICT: THE DEMONSTRATION DID NOT GO AS EXPECTED: ${checks.filter((c) => !c.passed).length} check(s) failed (marked FAIL above).`
    : durable
      ? "VERDICT: THE WORK OUTLIVED THE PROCESS ✅\n" +
        `Instance-1 was killed with ${toDo} reconciliations to do. They were outbox messages, committed with their\n` +
        `payments, so Instance-2 found all ${toDo} in the database on start and finished them: ${m.paid} Paid, ${m.failed} Failed,\n` +
        "nothing Pending, nothing lost, one status check per payment."
      : "VERDICT: THE WORK DIED WITH THE PROCESS ❌\n" +
        `Instance-1 was killed holding ${toDo} reconciliations in memory. The payment rows survived, but nothing\n` +
        "said they still needed work: Instance-2 started with an empty list, so these stay Pending for good:\n" +
        `${keys(lost)}, ${m.paidAtProviderButPendingHere} of them already Paid at the provider.\n` +
        "(The scenario passes: every check confirmed the loss it exists to show.)";

  const labels = labelsFrom(final.messages);
  const crashTable = textTable(
    ["what", "observed"],
    [
      ["process", `Instance-1, pid ${killed.pid} (a child process of the lab)`],
      ["crash point", killed.where],
      ["scenario clock", clockTime(killed.at)],
      ["work it still had", killed.pending.join(", ") || "none"],
      ["ended by", killed.signal ?? `exit code ${killed.exitCode}`],
    ],
  );
  const report = new ReportBuilder()
    .section("Schema, as the database reports it", stage.schema)
    .section("The killed instance", crashTable)
    .section("Payments after the crash", renderPayments(atCrash.payments))
    .section(
      "Outbox after the crash",
      atCrash.messages.length === 0 ? "(no outbox messages: the work was kept only in memory)" : renderMessages(atCrash.messages, labels),
    )
    .section("Timeline (both instances)", renderTimeline(ledger, labels))
    .section("Provider calls (every process)", calls.render());
  if (durable) report.section("Processing ledger", renderProcessingLedger(ledger, labels));
  report
    .section("Final payments", renderPayments(final.payments))
    .section("Final outbox", final.messages.length === 0 ? "(no outbox messages)" : renderMessages(final.messages, labels))
    .section("Metrics", renderMetrics(metrics))
    .section("Checks", renderChecks(checks))
    .section("Verdict", verdict);
  return { passed, checks, metrics, body: report.toString(), verdict };
}

export const inMemoryReconciliation: Scenario = {
  name: "session-13-in-memory-reconciliation",
  series: "Session-13",
  phase: "BEFORE",
  title: "Reconciliation work kept in memory",
  reportStem: "Session-13-In-Memory-Reconciliation",
  summary: "an instance killed with payments pending; the fresh one has nothing to do, so they stay Pending",
  run: (backend) => run(backend, false),
};

export const durableReconciliation: Scenario = {
  name: "session-13-durable-reconciliation",
  series: "Session-13",
  phase: "AFTER",
  title: "Durable reconciliation",
  reportStem: "Session-13-Durable-Reconciliation",
  summary: "the pending work is in the database; the fresh instance reloads and finishes all of it",
  run: (backend) => run(backend, true),
};
