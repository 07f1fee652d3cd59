// A publisher from one URL, as `wassal relay --to URL` takes it: nats:// for NATS JetStream,
// amqp:// or amqps:// for RabbitMQ, redis:// or rediss:// for Redis Streams, http:// or https://
// for webhooks. A NATS or RabbitMQ cluster is given as its nodes' URLs separated by commas, all of
// one scheme. Checked before anything connects, so bad input costs nothing.

import { InvalidArgumentError } from "../outbox/errors.js";
import { redactUrl, rememberSecret, rememberUrlSecrets } from "../outbox/redact.js";
import { NatsPublisher } from "./nats.js";
import { amqpUrls, listedUrls, RabbitMqPublisher } from "./rabbitmq.js";
import { RedisStreamsPublisher } from "./redis.js";
import type { Publisher } from "./publisher.js";
import { WebhookPublisher, webhookKey } from "./webhook.js";

/** The URL schemes a relay publishes to, with what each means. */
export const PUBLISHER_SCHEMES: Readonly<Record<string, string>> = {
  "nats:":
    "NATS JetStream, e.g. nats://127.0.0.1:4222, or a cluster's servers separated by commas, nats://a:4222,nats://b:4222 (subjects from --destination and --route)",
  "amqp:":
    'RabbitMQ, e.g. amqp://127.0.0.1:5672, credentials before the host, or the nodes of a cluster separated by commas, amqp://a:5672,amqp://b:5672, each with its credentials (destinations "<exchange>/<routing key>", or "/<queue>")',
  "amqps:": "RabbitMQ over TLS",
  "redis:": "Redis Streams, e.g. redis://127.0.0.1:6379 (destinations are stream keys)",
  "rediss:": "Redis Streams over TLS",
  "http:": "webhooks: each message POSTed to the URL (or to its route's URL), signed with --webhook-secret",
  "https:": "webhooks, over TLS",
};

export interface PublisherTarget {
  readonly scheme: string;
  /** The destination a message gets when neither it nor a route gives one (the webhook URL), if any. */
  readonly defaultDestination: string | undefined;
  /** Connects (or starts connecting: a NATS relay waits for its server in the background). */
  open(): Promise<Publisher>;
}

export interface PublisherTargetOptions {
  /** The Standard Webhooks secret ("whsec_…"), required for http(s). */
  readonly webhookSecret?: string;
  /** Connection changes of a broker (e.g. "disconnect", "reconnect"), for logs; RabbitMQ's "connect" and "disconnect" also name the node (redacted). */
  readonly onStatus?: (status: string, node?: string) => void;
}

function supported(): string {
  return Object.entries(PUBLISHER_SCHEMES)
    .map(([scheme, what]) => `${scheme}// (${what})`)
    .join("; ");
}

/** Checks the URL and what its scheme needs (a webhook secret); throws InvalidArgumentError naming what would be valid. */
export function publisherTarget(given: string, options: PublisherTargetOptions = {}): PublisherTarget {
  rememberUrlSecrets(given);
  // Before the NATS list: "nats://a,amqp://b" is one NATS item to natsServers, and a URL that parses.
  if (listedUrls(given).some(isAmqp)) return rabbitMq(given, options);
  const servers = natsServers(given);
  if (servers.length > 1) return natsCluster(given, options);
  // One NATS server given with a trailing comma is that server.
  const to = servers[0] as string;
  let url: URL;
  try {
    url = new URL(to);
  } catch {
    throw new InvalidArgumentError(`--to ${redactUrl(to)} is not a URL; the relay publishes to ${supported()}`);
  }
  const scheme = url.protocol;
  if (!Object.hasOwn(PUBLISHER_SCHEMES, scheme)) {
    throw new InvalidArgumentError(`--to ${url.protocol}// is not a broker this relay publishes to; supported: ${supported()}`);
  }
  if (scheme === "nats:") {
    checkNatsServer(url, to);
    return {
      scheme,
      defaultDestination: undefined,
      open: () => NatsPublisher.open({ servers: to, ...(options.onStatus ? { onStatus: options.onStatus } : {}) }),
    };
  }
  if (scheme === "redis:" || scheme === "rediss:") {
    return {
      scheme,
      defaultDestination: undefined,
      open: () => RedisStreamsPublisher.open({ url: to, ...(options.onStatus ? { onStatus: options.onStatus } : {}) }),
    };
  }
  webhookKey(options.webhookSecret); // before anything runs: a missing or short secret is bad input
  rememberSecret(options.webhookSecret);
  const secret = options.webhookSecret as string;
  return { scheme, defaultDestination: url.href.replaceAll("%7Btype%7D", "{type}"), open: async () => new WebhookPublisher({ secret }) };
}

