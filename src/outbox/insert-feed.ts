// A feed of the messages committed into an outbox, read from the database's own change stream
// (PostgreSQL's logical replication) instead of by polling. The contract only: a store that can
// stream its inserts implements it (wassal/postgres's openWalFeed), and the WAL relay consumes it.
//
// The feed is a notice, never the record: the outbox rows stay the truth. A message the feed
// never delivers (a slot lost and made again, a gap) is still pending in its table, where a claim
// finds it. So a position may be confirmed once each message before it is in the outbox's hands
// again: completed, scheduled for a retry, or left pending for a claim.

/** One message as the feed saw it inserted. */
export interface InsertedMessage {
  readonly id: string;
  readonly type: string;
  /** Its ordering key, or null. */
  readonly key: string | null;
}

/** One committed transaction's inserts into the outbox, in the order they were made. */
export interface InsertedBatch {
  readonly messages: readonly InsertedMessage[];
  /** Where the transaction ends in the feed: confirm it once its messages are dealt with. */
  readonly position: string;
}

export type InsertFeedEvent =
  /** Streaming from the slot. */
  | { readonly type: "streaming"; readonly slot: string; readonly from: string }
  /** Another consumer streams from the slot: this feed waits and tries again. */
  | { readonly type: "slot-busy"; readonly slot: string; readonly retryInMs: number; readonly detail: string }
  /**
   * The slot was made now (first start, or it was lost): what was inserted before it is not in
   * the stream, so whoever consumes the feed must claim the outbox's pending messages itself.
   */
  | { readonly type: "slot-created"; readonly slot: string }
  /** The stream broke (a restart, a failover, a network fault); the feed connects again. */
  | { readonly type: "disconnected"; readonly slot: string; readonly error: string; readonly retryInMs: number };

/** How far a slot is behind the database: what the server keeps for it. */
export interface InsertFeedLag {
  readonly slot: string;
  /** Write-ahead log bytes between the database's current position and the slot's confirmed one. */
  readonly bytes: number;
  /** Whether a consumer streams from the slot now. */
  readonly active: boolean;
}

export interface InsertFeedHandlers {
  /** A committed batch; the feed sends the next once this resolves (it should not reject). */
  readonly batch: (batch: InsertedBatch) => Promise<void>;
  /** What the feed went through: taking the slot, waiting for it, making it, reconnecting. */
  readonly event?: (event: InsertFeedEvent) => void;
}

export interface InsertFeed {
  /** The name of the slot the feed reads (for logs and metrics). */
  readonly slot: string;
  /**
   * Takes the slot, waiting while another consumer holds it, and streams each committed batch to
   * `handlers.batch`, one at a time (the next waits until it resolves). Resolves once streaming
   * has begun; reconnects after a break until `stop`. Rejects when the database cannot stream at
   * all (for example logical replication is off), with an error saying what to change. A stop
   * while it waits for the slot resolves it.
   */
  start(handlers: InsertFeedHandlers): Promise<void>;
  /** Everything up to `position` is dealt with: the database may drop the log before it. Positions only move forward. */
  confirm(position: string): void;
  /** The slot's lag now, or null when the slot does not exist. */
  lag(): Promise<InsertFeedLag | null>;
  /** Stops streaming (what was confirmed stays confirmed) and closes its connections. */
  stop(): Promise<void>;
}
