// Tracing on, but no OpenTelemetry SDK registered (the API alone, as in an app that never set one
// up): nothing changes. No header is added, every message is processed, retried and completed as
// without tracing, and the CLI's check finds no SDK, so it leaves tracing off.

import { trace } from "@opentelemetry/api";
import { expect, it } from "vitest";
import { otelTracing, registeredOtelTracing } from "../../src/observability/tracing.js";
import { describeEachStore, mustGet, useStoreHarness } from "../conformance/stores.js";
import { useWorkers, waitForStatus } from "../worker/support.js";
import { tracedStore } from "./support.js";

const tracing = otelTracing();

it("finds no SDK registered, so wassal worker and wassal relay leave tracing off", () => {
  expect(trace.getTracer("probe").startSpan("probe").isRecording()).toBe(false);
  expect(registeredOtelTracing()).toBeUndefined();
});

describeEachStore("OpenTelemetry tracing without an SDK", (factory) => {
  const ctx = useStoreHarness(factory);
  const workers = useWorkers(() => ctx().clock);

  it("adds no header and processes, retries and completes messages as without tracing", async () => {
    const { store, clock } = ctx();
    const traced = await tracedStore(store, clock, tracing);
    try {
      const headers = { "x-correlation-id": "c-1" };
      const plain = await traced.transaction((tx) => traced.enqueue(tx, { type: "order.ship", payload: { n: 1 } }));
      const withHeaders = await traced.transaction((tx) => traced.enqueue(tx, { type: "order.ship", payload: { n: 2 }, headers }));
      expect(plain.headers).toEqual({});
      expect(withHeaders.headers).toEqual(headers);
      expect((await mustGet(store, withHeaders.id)).headers).toEqual(headers);

      let runs = 0;
      await workers.start({
        store,
        clock,
        name: "worker-1",
        tracing,
        handlers: {
          "order.ship": async (message) => {
            runs += 1;
            if ((message.payload as { n: number }).n === 1 && message.attempts === 1) throw new Error("once");
            return {};
          },
        },
        retry: { maxAttempts: 2, baseDelayMs: 1_000, jitter: 0 },
        leaseMs: 3_000,
        pollIntervalMs: 1_000_000,
        wakeOnNewMessages: false,
      });
      await waitForStatus(store, withHeaders.id, "processed");
      // Both run at once: the failed one's retry may be recorded after the other's completion.
      expect(await waitForStatus(store, plain.id, "pending")).toMatchObject({ attempts: 1, lastError: "Error: once" });
      clock.advance(1_000);
      expect(await waitForStatus(store, plain.id, "processed")).toMatchObject({ attempts: 2 });
      expect(runs).toBe(3);
    } finally {
      await traced.close();
    }
  });
});
