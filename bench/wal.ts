// The WAL section of `npm run bench`: the polling relay (Relay as shipped: LISTEN/NOTIFY wake-ups,
// a poll every second) against the WAL relay (WalRelay on openWalFeed, as shipped: the slot's
// committed inserts waking the worker's batched claim, which also runs every 1 s and whenever a place of its 256 frees),
// both publishing to NATS JetStream (a stream of each run's own, deleted after it), in one
// interleaved run: each repetition runs both systems, the first of them alternating (A B, B A, …).
// They run on a private PostgreSQL server this section starts with wal_level = logical (the shared
// server runs replica) and removes at its end; each run has an outbox schema, a replication slot
// and a publication of its own, dropped after it.
//
// Throughput: N messages seeded (100 per transaction, untimed, then ANALYZE and a sync), the relay
// started, the clock stopped at the last completion, as the relay section (relay.ts) does. The WAL
// relay's slot must exist before the seeding, or the messages never pass through it: a WAL relay
// is started and stopped on the empty table first (it makes the publication and the slot, which
// then keeps every insert after it), and the timed WAL relay, a new one on that slot, streams all
// N. The table says how many of them the slot reported, and how many the relay published.
// CPU µs per message over the timed part: this process (the relay, its pg and NATS clients, and the
// pgoutput decoding of pg-logical-replication), the PostgreSQL server (every process of the private
// server: backends, the walsender, autovacuum), the broker, the whole machine (relay.ts `timed`).
// And the server's work, exact where CPU is noisy: transaction ids handed out (one per transaction
// that wrote, each commit a WAL flush) and WAL bytes written over the timed part, per message.
//
// Latency: enqueue → broker acknowledgement p50/p99 at a steady 200 messages/s, the relay running
// (relay.ts `ackLatency`), once per system per repetition, interleaved like the throughput runs.

import { execSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import type { OutboxStore } from "wassal";
import { openOutbox, startPrivatePostgres } from "wassal/lab";
import { openWalFeed } from "wassal/postgres";
import { type Publisher, Relay, type RelayEvent, WalRelay } from "wassal/relay";
import {
  ackLatency,
  allCompleted,
  type LatencyFigures,
  natsTarget,
  onTable,
  openPublisher,
  type RunFigures,
  seedMessages,
  type Target,
  timed,
} from "./relay.js";
import { locatePostmaster } from "./server-cpu.js";
import { type Spread, spread } from "./stats.js";

/** What the section's private server gets besides PostgreSQL's defaults. */
export const WAL_SETTINGS: Readonly<Record<string, string>> = { wal_level: "logical", max_replication_slots: "10", max_wal_senders: "10" };
const SYSTEMS = ["polling relay", "WAL relay"] as const;
type WalSystem = (typeof SYSTEMS)[number];
/** Messages per second of the latency runs. */
const LATENCY_RATE = 200;

export interface WalBenchOptions {
  readonly messages: number;
  readonly reps: number;
  readonly latencySeconds: number;
  /** Where initdb and pg_ctl are (null: the PATH). */
  readonly bin: string | null;
  /** The server's settings that shape the figures (run.ts postgresServer). */
  describe(url: string): Promise<Record<string, string | null> | null>;
}

export interface WalBenchResult {
  readonly heading: string[];
  readonly table: string[];
  readonly latencyTable: string[];
  readonly data: unknown;
}

/** How many of a run's messages the slot reported to the relay (null: the polling relay, which reads no slot), and how many it published. */
interface Claims {
  readonly reportedBySlot: number | null;
  readonly published: number;
}

/** One run's own outbox schema, slot, publication, NATS stream and publisher on the private server. */
interface Place {
  readonly url: string;
  readonly schema: string;
  readonly store: OutboxStore<unknown>;
  readonly publisher: Publisher;
  readonly target: Target;
  relay(system: WalSystem, onEvent?: (event: RelayEvent) => void): Relay<unknown> | WalRelay<unknown>;
  close(): Promise<void>;
}

async function openPlace(url: string): Promise<Place> {
  const schema = `wassal_bench_wal_${randomBytes(4).toString("hex")}`;
  const slot = `${schema}_slot`;
  const publication = `${schema}_pub`;
  const target = await natsTarget();
  const publisher = await openPublisher("nats");
  let outbox: Awaited<ReturnType<typeof openOutbox>>;
  try {
    await publisher.connected();
    outbox = await openOutbox(url, { schema, maxConnections: 8 });
  } catch (error) {
    await publisher.close();
    await target.remove();
    throw error;
  }
  const routes = { default: target.destination };
  return {
    url,
    schema,
    store: outbox.store,
    publisher,
    target,
    relay: (system, onEvent) =>
      system === "WAL relay"
        ? new WalRelay({ store: outbox.store, publisher, routes, feed: openWalFeed({ url, schema, slot, publication }), ...(onEvent ? { onEvent } : {}) })
        : new Relay({ store: outbox.store, publisher, routes, ...(onEvent ? { onEvent } : {}) }),
    close: async () => {
      await publisher.close();
      await outbox.close();
      await onTable(url, async (client) => {
        // The walsender of a stopped feed ends a moment later; a slot still in use cannot be dropped.
        for (let tries = 0; tries < 100; tries += 1) {
          const { rows } = await client.query<{ active: boolean }>("SELECT active FROM pg_replication_slots WHERE slot_name = $1", [slot]);
          if (rows[0] === undefined) break;
          if (!rows[0].active) {
            await client.query("SELECT pg_drop_replication_slot($1)", [slot]);
            break;
          }
          await new Promise((resolve) => setTimeout(resolve, 100));
        }
        await client.query(`DROP PUBLICATION IF EXISTS ${publication}`);
        await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      });
      await target.remove();
    },
  };
}

const claimsOf = (relay: Relay<unknown> | WalRelay<unknown>): Claims =>
  relay instanceof WalRelay
    ? { reportedBySlot: relay.stats.messages, published: relay.stats.published }
    : { reportedBySlot: null, published: relay.stats.published };

/** Where the server stands: WAL bytes written so far, and the next transaction id (read without taking one). */
function serverPosition(url: string): Promise<{ walBytes: number; nextXid: number }> {
  return onTable(url, async (client) => {
    const { rows } = await client.query<{ wal: string; xid: string }>(
      "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::text AS wal, pg_snapshot_xmax(pg_current_snapshot())::text AS xid",
    );
    return { walBytes: Number(rows[0]?.wal), nextXid: Number(rows[0]?.xid) };
  });
}

/** What a drain cost the server per message besides CPU: transactions that wrote (each took a transaction id, and commits with a WAL flush), and WAL bytes. */
interface ServerWork {
  readonly writeTransactions: number;
  readonly walBytes: number;
}

/** N messages seeded (for the WAL relay: into its slot, made first), then drained by the relay, timed. */
async function drain(system: WalSystem, place: Place, messages: number, postmaster: number | null): Promise<RunFigures & Claims & ServerWork> {
  if (system === "WAL relay") {
    const maker = place.relay(system);
    await maker.start();
    await maker.stop({ graceMs: 1_000 });
  }
  await seedMessages(place.store, messages);
  await onTable(place.url, (client) => client.query(`ANALYZE ${place.schema}.outbox_messages`));
  const all = allCompleted(place.store, messages);
  const relay = place.relay(system);
  execSync("sync");
  const before = await serverPosition(place.url);
  const figures = await timed(messages, "nats", postmaster, async () => {
    await relay.start();
    await all;
  });
  const after = await serverPosition(place.url);
  await relay.stop({ graceMs: 1_000 });
  const stored = await place.target.count();
  if (stored !== messages) throw new Error(`${system}: the broker holds ${stored} of ${messages} messages`);
  return {
    ...figures,
    ...claimsOf(relay),
    writeTransactions: (after.nextXid - before.nextXid) / messages,
    walBytes: (after.walBytes - before.walBytes) / messages,
  };
}

async function latency(system: WalSystem, place: Place, seconds: number): Promise<LatencyFigures & Claims> {
  const made: { relay?: Relay<unknown> | WalRelay<unknown> } = {};
  const figures = await ackLatency(place.store, (onEvent) => (made.relay = place.relay(system, onEvent)), LATENCY_RATE, seconds);
  if (made.relay === undefined) throw new Error(`${system}: the latency run made no relay`);
  return { ...figures, ...claimsOf(made.relay) };
}

async function inPlace<T>(url: string, work: (place: Place) => Promise<T>): Promise<T> {
  const place = await openPlace(url);
  try {
    return await work(place);
  } finally {
    await place.close();
  }
}

export async function walBench(options: WalBenchOptions): Promise<WalBenchResult> {
  const server = await startPrivatePostgres({ bin: options.bin, settings: WAL_SETTINGS, label: "bench-wal" });
  try {
    const serverSettings = await options.describe(server.url);
    const postmaster = await locatePostmaster(server.url);
    const runs = new Map(SYSTEMS.map((s) => [s, { drains: [] as (RunFigures & Claims & ServerWork)[], latencies: [] as (LatencyFigures & Claims)[] }]));
    const us = (v: number | null) => (v === null ? "–" : v.toFixed(0));
    for (let rep = 1; rep <= options.reps; rep += 1) {
      const order = rep % 2 === 1 ? SYSTEMS : [...SYSTEMS].reverse();
      for (const system of order) {
        const f = await inPlace(server.url, (place) => drain(system, place, options.messages, postmaster));
        runs.get(system)?.drains.push(f);
        process.stderr.write(
          `rep ${rep}/${options.reps}  wal ${system.padEnd(13)} ${Math.round(f.rate)} msg/s; CPU µs/msg: relay ${us(f.relayUs)}, PostgreSQL ${us(f.postgresUs)}, broker ${us(f.brokerUs)}, machine ${us(f.machineUs)}; per message ${f.writeTransactions.toFixed(3)} write transactions, ${us(f.walBytes)} WAL bytes; reported by the slot ${f.reportedBySlot ?? "–"}, published ${f.published}\n`,
        );
      }
      for (const system of order) {
        const l = await inPlace(server.url, (place) => latency(system, place, options.latencySeconds));
        runs.get(system)?.latencies.push(l);
        process.stderr.write(
          `rep ${rep}/${options.reps}  wal latency ${system.padEnd(13)} p50 ${l.p50.toFixed(2)} ms, p99 ${l.p99.toFixed(2)} ms (${l.messages} messages; reported by the slot ${l.reportedBySlot ?? "–"}, published ${l.published})\n`,
        );
      }
    }
    const slotsLeft = await onTable(server.url, async (client) => (await client.query("SELECT slot_name FROM pg_replication_slots")).rowCount);
    /** The spread of a figure over the repetitions; null when a repetition did not measure it. */
    const of = <T>(samples: readonly T[], pick: (s: T) => number | null): Spread | null => {
      const values = samples.map(pick);
      return values.length > 0 && values.every((v): v is number => v !== null) ? spread(values) : null;
    };
    const fmt = (s: Spread | null, digits = 0) => (s === null ? "–" : `${s.median.toFixed(digits)} (${s.min.toFixed(digits)}–${s.max.toFixed(digits)})`);
    const rows = SYSTEMS.map((system) => {
      const { drains, latencies } = runs.get(system) ?? { drains: [], latencies: [] };
      return {
        system,
        rate: of(drains, (f) => f.rate),
        cpuUsPerMessage: {
          relay: of(drains, (f) => f.relayUs),
          postgres: of(drains, (f) => f.postgresUs),
          broker: of(drains, (f) => f.brokerUs),
          machine: of(drains, (f) => f.machineUs),
        },
        writeTransactions: of(drains, (f) => f.writeTransactions),
        walBytes: of(drains, (f) => f.walBytes),
        reportedBySlot: of(drains, (f) => f.reportedBySlot),
        published: of(drains, (f) => f.published),
        latency: {
          p50: of(latencies, (l) => l.p50),
          p99: of(latencies, (l) => l.p99),
          max: of(latencies, (l) => l.max),
          messages: of(latencies, (l) => l.messages),
          reportedBySlot: of(latencies, (l) => l.reportedBySlot),
        },
        drains,
        latencies,
      };
    });
    const table = [
      "| system | messages/s median (min–max) | CPU µs/msg: relay (this process) | CPU µs/msg: PostgreSQL server (all its processes) | CPU µs/msg: broker (nats-server) | CPU µs/msg: whole machine | write transactions/msg | WAL bytes/msg | reported by the slot / published (medians) |",
      "|---|---|---|---|---|---|---|---|---|",
      ...rows.map(
        (r) =>
          `| ${r.system} | ${fmt(r.rate)} | ${fmt(r.cpuUsPerMessage.relay)} | ${fmt(r.cpuUsPerMessage.postgres)} | ${fmt(r.cpuUsPerMessage.broker)} | ${fmt(r.cpuUsPerMessage.machine)} | ${fmt(r.writeTransactions, 3)} | ${fmt(r.walBytes)} | ${r.reportedBySlot === null ? "–" : Math.round(r.reportedBySlot.median)} / ${Math.round(r.published?.median ?? 0)} |`,
      ),
    ];
    const latencyTable = [
      "| system | rate /s | messages per run | p50 ms median (min–max) | p99 ms median (min–max) | max ms median (min–max) | reported by the slot (median) |",
      "|---|---|---|---|---|---|---|",
      ...rows.map(
        (r) =>
          `| ${r.system} | ${LATENCY_RATE} | ${Math.round(r.latency.messages?.median ?? 0)} | ${fmt(r.latency.p50, 2)} | ${fmt(r.latency.p99, 2)} | ${fmt(r.latency.max, 2)} | ${r.latency.reportedBySlot === null ? "–" : Math.round(r.latency.reportedBySlot.median)} |`,
      ),
    ];
    const heading = [
      `WAL relay against the polling relay, outbox → NATS JetStream: ${options.messages} messages per throughput run, median (min–max) of ${options.reps} repetitions, interleaved (each repetition runs both, the first alternating). Both as shipped (256 in flight; the polling relay woken by LISTEN/NOTIFY, polling every 1 s; the WAL relay reading a logical replication slot through pgoutput, each committed batch waking its claim, which also runs every 1 s and whenever one of its 256 places frees). Seeding: 100 messages per transaction, untimed, then ANALYZE; for the WAL relay the slot is made first (a WAL relay started and stopped on the empty table), then the messages are seeded, and a new WAL relay on that slot is timed from its start to the last completion. CPU µs per message over the timed part; write transactions per message: transaction ids the server handed out over it (each a commit that flushes the WAL), and the WAL it wrote.`,
      `PostgreSQL: a private server the section started (${server.bin}, in ${server.startSeconds.toFixed(1)} s) with ${JSON.stringify(WAL_SETTINGS)} over PostgreSQL's defaults, removed at the end; it reports ${JSON.stringify(serverSettings)}. Replication slots left before its removal: ${slotsLeft}.`,
    ];
    return {
      heading,
      table,
      latencyTable,
      data: {
        settings: WAL_SETTINGS,
        server: serverSettings,
        messages: options.messages,
        reps: options.reps,
        latencyRate: LATENCY_RATE,
        latencySeconds: options.latencySeconds,
        slotsLeft,
        rows,
      },
    };
  } finally {
    server.stop();
  }
}