function checkNatsServer(url: URL, given: string): void {
  if (url.pathname !== "" && url.pathname !== "/")
    throw new InvalidArgumentError(`--to ${redactUrl(given)}: a NATS URL names a server only (nats://host:port); subjects come from --destination and --route`);
}

/**
 * The servers of a `--to` that lists a NATS cluster's, separated by commas: split only where the
 * next one starts with nats:// (listedUrls), so a comma inside a password, or another scheme, stays
 * in the item before it; a trailing comma ends the list. One item for any other URL.
 */
export function natsServers(to: string): string[] {
  return /^\s*nats:\/\//i.test(to) ? listedUrls(to, "nats") : [to];
}

/** `--to` as logs show it: each server of a NATS or RabbitMQ cluster's list redacted on its own. */
export function redactTarget(to: string): string {
  return listedUrls(to).map(redactUrl).join(",");
}

function isAmqp(url: string): boolean {
  return /^amqps?:\/\//i.test(url);
}

/**
 * RabbitMQ: one amqp(s):// URL, or a cluster's nodes separated by commas (split where the next
 * URL starts, so a comma inside a password stays in it), each node checked now.
 */
function rabbitMq(to: string, options: PublisherTargetOptions): PublisherTarget {
  const nodes = listedUrls(to);
  for (const node of nodes) rememberUrlSecrets(node);
  const other = nodes.find((node) => !isAmqp(node) && node !== "");
  if (other !== undefined) {
    throw new InvalidArgumentError(
      `--to ${redactTarget(to)} mixes brokers: ${redactUrl(other)} is not amqp:// or amqps://; a list names the nodes of one cluster, all RabbitMQ (amqp://h1:5672,amqp://h2:5672) or all NATS (nats://h1:4222,nats://h2:4222)`,
    );
  }
  const urls = amqpUrls(nodes, "--to");
  const scheme = new URL(urls[0] as string).protocol;
  return {
    scheme,
    defaultDestination: undefined,
    open: () => RabbitMqPublisher.open({ url: urls, ...(options.onStatus ? { onStatus: options.onStatus } : {}) }),
  };
}

/** A NATS cluster's servers, separated by commas: the publisher connects to any of them and follows the cluster. */
function natsCluster(to: string, options: PublisherTargetOptions): PublisherTarget {
  const servers = natsServers(to);
  for (const server of servers) {
    rememberUrlSecrets(server);
    let url: URL;
    try {
      url = new URL(server);
    } catch {
      throw new InvalidArgumentError(
        `--to: a server in the NATS server list ${redactTarget(to)} is not a URL; give servers as nats://host:port,nats://host:port`,
      );
    }
    if (url.protocol !== "nats:")
      throw new InvalidArgumentError(`--to: every server of a NATS cluster list must be nats://host:port (got ${redactUrl(server)})`);
    checkNatsServer(url, server);
  }
  return {
    scheme: "nats:",
    defaultDestination: undefined,
    open: () => NatsPublisher.open({ servers, ...(options.onStatus ? { onStatus: options.onStatus } : {}) }),
  };
}
