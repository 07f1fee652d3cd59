// `wassal dashboard`: a web page over one outbox (either store). Built on Hono: a small,
// dependency-free, well-kept web framework whose router, `html` template (escapes every value),
// server-sent events (`streamSSE`), CSRF check (Origin / Sec-Fetch-Site) and secure headers (a
// content security policy) are the parts a dashboard needs, so none of them is written by hand
// here; @hono/node-server runs it on Node's http server.
//
// Security: it binds to loopback unless told otherwise, and any other address needs a token
// (bearer header, or a cookie set by visiting /?token=…). It is read-only unless actions are
// allowed; then each action is a POST carrying a per-process CSRF token, checked with the request's
// origin. Every message field is escaped by the template.

import { randomBytes, createHash, timingSafeEqual } from "node:crypto";
import type { AddressInfo, Server } from "node:net";
import { createAdaptorServer } from "@hono/node-server";
import { Hono, type Context } from "hono";
import { getCookie, setCookie } from "hono/cookie";
import { csrf } from "hono/csrf";
import { HTTPException } from "hono/http-exception";
import { mount } from "hono/mount";
import { secureHeaders } from "hono/secure-headers";
import { streamSSE } from "hono/streaming";
import { InvalidArgumentError, MessageNotFoundError, MessageNotPendingError, MessageRunningError, WassalError } from "../outbox/errors.js";
import { checkListenAddress, listenOn } from "../observability/listen.js";
import type { OutboxStore } from "../outbox/store.js";
import { MESSAGE_STATUSES, type MessageStatus } from "../outbox/types.js";
import { isMessageId } from "../outbox/validate.js";
import type { InsertFeedLag } from "../outbox/insert-feed.js";
import { DASHBOARD_CSS, LIVE_JS } from "./assets.js";
import type { MessagePreview, ShardSummary } from "./pages.js";
import {
  layout,
  type ListQuery,
  goneMessageFragment,
  messageFragment,
  messagesFragment,
  overviewFragment,
  PREVIEW_CHARS,
  type PageContext,
  problemPage,
  searchFragment,
  shardsPage,
} from "./pages.js";
import { Pulse } from "./pulse.js";
import { MessageWatch } from "./watch.js";

export interface DashboardOptions {
  readonly store: OutboxStore<unknown>;
  /** Shown in the header: which database this is (a path, or a URL without its password). */
  readonly database: string;
  /** Show and accept actions (redrive a dead message, cancel a pending one, unblock a key). Default false: read-only. */
  readonly allowActions?: boolean;
  /** When set, every request must present it (Authorization: Bearer, or the cookie /?token= sets). */
  readonly token?: string;
  /** How often the outbox is read for live updates, in ms (default 1000). */
  readonly pollMs?: number;
  /** The wall clock (tests pass a manual one). */
  readonly now?: () => number;
  /**
   * Without a token, the host names a request may be addressed to (its Host header); any other is
   * refused (403), so a web page that rebinds its own name to 127.0.0.1 cannot read or act on the
   * dashboard. Default: 127.0.0.1, localhost and [::1]. startDashboard adds the address it listens on.
   */
  readonly hostNames?: readonly string[];
  /**
   * The path the app is mounted under, without a trailing slash (default "": the root). Its pages'
   * links, forms and live updates carry it; the stylesheet and script stay at /assets.
   */
  readonly base?: string;
  /** The WAL relay's replication slot to show (its lag and whether a relay streams from it), read at each overview. */
  readonly slot?: { readonly name: string; readonly lag: () => Promise<InsertFeedLag | null> };
}

const COOKIE = "wassal_dashboard";
const PROCESSING_LIMIT = 500;
const DEAD_LIMIT = 50;
const SEARCH_LIMIT = 50;
/** Message previews kept (a payload's and headers' first PREVIEW_CHARS characters each): they never change after enqueue. */
const PREVIEWS_KEPT = 16;

const digest = (text: string) => createHash("sha256").update(text).digest();
/** Equal texts, compared in constant time (of their digests). */
const sameSecret = (given: string, expected: string) => timingSafeEqual(digest(given), digest(expected));

