// Fan-out: one enqueue delivered to several named subscribers (a relay and a worker, or two
// services), each with its own lease, retries, dead letters and key order. A message of a type
// with subscribers is enqueued once per subscriber, in the same transaction (enqueueMany), as
// type `<type>@<subscriber>` and, when it has an ordering key, key `<key>@<subscriber>`: each
// subscriber's copies are ordered among themselves, and one subscriber's dead or slow message
// holds up no other subscriber. A worker or relay takes a subscriber's copies by their type
// (`--types order.placed@billing`). A type without subscribers is enqueued as it is.

import { InvalidArgumentError } from "./errors.js";
import type { JsonValue, NewMessage } from "./types.js";

/** What joins a type (or a key) and its subscriber's name. */
export const SUBSCRIBER_SEPARATOR = "@";

const NAME = /^[A-Za-z0-9_.:-]{1,64}$/;

/** The named subscribers of some message types. */
export interface Subscriptions {
  /** Each type's subscribers, as given. */
  readonly subscribers: Readonly<Record<string, readonly string[]>>;
  /** The messages to enqueue (with enqueueMany, in the business transaction) for `message`: one per subscriber of its type, or `[message]`. */
  messages<P extends JsonValue>(message: NewMessage<P>): NewMessage<P>[];
  /** The types a subscriber takes, for its worker's or relay's `types`: `order.placed@billing`, … */
  typesOf(subscriber: string): string[];
}

/** The type (or key) of `subscriber`'s copy of a message: `order.placed@billing`. */
export function subscriberCopy(name: string, subscriber: string): string {
  return `${name}${SUBSCRIBER_SEPARATOR}${subscriber}`;
}

/**
 * Declares which named subscribers receive each message type:
 * `subscriptions({ "order.placed": ["billing", "relay"] })`. Subscriber names are 1 to 64
 * letters, digits, `_`, `.`, `:` or `-`.
 */
export function subscriptions(subscribers: Readonly<Record<string, readonly string[]>>): Subscriptions {
  if (typeof subscribers !== "object" || subscribers === null || Array.isArray(subscribers))
    throw new InvalidArgumentError('subscriptions takes an object of message type → subscriber names, e.g. { "order.placed": ["billing", "relay"] }');
  const byType = new Map<string, readonly string[]>();
  for (const [type, names] of Object.entries(subscribers)) {
    if (!Array.isArray(names) || names.length === 0)
      throw new InvalidArgumentError(`subscriptions: ${JSON.stringify(type)} needs a list of at least one subscriber name (got ${JSON.stringify(names)})`);
    for (const name of names) {
      if (typeof name !== "string" || !NAME.test(name))
        throw new InvalidArgumentError(
          `subscriptions: subscriber ${JSON.stringify(name)} of ${JSON.stringify(type)} is not a valid name (1 to 64 letters, digits, _ . : -)`,
        );
    }
    if (new Set(names).size !== names.length) throw new InvalidArgumentError(`subscriptions: ${JSON.stringify(type)} names a subscriber twice`);
    byType.set(type, Object.freeze([...names]));
  }
  return {
    subscribers: Object.freeze(Object.fromEntries(byType)),
    messages: <P extends JsonValue>(message: NewMessage<P>): NewMessage<P>[] => {
      const names = byType.get(message.type);
      if (names === undefined) return [message];
      return names.map((subscriber) => ({
        ...message,
        type: subscriberCopy(message.type, subscriber),
        ...(message.key === undefined ? {} : { key: subscriberCopy(message.key, subscriber) }),
        ...(message.dedupeKey === undefined ? {} : { dedupeKey: subscriberCopy(message.dedupeKey, subscriber) }),
      }));
    },
    typesOf: (subscriber) => [...byType].filter(([, names]) => names.includes(subscriber)).map(([type]) => subscriberCopy(type, subscriber)),
  };
}
