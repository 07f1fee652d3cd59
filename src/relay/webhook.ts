// Webhooks: each message is POSTed to its destination URL, signed as Standard Webhooks specifies
// (webhook-id, webhook-timestamp, and webhook-signature "v1,<base64 HMAC-SHA256 of
// id.timestamp.body>"). A 2xx answer acknowledges it. A 4xx is permanent (the message goes dead
// with the status), except 408 and 429, which ask to be retried; a 5xx, a timeout or a refused
// connection is retried with backoff. Node's own fetch: no dependency.

import { createHmac } from "node:crypto";
import { type Clock, systemClock } from "../outbox/clock.js";
import { InvalidArgumentError } from "../outbox/errors.js";
import { type OutgoingMessage, PermanentPublishError, type PublishReceipt, type Publisher } from "./publisher.js";

export interface WebhookOptions {
  /**
   * The signing secret, as Standard Webhooks writes it: "whsec_" and the base64 of 24 to 64
   * random bytes (e.g. `echo whsec_$(openssl rand -base64 32)`). Receivers verify with the same.
   */
  readonly secret: string;
  /** How long to wait for an answer (default 10 000 ms); a timeout is retried. */
  readonly timeoutMs?: number;
  /** Supplies webhook-timestamp (default: the system clock). */
  readonly clock?: Clock;
}

/** Reads a "whsec_…" secret into its key bytes, or says what a valid one looks like. */
export function webhookKey(secret: unknown): Buffer {
  const hint = 'give "whsec_" followed by the base64 of 24 to 64 random bytes, e.g. whsec_$(openssl rand -base64 32)';
  if (typeof secret !== "string" || secret === "") throw new InvalidArgumentError(`a webhook secret is required: ${hint}`);
  if (!secret.startsWith("whsec_")) throw new InvalidArgumentError(`the webhook secret must start with "whsec_": ${hint}`);
  const base64 = secret.slice("whsec_".length);
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(base64)) throw new InvalidArgumentError(`the webhook secret is not valid base64 after "whsec_": ${hint}`);
  const key = Buffer.from(base64, "base64");
  if (key.length < 24 || key.length > 64) throw new InvalidArgumentError(`the webhook secret holds ${key.length} bytes; it must hold 24 to 64: ${hint}`);
  return key;
}

/** The Standard Webhooks signature of one delivery: "v1," and the base64 HMAC-SHA256 of "id.timestamp.body". */
export function webhookSignature(key: Buffer, id: string, timestampSeconds: number, body: string): string {
  return `v1,${createHmac("sha256", key).update(`${id}.${timestampSeconds}.${body}`).digest("base64")}`;
}

/** Statuses that ask the sender to come back later rather than refusing the message. */
const RETRYABLE_4XX = new Set([408, 425, 429]);

export class WebhookPublisher implements Publisher {
  readonly description: string;
  readonly #key: Buffer;
  readonly #timeoutMs: number;
  readonly #clock: Clock;

  constructor(options: WebhookOptions) {
    this.#key = webhookKey(options.secret);
    const timeoutMs = options.timeoutMs ?? 10_000;
    if (!Number.isSafeInteger(timeoutMs) || timeoutMs < 1)
      throw new InvalidArgumentError(`timeoutMs must be a whole number of milliseconds >= 1 (got ${String(timeoutMs)})`);
    this.#timeoutMs = timeoutMs;
    this.#clock = options.clock ?? systemClock;
    this.description = "webhooks (HTTP POST, Standard Webhooks signatures)";
  }

  async publish(message: OutgoingMessage, signal: AbortSignal): Promise<PublishReceipt> {
    let url: URL;
    try {
      url = new URL(message.destination);
    } catch {
      throw new PermanentPublishError(`destination ${JSON.stringify(message.destination)} is not a URL`);
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") throw new PermanentPublishError(`destination ${url.href} is not an http(s) URL`);
    const timestamp = Math.floor(this.#clock.now().getTime() / 1000);
    const headers: Record<string, string> = {
      ...message.headers,
      "content-type": "application/json",
      "webhook-id": message.id,
      "webhook-timestamp": String(timestamp),
      "webhook-signature": webhookSignature(this.#key, message.id, timestamp, message.body),
      "wassal-type": message.type,
      ...(message.key === null ? {} : { "wassal-key": message.key }),
      ...(message.keySeq === null ? {} : { "wassal-key-seq": String(message.keySeq) }),
    };
    let response: Response;
    try {
      response = await fetch(url, {
        method: "POST",
        headers,
        body: message.body,
        redirect: "manual",
        signal: AbortSignal.any([signal, AbortSignal.timeout(this.#timeoutMs)]),
      });
    } catch (error) {
      const reason = error instanceof Error && error.name === "TimeoutError" ? `no answer within ${this.#timeoutMs} ms` : describeFetchError(error);
      throw new Error(`POST ${url.origin}${url.pathname}: ${reason}`, { cause: error });
    }
    // The body is not needed: read it away so the connection can be reused.
    const text = await response.text().catch(() => "");
    if (response.status >= 200 && response.status < 300) return { duplicate: false };
    const detail = `POST ${url.origin}${url.pathname} answered ${response.status}${text ? `: ${text.slice(0, 200)}` : ""}`;
    if (response.status >= 400 && response.status < 500 && !RETRYABLE_4XX.has(response.status)) throw new PermanentPublishError(detail);
    throw new Error(detail);
  }

  async close(): Promise<void> {
    // fetch keeps no connection that needs closing.
  }
}

function describeFetchError(error: unknown): string {
  const cause = (error as { cause?: { code?: string; message?: string } }).cause;
  return cause?.code ?? cause?.message ?? (error instanceof Error ? error.message : String(error));
}
