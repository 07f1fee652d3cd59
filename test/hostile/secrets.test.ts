// A planted secret never comes out. Every command is run with secrets in every place a connection
// string or its environment carries one (the password before the "@", ?password=, ?sslpassword=,
// PGPASSWORD, a broker URL's password) and on its failure paths (a refused connection, malformed
// URLs, a key file that is not there, WASSAL_DEBUG's stacks), and everything it wrote is scanned:
// stdout, stderr, --json, debug-level logs, the lab's .txt and .html reports, the dashboard's page
// and the spans of a traced worker.
//
// Needs `npm run build` first (`npm test` does it).

import { mkdtempSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { redactSecrets, redactUrl } from "../../src/outbox/redact.js";
import { killAll, requireBuiltCli, ROOT, runCli, startCli, type CliResult } from "../support/cli.js";
import { freshSchema, postgresAvailable, TEST_DATABASE_URL } from "../support/postgres.js";
import { tempDir } from "../support/temp.js";

const PG = await postgresAvailable();
const dir = tempDir("wassal-hostile-secrets-");
const cwd = () => mkdtempSync(join(dir, "cwd-"));

/** The secrets planted, each in its own place. */
const SECRET = {
  userinfo: "PLANTEDpwUserinfo1",
  param: "PLANTEDpwParam2",
  sslpassword: "PLANTEDsslPassword3",
  env: "PLANTEDenvPassword4",
  broker: "PLANTEDbrokerPw5",
  sslkey: "PLANTEDsslKeyPath6",
} as const;

/** The test server's URL with a password in the user information and in two parameters. */
function plantedUrl(base = TEST_DATABASE_URL): string {
  const url = new URL(base);
  url.password = SECRET.userinfo;
  url.searchParams.set("password", SECRET.param);
  url.searchParams.set("sslpassword", SECRET.sslpassword);
  return url.toString();
}

const env = { PGPASSWORD: SECRET.env };

/** Fails, naming where, when any planted secret shows in `text` (as written or URL-encoded). */
function expectClean(where: string, text: string): void {
  for (const secret of Object.values(SECRET)) {
    for (const form of [secret, encodeURIComponent(secret), secret.toLowerCase()]) {
      const at = text.toLowerCase().indexOf(form.toLowerCase());
      expect(at, `${where} shows the planted secret ${secret}: …${text.slice(Math.max(0, at - 80), at + 80)}…`).toBe(-1);
    }
  }
}

function expectCleanRun(what: string, run: CliResult): void {
  expectClean(`${what} (stdout)`, run.stdout);
  expectClean(`${what} (stderr)`, run.stderr);
}

/** Every file under `folder`, scanned. */
function expectCleanFiles(what: string, folder: string): number {
  let files = 0;
  for (const name of readdirSync(folder, { recursive: true }) as string[]) {
    const path = join(folder, name);
    if (!statSync(path).isFile()) continue;
    files += 1;
    expectClean(`${what}: ${name}`, readFileSync(path, "utf8"));
  }
  return files;
}

beforeAll(requireBuiltCli);
afterEach(killAll);
afterAll(killAll);

describe("the one redaction", () => {
  it("hides a URL's password and secret parameters, on any scheme, parsed or malformed", () => {
    expect(redactUrl("postgres://app:pw1234@db:5432/app?password=pw5678&sslmode=require")).toBe("postgres://app:***@db:5432/app?password=***&sslmode=require");
    expect(redactUrl("postgres://app@db/app?sslpassword=k&sslkey=/etc/key.pem&application_name=x")).toBe(
      "postgres://app@db/app?sslpassword=***&sslkey=***&application_name=x",
    );
    expect(redactUrl("amqp://guest:guest@127.0.0.1:5672")).toBe("amqp://guest:***@127.0.0.1:5672");
    // Malformed: the port, a bracket, two ports, a space, an unescaped "@" in the password.
    expect(redactUrl("postgres://u:pw1234@127.0.0.1:99999/x")).toBe("postgres://u:***@127.0.0.1:99999/x");
    expect(redactUrl("postgres://u:pw1234@[bad/x")).toBe("postgres://u:***@[bad/x");
    expect(redactUrl("postgres://u:pw1234@:5432:5432/x")).toBe("postgres://u:***@:5432:5432/x");
    expect(redactUrl("postgres://u:pw1234@a b/x")).toBe("postgres://u:***@a b/x");
    expect(redactUrl("postgres://u:p@ss@w0rd@host/x")).toBe("postgres://u:***@host/x");
    // An unescaped "/", "?" or "#" in the password (what a user types before percent-encoding).
    expect(redactUrl("amqp://guest:hun/ter2@h:5672")).toBe("amqp://guest:***@h:5672");
    expect(redactUrl("nats://u:hun?ter2@h:4222")).toBe("nats://u:***@h:4222");
    expect(redactUrl("postgres://u:hun#ter2@h/db")).toBe("postgres://u:***@h/db");
    expect(redactUrl("amqp://u:1234@h:5672")).toBe("amqp://u:***@h:5672");
    // A port, then an "@" further on (in a path or query), is no password: the URL stays as it is.
    expect(redactUrl("https://h:443/hooks?email=a@b")).toBe("https://h:443/hooks?email=a@b");
    expect(redactUrl("https://h/hooks/a@b")).toBe("https://h/hooks/a@b");
  });

  it("finds URLs inside free text, and keeps the punctuation that ends a sentence", () => {
    expect(redactSecrets('cannot connect to "redis://:hunter22@cache:6379": refused, and postgres://a:b1234@h/d.')).toBe(
      'cannot connect to "redis://:***@cache:6379": refused, and postgres://a:***@h/d.',
    );
  });
});

describe("no planted secret in any output", () => {
  it("malformed URLs: the error line and --json name what is wrong, never the password", async () => {
    const malformed = [
      `postgres://u:${SECRET.userinfo}@127.0.0.1:99999/x`,
      `postgres://u:${SECRET.userinfo}@[bad/x`,
      `postgres://u:${SECRET.userinfo}@:5432:5432/x`,
      `postgres://u:${SECRET.userinfo}@a b/x`,
      `postgres://u:${SECRET.userinfo}@127.0.0.1:99999/x?password=${SECRET.param}`,
    ];
    for (const url of malformed) {
      for (const args of [
        ["outbox", "stats", "--db", url, "--json"],
        ["worker", "--db", url],
        ["lab", "session-15-outbox-leasing", "--db", url, "--json"],
      ]) {
        const run = await runCli(args, { cwd: cwd(), env });
        expect(run.code, `${args.join(" ")}: ${run.stderr}`).toBe(2);
        expect(run.stderr).toMatch(/malformed PostgreSQL URL postgres:\/\/u:\*\*\*@/);
        expectCleanRun(args.join(" "), run);
      }
    }
    // A broker URL: the relay's --to.
    for (const to of [
      `amqp://u:${SECRET.broker}@[bad`,
      `nats://u:${SECRET.broker}@127.0.0.1:4222/subject`,
      `ftp://u:${SECRET.broker}@host/x`,
      // A password with an unescaped "/", alone and as a cluster's second node.
      `amqp://u:${SECRET.broker}/x@h:5672`,
      `amqp://guest:guest@127.0.0.1:5672,amqp://u:${SECRET.broker}/x@h:5672`,
      `nats://127.0.0.1:4222,nats://u:${SECRET.broker}/x@h:4222`,
    ]) {
      const run = await runCli(["relay", "--db", join(cwd(), "r.db"), "--to", to, "--json"], { cwd: cwd(), env });
      expect(run.code, run.stderr).toBe(2);
      expectCleanRun(`relay --to ${to}`, run);
    }
  });

  describe.runIf(PG)("PostgreSQL, with secrets in the URL and PGPASSWORD", () => {
    const schema = freshSchema("wassal_hostile_secrets");
    const url = plantedUrl();
    const db = ["--db", url, "--schema", schema];

    it("short commands, in text and --json, succeeding", async () => {
      const runs: [string, string[]][] = [
        ["payments seed", ["payments", "seed", ...db, "--count", "3"]],
        ["payments seed --json", ["payments", "seed", ...db, "--count", "4", "--json"]],
        ["payments create --json", ["payments", "create", ...db, "--key", "PAY-SECRET-1", "--amount", "100", "--currency", "EUR", "--json"]],
        ["payments list", ["payments", "list", ...db]],
        ["payments list --json", ["payments", "list", ...db, "--json"]],
        ["outbox stats", ["outbox", "stats", ...db]],
        ["outbox stats --json", ["outbox", "stats", ...db, "--json"]],
        ["outbox dead", ["outbox", "dead", ...db]],
        ["outbox show", ["outbox", "show", "1", ...db]],
        ["outbox show --json", ["outbox", "show", "1", ...db, "--json"]],
        ["outbox blocked-keys", ["outbox", "blocked-keys", ...db]],
        ["outbox purge", ["outbox", "purge", ...db, "--processed-before", "1d"]],
        ["inbox blocked-keys --json", ["inbox", "blocked-keys", ...db, "--json"]],
      ];
      for (const [what, args] of runs) {
        const run = await runCli(args, { cwd: cwd(), env });
        expect(run.code, `${what}: ${run.stderr}`).toBe(0);
        expectCleanRun(what, run);
      }
      // The location is shown, without its secrets.
      const stats = await runCli(["outbox", "stats", ...db], { cwd: cwd(), env });
      expect(stats.stdout).toContain("password=***");
    });

    it("the same commands failing: a refused connection, a key file that is not there, with and without WASSAL_DEBUG", async () => {
      const refused = new URL(url);
      refused.port = "1";
      const sslkey = `${TEST_DATABASE_URL}?sslkey=/nowhere/${SECRET.sslkey}.pem`;
      for (const target of [refused.toString(), sslkey]) {
        for (const debug of [{}, { WASSAL_DEBUG: "1" }]) {
          for (const args of [
            ["outbox", "stats", "--db", target, "--json"],
            ["payments", "seed", "--db", target, "--count", "1"],
            ["worker", "--db", target, "--log-level", "debug"],
            ["dashboard", "--db", target, "--port", "0"],
          ]) {
            const run = await runCli(args, { cwd: cwd(), env: { ...env, ...debug } });
            expect(run.code, `${args.join(" ")}: ${run.stderr}`).not.toBe(0);
            expectCleanRun(`${args.join(" ")} ${JSON.stringify(debug)}`, run);
          }
        }
      }
    });

    it("a traced worker's debug logs and spans, and a relay's logs with a broker password", async () => {
      const spans = join(cwd(), "spans.json");
      await runCli(["payments", "seed", ...db, "--count", "5", "--prefix", "TRACED"], { cwd: cwd(), env });
      const worker = startCli(["worker", ...db, "--log-level", "debug"], {
        cwd: cwd(),
        env: { ...env, WASSAL_TEST_SPANS_FILE: spans },
        nodeArgs: ["--import", join(ROOT, "test", "fixtures", "otel-instrumentation.mjs")],
      });
      await worker.waitForStderr('"event":"completed"', 30_000);
      worker.signal("SIGTERM");
      expect((await worker.waitForExit(30_000)).code).toBe(0);
      expectClean("worker stderr", worker.stderr());
      expectClean("worker stdout", worker.stdout());
      expect(worker.stderr()).toContain('"db":"postgres://');
      const spanText = readFileSync(spans, "utf8");
      expect(JSON.parse(spanText).length).toBeGreaterThan(0);
      expectClean("worker spans", spanText);

      const relay = startCli(["relay", ...db, "--to", `redis://:${SECRET.broker}@127.0.0.1:6379`, "--destination", "wassal-hostile", "--log-level", "debug"], {
        cwd: cwd(),
        env,
      });
      await relay.waitForStderr("relay started", 30_000);
      relay.signal("SIGTERM");
      await relay.waitForExit(30_000);
      expectClean("relay stderr", relay.stderr());
      expectClean("relay stdout", relay.stdout());
      expect(relay.stderr()).toContain("redis://:***@");
    });

    it("the dashboard's page and log", async () => {
      const dashboard = startCli(["dashboard", ...db, "--port", "0"], { cwd: cwd(), env });
      const address = await new Promise<string>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no address; stderr: ${dashboard.stderr()}`)), 30_000);
        dashboard.child.stdout?.on("data", () => {
          const found = /dashboard on (http:\/\/\S+?)\/? /.exec(dashboard.stdout())?.[1];
          if (found) {
            clearTimeout(timer);
            resolve(found);
          }
        });
      });
      for (const path of ["/", "/search?q=PAY", "/messages/1"]) {
        const response = await fetch(`${address}${path}`);
        expect(response.status, path).toBe(200);
        expectClean(`dashboard ${path}`, await response.text());
      }
      dashboard.signal("SIGTERM");
      await dashboard.waitForExit(30_000);
      expectClean("dashboard stdout", dashboard.stdout());
      expectClean("dashboard stderr", dashboard.stderr());
    });

    it("the lab: its text report, JSON, and the saved .txt and .html reports", async () => {
      const here = cwd();
      for (const json of [false, true]) {
        const run = await runCli(["lab", "session-15-outbox-leasing", "--db", url, "--reports", here, ...(json ? ["--json"] : [])], {
          cwd: here,
          env,
          timeoutMs: 120_000,
        });
        expect(run.code, run.stderr).toBe(0);
        expectCleanRun(`lab ${json ? "--json" : ""}`, run);
      }
      expect(expectCleanFiles("lab reports", join(here, "Reports"))).toBeGreaterThanOrEqual(4);
    });
  });
});
