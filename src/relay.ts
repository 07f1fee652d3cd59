// "wassal/relay": publish an outbox's messages to a broker (NATS JetStream, RabbitMQ, Redis Streams,
// webhooks), completing each only once the broker acknowledged it; and, on the consuming side, an
// inbox that applies each received message once. The broker clients are optional peer dependencies,
// loaded only when a publisher of theirs is opened.

export { type HandledInOrder, Inbox, type InboxOptions, type KeyedDelivery, type Received } from "./relay/inbox.js";
export { MissingClientError } from "./outbox/optional.js";
export type { ConsumerRetry, ConsumerStats, DeliveredMessage, DeliveryHandler } from "./relay/deliver.js";
export { NatsConsumer, type NatsConsumerOptions } from "./relay/nats-consumer.js";
export { RabbitMqConsumer, type RabbitMqConsumerOptions } from "./relay/rabbitmq-consumer.js";
export { RedisStreamsConsumer, type RedisStreamsConsumerOptions } from "./relay/redis-consumer.js";
export { NatsPublisher, type NatsOptions } from "./relay/nats.js";
export { amqpDestination, RabbitMqPublisher, type RabbitMqOptions } from "./relay/rabbitmq.js";
export { RedisStreamsPublisher, type RedisStreamsOptions } from "./relay/redis.js";
export { PUBLISHER_SCHEMES, publisherTarget, type PublisherTarget, type PublisherTargetOptions } from "./relay/open-publisher.js";
export {
  BrokerUnavailableError,
  NoRouteError,
  PermanentPublishError,
  router,
  type OutgoingMessage,
  type PublishReceipt,
  type Publisher,
  type Routes,
} from "./relay/publisher.js";
export { outgoing, Relay, type RelayEvent, type RelayOptions, type RelayStats } from "./relay/relay.js";
export { ShardRelays, type ShardRelayOptions } from "./relay/shard-relays.js";
export { WebhookPublisher, webhookKey, webhookSignature, type WebhookOptions } from "./relay/webhook.js";
export { webhookReceiver, type WebhookReceiverOptions, type WebhookRequestHandler } from "./relay/webhook-receiver.js";
export { WalRelay, type WalRelayFeedEvent, type WalRelayOptions, type WalRelayStats } from "./relay/wal-relay.js";
export type { InsertedBatch, InsertedMessage, InsertFeed, InsertFeedEvent, InsertFeedHandlers, InsertFeedLag } from "./outbox/insert-feed.js";
