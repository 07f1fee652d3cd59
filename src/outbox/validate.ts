// Argument checks shared by every store, so each one rejects bad input with the same words.

import { InvalidArgumentError, LeaseLostError } from "./errors.js";
import { isPlainObject, storableText, unstorableText } from "./payload.js";
import { MESSAGE_STATUSES, ON_COMPLETE_MODES, type ClaimOptions, type Lease, type LeaseLost, type MessageStatus, type OnComplete } from "./types.js";

export const MAX_CLAIM_LIMIT = 1000;
/** The most messages one enqueueMany takes: they go to the database as one statement with one parameter. */
export const MAX_ENQUEUE_MANY = 10_000;
/** The longest retry delay `fail` accepts: one year (longer would only postpone a decision to mark the message dead). */
export const MAX_RETRY_DELAY_MS = 365 * 24 * 3600 * 1000;
/** The highest priority: a head start of one day (priorities are whole seconds, 0 the lowest). */
export const MAX_PRIORITY = 86_400;
/** The largest message id: both stores number messages with signed 64-bit integers. */
const MAX_MESSAGE_ID = 9_223_372_036_854_775_807n;
/** The range of times a message may be scheduled at: what every store's time column and a JS Date can hold. */
const EARLIEST_TIME = Date.parse("0001-01-01T00:00:00.000Z"); // (Date.UTC would read year 1 as 1901)
const LATEST_TIME = Date.UTC(9999, 11, 31, 23, 59, 59, 999);

/** A value as an error message shows it (JSON where it has a JSON form, so strings show their quotes). */
export function shown(value: unknown): string {
  if (typeof value === "bigint") return `${value}n`;
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}

/** An options or request object that a caller must pass: a clear error instead of a TypeError on its first field. */
export function checkObject<T>(value: T, what: string): NonNullable<T> {
  if (typeof value !== "object" || value === null) {
    throw new InvalidArgumentError(`${what} must be an object (got ${value === null ? "null" : typeof value})`);
  }
  return value as NonNullable<T>;
}

/**
 * An options object with only the keys it may have: a misspelt one (`timeZone` for `timezone`)
 * would otherwise be ignored, and its default silently used.
 */
export function checkKnownKeys<T>(value: T, what: string, keys: readonly string[]): NonNullable<T> {
  const object = checkObject(value, `${what} ({ ${keys.join(", ")} })`);
  for (const key of Object.keys(object)) {
    if (!keys.includes(key)) {
      const near = keys.find((known) => known.toLowerCase() === key.toLowerCase());
      throw new InvalidArgumentError(`${what} has no ${shown(key)}${near === undefined ? "" : ` (did you mean ${shown(near)}?)`}; it takes ${keys.join(", ")}`);
    }
  }
  return object;
}

/** A string stored in a text column: non-empty, bounded, and storable on every store (no NUL, no lone surrogate). */
export function checkText(value: unknown, what: string, maxLength: number): string {
  if (typeof value !== "string" || value.trim() === "" || value.length > maxLength) {
    throw new InvalidArgumentError(`${what} must be a non-empty string of at most ${maxLength} characters (got ${shown(value)})`);
  }
  const why = unstorableText(value);
  if (why) throw new InvalidArgumentError(`${what} ${why}; no store can hold it`);
  return value;
}

/** A message id as the stores issue them: a decimal whole number from 1 to 2^63 - 1. */
export function checkMessageId(messageId: unknown): string {
  // Only a 19-digit id can pass 2^63 - 1: the BigInt is made for those alone (this runs on every lease operation).
  if (typeof messageId !== "string" || !/^[1-9][0-9]{0,18}$/.test(messageId) || (messageId.length === 19 && BigInt(messageId) > MAX_MESSAGE_ID)) {
    throw new InvalidArgumentError(`a message id must be a whole number from 1 to ${MAX_MESSAGE_ID} written in decimal (got ${shown(messageId)})`);
  }
  return messageId;
}

