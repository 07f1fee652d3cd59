// The package's faces, as a user imports them (by the package name, from the built dist/): no
// entry point loads a database driver until a store is opened; each store has its own entry point; nothing that
// could forge events or bypass leases is public.

import { spawnSync } from "node:child_process";
import { beforeAll, describe, expect, it } from "vitest";
import { requireBuilt, ROOT } from "../support/cli.js";
import { childEnv } from "../support/env.js";

/** Runs an ES module snippet in a fresh Node process at the repository root and returns its JSON output. */
function inFreshProcess<T>(code: string): T {
  // `drivers()`: which database drivers the process has loaded so far (both are CommonJS packages,
  // so whatever imports them puts their files in the CommonJS module cache).
  const prelude = `import { createRequire } from "node:module";
    const cache = createRequire(import.meta.url).cache;
    const drivers = () => ["better-sqlite3", "pg", "mysql2"].filter((name) => Object.keys(cache).some((file) => file.includes("/node_modules/" + name + "/")));`;
  const result = spawnSync(process.execPath, ["--input-type=module", "-e", `${prelude}\n${code}`], {
    cwd: ROOT,
    env: childEnv(),
    encoding: "utf8",
    timeout: 30_000,
  });
  if (result.status !== 0) throw new Error(`node exited ${result.status}: ${result.stderr}`);
  return JSON.parse(result.stdout) as T;
}

