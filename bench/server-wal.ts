// The WAL a PostgreSQL run wrote: records, full-page images and bytes, from the cluster's
// pg_stat_wal (PostgreSQL 14 on). Work, not time: the same run writes the same records on a quiet
// machine and a busy one, so these figures compare systems where CPU figures are noisy. Read once
// before a run's "go" and once after its backends have exited (a backend flushes its WAL counters
// at exit, see settleBackends in server-cpu.ts). The whole cluster: autovacuum and any other
// client writing during the run count too.
// One connection for both readings, opened before the run's processes start: a backend started
// and ended inside the run would add its own CPU to the server's time measured over the run.

import pg from "pg";

export interface WalCounters {
  readonly records: number;
  readonly fpi: number;
  readonly bytes: number;
}

export interface WalReader {
  /** The cluster's WAL counters so far, or null when the server has no pg_stat_wal (before 14). */
  read(): Promise<WalCounters | null>;
  close(): Promise<void>;
}

export async function openWalReader(url: string): Promise<WalReader> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  return {
    async read() {
      try {
        const { rows } = await client.query<{ records: string; fpi: string; bytes: string }>(
          "SELECT wal_records::text AS records, wal_fpi::text AS fpi, wal_bytes::text AS bytes FROM pg_stat_wal",
        );
        const row = rows[0];
        return row === undefined ? null : { records: Number(row.records), fpi: Number(row.fpi), bytes: Number(row.bytes) };
      } catch {
        return null;
      }
    },
    close: () => client.end(),
  };
}

/** after − before, or null when either is missing. */
export function walBetween(before: WalCounters | null, after: WalCounters | null): WalCounters | null {
  if (before === null || after === null) return null;
  return { records: after.records - before.records, fpi: after.fpi - before.fpi, bytes: after.bytes - before.bytes };
}
