// `wassal relay` through real processes: bad input exits 2 with one clear line before anything
// opens; --help lists the brokers; and a relay process publishes a SQLite outbox's messages to the
// real NATS server, completes them, and stops gracefully on SIGTERM.
//
// Needs `npm run build` first (`npm test` does it).

import { existsSync, mkdtempSync } from "node:fs";
import { join } from "node:path";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { natsServers, redactTarget } from "../../src/relay/open-publisher.js";
import { openOutbox } from "../../src/stores/open-outbox.js";
import { errorLine } from "../support/assertions.js";
import { freePort, releasePort } from "../../src/chaos/ports.js";
import { killAll, requireBuiltCli, runCli, startCli, type CliResult } from "../support/cli.js";
import { TEST_NATS_URL, natsAvailable } from "../support/services.js";
import { tempDir } from "../support/temp.js";
import { until } from "../support/wait.js";
import { logLines } from "../worker-cli/harness.js";

const natsUp = await natsAvailable();
const FILE_TMP = tempDir("wassal-relay-cli-");
const cwd = () => mkdtempSync(join(FILE_TMP, "cwd-"));
const SECRET = `whsec_${Buffer.alloc(32, 1).toString("base64")}`;

beforeAll(requireBuiltCli);
afterEach(killAll);

/** Exit 2, nothing on stdout, one line on stderr (returned). */
function usageError(run: CliResult): string {
  expect({ code: run.code, signal: run.signal, stdout: run.stdout }).toEqual({ code: 2, signal: null, stdout: "" });
  return errorLine(run.stderr);
}

