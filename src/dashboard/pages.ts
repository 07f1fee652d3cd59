// The dashboard's HTML, written with Hono's `html` template: every value placed in a page is
// escaped by the template (a payload, header or error holding markup shows as text). The only
// unescaped inserts are the timeline SVG and the throughput chart, which escape their own text.

import type { InsertFeedLag } from "../outbox/insert-feed.js";
import { html, raw } from "hono/html";
import type { HtmlEscapedString } from "hono/utils/html";
import { renderTimelineSvg, timelineFromAudit, timelineLegend } from "../observability/timeline.js";
import { escapeHtml } from "../observability/escape-html.js";
import {
  type AuditEntry,
  type BlockedKey,
  type JsonText,
  MESSAGE_STATUSES,
  type MessagePage,
  type MessageState,
  type MessageStatus,
  type MessageText,
  type OutboxMessage,
  type OutboxStats,
} from "../outbox/types.js";
import type { MinuteThroughput } from "./pulse.js";
import { cancelReason, isCancelEntry } from "../outbox/cancels.js";

type Html = HtmlEscapedString | Promise<HtmlEscapedString>;

/** What every page needs to know about the request and the dashboard. */
export interface PageContext {
  readonly database: string;
  /** The path the dashboard is mounted under ("" at the root; "/shard/1" for a shard of a sharded outbox's). */
  readonly base: string;
  /** Null when actions are off: no form is shown. */
  readonly csrfToken: string | null;
  readonly now: Date;
}

const STATUSES: readonly MessageStatus[] = MESSAGE_STATUSES;

const time = (at: Date | null) => (at === null ? "-" : at.toISOString().replace("T", " ").replace("Z", ""));

function timeLeft(until: Date, now: Date): string {
  const ms = until.getTime() - now.getTime();
  if (ms <= 0) return `expired ${(-ms / 1000).toFixed(1)} s ago`;
  return ms < 60_000 ? `${(ms / 1000).toFixed(1)} s left` : `${Math.round(ms / 60_000)} min left`;
}

/** The page around a live fragment: the browser swaps the fragment in whenever the outbox changes. */
export function layout(title: string, ctx: PageContext, live: { readonly fragment: string; readonly events: string }, body: Html): Html {
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${title} · Wassal</title>
<link rel="stylesheet" href="/assets/dashboard.css">
<script src="/assets/live.js" defer></script>
</head>
<body>
<header>
  <a class="brand" href="${ctx.base}/">Wassal outbox</a>
  <nav>${ctx.base === "" ? "" : html`<a href="/">All shards</a> `}<a href="${ctx.base}/">Overview</a> <a href="${ctx.base}/messages">Messages</a></nav>
  <span class="db">${ctx.database}</span>
  <span class="mode">${ctx.csrfToken === null ? "read-only" : "actions allowed"}</span>
  <form class="search" method="get" action="${ctx.base}/search" role="search">
    <input name="q" placeholder="message id, dedupe key or ordering key" aria-label="search" maxlength="255" required>
    <button type="submit">Find</button>
  </form>
</header>
<main id="live" data-fragment="${live.fragment}" data-events="${live.events}">${body}</main>
<footer><span id="live-status">live updates: connecting</span></footer>
</body>
</html>`;
}

function statusBadge(status: MessageStatus): Html {
  return html`<span class="status status-${status}">${status}</span>`;
}

function messageLink(ctx: Pick<PageContext, "base">, message: Pick<OutboxMessage, "id">): Html {
  return html`<a class="message-link" href="${ctx.base}/messages/${message.id}">#${message.id}</a>`;
}

function actionForm(ctx: PageContext, path: string, label: string, running = false): Html {
  if (ctx.csrfToken === null) return html``;
  return html`<form class="action" method="post" action="${ctx.base}${path}"><input type="hidden" name="csrf" value="${ctx.csrfToken}">${running ? html`<input type="hidden" name="running" value="1">` : html``}<button type="submit">${label}</button></form>`;
}

/** A message's action: cancel a pending one, cancel a running one (its run aborted), redrive a dead one. */
function messageAction(ctx: PageContext, m: { readonly id: string; readonly status: string }, cancelLabel: string): Html {
  if (m.status === "pending") return actionForm(ctx, `/messages/${m.id}/cancel`, cancelLabel);
  if (m.status === "processing") return actionForm(ctx, `/messages/${m.id}/cancel`, `${cancelLabel} (abort its run)`, true);
  if (m.status === "dead") return actionForm(ctx, `/messages/${m.id}/redrive`, "Redrive");
  return html``;
}

