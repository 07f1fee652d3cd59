// NATS JetStream: each message is published to its subject with the message id (and a keyed
// message's number: duplicateId) as Nats-Msg-Id, so the stream's duplicate window drops a
// re-publish (after a relay crashed between the broker's acknowledgement and the completion), and
// the relay completes it once the PubAck arrives. The consumer's inbox id goes as Wassal-Id.
// Publishes are pipelined: each awaits its own PubAck, many at once.
//
// The client (@nats-io/transport-node and @nats-io/jetstream) is an optional peer dependency,
// loaded only when a NATS publisher is made.

import type { MsgHdrs, NatsConnection } from "@nats-io/transport-node";
import type { JetStreamClient } from "@nats-io/jetstream";
import { redactSecrets, redactUrl, rememberUrlSecrets } from "../outbox/redact.js";
import { InvalidArgumentError } from "../outbox/errors.js";
import { BrokerUnavailableError, duplicateId, type OutgoingMessage, PermanentPublishError, type PublishReceipt, type Publisher } from "./publisher.js";
import { importOptional } from "../outbox/optional.js";

export interface NatsOptions {
  /** Server URLs, e.g. "nats://127.0.0.1:4222". */
  readonly servers: string | readonly string[];
  /** How long to wait for a PubAck (default 5 000 ms); a timeout is retried. */
  readonly ackTimeoutMs?: number;
  /** Called on connection changes ("disconnect", "reconnect"), for logs. */
  readonly onStatus?: (status: string) => void;
}

/** JetStream not answering for now: no responder on the subject yet, or no stream leader (an election in a cluster). */
const JETSTREAM_NOT_ANSWERING = /no responders|503|JetStreamNotEnabled|jetstream is not enabled|temporarily unavailable/i;

/** Server errors that refuse this message for good, whatever is retried. */
const REFUSED = /maximum payload|message size exceeds|max_payload|MAX_PAYLOAD/i;

export class NatsPublisher implements Publisher {
  readonly description: string;
  readonly #connecting: Promise<NatsConnection>;
  readonly #headers: () => MsgHdrs;
  readonly #ackTimeoutMs: number;
  #nc: NatsConnection | undefined;
  #js: JetStreamClient | undefined;
  #connected = false;
  #closed = false;
  /** Disconnects so far: a publish that saw one while it waited failed because of it. */
  #disconnects = 0;