describe("wassal relay: bad input exits 2 with one line, before anything opens", () => {
  it("an unknown URL scheme names the supported ones", async () => {
    const dir = cwd();
    const db = join(dir, "never.db");
    const line = usageError(await runCli(["relay", "--db", db, "--to", "kafka://127.0.0.1:9092"], { cwd: dir }));
    expect(line).toContain("--to kafka:// is not a broker this relay publishes to; supported: nats:// (NATS JetStream");
    for (const scheme of ["amqp://", "amqps://", "redis://", "rediss://", "http://", "https://"]) expect(line).toContain(scheme);
    expect(existsSync(db)).toBe(false);
  });

  it("--to that is not a URL says so", async () => {
    const dir = cwd();
    expect(usageError(await runCli(["relay", "--db", join(dir, "x.db"), "--to", "localhost:4222"], { cwd: dir }))).toMatch(
      /--to "localhost:4222" is not a URL|is not a broker/,
    );
  });

  it("a NATS cluster's server list must hold nats:// URLs naming servers only, and never echoes a password", async () => {
    const dir = cwd();
    const db = join(dir, "never.db");
    const mixed = usageError(await runCli(["relay", "--db", db, "--to", "nats://127.0.0.1:4222,redis://127.0.0.1:6379"], { cwd: dir }));
    // The list splits only where a nats:// server starts, so another scheme stays in the item before it.
    expect(mixed).toContain("--to nats://127.0.0.1:4222,redis://127.0.0.1:6379 is not a URL");
    const notUrl = usageError(await runCli(["relay", "--db", db, "--to", "nats://u:hunter2secret@127.0.0.1:4222,nats://::bad"], { cwd: dir }));
    expect(notUrl).toContain("a server in the NATS server list nats://u:***@127.0.0.1:4222,nats://::bad is not a URL");
    const withPath = usageError(
      await runCli(["relay", "--db", db, "--to", "nats://127.0.0.1:4222,nats://u:hunter2secret@127.0.0.1:4223/orders"], { cwd: dir }),
    );
    expect(withPath).toContain("a NATS URL names a server only");
    for (const line of [mixed, notUrl, withPath]) expect(line).not.toContain("hunter2secret");
    // A comma inside a password is part of it: the list splits only where a nats:// server starts.
    expect(natsServers("nats://u:pa,ss@127.0.0.1:4222,nats://127.0.0.1:4223")).toEqual(["nats://u:pa,ss@127.0.0.1:4222", "nats://127.0.0.1:4223"]);
    // A trailing comma ends the list (as for an amqp:// list).
    expect(natsServers("nats://127.0.0.1:4222, nats://127.0.0.1:4223, ")).toEqual(["nats://127.0.0.1:4222", "nats://127.0.0.1:4223"]);
    expect(natsServers("nats://127.0.0.1:4222,")).toEqual(["nats://127.0.0.1:4222"]);
    expect(redactTarget("nats://127.0.0.1:4222,nats://u:pw12@127.0.0.1:4223")).not.toContain("pw12");
    expect(existsSync(db)).toBe(false);
  });

  it("a webhook without a secret, or with a short one, is refused and says how to make one", async () => {
    const dir = cwd();
    const db = join(dir, "never.db");
    const missing = usageError(await runCli(["relay", "--db", db, "--to", "http://127.0.0.1:9/hooks"], { cwd: dir }));
    expect(missing).toContain("a webhook secret is required");
    expect(missing).toContain("openssl rand -base64 32");
    const short = usageError(
      await runCli(["relay", "--db", db, "--to", "http://127.0.0.1:9/hooks", "--webhook-secret", `whsec_${Buffer.alloc(8).toString("base64")}`], { cwd: dir }),
    );
    expect(short).toContain("holds 8 bytes; it must hold 24 to 64");
    expect(existsSync(db)).toBe(false);
  });

  it("a database that holds no outbox is refused (the relay never creates one)", async () => {
    const dir = cwd();
    const db = join(dir, "missing.db");
    const line = usageError(await runCli(["relay", "--db", db, "--to", "http://127.0.0.1:9/h", "--webhook-secret", SECRET], { cwd: dir }));
    expect(line).toContain("missing.db");
    expect(existsSync(db)).toBe(false);
  });

  it("a broker that does not answer is logged as unreachable, never as connected", async () => {
    const dir = cwd();
    const db = join(dir, "app.db");
    await (await openOutbox(db)).close();
    const port = await freePort();
    try {
      const relay = startCli(["relay", "--db", db, "--to", `nats://127.0.0.1:${port}`, "--destination", "orders.{type}"], { cwd: dir });
      await relay.waitForStderr("broker unreachable; trying again");
      relay.signal("SIGTERM");
      await relay.waitForExit(15_000);
      const messages = logLines(relay.stderr()).map((l) => l.msg);
      expect(messages).toContain("broker unreachable; trying again");
      expect(messages).not.toContain("broker connected");
    } finally {
      releasePort(port);
    }
  });

  it("a relay with nowhere to send (no --destination, no --route) is refused", async () => {
    const dir = cwd();
    const db = join(dir, "never.db");
    const line = usageError(await runCli(["relay", "--db", db, "--to", TEST_NATS_URL], { cwd: dir }));
    expect(line).toBe(
      "wassal: the relay has nowhere to send messages: give --destination <template> (it then takes every type), --route <type>=<destination> (it takes those types), or both; or --own-destinations if the messages are enqueued with a destination of their own",
    );
    expect(existsSync(db)).toBe(false);
  });

  it("--types with a type that has no route is refused, naming it", async () => {
    const dir = cwd();
    const db = join(dir, "never.db");
    const line = usageError(
      await runCli(["relay", "--db", db, "--to", TEST_NATS_URL, "--types", "order.paid,order.shipped", "--route", "order.paid=orders.paid"], { cwd: dir }),
    );
    expect(line).toMatch(/^wassal: the relay takes "order\.shipped" but has no route for it: give each a route \(--route <type>=<destination>/);
    expect(existsSync(db)).toBe(false);
  });

  it("--route without '=' names the expected form", async () => {
    const dir = cwd();
    const line = usageError(await runCli(["relay", "--db", join(dir, "x.db"), "--to", TEST_NATS_URL, "--route", "order.paid"], { cwd: dir }));
    expect(line).toContain("expected <type>=<destination>");
  });

  it("--help lists the brokers and the routing rules", async () => {
    const run = await runCli(["relay", "--help"], { cwd: cwd() });
    expect(run.code).toBe(0);
    for (const text of [
      "--to <url>",
      "--destination <template>",
      "--route <type=destination>",
      "--webhook-secret",
      "--max-in-flight",
      "nats://",
      "https://",
      "Exit codes",
    ]) {
      expect(run.stdout).toContain(text);
    }
    expect(run.stdout).toMatch(/--types <list>/);
    expect(run.stdout).toContain("What it takes:");
  });
});

describe.skipIf(!natsUp)("wassal relay to NATS JetStream", () => {
  let nc: NatsConnection;
  let jsm: JetStreamManager;
  const stream = `WASSAL_CLI_${process.pid}`;

  beforeAll(async () => {
    nc = await connect({ servers: TEST_NATS_URL });
    jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: stream, subjects: [`${stream}.>`] });
  });
  afterAll(async () => {
    await jsm.streams.delete(stream).catch(() => undefined);
    await nc.close();
  });

  it("publishes the outbox's messages, completes them, and stops on SIGTERM with exit 0", async () => {
    const dir = cwd();
    const db = join(dir, "app.db");
    const outbox = await openOutbox(db);
    try {
      await outbox.store.transaction(async (tx) => {
        for (let n = 0; n < 20; n += 1) await outbox.store.enqueue(tx, { type: n % 2 ? "order.paid" : "order.created", key: `order-${n % 4}`, payload: { n } });
      });
    } finally {
      await outbox.close();
    }
    const relay = startCli(["relay", "--db", db, "--to", TEST_NATS_URL, "--destination", `${stream}.{type}`, "--route", `order.paid=${stream}.paid`], {
      cwd: dir,
    });
    await relay.waitForStderr("relay started");
    await until("20 messages in the stream", async () => (await jsm.streams.info(stream)).state.messages === 20, { timeoutMs: 15_000, intervalMs: 20 });
    const check = await openOutbox(db, { mustExist: true });
    try {
      await until("all processed", async () => (await check.store.countByStatus()).processed === 20, { timeoutMs: 15_000, intervalMs: 20 });
    } finally {
      await check.close();
    }
    const subjects = (await jsm.streams.info(stream, { subjects_filter: ">" })).state.subjects ?? {};
    expect(subjects).toEqual({ [`${stream}.order.created`]: 10, [`${stream}.paid`]: 10 });
    relay.signal("SIGTERM");
    const exit = await relay.waitForExit(15_000);
    expect(exit).toMatchObject({ code: 0, signal: null });
    const messages = logLines(relay.stderr()).map((l) => l.msg);
    expect(messages).toContain("relay started");
    expect(messages).toContain("relay stopped");
  });

  it("takes only the types it routes when it has no --destination, printing them; a worker's type stays pending", async () => {
    const dir = cwd();
    const db = join(dir, "app.db");
    const outbox = await openOutbox(db);
    let placedIds: string[] = [];
    try {
      placedIds = await outbox.store.transaction(async (tx) => {
        const placed: string[] = [];
        for (let n = 0; n < 3; n += 1) {
          await outbox.store.enqueue(tx, { type: "order.paid", payload: { n } });
          placed.push((await outbox.store.enqueue(tx, { type: "order.placed", payload: { n } })).id);
        }
        return placed;
      });
    } finally {
      await outbox.close();
    }
    const relay = startCli(["relay", "--db", db, "--to", TEST_NATS_URL, "--route", `order.paid=${stream}.routed`, "--log-level", "info"], { cwd: dir });
    const check = await openOutbox(db, { mustExist: true });
    try {
      await until("the paid ones relayed", async () => (await check.store.countByStatus()).processed === 3, { timeoutMs: 15_000, intervalMs: 20 });
      const started = logLines(relay.stderr()).find((line) => line.msg === "relay started");
      expect(started?.takes).toEqual(["order.paid"]);
      for (const id of placedIds) expect(await check.store.getMessage(id)).toMatchObject({ status: "pending", attempts: 0, lockedBy: null });
      relay.signal("SIGTERM");
      expect(await relay.waitForExit(15_000)).toMatchObject({ code: 0 });
    } finally {
      await check.close();
    }
  });

  it("--own-destinations: messages enqueued with a destination of their own are relayed with no route, every type or --types", async () => {
    const dir = cwd();
    const db = join(dir, "app.db");
    const outbox = await openOutbox(db);
    try {
      await outbox.store.transaction(async (tx) => {
        await outbox.store.enqueue(tx, { type: "order.mailed", payload: { n: 1 }, destination: `${stream}.own.mailed` });
        await outbox.store.enqueue(tx, { type: "order.faxed", payload: { n: 2 }, destination: `${stream}.own.faxed` });
      });
    } finally {
      await outbox.close();
    }
    // Its own --id-prefix: this stream's duplicate window holds the other tests' ids 1 and 2.
    const relay = startCli(["relay", "--db", db, "--to", TEST_NATS_URL, "--own-destinations", "--id-prefix", "own:", "--log-level", "info"], { cwd: dir });
    const check = await openOutbox(db, { mustExist: true });
    try {
      await until("both relayed", async () => (await check.store.countByStatus()).processed === 2, { timeoutMs: 15_000, intervalMs: 20 });
      expect(logLines(relay.stderr()).find((line) => line.msg === "relay started")?.takes).toBe("every type");
      relay.signal("SIGTERM");
      expect(await relay.waitForExit(15_000)).toMatchObject({ code: 0 });
    } finally {
      await check.close();
    }
    for (const [subject, n] of [
      [`${stream}.own.mailed`, 1],
      [`${stream}.own.faxed`, 2],
    ] as const) {
      const stored = await jsm.streams.getMessage(stream, { last_by_subj: subject });
      expect(JSON.parse(new TextDecoder().decode(stored?.data))).toEqual({ n });
    }
    // --types with --own-destinations needs no route either: it starts (and is stopped).
    const typed = startCli(["relay", "--db", db, "--to", TEST_NATS_URL, "--own-destinations", "--types", "order.mailed", "--log-level", "info"], { cwd: dir });
    await typed.waitForStderr("relay started");
    typed.signal("SIGTERM");
    expect(await typed.waitForExit(15_000)).toMatchObject({ code: 0 });
  });

  it("--audit keeps the audit trail of what it relays (the dashboard's timelines); without it, none", async () => {
    for (const audit of [true, false]) {
      const dir = cwd();
      const db = join(dir, "app.db");
      const outbox = await openOutbox(db);
      try {
        await outbox.store.transaction(async (tx) => {
          for (let n = 0; n < 3; n += 1) await outbox.store.enqueue(tx, { type: "order.audited", payload: { n } });
        });
      } finally {
        await outbox.close();
      }
      const relay = startCli(["relay", "--db", db, "--to", TEST_NATS_URL, "--destination", `${stream}.{type}`, ...(audit ? ["--audit"] : [])], { cwd: dir });
      const check = await openOutbox(db, { mustExist: true });
      try {
        await until("all processed", async () => (await check.store.countByStatus()).processed === 3, { timeoutMs: 15_000, intervalMs: 20 });
        relay.signal("SIGTERM");
        expect(await relay.waitForExit(15_000)).toMatchObject({ code: 0 });
        const actions = (await check.store.auditTrail()).map((entry) => entry.action);
        expect(
          actions.filter((a) => a === "claim"),
          `--audit ${audit}`,
        ).toHaveLength(audit ? 3 : 0);
        expect(
          actions.filter((a) => a === "complete"),
          `--audit ${audit}`,
        ).toHaveLength(audit ? 3 : 0);
      } finally {
        await check.close();
      }
    }
  });
});