/** Processed and dead messages per minute, as bars (SVG). */
function throughputChart(minutes: readonly MinuteThroughput[]): Html {
  const width = 560;
  const height = 120;
  const max = Math.max(1, ...minutes.map((m) => m.processed + m.dead));
  const step = width / Math.max(minutes.length, 1);
  const bars = minutes
    .map((m, n) => {
      const x = n * step + 4;
      const ph = ((height - 28) * m.processed) / max;
      const dh = ((height - 28) * m.dead) / max;
      const label = `${m.from.toISOString().slice(11, 16)}: ${m.processed} processed, ${m.dead} dead${m.whole ? "" : " (at least: partly watched, or rows were purged or redriven)"}`;
      return (
        `<g class="minute" data-from="${m.from.toISOString()}" data-processed="${m.processed}" data-dead="${m.dead}"><title>${escapeHtml(label)}</title>` +
        `<rect x="${x.toFixed(1)}" y="${(height - 20 - ph).toFixed(1)}" width="${(step - 8).toFixed(1)}" height="${ph.toFixed(1)}" fill="#2e9a5b"${m.whole ? "" : ' fill-opacity="0.5"'}/>` +
        `<rect x="${x.toFixed(1)}" y="${(height - 20 - ph - dh).toFixed(1)}" width="${(step - 8).toFixed(1)}" height="${dh.toFixed(1)}" fill="#c62828"/>` +
        `<text x="${(x + (step - 8) / 2).toFixed(1)}" y="${height - 6}" font-size="10" text-anchor="middle" fill="#5b6472">${m.from.toISOString().slice(11, 16)}</text></g>`
      );
    })
    .join("");
  const last = minutes.at(-1);
  return html`<figure class="throughput"><svg class="chart" role="img" aria-label="messages finished per minute" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="system-ui, sans-serif">${raw(bars)}</svg>
<figcaption>Messages finished per minute (green processed, red dead), UTC, since the dashboard started watching; a pale bar is a lower bound (the minute was partly watched, or rows were purged or redriven in it); this minute so far: ${last?.processed ?? 0} processed, ${last?.dead ?? 0} dead.</figcaption></figure>`;
}

