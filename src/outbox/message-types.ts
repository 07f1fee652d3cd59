// A typed message map: the app declares each message type's payload once, and what enqueues,
// handles and consumes those messages is typed from that one declaration:
//
//   export const messages = messageTypes<{ "order.placed": { orderId: string; total: number } }>();
//   await enqueue(store, trx, messages.message("order.placed", { orderId, total }, { key: orderId }));
//   export default messages.handlers({ "order.placed": async (message) => { message.payload.total } });
//
// It checks nothing at run time that the store does not check already (a payload is still
// validated as JSON when enqueued): the map exists for the compiler only.

import { InvalidArgumentError, UnknownMessageTypeError } from "./errors.js";
import type { Handler, HandlerResult } from "./process-lease.js";
import type { JsonValue, Lease, NewMessage, OutboxMessage } from "./types.js";

/** A payload type of a message map: anything JSON can carry (interfaces too, which JsonValue would refuse). */
type Payloads<M> = { readonly [K in keyof M]: unknown };

/** A claimed message whose payload is typed from the map. */
export type TypedMessage<M, K extends keyof M & string> = Omit<OutboxMessage, "type" | "payload"> & {
  readonly type: K;
  readonly payload: M[K];
};

/** A handler of one type of the map: as `Handler`, with the message's payload typed. */
export type TypedHandler<M, K extends keyof M & string, Tx = unknown> = (
  message: TypedMessage<M, K>,
  context: { readonly lease: Lease; readonly signal: AbortSignal },
  // biome-ignore lint/suspicious/noConfusingVoidType: an async handler without a return statement returns Promise<void>
) => Promise<HandlerResult<Tx> | undefined | void>;

/** What `message(…)` takes besides the type and the payload (see NewMessage). */
export type MessageOptions = Omit<NewMessage, "type" | "payload">;

/** A message as a relay consumer receives it (see DeliveredMessage in "wassal/relay"), its body typed from the map. */
export interface TypedDelivery<M, K extends keyof M & string> {
  readonly id: string;
  readonly type: K;
  readonly key: string | null;
  readonly keySeq: number | null;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: M[K];
  readonly source: string;
  readonly redelivered: boolean;
}

/** The shape of a delivered message the consumer's dispatch reads (structurally, DeliveredMessage). */
export interface DeliveryLike {
  readonly type: string | null;
  readonly body: unknown;
}

/** The typed helpers of one message map. */
export interface MessageTypes<M extends Payloads<M>> {
  /** The message types of the map, as given to `messageTypes(types)`, when they were. */
  readonly types: readonly (keyof M & string)[] | undefined;
  /** A message to enqueue (`store.enqueue(tx, …)`, or an integration's `enqueue(store, tx, …)`), its payload checked against the map. */
  message<K extends keyof M & string>(type: K, payload: M[K], options?: MessageOptions): NewMessage;
  /** A handlers module's map (or a Worker's `handlers`), each handler's message typed from the map. */
  handlers<Tx = unknown>(handlers: { readonly [K in keyof M & string]?: TypedHandler<M, K, Tx> }): Readonly<Record<string, Handler<Tx>>>;
  /** Narrows a claimed message to one type of the map: `if (messages.is(message, "order.placed")) message.payload.total`. */
  is<K extends keyof M & string>(message: OutboxMessage, type: K): message is OutboxMessage & TypedMessage<M, K>;
  /**
   * A relay consumer's handler (NatsConsumer, RabbitMqConsumer, RedisStreamsConsumer) that hands
   * each delivered message to the handler of its type, its body typed from the map. A type with
   * no handler throws UnknownMessageTypeError (the consumer retries it, then gives up on it)
   * unless `otherwise` takes it.
   */
  delivery<D extends DeliveryLike, Tx>(
    handlers: { readonly [K in keyof M & string]?: (message: Omit<D, "type" | "body"> & TypedDelivery<M, K>, tx: Tx) => void | Promise<void> },
    options?: { readonly otherwise?: (message: D, tx: Tx) => void | Promise<void> },
  ): (message: D, tx: Tx) => void | Promise<void>;
}

function handlerEntries<T>(what: string, handlers: object): [string, T][] {
  if (typeof handlers !== "object" || handlers === null || Array.isArray(handlers))
    throw new InvalidArgumentError(`${what} takes an object of message type → handler function`);
  const entries = Object.entries(handlers).filter(([, handler]) => handler !== undefined);
  for (const [type, handler] of entries) {
    if (typeof handler !== "function")
      throw new InvalidArgumentError(`${what}: the handler for ${JSON.stringify(type)} is not a function (got ${typeof handler})`);
  }
  return entries as [string, T][];
}

/**
 * Declares the app's message types once: `messageTypes<{ "order.placed": { orderId: string } }>()`.
 * Give the type names too (`messageTypes<M>(["order.placed"])`) and `types` lists them, for a
 * Worker's or relay's `types`.
 */
export function messageTypes<M extends Payloads<M>>(types?: readonly (keyof M & string)[]): MessageTypes<M> {
  if (types !== undefined && (!Array.isArray(types) || types.some((type) => typeof type !== "string" || type.length === 0)))
    throw new InvalidArgumentError("messageTypes(types): types must be a list of message type names");
  return {
    types: types === undefined ? undefined : Object.freeze([...types]),
    message: (type, payload, options = {}) => ({ ...options, type, payload: payload as JsonValue }),
    handlers: <Tx>(handlers: object) => Object.fromEntries(handlerEntries<Handler<Tx>>("messages.handlers", handlers)),
    is: <K extends keyof M & string>(message: OutboxMessage, type: K): message is OutboxMessage & TypedMessage<M, K> => message.type === type,
    delivery: <D extends DeliveryLike, Tx>(handlers: object, options: { readonly otherwise?: (message: D, tx: Tx) => void | Promise<void> } = {}) => {
      const byType = new Map(handlerEntries<(message: D, tx: Tx) => void | Promise<void>>("messages.delivery", handlers));
      const known = [...byType.keys()];
      return (message: D, tx: Tx) => {
        const handler = message.type === null ? undefined : byType.get(message.type);
        if (handler !== undefined) return handler(message, tx);
        if (options.otherwise !== undefined) return options.otherwise(message, tx);
        throw new UnknownMessageTypeError(message.type ?? "(none)", known);
      };
    },
  };
}
