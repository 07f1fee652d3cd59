// AFTER: the same outbox, now with leases. First a crash demonstration on PAY-001 under the
// scenario clock (claim, crash, blocked before expiry, reclaimed after it, processed once, and a
// stale completion refused), then two workers on separate connections claim the remaining
// messages one at a time until nothing is left.

import type { Clock } from "../../outbox/clock.js";
import { processLease } from "../../outbox/process-lease.js";
import type { ClaimMessageResult } from "../../outbox/types.js";
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
import type { ReportFigure, Scenario, ScenarioRun } from "../scenario.js";
import { timelineFromEvents, type TimelineNote } from "../../observability/timeline.js";
import type { OutboxEvent } from "../../outbox/events.js";
import { clockTime, textTable } from "../text-table.js";
import { createWorld, type LabWorker } from "../world.js";

/** The crashed owner's lease in the recovery demonstration. */
const DEMO_LEASE_MS = 500;
/** How far the scenario clock moves: past the demo lease. */
const DEMO_ADVANCE_MS = 600;
const DEMO_SECTION = "Lease-expiry demonstration (PAY-001, scenario clock)";
/** Leases in the concurrent phase; the scenario clock does not move there, so none expires. */
const LEASE_MS = 30_000;

/** Claims one message at a time and processes it, until a claim comes back empty. */
async function leasingWorker<Tx>(worker: LabWorker<Tx>, clock: Clock): Promise<void> {
  const handler = worker.payments.handler();
  for (;;) {
    const [lease] = await worker.store.claim(worker.name, { limit: 1, leaseMs: LEASE_MS });
    if (lease === undefined) return;
    await processLease(worker.store, lease, handler, clock);
    // Let the other instance take its turn at the write lock.
    await new Promise((resolve) => setImmediate(resolve));
  }
}

const outcome = (r: ClaimMessageResult) =>
  r.outcome === "claimed" ? (r.lease.reclaimedFrom ? `RECLAIMED from ${r.lease.reclaimedFrom}` : "CLAIMED") : r.outcome.toUpperCase();