/** Bytes as people read them (1,024 each step). */
function bytes(n: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${unit === 0 ? value : value.toFixed(1)} ${units[unit]}`;
}

/** The WAL relay's slot: the log it holds, and whether a relay streams from it. */
function slotSection(slot: { readonly name: string; readonly lag: InsertFeedLag | null } | { readonly name: string; readonly error: string }): Html {
  const body =
    "error" in slot
      ? html`<p class="error" role="alert">The slot could not be read: ${slot.error}</p>`
      : slot.lag === null
        ? html`<p class="error" role="alert">There is no replication slot ${slot.name}: a WAL relay makes it when it starts (it then claims what was inserted meanwhile from the table).</p>`
        : html`<section class="counts slot" aria-label="replication slot ${slot.name}">
  <div class="count" data-slot-lag="${slot.lag.bytes}"><span class="n">${bytes(slot.lag.bytes)}</span><span class="label">write-ahead log held</span></div>
  <div class="count" data-slot-active="${slot.lag.active ? "yes" : "no"}"><span class="n">${slot.lag.active ? "streaming" : "no relay"}</span><span class="label">relay</span></div>
</section>${slot.lag.active ? "" : html`<p class="note">No relay streams from this slot: the server keeps the log for it until one does (or the slot is dropped).</p>`}`;
  return html`<section><h2>Replication slot ${slot.name}</h2>${body}</section>`;
}

/** The overview: counts, throughput, leases per owner, blocked keys and dead messages. */
export function overviewFragment(
  ctx: PageContext,
  data: {
    readonly stats: OutboxStats;
    readonly throughput: readonly MinuteThroughput[];
    readonly processing: readonly MessageState[];
    readonly processingLimit: number;
    readonly dead: readonly MessageState[];
    readonly deadLimit: number;
    readonly blocked: readonly BlockedKey[];
    readonly pollError: string | null;
    /** The WAL relay's replication slot, when the dashboard watches one (--slot): its lag, null when the slot does not exist, or why it could not be read. */
    readonly slot?: { readonly name: string; readonly lag: InsertFeedLag | null } | { readonly name: string; readonly error: string };
  },
): Html {
  const { stats } = data;
  const owners = new Map<string, MessageState[]>();
  for (const m of data.processing) owners.set(m.lockedBy ?? "?", [...(owners.get(m.lockedBy ?? "?") ?? []), m]);
  return html`
${data.pollError === null ? "" : html`<p class="error" role="alert">The outbox could not be read: ${data.pollError}</p>`}
<section class="counts" aria-label="messages per state">
  ${STATUSES.map((s) => html`<div class="count count-${s}" data-status="${s}"><span class="n">${stats.counts[s]}</span><span class="label">${s}</span></div>`)}
  <div class="count"><span class="n">${stats.expiredLeases}</span><span class="label">expired leases</span></div>
  <div class="count"><span class="n">${stats.oldestPendingCreatedAt === null ? "-" : `${Math.max(0, Math.round((stats.now.getTime() - stats.oldestPendingCreatedAt.getTime()) / 1000))} s`}</span><span class="label">oldest pending</span></div>
</section>
<section><h2>Throughput</h2>${throughputChart(data.throughput)}</section>
${data.slot === undefined ? "" : slotSection(data.slot)}
<section>
<h2>Leases held, per owner</h2>
${
  owners.size === 0
    ? html`<p class="empty">No message is being processed.</p>`
    : html`<table class="leases"><thead><tr><th>owner</th><th>leases</th><th>next to run out</th><th>messages</th></tr></thead><tbody>
${[...owners].map(([owner, held]) => {
  const soonest = held.reduce((a, b) => ((a.lockedUntil?.getTime() ?? 0) <= (b.lockedUntil?.getTime() ?? 0) ? a : b));
  return html`<tr data-owner="${owner}"><td>${owner}</td><td>${held.length}</td><td>${soonest.lockedUntil === null ? "-" : timeLeft(soonest.lockedUntil, ctx.now)}</td><td>${held.slice(0, 8).map((m) => html`${messageLink(ctx, m)} `)}${held.length > 8 ? `and ${held.length - 8} more` : ""}</td></tr>`;
})}
</tbody></table>${data.processing.length >= data.processingLimit ? html`<p class="note">Showing the first ${data.processingLimit} processing messages.</p>` : ""}`
}
</section>
<section>
<h2>Blocked ordering keys</h2>
${
  data.blocked.length === 0
    ? html`<p class="empty">No key is blocked by a dead message.</p>`
    : html`<table class="blocked"><thead><tr><th>key</th><th>dead message</th><th>waiting</th><th>died</th><th>last error</th><th></th></tr></thead><tbody>
${data.blocked.map(
  (b) =>
    html`<tr data-key="${b.key}"><td>${b.key}</td><td>${messageLink(ctx, { id: b.messageId })} ${b.type}</td><td>${b.waiting}</td><td>${time(b.diedAt)}</td><td class="error-text">${b.lastError ?? ""}</td><td>${actionForm(ctx, `/keys/${encodeURIComponent(b.key)}/redrive`, "Redrive its message")}${actionForm(ctx, `/keys/${encodeURIComponent(b.key)}/skip`, "Skip it")}</td></tr>`,
)}
</tbody></table>`
}
</section>
<section>
<h2>Dead messages</h2>
${
  data.dead.length === 0
    ? html`<p class="empty">No dead message.</p>`
    : html`<table class="dead"><thead><tr><th>message</th><th>type</th><th>key</th><th>attempts</th><th>died</th><th>last error</th><th></th></tr></thead><tbody>
${data.dead.map(
  (m) =>
    html`<tr data-message="${m.id}"><td>${messageLink(ctx, m)}</td><td>${m.type}</td><td>${m.key ?? ""}</td><td>${m.attempts}</td><td>${time(m.availableAt)}</td><td class="error-text">${m.lastError ?? ""}</td><td>${actionForm(ctx, `/messages/${m.id}/redrive`, "Redrive")}</td></tr>`,
)}
</tbody></table>${data.dead.length >= data.deadLimit ? html`<p class="note">Showing the ${data.deadLimit} oldest dead messages.</p>` : ""}`
}
</section>`;
}

/** Search results: messages whose id, dedupe key or ordering key matched. */
export function searchFragment(ctx: PageContext, query: string, found: readonly OutboxMessage[], limit: number): Html {
  return html`<section><h2>Messages matching “${query}”</h2>
${
  found.length === 0
    ? html`<p class="empty">No message has that id, dedupe key or ordering key.</p>`
    : html`<table class="results"><thead><tr><th>message</th><th>status</th><th>type</th><th>dedupe key</th><th>key</th><th>created</th></tr></thead><tbody>
${found.map((m) => html`<tr data-message="${m.id}"><td>${messageLink(ctx, m)}</td><td>${statusBadge(m.status)}</td><td>${m.type}</td><td>${m.dedupeKey ?? ""}</td><td>${m.key ?? ""}</td><td>${time(m.createdAt)}</td></tr>`)}
</tbody></table>${found.length >= limit ? html`<p class="note">Showing the first ${limit}.</p>` : ""}`
}</section>`;
}

/** What the messages page lists: its filters, order and page size as the query gave them (absent: any, newest, 50). */
export interface ListQuery {
  readonly status?: MessageStatus;
  readonly type?: string;
  readonly key?: string;
  readonly order: "newest" | "oldest";
  readonly limit: number;
}

/** The messages page's address with these filters and a cursor (the filters kept, the defaults left out). */
export function listHref(base: string, query: ListQuery, cursor: { readonly after?: string; readonly before?: string } = {}): string {
  const params = new URLSearchParams();
  if (query.status !== undefined) params.set("status", query.status);
  if (query.type !== undefined) params.set("type", query.type);
  if (query.key !== undefined) params.set("key", query.key);
  if (query.order !== "newest") params.set("order", query.order);
  if (query.limit !== 50) params.set("limit", String(query.limit));
  if (cursor.after !== undefined) params.set("after", cursor.after);
  if (cursor.before !== undefined) params.set("before", cursor.before);
  const search = params.toString();
  return search === "" ? `${base}/messages` : `${base}/messages?${search}`;
}

/** The messages page: a filter form, one page of messages (each linking to its page), and links to the next and previous pages. */
export function messagesFragment(ctx: PageContext, query: ListQuery, page: MessagePage, cancelled: string | null): Html {
  const option = (value: string, label: string, chosen: string | undefined) =>
    html`<option value="${value}"${chosen === value ? raw(" selected") : ""}>${label}</option>`;
  return html`<section class="messages-list">
<h1>Messages</h1>
${cancelled === null ? "" : html`<p class="notice" role="status">Message #${cancelled} was cancelled (deleted; it will not be delivered).</p>`}
<form class="filters" method="get" action="${ctx.base}/messages">
  <label>status <select name="status">${option("", "any", query.status ?? "")}${STATUSES.map((s) => option(s, s === "processing" ? "processing (running)" : s, query.status))}</select></label>
  <label>type <input name="type" value="${query.type ?? ""}" maxlength="200"></label>
  <label>ordering key <input name="key" value="${query.key ?? ""}" maxlength="255"></label>
  <label>order <select name="order">${option("newest", "newest first", query.order)}${option("oldest", "oldest first", query.order)}</select></label>
  <label>per page <input name="limit" type="number" min="1" max="500" value="${query.limit}"></label>
  <button type="submit">List</button>
</form>
${
  page.messages.length === 0
    ? html`<p class="empty">No message matches.</p>`
    : html`<table class="messages"><thead><tr><th>message</th><th>status</th><th>type</th><th>key</th><th>created</th><th>attempts</th><th>owner</th><th></th></tr></thead><tbody>
${page.messages.map(
  (m) =>
    html`<tr data-message="${m.id}" data-status="${m.status}"><td>${messageLink(ctx, m)}</td><td>${statusBadge(m.status)}</td><td>${m.type}</td><td>${m.key ?? ""}${m.keySeq === null ? "" : ` #${m.keySeq}`}</td><td>${time(m.createdAt)}</td><td>${m.attempts}</td><td>${m.lockedBy ?? ""}</td><td>${messageAction(ctx, m, "Cancel")}</td></tr>`,
)}
</tbody></table>`
}
<nav class="pages">
${page.previous === null ? html`<span class="page-none">Previous</span>` : html`<a class="page-previous" rel="prev" href="${listHref(ctx.base, query, { before: page.previous })}">Previous</a>`}
${page.next === null ? html`<span class="page-none">Next</span>` : html`<a class="page-next" rel="next" href="${listHref(ctx.base, query, { after: page.next })}">Next</a>`}
</nav>
</section>`;
}

const AUDIT_LABEL: Record<AuditEntry["action"], string> = {
  claim: "claimed",
  complete: "completed",
  retry: "failed, retry scheduled",
  dead: "failed, dead-lettered",
  release: "released",
  redrive: "redriven",
  refused: "REFUSED (stale lease)",
};

function auditDetail(entry: AuditEntry): string {
  if (entry.action === "claim") {
    return entry.previousStatus === "processing"
      ? `reclaimed from ${entry.previousOwner ?? "?"} (lease ran out ${time(entry.previousLockedUntil)})`
      : `from ${entry.previousStatus ?? "pending"}`;
  }
  if (entry.action === "refused")
    return `${entry.operation ?? "write"} refused; held by ${entry.previousOwner ?? "nobody"} (${entry.previousStatus ?? "gone"})`;
  return "";
}

/**
 * How much of a payload or of headers a message page shows: the first 65,536 characters of the
 * stored JSON text (escaped, at most about 400 kB of HTML each); the rest is a download away.
 */
export const PREVIEW_CHARS = 65_536;

/** The payload and headers a message page shows: each at most PREVIEW_CHARS characters. */
export type MessagePreview = Pick<MessageText, "payload" | "headers">;

const decimal = new Intl.NumberFormat("en-US");

/** "11,277,847 bytes (11.3 MB)". */
export function sizeText(bytes: number): string {
  const units: [number, string][] = [
    [1e9, "GB"],
    [1e6, "MB"],
    [1e3, "kB"],
  ];
  const unit = units.find(([size]) => bytes >= size);
  return `${decimal.format(bytes)} bytes${unit === undefined ? "" : ` (${(bytes / unit[0]).toFixed(1)} ${unit[1]})`}`;
}

/** How deeply the JSON text nests (outside strings): pretty-printing costs depth × length. */
function nesting(text: string): number {
  let depth = 0;
  let deepest = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 92)
        i++; // a backslash: skip what it escapes
      else if (c === 34) inString = false;
    } else if (c === 34) inString = true;
    else if (c === 123 || c === 91) deepest = Math.max(deepest, ++depth);
    else if (c === 125 || c === 93) depth--;
  }
  return deepest;
}

/** A whole JSON text, indented for reading when that stays small; as stored otherwise. */
function readable(text: string): string {
  if (nesting(text) > 32) return text;
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

/** What the page says above a payload or headers it shows: the size, how much is shown, and the download. */
function excerptNote(base: string, messageId: string, what: "payload" | "headers", json: JsonText): Html {
  const link = html`<a class="download" href="${base}/messages/${messageId}/${what}" download>Download the whole ${what}</a>`;
  return json.cut
    ? html`<p class="note cut" data-bytes="${json.bytes}">Showing the first ${decimal.format(json.text.length)} characters of ${sizeText(json.bytes)} of JSON. ${link} (JSON, as stored).</p>`
    : html`<p class="note" data-bytes="${json.bytes}">${sizeText(json.bytes)} of JSON. ${link}.</p>`;
}

function headersSection(base: string, messageId: string, headers: JsonText): Html {
  if (headers.cut) return html`${excerptNote(base, messageId, "headers", headers)}<pre class="headers-text">${headers.text}</pre>`;
  let parsed: Record<string, string>;
  try {
    parsed = JSON.parse(headers.text) as Record<string, string>;
  } catch {
    return html`<pre class="headers-text">${headers.text}</pre>`;
  }
  return Object.keys(parsed).length === 0
    ? html`<p class="empty">None.</p>`
    : html`<table class="headers"><tbody>${Object.entries(parsed).map(([k, v]) => html`<tr><th>${k}</th><td>${v}</td></tr>`)}</tbody></table>`;
}

function payloadSection(base: string, messageId: string, payload: JsonText): Html {
  return html`${excerptNote(base, messageId, "payload", payload)}<pre class="payload">${payload.cut ? payload.text : readable(payload.text)}</pre>`;
}

/** A message's audit trail as a table (or a note that it has none). */
function auditTable(trail: readonly AuditEntry[]): Html {
  return trail.length === 0
    ? html`<p class="empty">No audit rows for this message.</p>`
    : html`<table class="audit"><thead><tr><th>at</th><th>action</th><th>owner</th><th>token</th><th>detail</th></tr></thead><tbody>
${trail.map((e) => html`<tr class="audit-${e.action}" data-action="${e.action}" data-owner="${e.owner}" data-token="${e.token}" data-at="${e.at.toISOString()}"><td>${time(e.at)}</td><td>${AUDIT_LABEL[e.action]}</td><td>${e.owner}</td><td>${e.token}</td><td>${auditDetail(e)}</td></tr>`)}
</tbody></table>`;
}

/**
 * A message whose row is gone but whose audit trail is not (cancelled, completed with onComplete
 * "delete", or purged): what the trail says became of it, its ownership timeline and the trail.
 */
/** The audit row of a message's cancel (store.cancel writes it as dead, by "cancel" or "cancel: <reason>"), if any. */
const cancelOf = (trail: readonly AuditEntry[]) => trail.find(isCancelEntry);

/** What a cancel did, in a sentence: when, why, and whose run it cut short. */
function cancelSentence(cancel: AuditEntry): string {
  const reason = cancelReason(cancel.owner);
  const why = reason === null ? "" : ` (${reason})`;
  const run =
    cancel.previousStatus === "processing"
      ? `, while ${cancel.previousOwner ?? "a worker"} ran it: that run's result was refused`
      : ", before any worker ran it";
  return `It was cancelled at ${time(cancel.at)}${why}${run}.`;
}

