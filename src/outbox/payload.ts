// The one rule for what a message may carry, the same on every store: a payload must come back
// from the database exactly as it went in. So it may hold only null, booleans, finite numbers,
// strings, arrays and plain objects, nested at most MAX_PAYLOAD_DEPTH deep, and every string (keys
// included) must be well-formed Unicode without U+0000 (PostgreSQL's jsonb and text cannot hold
// it, and a lone surrogate has no UTF-8 form). Anything else is refused at enqueue, naming where
// it sits, instead of being changed on the way (JSON.stringify would store NaN as null, drop a
// Map's entries and turn a Date into a string). As in JSON, a property whose value is undefined is
// left out, and -0 is stored as 0.

import { UnsupportedPayloadError } from "./errors.js";

export const MAX_PAYLOAD_DEPTH = 100;

const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/;
/** A NUL character, or a surrogate half without its other half (matched per UTF-16 code unit). */
// biome-ignore lint/suspicious/noControlCharactersInRegex: finding NUL is what this pattern is for
const UNSTORABLE = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

function member(path: string, key: string): string {
  return IDENTIFIER.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`;
}

/** Why a string cannot be stored, or null when it can. */
export function unstorableText(text: string): string | null {
  const found = UNSTORABLE.exec(text);
  if (found === null) return null;
  return found[0] === "\u0000" ? "contains a NUL character (U+0000)" : "contains a lone UTF-16 surrogate (not well-formed Unicode)";
}

/**
 * `text` made storable and cut to at most `maxLength` UTF-16 units for a text column (an error
 * message, say, which is recorded rather than refused): NUL becomes U+FFFD, as does a lone
 * surrogate, including one left by the cut.
 */
export function storableText(text: string, maxLength: number): string {
  const cut = text.length > maxLength ? text.slice(0, maxLength) : text;
  return UNSTORABLE.test(cut) ? cut.replace(new RegExp(UNSTORABLE.source, "g"), "\ufffd") : cut;
}

/** An object made by `{}` or Object.create(null): what JSON can carry, unlike a Date, Map or class instance. */
export function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return false;
  const proto: unknown = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

function describe(value: unknown): string {
  if (value === null) return "null";
  if (typeof value !== "object") return typeof value === "number" ? String(value) : typeof value;
  const name = (Object.getPrototypeOf(value) as { constructor?: { name?: string } } | null)?.constructor?.name;
  return name ? `a ${name}` : "an object";
}

function check(value: unknown, path: string, depth: number, open: Set<object>): void {
  switch (typeof value) {
    case "string": {
      const why = unstorableText(value);
      if (why) throw new UnsupportedPayloadError(path, `the string ${why}`);
      return;
    }
    case "boolean":
      return;
    case "number":
      if (!Number.isFinite(value)) throw new UnsupportedPayloadError(path, `${value} is not a finite number (JSON has no NaN or Infinity)`);
      return;
    case "object":
      break;
    default:
      throw new UnsupportedPayloadError(path, `a ${typeof value} has no JSON form`);
  }
  if (value === null) return;
  if (depth >= MAX_PAYLOAD_DEPTH) throw new UnsupportedPayloadError(path, `it is nested deeper than ${MAX_PAYLOAD_DEPTH} levels`);
  if (open.has(value)) throw new UnsupportedPayloadError(path, "it refers back to an object that contains it (a cycle)");
  open.add(value);
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      if (!(i in value) || value[i] === undefined)
        throw new UnsupportedPayloadError(`${path}[${i}]`, "an array element is missing or undefined (JSON would store null)");
      check(value[i], `${path}[${i}]`, depth + 1, open);
    }
  } else {
    if (!isPlainObject(value)) {
      throw new UnsupportedPayloadError(path, `${describe(value)} is not a plain object (convert it first, for example a Date to an ISO string)`);
    }
    if (Object.getOwnPropertySymbols(value).length > 0) throw new UnsupportedPayloadError(path, "an object has symbol keys, which JSON leaves out");
    for (const [key, item] of Object.entries(value)) {
      const why = unstorableText(key);
      if (why) throw new UnsupportedPayloadError(member(path, key), `the key ${why}`);
      if (item !== undefined) check(item, member(path, key), depth + 1, open);
    }
  }
  open.delete(value);
}

/** The payload as JSON text, or an UnsupportedPayloadError naming the first value it cannot hold faithfully. */
export function payloadText(payload: unknown): string {
  if (payload === undefined) throw new UnsupportedPayloadError("$", "the payload is undefined (use null for no payload)");
  check(payload, "$", 0, new Set());
  return JSON.stringify(payload);
}
