// Cron ticks under competing schedulers: `schedules` every-minute schedules on a fresh store, whose
// clock (one ManualClock shared by `schedulers` stores, each with its own connections) then moves on
// `minutes`, so that every schedule has that many ticks due. The schedulers all call
// fireSchedules at once, again and again until none is due: ticks fired per second (wall time,
// from the first call to the last), this process's CPU per tick (the schedulers' side), how the
// ticks split among the schedulers, and how many calls found a tick another had taken. The store
// must hold exactly schedules × minutes messages afterwards, one per tick, or the run fails.
// Also: an idle call's time (schedules exist, none due), which every worker pays about once a
// second, median of 200 calls.

import { ManualClock } from "wassal";
import { PostgresOutboxStore } from "wassal/postgres";
import { SqliteOutboxStore } from "wassal/sqlite";
import type { OutboxStore } from "wassal";

export interface ScheduleFigures {
  readonly schedulers: number;
  readonly schedules: number;
  readonly ticks: number;
  readonly seconds: number;
  readonly ticksPerSecond: number;
  readonly cpuUsPerTick: number;
  /** Ticks each scheduler fired. */
  readonly perScheduler: readonly number[];
  /** fireSchedules calls made in all, until none was due. */
  readonly calls: number;
  readonly idleCallUs: number;
}

const START = new Date("2026-01-01T09:00:00.000Z");
const IDLE_CALLS = 200;

/** A store on `db` (a postgres:// URL, else a SQLite file) with the given clock; priorities.ts opens its stores the same way. */
export function openBenchStore(db: string, options: { schema?: string; synchronous: "FULL" | "NORMAL" }, clock: ManualClock): Promise<OutboxStore<unknown>> {
  if (/^postgres(ql)?:\/\//.test(db)) {
    return PostgresOutboxStore.connect({ url: db, clock, maxConnections: 2, ...(options.schema ? { schema: options.schema } : {}) }) as Promise<
      OutboxStore<unknown>
    >;
  }
  return Promise.resolve(new SqliteOutboxStore({ path: db, clock, synchronous: options.synchronous }) as OutboxStore<unknown>);
}

export async function scheduleBench(
  db: string,
  options: { schema?: string; synchronous: "FULL" | "NORMAL"; schedulers: number; schedules: number; minutes: number },
): Promise<ScheduleFigures> {
  const clock = new ManualClock(START);
  const stores: OutboxStore<unknown>[] = [];
  try {
    for (let n = 0; n < options.schedulers; n += 1) stores.push(await openBenchStore(db, options, clock));
    const [first] = stores as [OutboxStore<unknown>];
    await first.migrate();
    for (let n = 0; n < options.schedules; n += 1) {
      await first.schedule(`bench-${n}`, "* * * * *", { type: "bench.tick", payload: { n } }, { backfillMs: (options.minutes + 1) * 60_000 });
    }
    // Idle: every schedule's next tick is a minute away.
    for (let n = 0; n < 20; n += 1) await first.fireSchedules(); // warm-up
    const idle: number[] = [];
    for (let n = 0; n < IDLE_CALLS; n += 1) {
      const started = performance.now();
      const firing = await first.fireSchedules();
      idle.push((performance.now() - started) * 1000);
      if (firing.fired.length > 0) throw new Error("schedules: a tick fired while none was due");
    }
    idle.sort((a, b) => a - b);

    clock.advance(options.minutes * 60_000);
    const perScheduler = stores.map(() => 0);
    let calls = 0;
    const cpu = process.cpuUsage();
    const started = performance.now();
    await Promise.all(
      stores.map(async (store, index) => {
        for (;;) {
          calls += 1;
          const firing = await store.fireSchedules({ owner: `scheduler-${index}` });
          perScheduler[index] = (perScheduler[index] ?? 0) + firing.fired.length;
          if (firing.skipped.length > 0) throw new Error(`schedules: ticks skipped: ${JSON.stringify(firing.skipped)}`);
          if (!firing.more && (firing.nextAt === null || firing.nextAt > firing.at)) return;
        }
      }),
    );
    const seconds = (performance.now() - started) / 1000;
    const used = process.cpuUsage(cpu);
    const ticks = options.schedules * options.minutes;
    const fired = perScheduler.reduce((a, b) => a + b, 0);
    const counts = await first.countByStatus();
    if (fired !== ticks || counts.pending !== ticks) {
      throw new Error(`schedules: ${fired} ticks fired and ${counts.pending} messages pending, for ${ticks} ticks due`);
    }
    return {
      schedulers: options.schedulers,
      schedules: options.schedules,
      ticks,
      seconds,
      ticksPerSecond: ticks / seconds,
      cpuUsPerTick: (used.user + used.system) / ticks,
      perScheduler,
      calls,
      idleCallUs: idle[Math.floor(idle.length / 2)] ?? 0,
    };
  } finally {
    await Promise.all(stores.map((store) => store.close()));
  }
}
