// The dashboard under a large payload (issue 37, item 3), from outside, as an attacker or an
// operator sees it: `wassal dashboard` runs as its own process (the built CLI, --poll-ms 1000, its
// default) over a store holding a 10 MB message and a 1 MB message, and this process is its clients.
// - the 10 MB message's page: HTML bytes and time of the first view and of 5 more (each view reads
//   the message again; the first also reads the payload's start);
// - GET / latency (p50, p99, max over `requests` sequential requests): alone, then while 20 live
//   streams (/events?message=<10 MB id>) watch that message, the message changing every second;
// - the server's memory (VmRSS, /proc): on a fresh dashboard process warmed by 20 GET /, with 100
//   streams on the 1 MB message held for `holdMs` (the message changing every second), and 10 s
//   after they closed. Targets: page under 1 MB and 500 ms; GET / p99 under 100 ms; memory within
//   50 MB of baseline 10 s after the streams closed.

import { type ChildProcess, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { openOutbox } from "wassal/lab";
import { percentile, spread, type Spread } from "./stats.js";

export interface DashboardFigures {
  readonly payloadBytes: number;
  readonly page: { readonly htmlBytes: number; readonly firstMs: number; readonly again: Spread };
  readonly download: { readonly bytes: number; readonly ms: number };
  readonly overview: {
    readonly alone: { readonly p50: number; readonly p99: number; readonly max: number };
    readonly with20Streams: { readonly p50: number; readonly p99: number; readonly max: number };
  };
  readonly memoryMb: { readonly baseline: number; readonly peakWith100Streams: number; readonly tenSecondsAfter: number };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A JSON payload of about `bytes` bytes, with markup and quotes in every item (what made the old page 4 times the payload). */
function payloadOf(bytes: number) {
  const items: { i: number; note: string }[] = [];
  let size = 2;
  for (let i = 0; size < bytes; i++) {
    const item = { i, note: `<b>item ${i}</b> & "quoted"` };
    items.push(item);
    size += JSON.stringify(item).length + 1;
  }
  return { items };
}

function rssMb(pid: number): number {
  const kb = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1];
  return Number(kb) / 1024;
}

async function serve(cli: string, db: string, schema: string | undefined): Promise<{ url: string; child: ChildProcess; pid: number }> {
  const child = spawn(process.execPath, [cli, "dashboard", "--db", db, ...(schema ? ["--schema", schema] : []), "--port", "0", "--poll-ms", "1000"], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  let err = "";
  child.stderr?.setEncoding("utf8").on("data", (chunk: string) => (err += chunk));
  const url = await new Promise<string>((resolve, reject) => {
    child.stdout?.setEncoding("utf8").on("data", (chunk: string) => {
      out += chunk;
      const found = /dashboard on (http:\/\/\S+\/)/.exec(out)?.[1];
      if (found) resolve(found);
    });
    child.on("exit", (code) => reject(new Error(`the dashboard exited (${code}): ${err}`)));
  });
  if (child.pid === undefined) throw new Error("the dashboard has no pid");
  return { url, child, pid: child.pid };
}

async function stop(child: ChildProcess): Promise<void> {
  const exited = new Promise((resolve) => child.on("exit", resolve));
  child.kill("SIGTERM");
  await exited;
}

async function timedGet(url: string): Promise<{ ms: number; bytes: number }> {
  const started = performance.now();
  const response = await fetch(url);
  const body = Buffer.from(await response.arrayBuffer());
  if (!response.ok) throw new Error(`${url}: ${response.status}`);
  return { ms: performance.now() - started, bytes: body.length };
}

/** Opens `count` live streams and resolves once each has had its first event; abort() closes them all. */
async function openStreams(url: string, count: number): Promise<AbortController> {
  const abort = new AbortController();
  await Promise.all(
    Array.from({ length: count }, async () => {
      const response = await fetch(url, { signal: abort.signal });
      const reader = response.body?.getReader();
      if (reader === undefined) throw new Error(`${url}: no stream`);
      await reader.read(); // the first event
      // Keep reading (as a browser does) until the stream is closed.
      void (async () => {
        try {
          for (;;) if ((await reader.read()).done) return;
        } catch {
          // aborted
        }
      })();
    }),
  );
  return abort;
}

async function latencies(url: string, requests: number): Promise<{ p50: number; p99: number; max: number }> {
  const times: number[] = [];
  for (let n = 0; n < requests; n++) times.push((await timedGet(url)).ms);
  return { p50: percentile(times, 50), p99: percentile(times, 99), max: Math.max(...times) };
}

/** Claims and releases `type`'s message every second until stopped: a live page's message that keeps changing. */
function churn(store: Awaited<ReturnType<typeof openOutbox>>["store"], type: string): () => Promise<void> {
  let running = true;
  const loop = (async () => {
    while (running) {
      const [lease] = await store.claim("bench-churn", { limit: 1, leaseMs: 60_000, types: [type] });
      await sleep(500);
      if (lease) await store.release(lease);
      await sleep(500);
    }
  })();
  return async () => {
    running = false;
    await loop;
  };
}

export async function dashboardBench(options: {
  readonly cli: string;
  readonly db: string;
  readonly schema: string | undefined;
  readonly requests: number;
  readonly holdMs: number;
}): Promise<DashboardFigures> {
  const outbox = await openOutbox(options.db, { ...(options.schema ? { schema: options.schema } : {}), synchronous: "NORMAL" });
  const payload = payloadOf(10_000_000);
  const big = (await outbox.store.transaction((tx) => outbox.store.enqueue(tx, { type: "bench.big", payload }))).id;
  const medium = (await outbox.store.transaction((tx) => outbox.store.enqueue(tx, { type: "bench.medium", payload: payloadOf(1_000_000) }))).id;
  try {
    // Page, download and GET / on one dashboard process.
    let dashboard = await serve(options.cli, options.db, options.schema);
    let figures: Omit<DashboardFigures, "memoryMb">;
    try {
      for (let n = 0; n < 5; n++) await timedGet(dashboard.url); // warm-up
      const first = await timedGet(`${dashboard.url}messages/${big}`);
      const again: number[] = [];
      for (let n = 0; n < 5; n++) again.push((await timedGet(`${dashboard.url}messages/${big}`)).ms);
      const download = await timedGet(`${dashboard.url}messages/${big}/payload`);
      const alone = await latencies(dashboard.url, options.requests);
      const streams = await openStreams(`${dashboard.url}events?message=${big}`, 20);
      const stopChurn = churn(outbox.store, "bench.big");
      const with20Streams = await latencies(dashboard.url, options.requests);
      await stopChurn();
      streams.abort();
      figures = {
        payloadBytes: Buffer.byteLength(JSON.stringify(payload)),
        page: { htmlBytes: first.bytes, firstMs: first.ms, again: spread(again) },
        download,
        overview: { alone, with20Streams },
      };
    } finally {
      await stop(dashboard.child);
    }
    // Memory on a fresh process: 100 streams on the 1 MB message, then 10 s after they closed.
    dashboard = await serve(options.cli, options.db, options.schema);
    try {
      for (let n = 0; n < 20; n++) await timedGet(dashboard.url);
      await sleep(1000);
      const baseline = rssMb(dashboard.pid);
      const streams = await openStreams(`${dashboard.url}events?message=${medium}`, 100);
      const stopChurn = churn(outbox.store, "bench.medium");
      let peak = rssMb(dashboard.pid);
      for (let waited = 0; waited < options.holdMs; waited += 250) {
        await sleep(250);
        peak = Math.max(peak, rssMb(dashboard.pid));
      }
      await stopChurn();
      streams.abort();
      await sleep(10_000);
      const after = rssMb(dashboard.pid);
      return { ...figures, memoryMb: { baseline, peakWith100Streams: peak, tenSecondsAfter: after } };
    } finally {
      await stop(dashboard.child);
    }
  } finally {
    await outbox.close();
  }
}

/** The section's table rows (markdown), one per store. */
export function dashboardRows(store: string, f: DashboardFigures): string[] {
  const mark = (ok: boolean) => (ok ? "met" : "MISSED");
  const ms = (n: number) => n.toFixed(1);
  return [
    `| ${store} | 10 MB message's page: HTML | ${(f.page.htmlBytes / 1e6).toFixed(3)} MB | under 1 MB | ${mark(f.page.htmlBytes < 1e6)} |`,
    `| ${store} | 10 MB message's page: first view | ${ms(f.page.firstMs)} ms | under 500 ms | ${mark(f.page.firstMs < 500)} |`,
    `| ${store} | 10 MB message's page: 5 more views, median (min–max) | ${ms(f.page.again.median)} ms (${ms(f.page.again.min)}–${ms(f.page.again.max)}) | under 500 ms | ${mark(f.page.again.max < 500)} |`,
    `| ${store} | whole payload download (${(f.download.bytes / 1e6).toFixed(1)} MB) | ${ms(f.download.ms)} ms | – | – |`,
    `| ${store} | GET / alone: p50, p99, max | ${ms(f.overview.alone.p50)}, ${ms(f.overview.alone.p99)}, ${ms(f.overview.alone.max)} ms | – | – |`,
    `| ${store} | GET / with 20 streams on the 10 MB message: p50, p99, max | ${ms(f.overview.with20Streams.p50)}, ${ms(f.overview.with20Streams.p99)}, ${ms(f.overview.with20Streams.max)} ms | p99 under 100 ms | ${mark(f.overview.with20Streams.p99 < 100)} |`,
    `| ${store} | server RSS: baseline, with 100 streams on the 1 MB message (peak), 10 s after they closed | ${f.memoryMb.baseline.toFixed(0)}, ${f.memoryMb.peakWith100Streams.toFixed(0)}, ${f.memoryMb.tenSecondsAfter.toFixed(0)} MB | within 50 MB of baseline | ${mark(f.memoryMb.tenSecondsAfter - f.memoryMb.baseline < 50)} |`,
  ];
}
