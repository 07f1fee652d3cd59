// The one writer of the CLI's output. Values printed for people come from the database (types,
// keys, dedupe keys, owners, error texts) and may hold terminal escape sequences: written raw,
// "\x1b]0;pwned\x07\x1b[2J" retitles and clears the operator's terminal. So every line goes out
// through here: control characters are shown as escapes (\x1b, \u009b, \u202e), never sent, and
// every URL's secrets and every known secret value are removed (see outbox/redact.ts).

import { redactSecrets } from "../outbox/redact.js";

/**
 * Characters a terminal may act on: C0 controls except tab and newline, DEL, C1 controls, and the
 * bidirectional overrides and isolates that reorder what is shown, plus the Unicode line and
 * paragraph separators.
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is what this pattern is for
const CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2028\u2029\u2066-\u2069]/g;
/** The same, and tab, newline and carriage return too: for one value inside a line. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is what this pattern is for
const CONTROL_IN_FIELD = /[\u0000-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2028\u2029\u2066-\u2069]/g;

function escapeChar(char: string): string {
  const code = char.charCodeAt(0);
  if (char === "\n") return "\\n";
  if (char === "\r") return "\\r";
  if (char === "\t") return "\\t";
  return code <= 0xff ? `\\x${code.toString(16).padStart(2, "0")}` : `\\u${code.toString(16).padStart(4, "0")}`;
}

/** Text safe to show in a terminal: its lines and tabs kept, every other control character escaped, secrets removed. */
export function terminalSafe(text: string): string {
  return redactSecrets(text).replace(CONTROL, escapeChar);
}

/** One value for a line or a column: every control character escaped, newlines and tabs included. */
export function field(value: string | number | null | undefined, missing = "-"): string {
  if (value === null || value === undefined) return missing;
  return String(value).replace(CONTROL_IN_FIELD, escapeChar);
}

/** Writes text for people on stdout. */
export function out(text: string): void {
  process.stdout.write(terminalSafe(text));
}

/** Writes text for people on stderr. */
export function err(text: string): void {
  process.stderr.write(terminalSafe(text));
}

/** JSON as a script reads it: JSON.stringify escapes C0 controls; C1 controls and bidi marks are escaped here too, and secrets removed. */
export function jsonText(value: unknown): string {
  return redactSecrets(JSON.stringify(value, null, 2) ?? "null").replace(CONTROL, escapeJsonChar);
}

function escapeJsonChar(char: string): string {
  return `\\u${char.charCodeAt(0).toString(16).padStart(4, "0")}`;
}

/** Writes a value as indented JSON on stdout. */
export function printJson(value: unknown): void {
  process.stdout.write(`${jsonText(value)}\n`);
}