export function goneMessageFragment(ctx: PageContext, messageId: string, trail: readonly AuditEntry[]): Html {
  const last = trail.at(-1);
  const cancel = cancelOf(trail);
  const fate =
    cancel !== undefined
      ? cancelSentence(cancel)
      : last?.action === "complete"
        ? `It was completed at ${time(last.at)} by ${last.owner}, and its row deleted (onComplete "delete"), or purged since.`
        : "Its row was deleted (purged).";
  const timeline = timelineFromAudit(messageId, trail, undefined, ctx.now);
  return html`<section class="message gone" data-message="${messageId}" data-status="gone">
<h1>Message #${messageId} <span class="status status-gone">gone</span></h1>
<p class="notice" role="status">This message is no longer in the outbox. ${fate}</p>
<h2>Ownership timeline</h2>
<figure class="timeline-figure">${raw(renderTimelineSvg(timeline))}${raw(timelineLegend())}</figure>
<h2>Audit trail</h2>
${auditTable(trail)}
</section>`;
}

/** One message: its fields, its ownership timeline, its audit trail, and the start of its headers and payload. */
export function messageFragment(ctx: PageContext, message: MessageState, preview: MessagePreview, trail: readonly AuditEntry[], auditing: string | null): Html {
  const timeline = timelineFromAudit(message.id, trail, message, ctx.now);
  const fields: [string, Html | string][] = [
    ["status", statusBadge(message.status)],
    ["type", message.type],
    ["dedupe key", message.dedupeKey ?? "-"],
    ["ordering key", message.key ?? "-"],
    ["destination", message.destination ?? "-"],
    ["attempts", String(message.attempts)],
    ["lease token", String(message.leaseToken)],
    ["owner", message.lockedBy ?? "-"],
    ["lease until", message.lockedUntil === null ? "-" : `${time(message.lockedUntil)} (${timeLeft(message.lockedUntil, ctx.now)})`],
    ["created", time(message.createdAt)],
    [message.status === "dead" ? "died" : "available", time(message.availableAt)],
    [message.status === "cancelled" ? "cancelled" : "processed", time(message.processedAt)],
  ];
  const cancel = message.status === "cancelled" ? cancelOf(trail) : undefined;
  return html`<section class="message" data-message="${message.id}" data-status="${message.status}">
<h1>Message #${message.id} ${statusBadge(message.status)}</h1>
${cancel === undefined ? "" : html`<p class="notice" role="status">${cancelSentence(cancel)}</p>`}
${message.status === "dead" ? actionForm(ctx, `/messages/${message.id}/redrive`, "Redrive this message") : messageAction(ctx, message, "Cancel this message")}
<dl class="fields">${fields.map(([name, value]) => html`<dt>${name}</dt><dd>${value}</dd>`)}</dl>
${message.lastError === null ? "" : html`<h2>Last error</h2><pre class="last-error">${message.lastError}</pre>`}
<h2>Ownership timeline</h2>
${auditing === null ? html`<figure class="timeline-figure">${raw(renderTimelineSvg(timeline))}${raw(timelineLegend())}</figure>` : html`<p class="note">${auditing}</p>`}
<h2>Audit trail</h2>
${auditTable(trail)}
<h2>Headers</h2>
${headersSection(ctx.base, message.id, preview.headers)}
<h2>Payload</h2>
${payloadSection(ctx.base, message.id, preview.payload)}
</section>`;
}

