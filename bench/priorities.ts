// The claim with priorities unused and in use. A fresh store holds `messages` due messages; one
// claimer in this process claims `batch` at a time and completes each batch with completeMany until
// none is left: messages per second (wall time), this process's CPU per message and, on a
// PostgreSQL server on this machine, the server's. The due times are spread over the last ten
// minutes. "unused": every message of priority 0, as every outbox had before priorities. "in use":
// a quarter of them with a priority from 1 to 600 s, so that head starts pass older messages. Each
// run checks that every message was claimed once, in the claim order (its rank, the due time less
// the priority, never decreasing from one claim to the next).

import { ManualClock } from "wassal";
import type { NewMessage } from "wassal";
import { openBenchStore } from "./schedules.js";
import { locatePostmaster, serverCpu, cpuUsPer } from "./server-cpu.js";

export type PriorityMix = "unused" | "in use";

export interface PriorityFigures {
  readonly mix: PriorityMix;
  readonly messages: number;
  readonly batch: number;
  readonly seconds: number;
  readonly perSecond: number;
  readonly cpuUsPerMessage: number;
  /** The PostgreSQL server's CPU per message, or null (SQLite, or a server elsewhere). */
  readonly serverUsPerMessage: number | null;
}

const START = new Date("2026-01-01T09:00:00.000Z");
const SPREAD_MS = 600_000;

/** A small deterministic generator, so that both mixes and every rep enqueue the same spread. */
function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state * 1_664_525 + 1_013_904_223) >>> 0;
    return state / 2 ** 32;
  };
}

export async function priorityBench(
  db: string,
  options: { schema?: string; synchronous: "FULL" | "NORMAL"; mix: PriorityMix; messages: number; batch: number },
): Promise<PriorityFigures> {
  const clock = new ManualClock(START);
  const store = await openBenchStore(db, options, clock);
  try {
    await store.migrate();
    const next = random(42);
    const list: NewMessage[] = [];
    for (let n = 0; n < options.messages; n += 1) {
      const due = new Date(START.getTime() + Math.floor(next() * SPREAD_MS));
      const priority = next() < 0.25 ? 1 + Math.floor(next() * 600) : 0;
      list.push({ type: "bench.message", payload: { n }, availableAt: due, ...(options.mix === "unused" || priority === 0 ? {} : { priority }) });
    }
    for (let from = 0; from < list.length; from += 1_000) {
      const part = list.slice(from, from + 1_000);
      await store.transaction((tx) => store.enqueueMany(tx, part));
    }
    clock.set(new Date(START.getTime() + SPREAD_MS));
    const postmaster = /^postgres(ql)?:\/\//.test(db) ? await locatePostmaster(db) : null;
    const serverBefore = postmaster === null ? null : serverCpu(postmaster);
    const cpu = process.cpuUsage();
    const started = performance.now();
    let claimed = 0;
    let lastRank = Number.NEGATIVE_INFINITY;
    for (;;) {
      const leases = await store.claim("bench", { limit: options.batch, leaseMs: 60_000 });
      if (leases.length === 0) break;
      for (const lease of leases) {
        // A claimed message's rank, from what it was enqueued with (the lease shows its lease's end).
        const n = (lease.message.payload as { n: number }).n;
        const given = list[n] as NewMessage;
        const rank = (given.availableAt ?? START).getTime() - (given.priority ?? 0) * 1000;
        if (rank < lastRank) throw new Error(`priorities: message ${n} of rank ${rank} claimed after one of rank ${lastRank}`);
        lastRank = rank;
      }
      claimed += leases.length;
      await store.completeMany(leases.map((lease) => ({ lease })));
    }
    const seconds = (performance.now() - started) / 1000;
    const used = process.cpuUsage(cpu);
    const serverAfter = postmaster === null ? null : serverCpu(postmaster);
    if (claimed !== options.messages) throw new Error(`priorities: ${claimed} messages claimed of ${options.messages}`);
    return {
      mix: options.mix,
      messages: options.messages,
      batch: options.batch,
      seconds,
      perSecond: options.messages / seconds,
      cpuUsPerMessage: (used.user + used.system) / options.messages,
      serverUsPerMessage: cpuUsPer(serverBefore, serverAfter, options.messages),
    };
  } finally {
    await store.close();
  }
}