  private constructor(
    transport: typeof import("@nats-io/transport-node"),
    jetstream: typeof import("@nats-io/jetstream"),
    servers: string[],
    ackTimeoutMs: number,
    onStatus: ((status: string) => void) | undefined,
  ) {
    this.#headers = transport.headers;
    this.#ackTimeoutMs = ackTimeoutMs;
    this.description = `NATS JetStream at ${servers.map(redactUrl).join(", ")}`;
    // noAsyncTraces: otherwise the client builds two Errors with stack traces per publish, in
    // case it fails, a quarter of the relay's CPU (README, "Measured"); its errors still say what failed.
    // Dials until the server answers (a relay started before its broker holds its messages), and
    // reconnects for ever afterwards; close() stops the dialling.
    this.#connecting = (async () => {
      for (;;) {
        if (this.#closed) throw new Error("closed before the first connection");
        try {
          return await transport.connect({ servers, maxReconnectAttempts: -1, reconnectTimeWait: 250, timeout: 2_000, noAsyncTraces: true });
        } catch (error) {
          onStatus?.(`connect failed: ${error instanceof Error ? error.message : String(error)}`);
          await new Promise((resolve) => setTimeout(resolve, 250).unref());
        }
      }
    })();
    this.#connecting.then(
      (nc) => {
        if (this.#closed) return void nc.close();
        this.#nc = nc;
        this.#js = jetstream.jetstream(nc);
        this.#connected = true;
        onStatus?.("connect");
        void this.#watch(nc, onStatus);
      },
      () => undefined, // closed before connecting
    );
  }

  /**
   * Loads the client and starts connecting; resolves at once (publishes find the broker
   * unreachable until the connection is up). `connected()` waits for it.
   */
  static async open(options: NatsOptions): Promise<NatsPublisher> {
    const servers = [options.servers].flat();
    if (servers.length === 0 || servers.some((s) => typeof s !== "string" || s === "")) {
      throw new InvalidArgumentError(
        `NATS servers must be one or more URLs such as nats://127.0.0.1:4222 (got ${redactSecrets(JSON.stringify(options.servers) ?? String(options.servers))})`,
      );
    }
    for (const server of servers) rememberUrlSecrets(server);
    const ackTimeoutMs = options.ackTimeoutMs ?? 5_000;
    if (!Number.isSafeInteger(ackTimeoutMs) || ackTimeoutMs < 1)
      throw new InvalidArgumentError(`ackTimeoutMs must be a whole number of milliseconds >= 1 (got ${String(ackTimeoutMs)})`);
    const transport = await importOptional<typeof import("@nats-io/transport-node")>("@nats-io/transport-node", "a NATS relay");
    const jetstream = await importOptional<typeof import("@nats-io/jetstream")>("@nats-io/jetstream", "a NATS relay");
    return new NatsPublisher(transport, jetstream, servers, ackTimeoutMs, options.onStatus);
  }

  /** Resolves once connected (for the first time). */
  async connected(): Promise<void> {
    await this.#connecting;
  }

  async #watch(nc: NatsConnection, onStatus: ((status: string) => void) | undefined): Promise<void> {
    for await (const status of nc.status()) {
      if (status.type === "disconnect") {
        this.#connected = false;
        this.#disconnects += 1;
      }
      if (status.type === "reconnect") this.#connected = true;
      if (status.type === "disconnect" || status.type === "reconnect") onStatus?.(status.type);
    }
  }

  async publish(message: OutgoingMessage, signal: AbortSignal): Promise<PublishReceipt> {
    const nc = this.#nc;
    const js = this.#js;
    if (nc === undefined || js === undefined) throw new BrokerUnavailableError(`${this.description}: not connected yet`);
    if (!this.#connected) throw new BrokerUnavailableError(`${this.description}: disconnected, reconnecting`);
    const disconnectsBefore = this.#disconnects;
    const h = this.#headers();
    for (const [name, value] of Object.entries(message.headers)) h.set(name, value);
    h.set("Wassal-Id", message.id);
    h.set("Wassal-Message-Id", message.messageId);
    h.set("Wassal-Type", message.type);
    if (message.key !== null) h.set("Wassal-Key", message.key);
    if (message.keySeq !== null) h.set("Wassal-Key-Seq", String(message.keySeq));
    try {
      const ack = await js.publish(message.destination, message.body, { msgID: duplicateId(message), headers: h, timeout: this.#ackTimeoutMs });
      return { duplicate: ack.duplicate };
    } catch (error) {
      const text = error instanceof Error ? error.message : String(error);
      if (REFUSED.test(text)) throw new PermanentPublishError(`${message.destination}: ${text}`, { cause: error });
      // Down, or down while this publish waited (its timeout overlapped a disconnect), or JetStream
      // not answering yet (right after a restart: "no responders"; in a cluster, while the
      // stream's replicas elect a new leader: "jetstream is not enabled"): held, not failed. A
      // subject no stream takes answers the same, and is held too, with a warning each time.
      if (!this.#connected || nc.isClosed() || this.#disconnects !== disconnectsBefore || JETSTREAM_NOT_ANSWERING.test(text)) {
        // Also what a server started without JetStream says, for good: the warning says what to check.
        const hint = /jetstream is not enabled/i.test(text)
          ? " (in a cluster, while the stream elects a leader; if it lasts, check that every server runs with JetStream, -js)"
          : "";
        throw new BrokerUnavailableError(`${this.description}: ${text}${hint}`, { cause: error });
      }
      if (signal.aborted) throw error;
      // No stream for the subject, a timeout, the server's own error: retried, then dead.
      throw new Error(`publish to ${message.destination}: ${text}`, { cause: error });
    }
  }

  async close(): Promise<void> {
    this.#closed = true;
    await this.#nc?.close();
  }
}
