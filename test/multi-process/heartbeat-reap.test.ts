// Two `wassal worker` processes on PostgreSQL share keyed messages; one is SIGKILLed while it holds
// some. Its heartbeat stops, so the survivor reaps it once its dead-after passes and takes its
// messages then, long before their 30 s leases would end: nothing lost, nothing done twice, each
// key still in order. With the defaults (heartbeat 2 s, dead after 10 s) the measured stall is
// printed: the time from the kill to the survivor's first reclaim.
//
// Needs `npm run build` first (`npm test` does it) and a PostgreSQL server.

import { mkdtempSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { killAll, requireBuiltCli, startCli, type CliProcess } from "../support/cli.js";
import { postgresAvailable, withClient } from "../support/postgres.js";
import { tempDir } from "../support/temp.js";
import { closeTargets, createTarget, logLines, waitForRows, type MessageRow, type Target } from "../worker-cli/harness.js";

const PG = await postgresAvailable();
const FILE_TMP = tempDir("wassal-mp-heartbeat-");

beforeAll(requireBuiltCli);
afterEach(killAll);
afterAll(closeTargets);

const KEYS = 8;
const PER_KEY = 6;
const HANDLER_MS = 250;

/** Each job takes HANDLER_MS, then records itself (id, key, number) with its completion. */
const MODULE = `
export function handlers({ store }) {
  return {
    job: async (message) => {
      await new Promise((resolve) => setTimeout(resolve, ${HANDLER_MS}));
      return {
        finalize: (tx) => tx.query("INSERT INTO " + store.schema + ".done (message_id, key, key_seq) VALUES ($1, $2, $3)", [message.id, message.key, message.keySeq]),
      };
    },
  };
}
`;

async function prepare(): Promise<{ target: Target; dir: string; module: string; schema: string }> {
  const target = await createTarget("postgres", FILE_TMP);
  const dir = mkdtempSync(join(FILE_TMP, "cwd-"));
  const module = join(dir, "jobs.mjs");
  writeFileSync(module, MODULE);
  const opened = await target.open();
  const store = opened.store;
  const schema = (store as unknown as { schema: string }).schema;
  try {
    await store.migrate();
    await store.transaction(async (tx) => {
      await (tx as { query(sql: string): Promise<unknown> }).query(
        `CREATE TABLE ${schema}.done (n bigserial PRIMARY KEY, message_id text NOT NULL, key text NOT NULL, key_seq bigint NOT NULL)`,
      );
      for (let i = 0; i < PER_KEY; i += 1) {
        for (let k = 0; k < KEYS; k += 1) await store.enqueue(tx, { type: "job", key: `k${k}`, payload: { k, i } });
      }
    });
  } finally {
    await opened.close();
  }
  return { target, dir, module, schema };
}

function worker(prepared: { target: Target; dir: string; module: string }, name: string, flags: Record<string, number>): CliProcess {
  const args = ["worker", ...prepared.target.args, "--handlers", prepared.module, "--name", name, "--log-level", "trace", "--concurrency", "8"];
  for (const [flag, value] of Object.entries(flags)) args.push(`--${flag}`, String(value));
  return startCli(args, { cwd: prepared.dir });
}

/**
 * Runs doomed and survivor together, SIGKILLs doomed once it holds at least two keyed messages,
 * waits for every message to be processed, and checks nothing was lost, doubled or reordered.
 * Returns the stall: from the kill to the survivor's first reclaim of doomed's messages (ms).
 */
async function killAndRecover(flags: Record<string, number>, deadlineMs: number): Promise<{ stallMs: number; doneMs: number }> {
  const prepared = await prepare();
  const { target, schema } = prepared;
  const doomed = worker(prepared, "doomed", flags);
  const survivor = worker(prepared, "survivor", flags);
  await waitForRows(target, "doomed to hold keyed messages", (rows) => rows.filter((r) => r.status === "processing" && r.lockedBy === "doomed").length >= 2, [
    doomed,
    survivor,
  ]);
  const killedAt = Date.now();
  doomed.signal("SIGKILL");
  expect((await doomed.waitForExit(5_000)).signal).toBe("SIGKILL");
  const frozen = await target.messages();
  const held = frozen.filter((r) => r.status === "processing" && r.lockedBy === "doomed");
  expect(held.length).toBeGreaterThan(0);
  // Each lease still had most of its 30 s to run.
  for (const row of held) expect(row.lockedUntil! - killedAt).toBeGreaterThan(20_000);

  const final = await waitForRows(
    target,
    "every message processed",
    (rows: MessageRow[]) => rows.every((r) => r.status === "processed"),
    [survivor],
    deadlineMs,
  );
  const doneMs = Date.now() - killedAt;
  survivor.signal("SIGTERM");
  expect((await survivor.waitForExit(15_000)).code).toBe(0);

  // doomed's messages were reclaimed by the survivor, under a new token, as after an expiry.
  const heldIds = new Set(held.map((r) => r.id));
  for (const row of final.filter((r) => heldIds.has(r.id))) expect(row).toMatchObject({ lockedBy: "survivor", leaseToken: 2, attempts: 2 });
  const logs = logLines(survivor.stderr());
  const reaped = logs.filter((l) => l.event === "owners-reaped");
  expect(reaped.map((l) => l.reaped)).toEqual([[{ owner: "doomed", expired: held.length }]]);
  const reclaims = logs.filter((l) => l.event === "claim-won" && l.reclaimedFrom === "doomed");
  expect(reclaims.map((l) => l.messageId).sort()).toEqual([...heldIds].sort());
  const stallMs = Math.min(...reclaims.map((l) => Date.parse(String(l.at)))) - killedAt;

  // Nothing lost, nothing done twice, every key in its order.
  const done = await withClient(
    async (client) =>
      (await client.query<{ message_id: string; key: string; key_seq: string }>(`SELECT message_id, key, key_seq FROM ${schema}.done ORDER BY n`)).rows,
  );
  expect(done).toHaveLength(KEYS * PER_KEY);
  expect(new Set(done.map((d) => d.message_id)).size).toBe(KEYS * PER_KEY);
  for (let k = 0; k < KEYS; k += 1) {
    expect(done.filter((d) => d.key === `k${k}`).map((d) => Number(d.key_seq))).toEqual(Array.from({ length: PER_KEY }, (_, i) => i + 1));
  }
  return { stallMs, doneMs };
}

describe.runIf(PG)("postgres: a SIGKILLed worker's keyed messages, taken over once its heartbeat stops", () => {
  it("lease 30 s, heartbeat 500 ms, dead after 3 s: the survivor finishes everything well before the lease would have ended", async () => {
    const { stallMs, doneMs } = await killAndRecover({ "lease-ms": 30_000, "heartbeat-ms": 500, "owner-dead-after-ms": 3_000, "poll-ms": 200 }, 20_000);
    console.log(`heartbeat 500 ms, dead after 3 s, lease 30 s: first reclaim ${stallMs} ms after the SIGKILL, all done after ${doneMs} ms`);
    expect(stallMs).toBeGreaterThanOrEqual(2_000); // not before the dead-after (less the last beat's age)
    // Well under the 30 s lease (about 4 s here when the machine is quiet; the margin is for a busy one).
    expect(doneMs).toBeLessThan(20_000);
  }, 60_000);

  it("the defaults (lease 30 s, heartbeat 2 s, dead after 10 s): the stall is about the dead-after, not the lease", async () => {
    const { stallMs, doneMs } = await killAndRecover({}, 28_000);
    console.log(`defaults (heartbeat 2 s, dead after 10 s, lease 30 s, poll 1 s): first reclaim ${stallMs} ms after the SIGKILL, all done after ${doneMs} ms`);
    expect(stallMs).toBeGreaterThanOrEqual(7_000);
    expect(stallMs).toBeLessThan(28_000); // about 9 s when the machine is quiet; a lease would be 30 s or more
  }, 60_000);
});