/** True when `text` is a message id as the stores issue them. */
export function isMessageId(text: string): boolean {
  return /^[1-9][0-9]{0,18}$/.test(text) && (text.length < 19 || BigInt(text) <= MAX_MESSAGE_ID);
}

/** What findMessages looks for: a message id, dedupe key or ordering key. */
export function checkSearchText(text: unknown): string {
  return checkText(text, "the text to find (a message id, dedupe key or ordering key)", 255);
}

export function checkDedupeKey(key: unknown): string {
  return checkText(key, "dedupeKey", 1000);
}

/** The longest ordering key and destination. */
export const MAX_KEY_LENGTH = 255;
export const MAX_HEADERS = 64;
const MAX_HEADER_NAME_LENGTH = 100;
const MAX_HEADER_VALUE_LENGTH = 4096;
/** An HTTP token (RFC 9110): what a header name may be, so headers can travel as HTTP, AMQP or NATS headers unchanged. */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** Control characters other than tab: a value carrying CR or LF could forge a header on the wire. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is what this pattern is for
const CONTROL = /[\u0000-\u0008\u000a-\u001f\u007f]/;

export function checkOrderingKey(key: unknown): string {
  return checkText(key, "key (the ordering key)", MAX_KEY_LENGTH);
}

/** An id a consumer received (the broker's message id), for the inbox. */
export function checkInboxId(id: unknown): string {
  return checkText(id, "inbox message id", MAX_KEY_LENGTH);
}

/** A message's number in its key's order: a whole number from 1. */
export function checkKeySeq(seq: unknown): number {
  if (typeof seq !== "number" || !Number.isSafeInteger(seq) || seq < 1)
    throw new InvalidArgumentError(`keySeq (the message's number in its key's order) must be a whole number >= 1 (got ${shown(seq)})`);
  return seq;
}

/** Where inbox ids come from ("" by default): any string without NUL or lone surrogates, at most 255 characters. */
export function checkInboxSource(source: unknown): string {
  if (source === "") return source;
  return checkText(source, "inbox source", MAX_KEY_LENGTH);
}

export function checkDestination(destination: unknown): string {
  const text = checkText(destination, "destination", MAX_KEY_LENGTH);
  if (CONTROL.test(text)) throw new InvalidArgumentError(`destination contains a control character (got ${shown(text)})`);
  return text;
}

/** Headers as stored: JSON text of a string-to-string map, or null when there are none. */
export function checkHeaders(headers: unknown): string | null {
  if (!isPlainObject(headers)) {
    throw new InvalidArgumentError(`headers must be a plain object of string values (got ${Array.isArray(headers) ? "an array" : shown(headers)})`);
  }
  const entries = Object.entries(headers);
  if (entries.length > MAX_HEADERS) throw new InvalidArgumentError(`at most ${MAX_HEADERS} headers are allowed (got ${entries.length})`);
  for (const [name, value] of entries) {
    const problem = headerProblem(name, value);
    if (problem !== null) throw new InvalidArgumentError(problem);
  }
  return entries.length === 0 ? null : JSON.stringify(headers);
}

/** What is wrong with one header, or null when nothing is. */
function headerProblem(name: string, value: unknown): string | null {
  if (name.length > MAX_HEADER_NAME_LENGTH || !TOKEN.test(name)) {
    return `header name ${shown(name)} is not a token: use 1 to ${MAX_HEADER_NAME_LENGTH} letters, digits or any of !#$%&'*+-.^_\`|~ (for example x-correlation-id)`;
  }
  if (typeof value !== "string") return `header ${name} must be a string (got ${shown(value)})`;
  if (value.length > MAX_HEADER_VALUE_LENGTH) return `header ${name} is longer than ${MAX_HEADER_VALUE_LENGTH} characters (${value.length})`;
  if (CONTROL.test(value)) return `header ${name} contains a control character (only tab is allowed): ${shown(value)}`;
  const why = unstorableText(value);
  return why ? `header ${name} ${why}; no store can hold it` : null;
}

