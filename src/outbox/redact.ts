// The one redaction of secrets. Connection strings (a database URL, a broker URL) carry secrets in
// several places: the password before the "@", query parameters such as ?password=, ?sslpassword=
// and ?sslkey= (a key file's path), and, for PostgreSQL, the PGPASSWORD environment variable.
// Everything Wassal prints (errors, logs, JSON, reports, the dashboard, spans) shows a URL through
// redactUrl, and passes free text (a driver's error message) through redactSecrets, which also
// removes every secret value it has been told of, wherever it appears.

/** What a secret is replaced with. */
export const REDACTED = "***";

/** Query parameters whose values are secrets (compared case-insensitively). */
const SECRET_PARAMS = new Set(["password", "pass", "pwd", "sslpassword", "sslkey", "secret", "token", "auth_token", "access_token", "api_key", "apikey"]);

/** Environment variables whose values are secrets. */
const SECRET_ENV = ["PGPASSWORD", "PGSSLKEY", "PGSSLPASSWORD"];

/** Secret values seen (a URL's password, a ?password= value, a config's password): removed from any text. */
const known = new Set<string>();
/** The known secrets, longest first: made once after each new one, not at every line a logger writes. */
let longestFirst: string[] | undefined;

/** Shorter values are not looked for in free text (they would match ordinary words); URLs still hide them. */
const MIN_SCRUBBED_LENGTH = 6;

/** Tells the redaction of a secret value: from now on it is removed from every text redactSecrets sees. */
export function rememberSecret(value: string | undefined | null): void {
  if (typeof value !== "string" || value.length < MIN_SCRUBBED_LENGTH) return;
  longestFirst = undefined;
  known.add(value);
  // As written, decoded, URL-encoded, and escaped inside a JSON string (a log line, --json output).
  for (const form of [safeDecode(value), encodeURIComponent(value), JSON.stringify(value).slice(1, -1)])
    if (form.length >= MIN_SCRUBBED_LENGTH) known.add(form);
}

function safeDecode(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

/** A URL's scheme and "//", then its user information: everything before the authority's last "@". */
const AUTHORITY_USERINFO = /^([a-z][a-z0-9+.-]*:\/\/)([^/?#]*)@/i;

/**
 * The same for a URL whose password holds an unescaped "/", "?" or "#" (user:pa/ss@host, what a
 * user types before learning to percent-encode): after "user:" comes no port (digits, then "/",
 * "?", "#" or the end), so everything up to the last "@" is taken for the user information. It may
 * hide more than the password (an "@" further on), never less.
 */
const MALFORMED_USERINFO = /^([a-z][a-z0-9+.-]*:\/\/)([^:/?#@\s]*:(?!\d*(?:[/?#]|$))\S*)@/i;

/** The URL's scheme and user information (up to its last "@"), well-formed or not; undefined when it has none. */
function userinfoMatch(url: string): RegExpExecArray | null {
  return AUTHORITY_USERINFO.exec(url) ?? MALFORMED_USERINFO.exec(url);
}

/** Remembers the secrets a URL holds (its password and secret parameters); so redactSecrets removes them from any text. */
export function rememberUrlSecrets(url: string): void {
  const userinfo = userinfoMatch(url)?.[2];
  const colon = userinfo?.indexOf(":") ?? -1;
  // A password equal to its user name ("postgres:postgres") would blank the name wherever it
  // appears, the scheme included: URLs still hide it, free text is left alone.
  if (userinfo !== undefined && colon >= 0 && userinfo.slice(colon + 1) !== userinfo.slice(0, colon)) rememberSecret(userinfo.slice(colon + 1));
  const query = url.indexOf("?");
  if (query < 0) return;
  for (const pair of url.slice(query + 1).split(/[&#]/)) {
    const eq = pair.indexOf("=");
    if (eq > 0 && SECRET_PARAMS.has(safeDecode(pair.slice(0, eq)).toLowerCase())) rememberSecret(pair.slice(eq + 1));
  }
}

/**
 * A URL safe to print: its password and secret query parameters replaced by ***. Works on any
 * scheme and on malformed URLs too (a URL that does not parse is where a secret is most often
 * echoed), by rewriting the text rather than parsing it.
 */
export function redactUrl(url: string): string {
  // The authority's user information runs to its last "@" (a malformed URL may hold an unescaped one).
  const shown = url
    .replace(AUTHORITY_USERINFO.test(url) ? AUTHORITY_USERINFO : MALFORMED_USERINFO, (_whole, scheme: string, userinfo: string) => {
      const colon = userinfo.indexOf(":");
      return colon < 0 ? `${scheme}${userinfo}@` : `${scheme}${userinfo.slice(0, colon)}:${REDACTED}@`;
    })
    .replace(/([?&;])([^=&#;\s]+)=([^&#;\s]*)/g, (whole, sep: string, name: string) =>
      SECRET_PARAMS.has(safeDecode(name).toLowerCase()) ? `${sep}${name}=${REDACTED}` : whole,
    );
  return scrubKnown(shown);
}

/** URLs inside free text: a scheme, "://", then everything up to whitespace, a quote or a bracket. */
const URL_IN_TEXT = /[a-z][a-z0-9+.-]*:\/\/[^\s"'`<>]+/gi;

function scrubKnown(text: string): string {
  if (longestFirst === undefined) {
    for (const name of SECRET_ENV) rememberSecret(process.env[name]);
    // Longest first, so a secret that contains another is removed whole.
    longestFirst = [...known].sort((a, b) => b.length - a.length);
  }
  let out = text;
  for (const secret of longestFirst) {
    if (out.includes(secret)) out = out.split(secret).join(REDACTED);
  }
  return out;
}

/** Free text (an error message, a log line, a report) with every URL redacted and every known secret removed. */
export function redactSecrets(text: string): string {
  return scrubKnown(
    text.replace(URL_IN_TEXT, (match) => {
      // Punctuation after a URL ends the sentence, not the URL.
      const url = match.replace(/[.,;:!?)\]]+$/, "");
      return redactUrl(url) + match.slice(url.length);
    }),
  );
}