/** True for an address that only this machine can reach. */
export function isLoopback(host: string): boolean {
  return host === "localhost" || host === "::1" || /^127(\.\d{1,3}){3}$/.test(host);
}

/**
 * The few previews of payloads and headers last shown, by message id: a live page fetches its
 * message again at every change, and the payload's text need not be read again for that. An entry
 * is used only for the same message (its id, type and creation time), since SQLite may give a
 * purged message's id to a new one.
 */
class Previews {
  readonly #kept = new Map<string, { readonly identity: string; readonly preview: MessagePreview }>();

  static identity(message: { readonly type: string; readonly createdAt: Date }): string {
    return `${message.type}@${message.createdAt.getTime()}`;
  }

  get(id: string, identity: string): MessagePreview | undefined {
    const kept = this.#kept.get(id);
    if (kept === undefined || kept.identity !== identity) return undefined;
    this.#kept.delete(id);
    this.#kept.set(id, kept); // the most recently used last
    return kept.preview;
  }

  set(id: string, identity: string, preview: MessagePreview): void {
    this.#kept.delete(id);
    this.#kept.set(id, { identity, preview });
    for (const oldest of this.#kept.keys()) {
      if (this.#kept.size <= PREVIEWS_KEPT) break;
      this.#kept.delete(oldest);
    }
  }
}

/** The parameters the messages page takes. */
const LIST_PARAMETERS = ["status", "type", "key", "order", "limit", "after", "before", "cancelled"] as const;
/** The most messages one page of the list shows. */
const LIST_LIMIT = 500;

/**
 * The messages page's query, checked: a bad or unknown parameter is a problem naming it and what
 * is valid (answered with 400). An empty value (a filter form's empty field) is no filter.
 */
export function parseListQuery(
  params: URLSearchParams,
): { readonly query: ListQuery; readonly after?: string; readonly before?: string; readonly cancelled: string | null } | { readonly problem: string } {
  const given = new Map<string, string>();
  for (const [name, value] of params) {
    if (!(LIST_PARAMETERS as readonly string[]).includes(name)) {
      return { problem: `Unknown parameter ${JSON.stringify(name)}: the messages page takes ${LIST_PARAMETERS.join(", ")}.` };
    }
    if (given.has(name)) return { problem: `Parameter ${JSON.stringify(name)} was given twice: give it once.` };
    if (value !== "") given.set(name, value);
  }
  const status = given.get("status");
  if (status !== undefined && !(MESSAGE_STATUSES as readonly string[]).includes(status)) {
    return { problem: `Parameter "status" must be one of ${MESSAGE_STATUSES.join(", ")} (processing is a running, leased message), or left out for any.` };
  }
  const type = given.get("type");
  if (type !== undefined && type.length > 200) return { problem: 'Parameter "type" must be a message type of at most 200 characters.' };
  const key = given.get("key");
  if (key !== undefined && key.length > 255) return { problem: 'Parameter "key" must be an ordering key of at most 255 characters.' };
  const order = given.get("order") ?? "newest";
  if (order !== "newest" && order !== "oldest") return { problem: 'Parameter "order" must be "newest" or "oldest".' };
  const limitText = given.get("limit") ?? "50";
  const limit = /^[0-9]{1,4}$/.test(limitText) ? Number(limitText) : Number.NaN;
  if (!(limit >= 1 && limit <= LIST_LIMIT)) return { problem: `Parameter "limit" must be a whole number from 1 to ${LIST_LIMIT}.` };
  for (const name of ["after", "before", "cancelled"] as const) {
    const id = given.get(name);
    if (id !== undefined && !isMessageId(id))
      return { problem: `Parameter ${JSON.stringify(name)} must be a message id (a whole number, as the page's links give it).` };
  }
  const after = given.get("after");
  const before = given.get("before");
  if (after !== undefined && before !== undefined) return { problem: 'Give "after" (the next page) or "before" (the previous page), not both.' };
  const query: ListQuery = {
    ...(status === undefined ? {} : { status: status as MessageStatus }),
    ...(type === undefined ? {} : { type }),
    ...(key === undefined ? {} : { key }),
    order,
    limit,
  };
  return { query, ...(after === undefined ? {} : { after }), ...(before === undefined ? {} : { before }), cancelled: given.get("cancelled") ?? null };
}

/**
 * A Hono app with the dashboard's guards (its security headers; without a token, requests only to
 * this machine's own names; with one, the token on every request) and its assets.
 */
function guardedApp(options: Pick<DashboardOptions, "token" | "hostNames">): Hono {
  const { token } = options;
  // Not strict: "/shard/1/" is "/shard/1", as a browser expects of a folder-like address.
  const app = new Hono({ strict: false });
  app.use(
    "*",
    secureHeaders({
      contentSecurityPolicy: {
        defaultSrc: ["'none'"],
        scriptSrc: ["'self'"],
        styleSrc: ["'self'"],
        connectSrc: ["'self'"],
        imgSrc: ["'self'"],
        formAction: ["'self'"],
        frameAncestors: ["'none'"],
        baseUri: ["'none'"],
      },
      referrerPolicy: "no-referrer",
    }),
  );

  // No token: only requests addressed to this machine by its own names (DNS rebinding gets a 403).
  if (token === undefined) {
    const allowed = new Set(["127.0.0.1", "localhost", "[::1]", ...(options.hostNames ?? [])].map((h) => h.toLowerCase()));
    app.use("*", async (c, next) => {
      // The request's URL is built from its Host header (by the Node adapter): its host name is the one the browser asked for.
      const host = new URL(c.req.url).hostname.toLowerCase();
      if (!allowed.has(host)) return c.text("403 Forbidden: this dashboard answers only to its own address\n", 403);
      return next();
    });
  }

  // The token, when one is set: 401 with nothing else for a request without the right one.
  if (token !== undefined) {
    app.use("*", async (c, next) => {
      const offered = c.req.query("token");
      if (offered !== undefined && c.req.method === "GET" && sameSecret(offered, token)) {
        setCookie(c, COOKIE, token, { httpOnly: true, sameSite: "Strict", path: "/" });
        const url = new URL(c.req.url);
        url.searchParams.delete("token");
        // Same page, never another site: "//evil.example/" or "/\\evil.example/" would leave the origin.
        return c.redirect(`/${url.pathname.replace(/^[/\\]+/, "")}${url.search}`, 303);
      }
      // The scheme is case-insensitive (RFC 9110, section 11.1): "bearer" and "BEARER" are "Bearer".
      const bearer = /^bearer +(.+)$/i.exec(c.req.header("authorization") ?? "")?.[1];
      const presented = bearer ?? getCookie(c, COOKIE);
      if (presented === undefined || !sameSecret(presented, token)) {
        c.header("WWW-Authenticate", 'Bearer realm="wassal-dashboard"');
        return c.text("401 Unauthorized\n", 401);
      }
      return next();
    });
  }

  app.get("/assets/dashboard.css", (c) => c.body(DASHBOARD_CSS, 200, { "content-type": "text/css; charset=utf-8", "cache-control": "no-cache" }));
  app.get("/favicon.ico", (c) => c.body(null, 204));
  app.get("/assets/live.js", (c) => c.body(LIVE_JS, 200, { "content-type": "text/javascript; charset=utf-8", "cache-control": "no-cache" }));

  return app;
}

/** The dashboard as a Hono app (mount it in your own server, or start it with startDashboard), its poller, and its per-message watch. */
export function dashboardApp(options: DashboardOptions): { readonly app: Hono; readonly pulse: Pulse; readonly watch: MessageWatch } {
  const { store } = options;
  const allowActions = options.allowActions ?? false;
  const now = options.now ?? Date.now;
  const pollMs = options.pollMs ?? 1000;
  const pulse = new Pulse(store, pollMs, now);
  const watch = new MessageWatch(store, pollMs);
  const previews = new Previews();
  const csrfToken = allowActions ? randomBytes(24).toString("base64url") : null;
  const app = guardedApp(options);
  const base = options.base ?? "";
  if (base !== "" && !/^(\/[\w-]+)+$/.test(base))
    throw new InvalidArgumentError(`base must be a path like /shard/1, without a trailing slash (got ${JSON.stringify(base)})`);
  const ctxOf = (): PageContext => ({ database: options.database, base, csrfToken, now: new Date(now()) });
  const problem = (title: string, detail: string) => problemPage(title, detail, base);

  const slotOf = async () => {
    const { slot } = options;
    if (slot === undefined) return undefined;
    try {
      return { name: slot.name, lag: await slot.lag() };
    } catch (error) {
      return { name: slot.name, error: error instanceof Error ? error.message : String(error) };
    }
  };
  const overview = async () => {
    const [stats, processing, dead, blocked, slot] = await Promise.all([
      pulse.stats(),
      // Without payloads and headers: the overview shows neither, and one may be megabytes.
      store.listMessageStates({ status: ["processing"], limit: PROCESSING_LIMIT }),
      store.listMessageStates({ status: ["dead"], limit: DEAD_LIMIT }),
      store.blockedKeys({ limit: DEAD_LIMIT }),
      slotOf(),
    ]);
    return overviewFragment(ctxOf(), {
      ...(slot === undefined ? {} : { slot }),
      stats,
      throughput: pulse.throughput(),
      processing,
      processingLimit: PROCESSING_LIMIT,
      dead,
      deadLimit: DEAD_LIMIT,
      blocked,
      pollError: pulse.error,
    });
  };
  /** The message's state and the start of its payload and headers (read once, then kept: they never change), or undefined. */
  const readMessage = async (id: string) => {
    const state = await store.getMessageState(id);
    if (state === undefined) return undefined;
    const kept = previews.get(id, Previews.identity(state));
    if (kept !== undefined) return { message: state, preview: kept };
    const text = await store.getMessageText(id, { maxChars: PREVIEW_CHARS });
    if (text === undefined) return undefined;
    const preview = { payload: text.payload, headers: text.headers };
    previews.set(id, Previews.identity(text), preview);
    return { message: text, preview };
  };
  /** The message's fragment, or null when there is no such message. */
  const messageView = async (id: string) => {
    if (!isMessageId(id)) return null;
    const [read, trail] = await Promise.all([readMessage(id), store.auditTrail({ messageId: id })]);
    // Gone (cancelled, deleted at completion, purged): the audit trail still tells its story.
    if (read === undefined) return trail.length === 0 ? null : goneMessageFragment(ctxOf(), id, trail);
    const unaudited =
      trail.length === 0 && read.message.attempts > 0
        ? "This message was claimed, but no audit rows were written for it: the workers or relays that claimed it ran without the audit trail (Worker option audit: true, wassal worker --audit, or wassal relay --audit), so its lease history cannot be drawn."
        : null;
    return messageFragment(ctxOf(), read.message, read.preview, trail, unaudited);
  };
  const notFound = (c: Context, what: string) => c.html(problem("404: not found", what), 404);

  app.get("/", async (c) => c.html(layout("Overview", ctxOf(), { fragment: `${base}/fragments/overview`, events: `${base}/events` }, await overview())));
  app.get("/fragments/overview", async (c) => c.html(await overview()));

  app.get("/search", async (c) => {
    const query = (c.req.query("q") ?? "").trim();
    if (query === "" || query.length > 255) {
      return c.html(problem("400: nothing to search for", "Give a message id, a dedupe key or an ordering key of 1 to 255 characters."), 400);
    }
    const found = await store.findMessages(query, { limit: SEARCH_LIMIT });
    return c.html(layout(`Search: ${query}`, ctxOf(), { fragment: "", events: "" }, searchFragment(ctxOf(), query, found, SEARCH_LIMIT)));
  });

  app.get("/messages", async (c) => {
    const parsed = parseListQuery(new URL(c.req.url).searchParams);
    if ("problem" in parsed) return c.html(problem("400: bad request", parsed.problem), 400);
    const { query, after, before, cancelled } = parsed;
    const page = await store.pageMessages({
      ...(query.status === undefined ? {} : { status: query.status }),
      ...(query.type === undefined ? {} : { type: query.type }),
      ...(query.key === undefined ? {} : { key: query.key }),
      order: query.order,
      limit: query.limit,
      ...(after === undefined ? {} : { after }),
      ...(before === undefined ? {} : { before }),
    });
    return c.html(layout("Messages", ctxOf(), { fragment: "", events: "" }, messagesFragment(ctxOf(), query, page, cancelled)));
  });

  app.get("/messages/:id", async (c) => {
    const id = c.req.param("id");
    const view = await messageView(id);
    if (view === null) return notFound(c, `There is no message with id ${id}. Search by id, dedupe key or ordering key from the overview.`);
    return c.html(layout(`Message #${id}`, ctxOf(), { fragment: `${base}/fragments/messages/${id}`, events: `${base}/events?message=${id}` }, view));
  });
  app.get("/fragments/messages/:id", async (c) => {
    const view = await messageView(c.req.param("id"));
    return view === null ? notFound(c, "No such message.") : c.html(view);
  });

  // The whole payload or headers, as the stored JSON text: a download, never a page (the page shows their first PREVIEW_CHARS characters).
  app.get("/messages/:id/:part{payload|headers}", async (c) => {
    const id = c.req.param("id");
    const part = c.req.param("part") === "headers" ? "headers" : "payload";
    const text = isMessageId(id) ? await store.getMessageText(id) : undefined;
    if (text === undefined) return notFound(c, `There is no message with id ${id}.`);
    return c.body(text[part].text, 200, {
      "content-type": "application/json; charset=utf-8",
      "content-disposition": `attachment; filename="message-${id}-${part}.json"`,
      "cache-control": "no-store",
    });
  });

  // Live updates: an event whenever what the page shows may have changed. The overview hears the
  // pulse; a message page hears its message's watch (one poll per message, however many pages watch
  // it, reading its state and trail, never its payload). A stream keeps nothing but a flag: changes
  // that come while an event is being written make one more event.
  app.get("/events", (c) => {
    const messageId = c.req.query("message");
    if (messageId !== undefined && !isMessageId(messageId)) return notFound(c, `There is no message with id ${messageId}.`);
    return streamSSE(c, async (stream) => {
      let changed = false;
      let writing = false;
      const send = async () => {
        changed = true;
        if (writing) return;
        writing = true;
        try {
          while (changed && !stream.aborted) {
            changed = false;
            await stream.writeSSE({ event: "change", data: String(now()) });
          }
        } finally {
          writing = false;
        }
      };
      const onChange = () => void send().catch(() => stream.abort());
      await new Promise<void>((resolve) => {
        const stop = messageId === undefined ? pulse.onChange(onChange) : watch.watch(messageId, onChange);
        stream.onAbort(() => {
          stop();
          resolve();
        });
        if (messageId === undefined) onChange(); // what the overview shows now
      });
    });
  });

  // Actions: only with allowActions, only by POST with the page's CSRF token and a same-origin request.
  app.use("/messages/:id/redrive", csrf());
  app.use("/messages/:id/cancel", csrf());
  app.use("/keys/:key/*", csrf());
  const refuse = (c: Context) =>
    c.html(problem("403: actions are off", "This dashboard is read-only. Start it with --allow-actions to redrive or cancel messages and unblock keys."), 403);
  const checkCsrf = async (c: Context): Promise<boolean> => {
    const body = await c.req.parseBody();
    const given = typeof body.csrf === "string" ? body.csrf : "";
    return csrfToken !== null && sameSecret(given, csrfToken);
  };
  const badCsrf = (c: Context) => c.html(problem("403: stale form", "The form's token did not match: reload the page and try again."), 403);

  app.post("/messages/:id/redrive", async (c) => {
    if (!allowActions) return refuse(c);
    if (!(await checkCsrf(c))) return badCsrf(c);
    const id = c.req.param("id");
    if (!isMessageId(id)) return notFound(c, `There is no message with id ${id}.`);
    const result = await store.redrive({ messageIds: [id] });
    if (result.moved === 0 && result.notMoved[0]?.status === "missing") return notFound(c, `There is no message with id ${id}.`);
    return c.redirect(`${base}/messages/${id}`, 303);
  });
  app.post("/messages/:id/cancel", async (c) => {
    if (!allowActions) return refuse(c);
    if (!(await checkCsrf(c))) return badCsrf(c);
    const id = c.req.param("id");
    if (!isMessageId(id)) return notFound(c, `There is no message with id ${id}.`);
    // A running message's form says so (running=1): its run is aborted and its result refused.
    const running = (await c.req.parseBody())["running"] === "1";
    try {
      await store.cancel(id, { reason: "dashboard", running });
    } catch (error) {
      if (error instanceof MessageNotFoundError) return notFound(c, `There is no message with id ${id}.`);
      if (error instanceof MessageRunningError || error instanceof MessageNotPendingError) return c.html(problem("409: not cancelled", error.message), 409);
      throw error;
    }
    return c.redirect(`${base}/messages?status=pending&cancelled=${id}`, 303);
  });
  app.post("/keys/:key/:action", async (c) => {
    if (!allowActions) return refuse(c);
    if (!(await checkCsrf(c))) return badCsrf(c);
    const action = c.req.param("action");
    if (action !== "redrive" && action !== "skip") return notFound(c, "Keys can be redriven or skipped.");
    try {
      await store.unblockKey(c.req.param("key"), action);
    } catch (error) {
      if (error instanceof WassalError) return c.html(problem("409: not blocked", error.message), 409);
      throw error;
    }
    return c.redirect(`${base}/`, 303);
  });

  app.notFound((c) => notFound(c, `Nothing here. The overview is at ${base}/.`));
  app.onError((error, c) => {
    if (error instanceof InvalidArgumentError) return c.html(problem("400: bad request", error.message), 400);
    // The CSRF guard refuses a cross-site form with a 403 of its own.
    if (error instanceof HTTPException) {
      return c.html(problem(`${error.status}: refused`, "A form from another site cannot act on this dashboard."), error.status);
    }
    return c.html(problem("500: the outbox could not be read", error instanceof Error ? error.message : String(error)), 500);
  });
  return { app, pulse, watch };
}

export interface StartDashboardOptions extends DashboardOptions {
  /** Default 127.0.0.1. Any address that is not loopback needs a token. */
  readonly host?: string;
  /** Default 4300; 0 picks a free port. */
  readonly port?: number;
}

export interface RunningDashboard {
  readonly url: string;
  close(): Promise<void>;
}

/**
 * What a token may be: 16 or more visible ASCII characters, no spaces. A blank token guards
 * nothing; a space or tab at either end cannot travel in an Authorization header (its value is
 * trimmed); a control or non-ASCII character cannot travel in a header at all.
 */
const TOKEN_SHAPE = /^[\x21-\x7e]{16,}$/;

/** Refuses a non-loopback host without a token, and a token that is too short, blank or holds characters a header cannot carry (before anything is opened). */
export function checkDashboardAccess(host: string, token: string | undefined): void {
  if (!isLoopback(host) && (token === undefined || token === "")) {
    throw new InvalidArgumentError(
      `the dashboard would listen on ${host}, which other machines can reach, without a token; give --token (or WASSAL_DASHBOARD_TOKEN), or listen on 127.0.0.1`,
    );
  }
  if (token === undefined) return;
  const example = "for example: openssl rand -hex 24";
  if (token.length < 16)
    throw new InvalidArgumentError(`the dashboard's token (--token or WASSAL_DASHBOARD_TOKEN) must be at least 16 characters (${example})`);
  if (!TOKEN_SHAPE.test(token)) {
    const why =
      token.trim() === ""
        ? "is blank"
        : /^\s|\s$/.test(token)
          ? "starts or ends with white space"
          : "holds a space, a control character or a non-ASCII character";
    throw new InvalidArgumentError(
      `the dashboard's token (--token or WASSAL_DASHBOARD_TOKEN) ${why}; use 16 or more visible ASCII characters without spaces (${example})`,
    );
  }
}

const DASHBOARD_NAMES = { what: "the dashboard", portFlag: "--port", hostFlag: "--host" } as const;

/**
 * Checks, before anything is opened, that the dashboard may listen there: a token for an address
 * other machines reach, and an address and port that can be bound now (tried and let go).
 */
export async function checkDashboardAddress(host: string, port: number, token: string | undefined): Promise<void> {
  checkDashboardAccess(host, token);
  await checkListenAddress(host, port, DASHBOARD_NAMES);
}

/** One shard of a sharded outbox, for its page of the dashboard. */
export interface DashboardShard {
  /** Its open store; none while its server has not answered yet (see ShardedDashboard.attach). */
  readonly store?: OutboxStore<unknown> | undefined;
  /** Shown in its pages' header: which database it is (a path, or a URL without its password). */
  readonly database: string;
}

export interface ShardedDashboardOptions extends Omit<DashboardOptions, "store" | "database" | "base" | "slot"> {
  /** The shards, in shard order (two or more). */
  readonly shards: readonly DashboardShard[];
}

/** One shard's own dashboard: its app (served under /shard/<n>), its poller and its per-message watch. */
interface ShardPart {
  readonly app: Hono;
  readonly pulse: Pulse;
  readonly watch: MessageWatch;
}

export interface ShardedDashboard {
  readonly app: Hono;
  /** Each shard's own dashboard, in shard order; undefined while the shard has no store. */
  readonly parts: readonly (ShardPart | undefined)[];
  /** Gives a shard that had none its store (its server answers now): its pages are served from then on. */
  attach(shard: number, store: OutboxStore<unknown>, database: string): ShardPart;
  /** Says that a shard without a store will not get one (it answered, and cannot be used): why, on its pages. */
  leftOut(shard: number, reason: string): void;
}

/**
 * The dashboard of a sharded outbox as a Hono app: at / each shard's counts and their sum, and
 * under /shard/<n>/ shard n's own dashboard (its messages, leases, search, timelines and actions).
 * A shard given without a store (its server did not answer yet) is shown as not answering, and
 * its pages answer 503, until it is attached.
 */
export function shardedDashboardApp(options: ShardedDashboardOptions): ShardedDashboard {
  if (!Array.isArray(options.shards) || options.shards.length < 2) {
    throw new InvalidArgumentError(
      `a sharded outbox's dashboard takes two or more shards (got ${Array.isArray(options.shards) ? options.shards.length : "none"})`,
    );
  }
  const { shards: _shards, ...common } = options;
  const databases = options.shards.map((shard) => shard.database);
  const parts: (ShardPart | undefined)[] = options.shards.map(() => undefined);
  const attach = (shard: number, store: OutboxStore<unknown>, database: string): ShardPart => {
    if (!Number.isInteger(shard) || shard < 0 || shard >= parts.length) {
      throw new InvalidArgumentError(`shard ${shard} is not one of this dashboard's shards (0 to ${parts.length - 1})`);
    }
    if (parts[shard] !== undefined) throw new InvalidArgumentError(`shard ${shard} has its store already`);
    const part = dashboardApp({ ...common, store, database: `shard ${shard}: ${database}`, base: `/shard/${shard}` });
    databases[shard] = database;
    parts[shard] = part;
    return part;
  };
  for (const [n, shard] of options.shards.entries()) if (shard.store !== undefined) attach(n, shard.store, shard.database);
  const app = guardedApp(options);
  const now = options.now ?? Date.now;
  /** Why a shard without a store was given up, by shard. */
  const givenUp = new Map<number, string>();
  const waiting = (shard: number) => {
    const reason = givenUp.get(shard);
    if (reason !== undefined) return `shard ${shard} (${databases[shard]}) cannot be served: ${reason}`;
    return `shard ${shard} (${databases[shard]}) has not answered since the dashboard started; it is tried again every 2 s`;
  };
  const leftOut = (shard: number, reason: string) => {
    if (parts[shard] === undefined) givenUp.set(shard, reason);
  };
  app.get("/", async (c) => {
    const summaries = await Promise.all(
      parts.map(async (part, shard): Promise<ShardSummary> => {
        const database = databases[shard] as string;
        if (part === undefined) return { shard, database, stats: null, error: waiting(shard) };
        try {
          const stats = await part.pulse.stats();
          // The last good reading stays in the pulse: a shard that stopped answering is said as such, not summed.
          if (part.pulse.error !== null) return { shard, database, stats: null, error: part.pulse.error };
          return { shard, database, stats, error: null };
        } catch (error) {
          return { shard, database, stats: null, error: error instanceof Error ? error.message : String(error) };
        }
      }),
    );
    return c.html(shardsPage({ actions: options.allowActions ?? false, now: new Date(now()) }, summaries));
  });
  // Each shard's own app, under its path (which it is given without the prefix); a shard not
  // attached yet answers 503.
  for (const n of parts.keys()) {
    const serve = mount((request: Request) => {
      const part = parts[n];
      if (part !== undefined) return part.app.fetch(request);
      const down = !givenUp.has(n);
      return new Response(
        String(problemPage(down ? `503: shard ${n} does not answer` : `500: shard ${n} cannot be served`, `${waiting(n)}. The other shards are at /.`)),
        { status: down ? 503 : 500, headers: { "content-type": "text/html; charset=utf-8", ...(down ? { "retry-after": "2" } : {}) } },
      );
    });
    app.all(`/shard/${n}`, serve);
    app.all(`/shard/${n}/*`, serve);
  }
  app.notFound((c) => c.html(problemPage("404: not found", "Nothing here. The shards' overview is at /, each shard's dashboard at /shard/<n>/."), 404));
  return { app, parts, attach, leftOut };
}

/** A sharded outbox's dashboard, serving; `attach` gives a shard that had none its store, and starts its pollers. */
export interface RunningShardedDashboard extends RunningDashboard {
  attach(shard: number, store: OutboxStore<unknown>, database: string): Promise<void>;
  /** Says that a shard without a store will not get one, and why (shown on its pages). */
  leftOut(shard: number, reason: string): void;
}

/** Serves the dashboard of a sharded outbox (see shardedDashboardApp), as startDashboard serves one outbox's. */
export async function startShardedDashboard(options: ShardedDashboardOptions & Pick<StartDashboardOptions, "host" | "port">): Promise<RunningShardedDashboard> {
  const host = options.host ?? "127.0.0.1";
  checkDashboardAccess(host, options.token);
  const sharded = shardedDashboardApp({ ...options, hostNames: [...(options.hostNames ?? []), host.includes(":") ? `[${host}]` : host] });
  const given = sharded.parts.filter((part): part is ShardPart => part !== undefined);
  const running = await serveDashboard(
    sharded.app,
    given.map((part) => part.pulse),
    given.map((part) => part.watch),
    host,
    options.port ?? 4300,
  );
  let closed = false;
  // Every shard's pollers, those attached later too (stopping one twice is harmless).
  const stopParts = () => {
    for (const part of sharded.parts) {
      part?.pulse.stop();
      part?.watch.stop();
    }
  };
  return {
    url: running.url,
    async attach(shard, store, database) {
      if (closed) throw new Error("the dashboard has stopped");
      await sharded.attach(shard, store, database).pulse.start();
      if (closed) stopParts(); // closed while its poller started
    },
    leftOut: sharded.leftOut,
    close() {
      closed = true;
      stopParts();
      return running.close();
    },
  };
}

/** Starts the pollers and serves the app; closing stops them and the server. */
async function serveDashboard(app: Hono, pulses: readonly Pulse[], watches: readonly MessageWatch[], host: string, port: number): Promise<RunningDashboard> {
  const stop = () => {
    for (const pulse of pulses) pulse.stop();
    for (const watch of watches) watch.stop();
  };
  await Promise.all(pulses.map((pulse) => pulse.start()));
  const server = createAdaptorServer({ fetch: app.fetch });
  try {
    await listenOn(server as Server, host, port, DASHBOARD_NAMES);
  } catch (error) {
    stop();
    throw error;
  }
  const address = server.address() as AddressInfo;
  const shown = address.family === "IPv6" ? `[${address.address}]` : address.address;
  return {
    url: `http://${shown}:${address.port}/`,
    close: () =>
      new Promise<void>((resolve) => {
        stop();
        if ("closeAllConnections" in server) server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** Serves the dashboard; refuses (InvalidArgumentError) a non-loopback host without a token, or a port it cannot use. */
export async function startDashboard(options: StartDashboardOptions): Promise<RunningDashboard> {
  const host = options.host ?? "127.0.0.1";
  checkDashboardAccess(host, options.token);
  const { app, pulse, watch } = dashboardApp({ ...options, hostNames: [...(options.hostNames ?? []), host.includes(":") ? `[${host}]` : host] });
  return serveDashboard(app, [pulse], [watch], host, options.port ?? 4300);
}