/**
 * The caller's headers plus those of `added` (trace context) that the caller did not set (names
 * compared without regard to case), that are valid headers, and that fit within MAX_HEADERS: an
 * added header never overwrites the caller's, and never makes a message invalid. Headers that are
 * not a plain object are returned as they are, for checkHeaders to refuse.
 */
export function withAddedHeaders(headers: unknown, added: Readonly<Record<string, string>>): unknown {
  const entries = Object.entries(added);
  if (entries.length === 0 || (headers != null && !isPlainObject(headers))) return headers;
  const merged: Record<string, unknown> = headers == null ? {} : { ...headers };
  const names = Object.keys(merged);
  const taken = new Set(names.map((name) => name.toLowerCase()));
  let count = names.length;
  for (const [name, value] of entries) {
    if (count >= MAX_HEADERS) break;
    const lower = name.toLowerCase();
    if (taken.has(lower) || headerProblem(name, value) !== null) continue;
    merged[name] = value;
    taken.add(lower);
    count += 1;
  }
  return merged;
}

/** A time a message is scheduled at: a valid Date that every store can hold. */
export function checkTime(value: unknown, what: string): Date {
  if (!(value instanceof Date) || Number.isNaN(value.getTime())) {
    throw new InvalidArgumentError(`${what} must be a valid Date (got ${value instanceof Date ? "an invalid Date" : typeof value})`);
  }
  if (value.getTime() < EARLIEST_TIME || value.getTime() > LATEST_TIME) {
    throw new InvalidArgumentError(`${what} must lie between the years 1 and 9999 (got ${value.toISOString()})`);
  }
  return value;
}

export function checkOwner(owner: unknown): string {
  return checkText(owner, "owner", 200);
}

export function checkLeaseMs(leaseMs: unknown): number {
  if (typeof leaseMs !== "number" || !Number.isInteger(leaseMs) || leaseMs <= 0 || leaseMs > 2_147_483_647) {
    throw new InvalidArgumentError(`leaseMs must be a positive whole number of milliseconds (got ${shown(leaseMs)})`);
  }
  return leaseMs;
}

export function checkClaimOptions(options: ClaimOptions): ClaimOptions {
  const { limit } = checkObject(options, "claim options ({ limit, leaseMs })");
  if (typeof limit !== "number" || !Number.isInteger(limit) || limit < 1 || limit > MAX_CLAIM_LIMIT) {
    throw new InvalidArgumentError(`limit must be a whole number from 1 to ${MAX_CLAIM_LIMIT} (got ${shown(limit)})`);
  }
  const leaseMs = checkLeaseMs(options.leaseMs);
  return options.types === undefined ? { limit, leaseMs } : { limit, leaseMs, types: checkTypes(options.types) };
}

/** A list of message types to claim: 1 to 1000 valid types. */
export function checkTypes(types: unknown): readonly string[] {
  if (!Array.isArray(types) || types.length === 0 || types.length > 1000) {
    throw new InvalidArgumentError(`types must be a list of 1 to 1000 message types (got ${shown(types)})`);
  }
  return [...new Set(types.map((type) => checkMessageType(type)))];
}

/** A lease handed back to a store: its token must be one a claim could have issued. */
export function checkLease(lease: Lease): Lease {
  checkObject(lease, "lease");
  checkMessageId(lease.messageId);
  checkOwner(lease.owner);
  const { key } = checkObject(lease.message, "lease.message");
  if (key !== null && typeof key !== "string")
    throw new InvalidArgumentError(`lease.message.key must be the message's ordering key or null (got ${shown(key)}); pass the lease a claim returned`);
  if (typeof lease.token !== "number" || !Number.isSafeInteger(lease.token) || lease.token < 1) {
    throw new InvalidArgumentError(`lease.token must be a whole number >= 1 (got ${shown(lease.token)}); pass the lease a claim returned`);
  }
  return lease;
}

