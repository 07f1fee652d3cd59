// Session 14: does a payment ever exist without its message? A first instance runs as a real child
// process and creates the payments in order; at PAY-004 it is killed with SIGKILL right after the
// payment's write and before its message's. A fresh instance then takes the requests again (PAY-004
// retried, PAY-005 and PAY-006 for the first time), and a worker reconciles whatever the outbox holds.
//
// BEFORE: a dual write. The payment commits in one transaction, the message is written in another,
// so the crash leaves PAY-004's payment with no message: an orphan that a query finds right after
// the crash. The retry sees the key and writes nothing, so PAY-004 is never reconciled.
// AFTER: the payment and its message go through the store's `enqueue` in one transaction. The same
// crash point (after the payment insert, before the commit) leaves neither; the retry writes both.

import type { LabBackend } from "../backend.js";
import { duplicates, messageKey, pairPaymentsAndMessages, ProviderCalls, renderPairing } from "../crash-figures.js";
import { drainOutbox, dualWriteCreate, paymentsService } from "../instance-work.js";
import type { AtomicityMetrics } from "../metrics.js";
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

/** The payment whose creation the crash cuts short. */
const CRASH_KEY = "PAY-004";
/** The scenario clock's step between the crash and the restart (for a readable timeline). */
const RESTART_AFTER_MS = 1_000;

