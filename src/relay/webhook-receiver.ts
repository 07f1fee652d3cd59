// The receiving side of webhooks: a request handler for Node's http server (or anything that
// passes Node's request and response) that checks a Standard Webhooks signature and applies the
// delivery through the inbox, in the consumer's transaction. It answers 204 once applied (or when
// the inbox had the id: a redelivery), 401 for a signature that does not verify or a timestamp
// too far from now (a replay), 400 for a body that is not JSON, and 500 when the handler throws,
// so that the sender tries again later. A keyed delivery whose key waits for an earlier number (its
// wassal-key-seq is ahead of the key's next) is answered 425 (Too Early) with a Retry-After, and
// applied when it comes again in its turn.

import { timingSafeEqual } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { type Clock, systemClock } from "../outbox/clock.js";
import { InvalidArgumentError } from "../outbox/errors.js";
import { type ConsumerStats, type DeliveredMessage, type DeliveryHandler, keySeqOf, newConsumerStats } from "./deliver.js";
import type { Inbox } from "./inbox.js";
import { webhookKey, webhookSignature } from "./webhook.js";

export interface WebhookReceiverOptions<Tx> {
  /** The same "whsec_…" secret the sender signs with. */
  readonly secret: string;
  readonly inbox: Inbox<Tx>;
  readonly handle: DeliveryHandler<Tx>;
  /** How far webhook-timestamp may be from now, in seconds, before a delivery is refused as a replay (default 300). */
  readonly toleranceSeconds?: number;
  /** The largest body accepted, in bytes (default 1 MiB). */
  readonly maxBodyBytes?: number;
  /** Told of each handler failure (the sender is answered 500 and retries). */
  readonly onError?: (error: unknown, message: DeliveredMessage) => void;
  /** Told of each delivery answered 425 because its key waits for an earlier number (see ConsumerRetry.onEarly). */
  readonly onEarly?: (message: DeliveredMessage, waitingFor: number) => void;
  /** Told of each delivery applied out of its key's order (see ConsumerRetry.onLate). */
  readonly onLate?: (message: DeliveredMessage) => void;
  readonly clock?: Clock;
}

export type WebhookRequestHandler = ((request: IncomingMessage, response: ServerResponse) => void) & { readonly stats: ConsumerStats };

const OWN_HEADERS = new Set([
  "webhook-id",
  "webhook-timestamp",
  "webhook-signature",
  "wassal-type",
  "wassal-key",
  "wassal-key-seq",
  "content-type",
  "content-length",
  "host",
  "connection",
]);

/** Whether one of the space-separated "v1,<base64>" signatures matches, compared in constant time. */
function verifies(header: string, expected: string): boolean {
  const want = Buffer.from(expected);
  return header.split(" ").some((candidate) => {
    const got = Buffer.from(candidate);
    return got.length === want.length && timingSafeEqual(got, want);
  });
}

export function webhookReceiver<Tx>(options: WebhookReceiverOptions<Tx>): WebhookRequestHandler {
  const key = webhookKey(options.secret);
  if (typeof options.handle !== "function") throw new InvalidArgumentError("webhookReceiver needs handle: (message, tx) => void");
  const tolerance = options.toleranceSeconds ?? 300;
  const maxBody = options.maxBodyBytes ?? 1024 * 1024;
  const clock = options.clock ?? systemClock;
  const stats: ConsumerStats = newConsumerStats();

  const answer = (response: ServerResponse, status: number, text = "") => {
    response.writeHead(status, { "content-type": "text/plain" }).end(text);
  };

  const receive = async (request: IncomingMessage, response: ServerResponse): Promise<void> => {
    if (request.method !== "POST") return answer(response, 405, "POST only\n");
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of request) {
      size += (chunk as Buffer).length;
      if (size > maxBody) return answer(response, 413, `the body is larger than ${maxBody} bytes\n`);
      chunks.push(chunk as Buffer);
    }
    const body = Buffer.concat(chunks).toString("utf8");
    const header = (name: string) => {
      const value = request.headers[name];
      return typeof value === "string" ? value : undefined;
    };
    const id = header("webhook-id");
    const timestamp = Number(header("webhook-timestamp"));
    const signature = header("webhook-signature");
    if (id === undefined || !Number.isSafeInteger(timestamp) || signature === undefined) {
      return answer(response, 401, "missing webhook-id, webhook-timestamp or webhook-signature\n");
    }
    if (Math.abs(clock.now().getTime() / 1000 - timestamp) > tolerance) return answer(response, 401, "webhook-timestamp is too far from now\n");
    if (!verifies(signature, webhookSignature(key, id, timestamp, body))) return answer(response, 401, "the signature does not verify\n");
    let parsed: unknown;
    try {
      parsed = JSON.parse(body);
    } catch {
      return answer(response, 400, "the body is not JSON\n");
    }
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(request.headers)) if (!OWN_HEADERS.has(name) && typeof value === "string") headers[name] = value;
    const message: DeliveredMessage = {
      id,
      type: header("wassal-type") ?? null,
      key: header("wassal-key") ?? null,
      keySeq: keySeqOf(header("wassal-key-seq")),
      headers,
      body: parsed,
      source: request.url ?? "",
      redelivered: false,
    };
    try {
      const received = await options.inbox.handle(message, (tx) => options.handle(message, tx));
      if (received.early) {
        stats.early += 1;
        try {
          options.onEarly?.(message, received.waitingFor);
        } catch {
          // a report that throws must not turn the answer into a 500
        }
        response.writeHead(425, { "content-type": "text/plain", "retry-after": "1" });
        response.end(`ordering key ${JSON.stringify(message.key)} waits for its number ${received.waitingFor}; send this one again later\n`);
        return;
      }
      if (received.duplicate) stats.duplicates += 1;
      else {
        stats.applied += 1;
        if (received.late) {
          stats.late += 1;
          try {
            options.onLate?.(message);
          } catch {
            // as onEarly
          }
        }
      }
      answer(response, 204);
    } catch (error) {
      stats.failed += 1;
      options.onError?.(error, message);
      answer(response, 500, "the receiver failed; try again later\n");
    }
  };

  const handler = (request: IncomingMessage, response: ServerResponse) => {
    receive(request, response).catch(() => {
      if (!response.headersSent) answer(response, 500);
    });
  };
  return Object.assign(handler, { stats });
}