export function checkDelayMs(delayMs: unknown): number {
  if (typeof delayMs !== "number" || !Number.isFinite(delayMs) || delayMs < 0 || delayMs > MAX_RETRY_DELAY_MS) {
    throw new InvalidArgumentError(`retryInMs must be a number of milliseconds from 0 to ${MAX_RETRY_DELAY_MS} (one year) (got ${shown(delayMs)})`);
  }
  return Math.round(delayMs);
}

/**
 * A message's priority: whole seconds of head start in the claim order, from 0 (the default) to
 * MAX_PRIORITY. Due messages are claimed by (due time - priority), so a priority is never absolute
 * and never starves a lower one: see the README's "Priorities".
 */
export function checkPriority(priority: unknown, what: string): number {
  if (typeof priority !== "number" || !Number.isSafeInteger(priority) || priority < 0 || priority > MAX_PRIORITY) {
    throw new InvalidArgumentError(
      `priority of ${what} must be a whole number of seconds from 0 (the default, the lowest) to ${MAX_PRIORITY} (one day): the message is claimed as if it had been due that much earlier (got ${shown(priority)})`,
    );
  }
  return priority;
}

/** The longest debounce: a day. */
export const MAX_DEBOUNCE_MS = 86_400_000;

/** A message's singleton key (see NewMessage.singletonKey). */
export function checkSingletonKey(key: unknown): string {
  return checkText(key, "singletonKey", MAX_KEY_LENGTH);
}

/** A singleton message's debounce (see NewMessage.debounceMs). */
export function checkDebounceMs(ms: unknown, what: string): number {
  if (typeof ms !== "number" || !Number.isSafeInteger(ms) || ms < 0 || ms > MAX_DEBOUNCE_MS) {
    throw new InvalidArgumentError(`debounceMs of ${what} must be a whole number of milliseconds from 0 to ${MAX_DEBOUNCE_MS} (one day) (got ${shown(ms)})`);
  }
  return ms;
}

export function checkMessageType(type: unknown): string {
  return checkText(type, "message type", 200);
}

/** A store's onComplete option (undefined: "keep"). */
export function checkOnComplete(mode: unknown): OnComplete {
  if (mode === undefined) return "keep";
  if (!ON_COMPLETE_MODES.includes(mode as OnComplete)) {
    throw new InvalidArgumentError(`onComplete must be "keep" (a completed message stays as processed) or "delete" (its row is deleted) (got ${shown(mode)})`);
  }
  return mode as OnComplete;
}

export function checkStatuses(statuses: unknown): readonly MessageStatus[] {
  if (!Array.isArray(statuses) || statuses.some((s) => !MESSAGE_STATUSES.includes(s as MessageStatus))) {
    throw new InvalidArgumentError(`status must be a list of ${MESSAGE_STATUSES.join(", ")} (got ${shown(statuses)})`);
  }
  return statuses as MessageStatus[];
}

/** The text recorded as a message's last error: at most 4000 characters, storable on every store. */
export function describeError(error: unknown): string {
  const text = error instanceof Error ? `${error.name}: ${error.message}` : typeof error === "string" ? error : shown(error);
  return storableText(text, 4000);
}

/** Turns a lease-lost result into a thrown LeaseLostError; passes any other result through. */
export function assertHeld<R extends { readonly outcome: string }>(result: R | LeaseLost): R {
  if (result.outcome === "lease-lost") {
    const lost = result as LeaseLost;
    const detail =
      lost.current === null
        ? "the message no longer exists"
        : `the message is ${lost.current.status}, held by ${lost.current.lockedBy ?? "nobody"} under token ${lost.current.leaseToken}`;
    throw new LeaseLostError(lost.messageId, lost.token, detail);
  }
  return result as R;
}

export function checkBatchSize(batchSize: unknown, what = "batchSize"): number {
  if (typeof batchSize !== "number" || !Number.isInteger(batchSize) || batchSize < 1 || batchSize > 100_000) {
    throw new InvalidArgumentError(`${what} must be a whole number from 1 to 100000 (got ${shown(batchSize)})`);
  }
  return batchSize;
}