/**
 * A page for what is not there (404) or not allowed (401, 403), saying what to do. Its link goes
 * back to the overview of the dashboard it is part of (`base`: a shard's, under a sharded one).
 */
export function problemPage(title: string, detail: string, base = ""): Html {
  return html`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${title} · Wassal</title><link rel="stylesheet" href="/assets/dashboard.css"></head>
<body><main class="problem"><h1>${title}</h1><p>${detail}</p><p><a href="${base}/">Back to the overview</a></p></main></body></html>`;
}

/** One shard as the sharded outbox's overview shows it: its counts, or why they could not be read. */
export interface ShardSummary {
  readonly shard: number;
  readonly database: string;
  readonly stats: OutboxStats | null;
  readonly error: string | null;
}

/** The overview of a sharded outbox: each shard's counts and their sum, each shard linking to its own dashboard. */
export function shardsPage(ctx: { readonly actions: boolean; readonly now: Date }, shards: readonly ShardSummary[]): Html {
  const total = (status: MessageStatus) => shards.reduce((sum, s) => sum + (s.stats?.counts[status] ?? 0), 0);
  const unread = shards.filter((s) => s.stats === null).length;
  const oldest = (s: ShardSummary) =>
    s.stats?.oldestPendingCreatedAt == null ? "-" : `${Math.max(0, Math.round((ctx.now.getTime() - s.stats.oldestPendingCreatedAt.getTime()) / 1000))} s`;
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="refresh" content="5">
<title>Sharded outbox · Wassal</title>
<link rel="stylesheet" href="/assets/dashboard.css">
</head>
<body>
<header>
  <a class="brand" href="/">Wassal outbox</a>
  <nav>${shards.map((s) => html`<a href="/shard/${s.shard}/">Shard ${s.shard}</a> `)}</nav>
  <span class="db">${shards.length} shards</span>
  <span class="mode">${ctx.actions ? "actions allowed" : "read-only"}</span>
</header>
<main>
<section class="counts" aria-label="messages per state, all shards">
  ${STATUSES.map((s) => html`<div class="count count-${s}" data-status="${s}"><span class="n">${total(s)}</span><span class="label">${s}</span></div>`)}
</section>
${unread === 0 ? "" : html`<p class="error" role="alert">${unread} of ${shards.length} shards could not be read: their counts are left out of the sums.</p>`}
<section><h2>Shards</h2>
<table class="shards"><thead><tr><th>shard</th><th>database</th>${STATUSES.map((s) => html`<th>${s}</th>`)}<th>expired leases</th><th>oldest pending</th></tr></thead><tbody>
${shards.map(
  (s) =>
    html`<tr data-shard="${s.shard}"><td><a href="/shard/${s.shard}/">Shard ${s.shard}</a></td><td>${s.database}</td>${
      s.stats === null
        ? html`<td colspan="${STATUSES.length + 2}" class="error-text">could not be read: ${s.error ?? "unknown"}</td>`
        : html`${STATUSES.map((status) => html`<td data-status="${status}">${s.stats?.counts[status]}</td>`)}<td>${s.stats.expiredLeases}</td><td>${oldest(s)}</td>`
    }</tr>`,
)}
</tbody></table>
<p class="note">Each shard's page has its messages, leases, dead messages, search and timelines. This page reloads every 5 s.</p>
</section>
</main>
</body>
</html>`;
}