async function run<Tx>(backend: LabBackend<Tx>, atomic: boolean): Promise<ScenarioRun> {
  const stage = await openRestartStage(backend);
  const { clock, ledger, provider } = stage;
  const total = PAYMENT_REQUESTS.length;
  const crashIndex = PAYMENT_REQUESTS.findIndex((r) => r.idempotencyKey === CRASH_KEY);

  // 1. The first instance, a child process, creates payments in order until the lab kills it.
  const killed = await stage.kill(
    "Instance-1",
    atomic
      ? { kind: "transactional-outbox", payments: PAYMENT_REQUESTS, crashAfterPaymentOf: CRASH_KEY }
      : { kind: "dual-write", payments: PAYMENT_REQUESTS, crashAfterPaymentOf: CRASH_KEY },
  );
  const atCrash = await stage.snapshot();
  const pairedAtCrash = pairPaymentsAndMessages(atCrash);
  const orphanCheck = `query after the crash: ${atCrash.payments.length} payment row(s), ${atCrash.messages.length} message(s); ${pairedAtCrash.paymentsWithoutMessage.length} payment(s) without a message (${pairedAtCrash.paymentsWithoutMessage.map((p) => p.idempotencyKey).join(", ") || "none"}), ${pairedAtCrash.messagesWithoutPayment.length} message(s) without a payment`;
  ledger.note(clock.now(), "lab", orphanCheck);

  // 2. A fresh instance: the request that got no answer is retried, the others arrive for the first time.
  clock.advance(RESTART_AFTER_MS);
  ledger.note(clock.now(), "lab", "start Instance-2 in the lab's own process: a fresh instance on the same database");
  const fresh = await stage.instance("Instance-2");
  const freshPayments = paymentsService(fresh);
  const retried = PAYMENT_REQUESTS.slice(crashIndex);
  for (const request of retried) {
    fresh.note(`request ${request.idempotencyKey}${request.idempotencyKey === CRASH_KEY ? " again: the client got no answer the first time and retries" : ""}`);
    if (atomic) {
      const { payment, created } = await freshPayments.create(request);
      fresh.note(
        created
          ? `create ${payment.idempotencyKey}: payment row + reconciliation message committed together`
          : `create ${payment.idempotencyKey}: the key exists: nothing written`,
      );
    } else {
      await dualWriteCreate(fresh, request);
    }
  }
  const afterRetry = await stage.snapshot();
  const messagesOf = (snapshot: typeof atCrash, key: string) => snapshot.messages.filter((m) => messageKey(m) === key).length;

  // 3. The outbox worker reconciles whatever the outbox holds.
  ledger.note(clock.now(), "lab", "start the outbox worker: it reconciles every message it can claim");
  const worker = await stage.instance("Worker");
  await drainOutbox(worker, paymentsService(worker));
  const final = await stage.snapshot();
  const pairedAtEnd = pairPaymentsAndMessages(final);

  // 4. Figures, from the rows, the ledger and the provider's log.
  const calls = new ProviderCalls(stage.providerCalls());
  const stillPending = final.payments.filter((p) => p.status === "Pending");
  const paidAtProvider = stillPending.filter((p) => provider.outcomeFor(p.idempotencyKey) === "Paid");
  const metrics: AtomicityMetrics = {
    requestsBeforeCrash: new ProviderCalls(killed.providerCalls).creates(),
    killedBy: killed.signal,
    paymentRowsAfterCrash: atCrash.payments.length,
    outboxMessagesAfterCrash: atCrash.messages.length,
    paymentsWithoutMessageAfterCrash: pairedAtCrash.paymentsWithoutMessage.length,
    messagesWithoutPaymentAfterCrash: pairedAtCrash.messagesWithoutPayment.length,
    messagesWrittenByRetry: messagesOf(afterRetry, CRASH_KEY) - messagesOf(atCrash, CRASH_KEY),
    paymentsAtEnd: final.payments.length,
    outboxMessagesAtEnd: final.messages.length,
    paymentsWithoutMessageAtEnd: pairedAtEnd.paymentsWithoutMessage.length,
    messagesWithoutPaymentAtEnd: pairedAtEnd.messagesWithoutPayment.length,
    processingAttempts: ledger.of("processing-started").length,
    providerStatusChecks: calls.statusChecks(),
    paid: final.payments.filter((p) => p.status === "Paid").length,
    failed: final.payments.filter((p) => p.status === "Failed").length,
    stillPending: stillPending.length,
    paidAtProviderButPendingHere: paidAtProvider.length,
    duplicatePaymentRows: duplicates(final.payments, (p) => p.idempotencyKey),
    duplicateOutboxRows: duplicates(final.messages, (m) => m.dedupeKey),
    fakeSuccesses: calls.fakeSuccesses(final.payments).length,
  };
  const m = metrics;
  const keys = (payments: readonly { idempotencyKey: string }[]) => payments.map((p) => p.idempotencyKey).join(", ") || "none";
  const crashPayment = atCrash.payments.find((p) => p.idempotencyKey === CRASH_KEY);
  const began = crashIndex + 1;

  const killedCheck = check(
    `Instance-1 began ${began} payment requests and was killed with SIGKILL in the middle of ${CRASH_KEY}'s`,
    m.requestsBeforeCrash === began && killed.signal === "SIGKILL" && killed.pending.join() === CRASH_KEY,
    `${m.requestsBeforeCrash} provider creations by pid ${killed.pid}; ended by ${killed.signal ?? `exit code ${killed.exitCode}`} at: ${killed.where}`,
  );
  const noDuplicates = check(
    "no duplicate payment or outbox rows",
    m.duplicatePaymentRows === 0 && m.duplicateOutboxRows === 0,
    `${m.duplicatePaymentRows} / ${m.duplicateOutboxRows}`,
  );
  const noFake = check("no fake success (Paid has the provider's id, Failed has none)", m.fakeSuccesses === 0, String(m.fakeSuccesses));
  const checks = atomic
    ? [
        killedCheck,
        check(
          `after the crash neither of ${CRASH_KEY}'s rows exists`,
          crashPayment === undefined &&
            messagesOf(atCrash, CRASH_KEY) === 0 &&
            m.paymentRowsAfterCrash === crashIndex &&
            m.outboxMessagesAfterCrash === crashIndex,
          `${CRASH_KEY}: payment ${crashPayment === undefined ? "absent" : "PRESENT"}, message ${messagesOf(atCrash, CRASH_KEY) === 0 ? "absent" : "PRESENT"}; ${m.paymentRowsAfterCrash} payments, ${m.outboxMessagesAfterCrash} messages in all`,
        ),
        check(
          "the query after the crash finds no orphan on either side",
          m.paymentsWithoutMessageAfterCrash === 0 && m.messagesWithoutPaymentAfterCrash === 0,
          `${m.paymentsWithoutMessageAfterCrash} payment(s) without a message, ${m.messagesWithoutPaymentAfterCrash} message(s) without a payment`,
        ),
        check(
          `the retried request wrote ${CRASH_KEY}'s payment and message together`,
          m.messagesWrittenByRetry === 1 && afterRetry.payments.some((p) => p.idempotencyKey === CRASH_KEY),
          `${m.messagesWrittenByRetry} message written by the retry`,
        ),
        check(
          `the provider answered the retry with the reference it gave the first time (idempotent by key)`,
          calls.references(CRASH_KEY).length === 2 && new Set(calls.references(CRASH_KEY)).size === 1,
          `${CRASH_KEY} created ${calls.creates(CRASH_KEY)} times: ${calls.references(CRASH_KEY).join(", ")}`,
        ),
        check(
          `every payment has its one message: ${total} and ${total}, no orphan`,
          m.paymentsAtEnd === total && m.outboxMessagesAtEnd === total && m.paymentsWithoutMessageAtEnd === 0 && m.messagesWithoutPaymentAtEnd === 0,
          `${m.paymentsAtEnd} payments, ${m.outboxMessagesAtEnd} messages, ${m.paymentsWithoutMessageAtEnd} + ${m.messagesWithoutPaymentAtEnd} orphans`,
        ),
        check(
          `the worker reconciled all ${total}, once each`,
          m.processingAttempts === total && m.providerStatusChecks === total && calls.checkedMoreThanOnce().length === 0,
          `${m.processingAttempts} processing attempts, ${m.providerStatusChecks} status checks`,
        ),
        check(
          "final rows: 4 Paid / 2 Failed / 0 pending",
          m.paid === 4 && m.failed === 2 && m.stillPending === 0,
          `${m.paid} / ${m.failed} / ${m.stillPending}`,
        ),
        noDuplicates,
        noFake,
      ]
    : [
        killedCheck,
        check(
          `the query after the crash finds the orphan: ${CRASH_KEY}'s payment without its message`,
          keys(pairedAtCrash.paymentsWithoutMessage) === CRASH_KEY && m.messagesWithoutPaymentAfterCrash === 0,
          `${m.paymentRowsAfterCrash} payments, ${m.outboxMessagesAfterCrash} messages; without a message: ${keys(pairedAtCrash.paymentsWithoutMessage)}`,
        ),
        check(
          `the retried request found ${CRASH_KEY}'s key and wrote nothing`,
          m.messagesWrittenByRetry === 0 && calls.creates(CRASH_KEY) === 1,
          `${m.messagesWrittenByRetry} message written by the retry; ${CRASH_KEY} created at the provider ${calls.creates(CRASH_KEY)} time(s)`,
        ),
        check(
          "the orphan is still there at the end",
          keys(pairedAtEnd.paymentsWithoutMessage) === CRASH_KEY,
          `${m.paymentsAtEnd} payments, ${m.outboxMessagesAtEnd} messages; without a message: ${keys(pairedAtEnd.paymentsWithoutMessage)}`,
        ),
        check(
          `the worker reconciled the ${total - 1} messages there are`,
          m.processingAttempts === total - 1 && m.providerStatusChecks === total - 1,
          `${m.processingAttempts} processing attempts, ${m.providerStatusChecks} status checks`,
        ),
        check(
          `${CRASH_KEY} stays Pending for good, though the provider has it Paid`,
          keys(stillPending) === CRASH_KEY && keys(paidAtProvider) === CRASH_KEY,
          `Pending: ${keys(stillPending)}; of them Paid at the provider: ${keys(paidAtProvider)}`,
        ),
        check(
          "final rows: 3 Paid / 2 Failed / 1 pending",
          m.paid === 3 && m.failed === 2 && m.stillPending === 1,
          `${m.paid} / ${m.failed} / ${m.stillPending}`,
        ),
        noDuplicates,
        noFake,
      ];
  const passed = checks.every((c) => c.passed);
  const verdict = !passed
    ? `VERDICT: THE DEMONSTRATION DID NOT GO AS EXPECTED: ${checks.filter((c) => !c.passed).length} check(s) failed (marked FAIL above).`
    : atomic
      ? "VERDICT: THE PAYMENT AND ITS MESSAGE COMMIT TOGETHER OR NOT AT ALL ✅\n" +
        `Instance-1 was killed inside ${CRASH_KEY}'s transaction, after the payment insert: the database kept\n` +
        `neither row, so nothing was half-done. The retry wrote both; every one of the ${total} payments has its\n` +
        `message, and the worker reconciled all of them: ${m.paid} Paid, ${m.failed} Failed, nothing Pending.`
      : "VERDICT: A PAYMENT WITHOUT ITS MESSAGE: THE DUAL WRITE LEFT AN ORPHAN ❌\n" +
        `Instance-1 was killed after ${CRASH_KEY}'s payment committed and before its message was written. The\n` +
        "retry found the key and wrote nothing, so no message will ever ask for its reconciliation: it stays\n" +
        `Pending although the provider has it Paid. ${m.paid} Paid, ${m.failed} Failed, ${m.stillPending} Pending.\n` +
        "(The scenario passes: every check confirmed the orphan it exists to show.)";

  const labels = labelsFrom(final.messages);
  const crashTable = textTable(
    ["what", "observed"],
    [
      ["process", `Instance-1, pid ${killed.pid} (a child process of the lab)`],
      ["crash point", killed.where],
      ["scenario clock", clockTime(killed.at)],
      ["ended by", killed.signal ?? `exit code ${killed.exitCode}`],
    ],
  );
  const report = new ReportBuilder()
    .section("Schema, as the database reports it", stage.schema)
    .section("The killed instance", crashTable)
    .section("Orphan check right after the crash (payment rows against outbox messages)", renderPairing(pairedAtCrash))
    .section("Payments after the crash", renderPayments(atCrash.payments))
    .section("Outbox after the crash", atCrash.messages.length === 0 ? "(no outbox messages)" : renderMessages(atCrash.messages, labels))
    .section("Timeline (both instances and the worker)", renderTimeline(ledger, labels))
    .section("Provider calls (every process)", calls.render())
    .section("Processing ledger", renderProcessingLedger(ledger, labels))
    .section("Orphan check at the end", renderPairing(pairedAtEnd))
    .section("Final payments", renderPayments(final.payments))
    .section("Final outbox", renderMessages(final.messages, labels))
    .section("Metrics", renderMetrics(metrics))
    .section("Checks", renderChecks(checks))
    .section("Verdict", verdict);
  return { passed, checks, metrics, body: report.toString(), verdict };
}

export const dualWrite: Scenario = {
  name: "session-14-dual-write",
  series: "Session-14",
  phase: "BEFORE",
  title: "Dual write: the payment, then its message",
  reportStem: "Session-14-Dual-Write",
  summary: "killed between the payment's commit and its message's write: a payment with no message, never reconciled",
  run: (backend) => run(backend, false),
};

export const transactionalOutbox: Scenario = {
  name: "session-14-transactional-outbox",
  series: "Session-14",
  phase: "AFTER",
  title: "Transactional outbox",
  reportStem: "Session-14-Transactional-Outbox",
  summary: "payment and message in one transaction: the same crash leaves neither, and no orphan ever exists",
  run: (backend) => run(backend, true),
};