describe("entry points", () => {
  beforeAll(() => {
    for (const entry of ["index.js", "sqlite.js", "postgres.js", "mariadb.js", "observability.js", "lab.js", "relay.js"]) requireBuilt(entry);
  });

  it("no entry point loads a database driver on import; opening a store loads its own driver alone", () => {
    const postgresUser = inFreshProcess<{ imported: string[]; opened: string[] }>(`
      await import("wassal");
      const { PostgresOutboxStore } = await import("wassal/postgres");
      await import("wassal/sqlite");
      await import("wassal/mariadb");
      const imported = drivers();
      await PostgresOutboxStore.connect({ url: "postgres://127.0.0.1:1/none", connectTimeoutMs: 1000 }).catch(() => undefined);
      console.log(JSON.stringify({ imported, opened: drivers() }));`);
    expect(postgresUser).toEqual({ imported: [], opened: ["pg"] });
    const sqliteUser = inFreshProcess<string[]>(`
      await import("wassal/postgres");
      const { SqliteOutboxStore } = await import("wassal/sqlite");
      await new SqliteOutboxStore({ path: ":memory:" }).close();
      console.log(JSON.stringify(drivers()));`);
    expect(sqliteUser).toEqual(["better-sqlite3"]);
    const mariadbUser = inFreshProcess<{ imported: string[]; opened: string[] }>(`
      await import("wassal");
      await import("wassal/postgres");
      await import("wassal/sqlite");
      const { MariaDbOutboxStore } = await import("wassal/mariadb");
      const imported = drivers();
      await MariaDbOutboxStore.connect({ url: "mariadb://127.0.0.1:1/none", connectTimeoutMs: 1000 }).catch(() => undefined);
      console.log(JSON.stringify({ imported, opened: drivers() }));`);
    expect(mariadbUser).toEqual({ imported: [], opened: ["mysql2"] });
  });

  it("the root exports the core, including UnrecoverableError, and none of the stores, the domain or the lab", () => {
    const out = inFreshProcess<{ names: string[]; unrecoverable: boolean }>(`
      const core = await import("wassal");
      const error = new core.UnrecoverableError("BAD_PAYLOAD", "payload has no amount");
      console.log(JSON.stringify({ names: Object.keys(core).sort(), unrecoverable: error instanceof core.WassalError && error.name === "UnrecoverableError" }));`);
    expect(out.unrecoverable).toBe(true);
    expect(out.names).toEqual(
      expect.arrayContaining([
        "Worker",
        "processLease",
        "ManualClock",
        "systemClock",
        "EventHub",
        "CompletionBatcher",
        "UnrecoverableError",
        "LeaseLostError",
        "startRetention",
        "messageTypes",
        "subscriptions",
        "UnroutedTypesError",
        "MAX_CANCEL_REASON",
      ]),
    );
    for (const outside of [
      "SqliteOutboxStore",
      "PostgresOutboxStore",
      "MariaDbOutboxStore",
      "openOutbox",
      "PaymentsService",
      "ProviderSimulator",
      "runScenario",
      "outboxMetrics",
      "otelTracing",
    ]) {
      expect(out.names).not.toContain(outside);
    }
  });

  it("each subpath exports its own part", () => {
    const out = inFreshProcess<Record<string, string[]>>(`
      const names = async (path) => Object.keys(await import(path)).sort();
      console.log(JSON.stringify({
        sqlite: await names("wassal/sqlite"),
        postgres: await names("wassal/postgres"),
        mariadb: await names("wassal/mariadb"),
        observability: await names("wassal/observability"),
        lab: await names("wassal/lab"),
        relay: await names("wassal/relay"),
        shards: await names("wassal/shards"),
        kysely: await names("wassal/kysely"),
        knex: await names("wassal/knex"),
        drizzle: await names("wassal/drizzle"),
        typeorm: await names("wassal/typeorm"),
        prisma: await names("wassal/prisma"),
      }));`);
    expect(out.kysely).toEqual(["enqueue", "fromKysely"]);
    expect(out.knex).toEqual(["enqueue", "fromKnex"]);
    expect(out.drizzle).toEqual(["enqueue", "fromDrizzle"]);
    expect(out.typeorm).toEqual(["enqueue", "fromTypeOrm"]);
    expect(out.prisma).toEqual(["enqueue", "fromPrisma"]);
    expect(out.shards).toEqual([
      "AddShardsRefusedError",
      "ShardWorkers",
      "ShardedOutbox",
      "addShards",
      "jumpShard",
      "keyHash",
      "planAddShards",
      "shardIdPrefix",
      "shardOfKey",
    ]);
    expect(out.sqlite).toEqual(["SqliteOutboxStore"]);
    expect(out.postgres).toEqual(["LogicalReplicationUnavailableError", "PostgresOutboxStore", "openWalFeed"]);
    expect(out.mariadb).toEqual(["MariaDbOutboxStore"]);
    expect(out.observability).toEqual(["createLogger", "logEvents", "otelTracing", "outboxMetrics", "relayMetrics", "serveMetrics"]);
    expect(out.relay).toEqual(
      expect.arrayContaining([
        "Relay",
        "ShardRelays",
        "WalRelay",
        "NatsPublisher",
        "WebhookPublisher",
        "PermanentPublishError",
        "BrokerUnavailableError",
        "router",
      ]),
    );
    expect(out.lab).toEqual(expect.arrayContaining(["openOutbox", "withOutbox", "PaymentsService", "ProviderSimulator", "runScenario", "SCENARIOS"]));
  });

  it("wassal/shards loads no database driver", () => {
    const out = inFreshProcess<{ drivers: string[] }>(`
      await import("wassal/shards");
      console.log(JSON.stringify({ drivers: drivers() }));`);
    expect(out.drivers).toEqual([]);
  });

  it("wassal/relay loads no database driver, and a NATS publisher opens at once even with no server (it connects in the background)", () => {
    const out = inFreshProcess<{ drivers: string[]; connectedYet: boolean }>(`
      const relay = await import("wassal/relay");
      const publisher = await relay.NatsPublisher.open({ servers: "nats://127.0.0.1:1" });
      const connectedYet = await Promise.race([publisher.connected().then(() => true), new Promise((resolve) => setTimeout(() => resolve(false), 200))]);
      await publisher.close();
      console.log(JSON.stringify({ drivers: drivers(), connectedYet }));
      process.exit(0);`);
    expect(out).toEqual({ drivers: [], connectedYet: false });
  });

  it("a caller can listen to a store's events but cannot emit one, and a store has no lease-bypassing member", () => {
    const out = inFreshProcess<{ hubMembers: string[]; storeHasUnleased: boolean; events: string[] }>(`
      const { EventHub } = await import("wassal");
      const { SqliteOutboxStore } = await import("wassal/sqlite");
      const store = new SqliteOutboxStore({ path: ":memory:" });
      await store.migrate();
      const events = [];
      store.events.subscribe((event) => events.push(event.type));
      await store.claim("me", { limit: 1, leaseMs: 1000 });
      const hubMembers = Object.getOwnPropertyNames(EventHub.prototype).filter((name) => name !== "constructor").sort();
      const storeHasUnleased = "unleased" in store;
      await store.close();
      console.log(JSON.stringify({ hubMembers, storeHasUnleased, events }));`);
    expect(out.events).toEqual(["claim-empty"]);
    expect(out.hubMembers).toEqual(["subscribe"]);
    expect(out.storeHasUnleased).toBe(false);
  });
});
