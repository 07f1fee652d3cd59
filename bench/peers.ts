// Seeding and clean-up for the peer job queues raced against Wassal in bench/run.ts: each peer gets
// its own fresh store (a new PostgreSQL schema, or a new SQLite file in a temp directory), filled
// with `messages` jobs through the peer's own bulk-insert API, outside the timed part.

import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { makeWorkerUtils } from "graphile-worker";
import pg from "pg";
import { PgBoss } from "pg-boss";
import { better, defineQueue } from "plainjob";

export type Peer = "pg-boss" | "graphile-worker" | "plainjob";
export const PEER_QUEUE = "bench.noop";

/** Store each peer runs on in the bench (plainjob always sets synchronous = NORMAL itself). */
export const PEER_STORE: Record<Peer, string> = { "pg-boss": "postgres", "graphile-worker": "postgres", plainjob: "sqlite-NORMAL" };

export const silentLogger = { error: () => undefined, warn: () => undefined, info: () => undefined, debug: () => undefined };

async function dropSchema(url: string, schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  await client.end();
}

/** A fresh store for `peer` holding `messages` queued no-op jobs; returns its --db, schema and a clean-up. */
export async function preparePeer(peer: Peer, messages: number, postgresUrl: string): Promise<{ db: string; schema: string; cleanup: () => Promise<void> }> {
  if (peer === "plainjob") {
    const dir = mkdtempSync(join(tmpdir(), "wassal-bench-plainjob-"));
    const db = join(dir, "plainjob.db");
    const sqlite = new Database(db);
    const queue = defineQueue({ connection: better(sqlite), logger: silentLogger });
    for (let done = 0; done < messages; done += 1000) {
      queue.addMany(
        PEER_QUEUE,
        Array.from({ length: Math.min(1000, messages - done) }, (_, i) => ({ n: done + i })),
      );
    }
    queue.close();
    return { db, schema: "-", cleanup: async () => rmSync(dir, { recursive: true, force: true }) };
  }
  const schema = `${peer === "pg-boss" ? "pgboss" : "graphile"}_bench_${randomBytes(4).toString("hex")}`;
  const cleanup = () => dropSchema(postgresUrl, schema);
  try {
    if (peer === "pg-boss") {
      const boss = new PgBoss({ connectionString: postgresUrl, schema, supervise: false, schedule: false });
      boss.on("error", (error) => process.stderr.write(`pg-boss seed: ${String(error)}\n`));
      await boss.start();
      await boss.createQueue(PEER_QUEUE);
      for (let done = 0; done < messages; done += 1000) {
        await boss.insert(
          PEER_QUEUE,
          Array.from({ length: Math.min(1000, messages - done) }, (_, i) => ({ data: { n: done + i } })),
        );
      }
      await boss.stop({ graceful: false });
    } else {
      const utils = await makeWorkerUtils({ connectionString: postgresUrl, schema });
      try {
        await utils.migrate();
        for (let done = 0; done < messages; done += 1000) {
          await utils.addJobs(Array.from({ length: Math.min(1000, messages - done) }, (_, i) => ({ identifier: PEER_QUEUE, payload: { n: done + i } })));
        }
      } finally {
        await utils.release();
      }
    }
  } catch (error) {
    await cleanup();
    throw error;
  }
  return { db: postgresUrl, schema, cleanup };
}