async function run<Tx>(backend: LabBackend<Tx>): Promise<ScenarioRun> {
  const world = await createWorld(backend);
  const { clock, ledger, provider, labels } = world;
  const createCallsBefore = provider.createCalls();
  const target = world.seededMessages.find((m) => labels(m.id) === "PAY-001");
  if (target === undefined) throw new Error("seed is missing PAY-001");

  // --- Lease-expiry recovery on PAY-001 -------------------------------------------------
  const demoStart = ledger.entries.length;
  const demo: string[][] = [];
  const demoNotes: TimelineNote[] = [];
  let workerA = await world.connect("Worker-A");
  const workerB = await world.connect("Worker-B");
  const t0 = clock.now();
  const first = await workerA.store.claimMessage("Worker-A", target.id, { leaseMs: DEMO_LEASE_MS });
  demo.push([clockTime(t0), "Worker-A", `claims PAY-001 with a ${DEMO_LEASE_MS} ms lease`, outcome(first)]);
  await workerA.store.close();
  ledger.note(clock.now(), "Worker-A", "CRASHES before processing PAY-001 (its connection is gone; the row stays processing under its lease)");
  demoNotes.push({ at: clock.now(), owner: "Worker-A", text: "Worker-A crashes before processing", kind: "crash" });
  const afterCrash = await world.api.store.getMessage(target.id);
  demo.push([
    clockTime(clock.now()),
    "Worker-A",
    "crashes before processing",
    `row: ${afterCrash?.status}, locked_by ${afterCrash?.lockedBy}, until ${afterCrash?.lockedUntil ? clockTime(afterCrash.lockedUntil) : "-"}`,
  ]);

  const blocked = await workerB.store.claimMessage("Worker-B", target.id, { leaseMs: LEASE_MS });
  demo.push([clockTime(clock.now()), "Worker-B", "tries to claim PAY-001 before expiry", outcome(blocked)]);

  clock.advance(DEMO_ADVANCE_MS);
  ledger.note(clock.now(), "clock", `scenario clock advanced ${DEMO_ADVANCE_MS} ms, past Worker-A's lease`);
  demoNotes.push({ at: clock.now(), owner: "clock", text: `clock at ${clockTime(clock.now())}`, kind: "clock" });
  demo.push([clockTime(clock.now()), "clock", `advances ${DEMO_ADVANCE_MS} ms`, "Worker-A's lease has expired"]);

  const reclaimed = await workerB.store.claimMessage("Worker-B", target.id, { leaseMs: LEASE_MS });
  demo.push([clockTime(clock.now()), "Worker-B", "claims PAY-001 after expiry", outcome(reclaimed)]);

  // Worker-A's application instance restarts with a new connection, under the same name.
  workerA = await world.connect("Worker-A");
  ledger.note(clock.now(), "Worker-A", "restarts on a new connection (same worker name)");
  let staleRefused = false;
  if (first.outcome === "claimed") {
    const stale = await workerA.store.complete(first.lease);
    staleRefused = stale.outcome === "lease-lost";
    demo.push([
      clockTime(clock.now()),
      "Worker-A",
      `presents its pre-crash lease (token ${first.lease.token}) to complete PAY-001`,
      staleRefused ? "REFUSED: lease lost, nothing written" : "ACCEPTED (fencing is broken)",
    ]);
  }
  let demoProcessed = "not processed";
  if (reclaimed.outcome === "claimed") {
    const { result, summary } = await processLease(workerB.store, reclaimed.lease, workerB.payments.handler(), clock);
    demoProcessed = result.outcome === "completed" ? `processed once: ${summary}` : "lease lost";
    demo.push([clockTime(clock.now()), "Worker-B", "processes PAY-001 and completes it (guarded)", demoProcessed]);
  }
  const demoTimeline = renderTimeline(ledger, labels, demoStart);
  const demoEnd = ledger.entries.length;
  const demoEvents = ledger.entries.slice(demoStart, demoEnd).filter((e): e is OutboxEvent & { seq: number } => e.type !== "note");
  const figures: ReportFigure[] = [
    {
      section: DEMO_SECTION,
      caption: `PAY-001's ownership: Worker-A's ${DEMO_LEASE_MS} ms lease, its crash, Worker-B blocked, the lease running out, the reclaim, and the stale write refused`,
      timeline: timelineFromEvents(target.id, demoEvents, demoNotes),
    },
  ];

  // --- Two workers drain the rest, one claim at a time ----------------------------------
  ledger.note(clock.now(), "lab", "concurrent phase: Worker-A and Worker-B claim one message at a time");
  await Promise.all([leasingWorker(workerA, clock), leasingWorker(workerB, clock)]);

  const finalPayments = await world.api.repository.list();
  const finalMessages = await world.api.store.listMessages();
  const metrics = computeMetrics({
    ledger,
    provider,
    seededPayments: world.seededPayments,
    seededMessages: world.seededMessages,
    finalPayments,
    finalMessages,
    rowsLoadedByWorker: null,
    paymentCreationsInWorkers: provider.createCalls() - createCallsBefore,
    leased: true,
  });
  const m = metrics;
  const pay001 = finalMessages.find((msg) => msg.id === target.id);
  const pay001Attempts = ledger.attemptsByMessage().get(target.id) ?? 0;
  const concurrentClaims = ledger.of("claim-won").filter((e) => e.seq > demoEnd).length;
  const createdOncePerKey = world.seededPayments.every((p) => provider.createCalls(p.idempotencyKey) === 1);
  const split = Object.entries(m.processedByWorker)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([w, n]) => `${w} ${n}`)
    .join(", ");
  const paidWithId = finalPayments.filter((p) => p.status === "Paid" && p.transactionId !== null).length;
  const failedWithId = finalPayments.filter((p) => p.status === "Failed" && p.transactionId !== null).length;

  const checks = [
    check(
      "6 payments and 6 pending messages seeded",
      m.paymentsSeeded === 6 && m.pendingMessagesSeeded === 6,
      `${m.paymentsSeeded} / ${m.pendingMessagesSeeded}`,
    ),
    check("Worker-A claimed PAY-001 with a 500 ms lease", first.outcome === "claimed" && first.lease.owner === "Worker-A", outcome(first)),
    check(
      "Worker-B was blocked before the lease expired",
      blocked.outcome === "blocked" && blocked.heldBy === "Worker-A",
      blocked.outcome === "blocked" ? `blocked by ${blocked.heldBy}` : outcome(blocked),
    ),
    check("Worker-B reclaimed PAY-001 after expiry", reclaimed.outcome === "claimed" && reclaimed.lease.reclaimedFrom === "Worker-A", outcome(reclaimed)),
    check("the crashed owner's stale lease could not write", staleRefused, staleRefused ? "refused (token moved on)" : "accepted"),
    check(
      "PAY-001 was processed exactly once, by Worker-B",
      pay001Attempts === 1 && pay001?.status === "processed" && pay001.lockedBy === "Worker-B",
      `${pay001Attempts} attempt(s), ${pay001?.status} by ${pay001?.lockedBy}`,
    ),
    check(
      "6 processing attempts for 6 unique messages",
      m.processingAttempts === 6 && m.uniqueMessagesProcessed === 6,
      `${m.processingAttempts} attempts, ${m.uniqueMessagesProcessed} unique`,
    ),
    check("no message processed more than once", m.messagesProcessedMoreThanOnce === 0, String(m.messagesProcessedMoreThanOnce)),
    check("one provider status check per payment", m.providerStatusChecks === 6, `${m.providerStatusChecks} status checks`),
    check("zero ownership violations", m.ownershipViolations === 0, String(m.ownershipViolations)),
    check("final rows: 4 Paid / 2 Failed / 0 pending", m.paid === 4 && m.failed === 2 && m.stillPending === 0, `${m.paid} / ${m.failed} / ${m.stillPending}`),
    check(
      "final outbox: 6 processed / 0 pending / 0 processing",
      m.outboxProcessed === 6 && m.outboxPending === 0 && m.outboxProcessing === 0,
      `${m.outboxProcessed} / ${m.outboxPending} / ${m.outboxProcessing}`,
    ),
    check(
      "no duplicate payment or outbox rows (at most 1 per key)",
      m.duplicatePaymentRows === 0 && m.duplicateOutboxRows === 0,
      `${m.duplicatePaymentRows} / ${m.duplicateOutboxRows}`,
    ),
    check(
      "one provider creation per key, none by workers",
      createdOncePerKey && m.paymentCreationsInWorkers === 0,
      `${world.seededPayments.filter((p) => provider.createCalls(p.idempotencyKey) === 1).length} / 6 keys created once; ${m.paymentCreationsInWorkers} by workers`,
    ),
    check(
      "transaction ids only from the provider, only on Paid",
      m.fakeSuccesses === 0 && paidWithId === 4 && failedWithId === 0,
      `${paidWithId} Paid with id, ${failedWithId} Failed with id, ${m.fakeSuccesses} fake`,
    ),
    check("the concurrent phase claimed the other 5 messages", concurrentClaims === 5, `${concurrentClaims} claims won (split ${split})`),
  ];
  const passed = checks.every((c) => c.passed);
  const verdict = passed
    ? "VERDICT: ONE OWNER PER MESSAGE, AND A DEAD OWNER'S LEASE RUNS OUT ✅\n" +
      `6 messages, 6 processing attempts, 6 status checks: each message was worked once, by whoever\n` +
      `claimed it (${split}). PAY-001 outlived its crashed owner: the lease ran out, Worker-B took it\n` +
      "over, and the old owner's late write was refused by its stale token."
    : `VERDICT: LEASING DID NOT HOLD: ${checks.filter((c) => !c.passed).length} check(s) failed (marked FAIL above).`;

  const report = new ReportBuilder()
    .section("Schema, as the database reports it", world.schema)
    .section("Seeded payments", renderPayments(world.seededPayments))
    .section("Seeded outbox messages", renderMessages(world.seededMessages, labels))
    .section(DEMO_SECTION, `${textTable(["clock", "who", "action", "result"], demo)}\n\nAs it happened:\n${demoTimeline}`)
    .section("Timeline (whole run)", renderTimeline(ledger, labels))
    .section("Per-message ownership", renderOwnership(finalMessages, ledger, labels, true))
    .section("Claim ledger (claims are not work: empty and blocked claims process nothing)", renderClaimLedger(ledger))
    .section("Processing ledger", renderProcessingLedger(ledger, labels))
    .section("Final payments", renderPayments(finalPayments))
    .section("Final outbox", renderMessages(finalMessages, labels))
    .section("Metrics", renderMetrics(metrics))
    .section("Checks", renderChecks(checks))
    .section("Verdict", verdict);
  return { passed, checks, metrics, body: report.toString(), verdict, figures };
}

export const outboxLeasing: Scenario = {
  name: "session-15-outbox-leasing",
  series: "Session-15",
  phase: "AFTER",
  title: "Outbox leasing",
  reportStem: "Session-15-Outbox-Leasing",
  summary: "atomic claims under expiring leases; a crashed owner's message is reclaimed and processed once",
  run,
};
