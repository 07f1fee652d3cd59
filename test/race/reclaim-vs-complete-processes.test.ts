// Reclaim versus completion with real concurrency: separate OS processes on one database, through
// the built library (dist/), each with its own connection and the audit trail on. One process
// (the completer) claims batches under leases of a few milliseconds and completes them one by one,
// with a business write in the completion transaction; by the time it gets to most of them the
// lease has expired. Two other processes (the reclaimers) claim in a loop all the while, taking
// over every expired lease they meet and never completing. So, thousands of times, a completion
// and a reclaim of the same message are in flight at once. SQLite: the system clock; PostgreSQL:
// the database's clock.
//
// At the end, from the database and the audit trail: every message is processed, with exactly
// one completion, under its final lease token; no message has a claim after its completion;
// exactly one business row per message, written under that token; and the processes' own records
// agree with the audit trail.
//
// Needs `npm run build` first (`npm test` does it).

import { mkdtempSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import type { OutboxStore } from "../../src/outbox/store.js";
import type { AuditEntry, MessageHolder, OutboxMessage } from "../../src/outbox/types.js";
import { SqliteOutboxStore } from "../../src/stores/sqlite/sqlite-outbox-store.js";
import { PostgresOutboxStore } from "../../src/stores/postgres/postgres-outbox-store.js";
import { requireBuilt, ROOT } from "../support/cli.js";
import { freshSchema, postgresAvailable, TEST_DATABASE_URL, withClient } from "../support/postgres.js";
import { tempDir } from "../support/temp.js";
import { within } from "../support/wait.js";
import { killAll, startWorkerScript, type WorkerProcess } from "../multi-process/worker-process.js";
import { businessProblems, auditProblems, readPostgresBusinessRows, readSqliteBusinessRows, unprocessed, type BusinessRow } from "./race-checks.js";

const PG = await postgresAvailable();
const FILE_TMP = tempDir("wassal-race-mp-");
const WORKER = join(ROOT, "test", "race", "race-worker.mjs");

beforeAll(() => {
  requireBuilt("stores/sqlite/sqlite-outbox-store.js");
  requireBuilt("stores/postgres/postgres-outbox-store.js");
});

interface ClaimRecord {
  messageId: string;
  token: number;
  owner: string;
  lockedUntil: number;
  reclaimedFrom: string | null;
}

interface CompletionRecord {
  messageId: string;
  token: number;
  lockedUntil: number;
  outcome: "completed" | "lease-lost";
  startedAt: number;
  endedAt: number;
  current: (Omit<MessageHolder, "lockedUntil"> & { lockedUntil: string | null }) | null;
}

interface WorkerRecord {
  worker: string;
  role: "completer" | "reclaimer";
  startedAt: number;
  finishedAt: number;
  claimCalls: number;
  emptyClaims: number;
  namedClaims: { claimed: number; blocked: number; processed: number; other: number };
  claims: ClaimRecord[];
  completions: CompletionRecord[];
  error: string | null;
}

/** A worker process and the file it writes its record to. */
interface Child {
  readonly out: string;
  readonly process: WorkerProcess;
}

function startChild(config: Record<string, unknown> & { worker: string; out: string }): Child {
  return { out: config.out, process: startWorkerScript(WORKER, config) };
}

const COMPLETER = "completer";
const RECLAIMERS = ["reclaimer-1", "reclaimer-2"];
const DEADLINE_MS = 40_000;

interface Setup {
  /** Config keys that point a worker at the database. */
  readonly target: Record<string, unknown>;
  /** A store on the database, audit on (for auditTrail and the final rows). */
  readonly store: OutboxStore<unknown>;
  readonly ids: string[];
  businessRows(): Promise<BusinessRow[]>;
  close(): Promise<void>;
}

async function seed(store: OutboxStore<unknown>, total: number): Promise<string[]> {
  const ids: string[] = [];
  for (let first = 0; first < total; first += 500) {
    ids.push(
      ...(await store.transaction(async (tx) => {
        const made: string[] = [];
        for (let n = first; n < Math.min(total, first + 500); n += 1) made.push((await store.enqueue(tx, { type: "race.message", payload: { n } })).id);
        return made;
      })),
    );
  }
  return ids;
}

async function sqliteSetup(total: number): Promise<Setup> {
  const path = join(mkdtempSync(join(FILE_TMP, "sqlite-")), "outbox.db");
  const store = new SqliteOutboxStore({ path, audit: true });
  await store.migrate();
  await store.transaction((tx) => {
    // Deliberately without a unique constraint: a second business row would show.
    tx.exec("CREATE TABLE effects (message_id INTEGER NOT NULL, owner TEXT NOT NULL, token INTEGER NOT NULL) STRICT");
  });
  const ids = await seed(store, total);
  return {
    target: { store: "sqlite", db: path },
    store,
    ids,
    async businessRows() {
      return readSqliteBusinessRows(path);
    },
    close: () => store.close(),
  };
}

async function postgresSetup(total: number): Promise<Setup> {
  const schema = freshSchema("wassal_race_mp");
  const store = await PostgresOutboxStore.connect({ url: TEST_DATABASE_URL, schema, audit: true, maxConnections: 2, applicationName: "wassal-race-mp-test" });
  await store.migrate();
  await store.transaction(async (tx) => {
    await tx.query(`CREATE TABLE ${schema}.effects (message_id bigint NOT NULL, owner text NOT NULL, token int NOT NULL)`);
  });
  const ids = await seed(store, total);
  // Asynchronous commit for the workers: visibility and locking are unchanged, only the flush is skipped.
  const url = new URL(TEST_DATABASE_URL);
  url.searchParams.set("options", "-c synchronous_commit=off");
  return {
    target: { store: "postgres", url: url.toString(), schema },
    store,
    ids,
    businessRows: () => withClient((client) => readPostgresBusinessRows(client, schema)),
    close: () => store.close(),
  };
}

interface Tuning {
  readonly completerLeaseMs: number;
  readonly completerLimit: number;
  readonly completeConcurrency: number;
  readonly reclaimerLeaseMs: number;
  readonly reclaimerLimit: number;
}

/** How hard one round ran the race (see the end of race()). */
interface RaceCounts {
  /** Completions attempted on an expired lease, won or refused. */
  expiredAttempts: number;
  /** Of those, completions that won: the completion came first. */
  wonOnExpiredLease: number;
  /** Of those, completions refused because a reclaim came first. */
  refused: number;
  /** Reclaims by name overtaken by the completion between the reclaimer's read and its write. */
  overtaken: number;
}

/**
 * What the races must add up to, over as many rounds as it takes: both outcomes of the race, and
 * the completion landing inside a reclaimer's read-to-write window. How many happen per round is
 * the scheduler's business, so the test runs rounds until the counts are reached, up to MAX_ROUNDS.
 */
const WANTED: RaceCounts = { expiredAttempts: 1000, wonOnExpiredLease: 20, refused: 20, overtaken: 20 };
const MAX_ROUNDS = 8;

async function raceUntilCounted(kind: "sqlite" | "postgres", open: () => Promise<Setup>, tuning: Tuning): Promise<void> {
  const sum: RaceCounts = { expiredAttempts: 0, wonOnExpiredLease: 0, refused: 0, overtaken: 0 };
  const keys = Object.keys(WANTED) as (keyof RaceCounts)[];
  const short = () => keys.filter((k) => sum[k] < WANTED[k]);
  for (let round = 1; ; round += 1) {
    const setup = await open();
    try {
      const counts = await race(kind, setup, tuning);
      for (const k of keys) sum[k] += counts[k];
    } finally {
      await setup.close();
    }
    const missing = short();
    console.info(
      `${kind} reclaim-vs-complete across processes, after round ${round}: ${JSON.stringify(sum)}${missing.length ? `, short of ${missing.join(", ")}` : ""}`,
    );
    if (missing.length === 0) return;
    if (round >= MAX_ROUNDS) {
      throw new Error(
        `${kind}: after ${round} rounds (the cap) the races still fall short: ${missing.map((k) => `${k} ${sum[k]} of ${WANTED[k]}`).join(", ")}. ` +
          "Either a race outcome no longer happens (a broken reclaim or completion guard), or this machine is too fast or too slow for the leases in the tuning.",
      );
    }
  }
}

/** A round's deadline, setup and teardown, times the cap: the test's own timeout (only a failing run comes near it). */
const TEST_TIMEOUT_MS = MAX_ROUNDS * (DEADLINE_MS + 30_000);

async function race(kind: "sqlite" | "postgres", setup: Setup, tuning: Tuning): Promise<RaceCounts> {
  const TOTAL = setup.ids.length;
  const dir = mkdtempSync(join(FILE_TMP, `${kind}-run-`));
  const children: Child[] = [];
  const started = performance.now();
  try {
    children.push(
      startChild({
        ...setup.target,
        role: "completer",
        worker: COMPLETER,
        leaseMs: tuning.completerLeaseMs,
        limit: tuning.completerLimit,
        completeConcurrency: tuning.completeConcurrency,
        total: TOTAL,
        deadlineMs: DEADLINE_MS,
        out: join(dir, `${COMPLETER}.json`),
      }),
    );
    for (const name of RECLAIMERS) {
      children.push(
        startChild({
          ...setup.target,
          role: "reclaimer",
          worker: name,
          target: COMPLETER,
          leaseMs: tuning.reclaimerLeaseMs,
          limit: tuning.reclaimerLimit,
          total: TOTAL,
          deadlineMs: DEADLINE_MS,
          out: join(dir, `${name}.json`),
        }),
      );
    }
    await Promise.all(children.map((c) => c.process.waitFor("ready", 20_000)));
    for (const c of children) c.process.proc.stdin!.write("go\n");
    const completer = children[0]!;
    const completerExit = await within("the completer to process every message", completer.process.exited, DEADLINE_MS + 5_000);
    for (const c of children.slice(1)) c.process.proc.stdin!.end("stop\n");
    const exits = [completerExit, ...(await within("the reclaimers to stop", Promise.all(children.slice(1).map((c) => c.process.exited)), 20_000))];
    exits.forEach((exit, i) => {
      const c = children[i]!.process;
      expect({ worker: c.name, ...exit, stderr: c.stderr() }).toEqual({ worker: c.name, code: 0, signal: null, stderr: "" });
    });
  } finally {
    killAll(children.map((c) => c.process));
  }
  const elapsed = Math.round(performance.now() - started);
  const records = children.map((c) => JSON.parse(readFileSync(c.out, "utf8")) as WorkerRecord);

  // From the database: every message processed, exactly one completion each under its final lease
  // token, no claim after a completion, exactly one business row each under that token.
  const messages: OutboxMessage[] = await setup.store.listMessages();
  const audit: AuditEntry[] = await setup.store.auditTrail();
  const business = await setup.businessRows();
  expect(messages.map((m) => m.id)).toEqual(setup.ids);
  expect(auditProblems(audit, messages)).toEqual([]);
  expect(businessProblems(business, messages)).toEqual([]);
  expect(unprocessed(messages)).toEqual([]);

  // From the processes: the completer's successful completions are exactly the audit trail's, one per
  // message; nobody ever claimed a message under a token above the one it was completed with;
  // every claim a process saw is in the audit trail and vice versa.
  const completer = records[0]!;
  const completed = completer.completions.filter((c) => c.outcome === "completed");
  const lost = completer.completions.filter((c) => c.outcome === "lease-lost");
  expect(completed.map((c) => `${c.messageId}#${c.token}`).sort()).toEqual(
    audit
      .filter((e) => e.action === "complete")
      .map((e) => `${e.messageId}#${e.token}`)
      .sort(),
  );
  expect(new Set(completed.map((c) => c.messageId)).size).toBe(TOTAL);
  const completedToken = new Map(completed.map((c) => [c.messageId, c.token]));
  const claims = records.flatMap((r) => r.claims);
  const lateClaims = claims.filter((c) => c.token > (completedToken.get(c.messageId) ?? Infinity));
  expect(lateClaims, "claims under a token above the completed one").toEqual([]);
  expect(claims.map((c) => `${c.messageId}#${c.token}@${c.owner}`).sort()).toEqual(
    audit
      .filter((e) => e.action === "claim")
      .map((e) => `${e.messageId}#${e.token}@${e.owner}`)
      .sort(),
  );
  // Each lease the completer held ended exactly one way: its completion went through, or another
  // process reclaimed the message (the next token, taken over from the completer) and the
  // completion was refused. Never both, never neither.
  const key = (c: { messageId: string; token: number }) => `${c.messageId}#${c.token}`;
  const completedLeases = new Set(completed.map(key));
  const reclaimedLeases = new Set(claims.filter((c) => c.reclaimedFrom === COMPLETER).map((c) => key({ messageId: c.messageId, token: c.token - 1 })));
  const completerLeases = completer.claims.map(key);
  expect(
    completerLeases.filter((k) => completedLeases.has(k) && reclaimedLeases.has(k)),
    "completer leases both completed and reclaimed",
  ).toEqual([]);
  expect(
    completerLeases.filter((k) => !completedLeases.has(k) && !reclaimedLeases.has(k)),
    "completer leases neither completed nor reclaimed",
  ).toEqual([]);
  expect(lost.map(key).sort(), "refused completions are exactly the reclaimed leases").toEqual([...reclaimedLeases].sort());
  // A refused completion was refused because someone else's claim had taken the message over.
  const badRefusals = lost.filter((c) => c.current === null || c.current.leaseToken <= c.token);
  expect(badRefusals).toEqual([]);

  // How hard the race was run: completions that started on an expired lease (a reclaimer could
  // take the message at any moment), split into those that won and those a reclaim beat; and
  // reclaims by name that read the message as the completer's and found it processed when they
  // went to write (the completion landed between the reclaimer's read and its write).
  const claimedUntil = new Map(claims.map((c) => [`${c.messageId}#${c.token}`, c.lockedUntil]));
  const completeAt = new Map(audit.filter((e) => e.action === "complete").map((e) => [`${e.messageId}#${e.token}`, e.at.getTime()]));
  const wonExpired = completed.filter(
    (c) => (completeAt.get(`${c.messageId}#${c.token}`) ?? 0) >= (claimedUntil.get(`${c.messageId}#${c.token}`) ?? Infinity),
  ).length;
  const reclaims = claims.filter((c) => c.reclaimedFrom !== null);
  const reclaimsOfCompleter = reclaims.filter((c) => c.reclaimedFrom === COMPLETER).length;
  const reclaimers = records.slice(1);
  const overtaken = reclaimers.reduce((sum, r) => sum + r.namedClaims.processed, 0);
  const summary = {
    elapsedMs: elapsed,
    messages: TOTAL,
    claims: claims.length,
    reclaims: reclaims.length,
    reclaimsOfCompleter,
    completionAttempts: completer.completions.length,
    completedOnExpiredLease: wonExpired,
    refusedLeaseLost: lost.length,
    namedReclaimsOvertakenByCompletion: overtaken,
    auditRows: audit.length,
    claimCalls: records.map((r) => `${r.worker} ${r.claimCalls} (${r.emptyClaims} empty)`).join(", "),
    claimMessageByName: reclaimers.map((r) => `${r.worker} ${JSON.stringify(r.namedClaims)}`).join(", "),
  };
  console.info(`${kind} reclaim-vs-complete, ${1 + RECLAIMERS.length} processes: ${JSON.stringify(summary)}`);
  expect(
    reclaimers.map((r) => r.namedClaims.other),
    "claims by name that found the message neither processing nor processed",
  ).toEqual(reclaimers.map(() => 0));
  // How many real races this round ran: the caller adds them up over rounds until both outcomes
  // (and the read-to-write overtakes) reach their counts.
  return { expiredAttempts: wonExpired + lost.length, wonOnExpiredLease: wonExpired, refused: lost.length, overtaken };
}

describe("sqlite store: reclaim versus completion across processes", () => {
  const TOTAL = 3000;
  it(
    `${TOTAL} messages, a completer and ${RECLAIMERS.length} reclaimers on one file, leases of a few ms: no completed message is claimed again`,
    async () => {
      await raceUntilCounted("sqlite", () => sqliteSetup(TOTAL), {
        completerLeaseMs: 1,
        completerLimit: 40,
        completeConcurrency: 1,
        reclaimerLeaseMs: 2,
        reclaimerLimit: 5,
      });
    },
    TEST_TIMEOUT_MS,
  );
});

describe.runIf(PG)("postgres store: reclaim versus completion across processes", () => {
  const TOTAL = 3000;
  it(
    `${TOTAL} messages, a completer and ${RECLAIMERS.length} reclaimers on one database, leases of a few ms on the database clock: no completed message is claimed again`,
    async () => {
      await raceUntilCounted("postgres", () => postgresSetup(TOTAL), {
        completerLeaseMs: 3,
        completerLimit: 10,
        completeConcurrency: 2,
        reclaimerLeaseMs: 2,
        reclaimerLimit: 5,
      });
    },
    TEST_TIMEOUT_MS,
  );
});
