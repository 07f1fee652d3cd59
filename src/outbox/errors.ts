// Every error Wassal throws on purpose. Each message says what went wrong and what to do.

/** The base class: `err instanceof WassalError` catches every deliberate Wassal error. */
export class WassalError extends Error {
  override name = "WassalError";
  /** A stable, machine-readable code. */
  readonly code: string;

  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}

/** An argument or option had a value outside its valid range. */
export class InvalidArgumentError extends WassalError {
  override name = "InvalidArgumentError";
  /** `code`: for subclasses that name a narrower kind of bad input. */
  constructor(message: string, code = "INVALID_ARGUMENT", options?: { cause?: unknown }) {
    super(code, message, options);
  }
}

/**
 * A payload holds a value that would not come back from the database as it went in (a BigInt, a
 * cycle, NaN, a Date or Map, a NUL character…). `path` says where, as in `$.items[2].amount`.
 */
export class UnsupportedPayloadError extends InvalidArgumentError {
  override name = "UnsupportedPayloadError";
  /** Where in the payload the value sits (`$` is the payload itself). */
  readonly path: string;
  constructor(path: string, detail: string) {
    super(
      `payload value at ${path} cannot be stored faithfully: ${detail}. A payload may hold only null, booleans, finite numbers, well-formed strings without NUL, arrays and plain objects`,
      "UNSUPPORTED_PAYLOAD",
    );
    this.path = path;
  }
}

/** The database could not be opened, or is not a database this store can use. */
export class DatabaseOpenError extends WassalError {
  override name = "DatabaseOpenError";
  constructor(message: string, options?: { cause?: unknown }) {
    super("DATABASE_OPEN", message, options);
  }
}

/**
 * The database holds migrations this version of Wassal does not know: a newer Wassal migrated it
 * (typically after a deployment was rolled back). It is refused for writing, before anything is
 * written; it can still be opened read-only (readOnly) to inspect it. `newer` names the unknown
 * migrations.
 */
export class DatabaseTooNewError extends DatabaseOpenError {
  override name = "DatabaseTooNewError";
  /** The migrations recorded in the database that this version does not ship, e.g. ["outbox-014-…"]. */
  readonly newer: readonly string[];
  constructor(location: string, newer: readonly string[]) {
    super(
      `${location} was migrated by a newer Wassal (${newer.join(", ")}); upgrade wassal to use it, or open it read-only to inspect it (wassal outbox stats, dead, show; readOnly: true in the library)`,
    );
    this.newer = [...newer];
  }
}

/**
 * Wassal's outbox tables are missing from the database, or have migrations pending: nothing was
 * written. Create or upgrade them first, as a deploy step (`wassal migrate --db …`) or from code
 * (`await store.migrate()`). `pending` names the migrations not yet applied, when known.
 */
export class NotMigratedError extends DatabaseOpenError {
  override name = "NotMigratedError";
  readonly pending: readonly string[];
  constructor(location: string | null, pending: readonly string[], options?: { cause?: unknown }) {
    const where = location === null ? "this database" : location;
    const what = pending.length === 0 ? "has no Wassal outbox tables" : `has Wassal migrations pending (${pending.join(", ")})`;
    super(`${where} ${what}: run 'wassal migrate --db <url or path>' first (or await store.migrate() from code)`, options);
    this.pending = [...pending];
  }
}

/** A write was attempted through a store opened read-only. */
export class StoreReadOnlyError extends WassalError {
  override name = "StoreReadOnlyError";
  constructor(location: string) {
    super(
      "STORE_READ_ONLY",
      `${location} was opened read-only, so nothing can be written through it; open the store without readOnly, as a user who may write the database`,
    );
  }
}

/** A write could not get the database's write lock in time; the operation wrote nothing and can be retried. */
export class StoreBusyError extends WassalError {
  override name = "StoreBusyError";
  constructor(message: string, options?: { cause?: unknown }) {
    super("STORE_BUSY", message, options);
  }
}

/** `enqueue` was given a connection that is not inside a transaction. */
export class NotInTransactionError extends WassalError {
  override name = "NotInTransactionError";
  constructor(message: string, options?: { cause?: unknown }) {
    super("NOT_IN_TRANSACTION", message, options);
  }
}

/**
 * The caller no longer holds the lease it presented: the message was reclaimed (its lease token
 * moved on), completed, failed or released. Nothing was written. Lease operations return a
 * `lease-lost` result rather than throw; use `assertHeld` to turn that result into this error.
 */
export class LeaseLostError extends WassalError {
  override name = "LeaseLostError";
  readonly messageId: string;
  readonly token: number;

  constructor(messageId: string, token: number, detail: string) {
    super(
      "LEASE_LOST",
      `lease on message ${messageId} (token ${token}) is no longer held: ${detail}. Nothing was written; drop the work, another owner has it or it is already finished`,
    );
    this.messageId = messageId;
    this.token = token;
  }
}

/** `unblockKey` was given a key that no dead message blocks. */
export class KeyNotBlockedError extends WassalError {
  override name = "KeyNotBlockedError";
  readonly key: string;
  /** Where the key is not blocked: the outbox (no dead message holds it), or a consumer's inbox (no message of it is held back) with its source. */
  constructor(key: string, inbox?: { readonly source: string }) {
    super(
      "KEY_NOT_BLOCKED",
      inbox === undefined
        ? `ordering key ${JSON.stringify(key)} is not blocked (no dead message holds it); see the blocked keys with: wassal outbox blocked-keys`
        : `ordering key ${JSON.stringify(key)} holds nothing back at the inbox (source ${JSON.stringify(inbox.source)}); see the keys that do with: wassal inbox blocked-keys`,
    );
    this.key = key;
  }
}

/** A message id or dedupe key was not found. */
export class MessageNotFoundError extends WassalError {
  override name = "MessageNotFoundError";
  constructor(message: string) {
    super("MESSAGE_NOT_FOUND", message);
  }
}

/** A schedule was named that this outbox does not have. */
export class ScheduleNotFoundError extends WassalError {
  override name = "ScheduleNotFoundError";
  readonly schedule: string;
  constructor(schedule: string, known: readonly string[]) {
    super(
      "SCHEDULE_NOT_FOUND",
      `no schedule is named ${JSON.stringify(schedule)} in this outbox; ${known.length === 0 ? "it has none" : `its schedules: ${known.map((name) => JSON.stringify(name)).join(", ")}`} (list them with: wassal schedule list)`,
    );
    this.schedule = schedule;
  }
}

/** A limit was named that this outbox does not have (wassal limit remove). */
export class LimitNotFoundError extends WassalError {
  override name = "LimitNotFoundError";
  readonly type: string;
  constructor(type: string, known: readonly string[]) {
    super(
      "LIMIT_NOT_FOUND",
      `message type ${JSON.stringify(type)} has no limit in this outbox; ${known.length === 0 ? "no type has one" : `the limited types: ${known.map((name) => JSON.stringify(name)).join(", ")}`} (list them with: wassal limit list)`,
    );
    this.type = type;
  }
}

/** store.cancel was given a message that is running: leased by a worker now (status processing). */
export class MessageRunningError extends WassalError {
  override name = "MessageRunningError";
  readonly messageId: string;
  readonly lockedBy: string | null;
  constructor(messageId: string, lockedBy: string | null, lockedUntil: Date | null) {
    super(
      "MESSAGE_RUNNING",
      `message ${messageId} is running (leased by ${JSON.stringify(lockedBy)}${lockedUntil === null ? "" : ` until ${lockedUntil.toISOString()}`}), so it was not cancelled. Nothing was changed; to cancel it while it runs (its run is aborted and its result refused), pass { running: true } (wassal outbox cancel --running), or wait for its attempt to end`,
    );
    this.messageId = messageId;
    this.lockedBy = lockedBy;
  }
}

/** store.cancel was given a message that is finished (processed or dead): there is nothing to cancel. */
export class MessageNotPendingError extends WassalError {
  override name = "MessageNotPendingError";
  readonly messageId: string;
  readonly status: "processed" | "dead" | "cancelled";
  constructor(messageId: string, status: "processed" | "dead" | "cancelled") {
    super(
      "MESSAGE_NOT_PENDING",
      status === "processed"
        ? `message ${messageId} was already processed, so it cannot be cancelled (only a pending message can); nothing was changed (processed messages go with: wassal outbox purge --processed-before …)`
        : status === "cancelled"
          ? `message ${messageId} was already cancelled; nothing was changed (cancelled messages go with processed ones: wassal outbox purge --processed-before …)`
          : `message ${messageId} is dead, so it cannot be cancelled (only a pending message can); nothing was changed: purge it (wassal outbox purge --dead-before …), or if it blocks its key, skip it (wassal outbox unblock <key> --skip)`,
    );
    this.messageId = messageId;
    this.status = status;
  }
}

/** A message with the same dedupe key already exists. */
export class DuplicateMessageError extends WassalError {
  override name = "DuplicateMessageError";
  readonly dedupeKey: string;
  /** `message`: in place of the usual one, when the key is not (only) taken in the table (enqueueMany's list). */
  constructor(dedupeKey: string, options?: { readonly message?: string; readonly cause?: unknown }) {
    super(
      "DUPLICATE_MESSAGE",
      options?.message ??
        `an outbox message with dedupe key ${JSON.stringify(dedupeKey)} already exists; each dedupe key is enqueued once (look the existing one up instead)`,
      options?.cause === undefined ? undefined : { cause: options.cause },
    );
    this.dedupeKey = dedupeKey;
  }
}

/**
 * An error that retrying cannot fix (a malformed payload, say): the worker marks the message dead
 * at once instead of spending its remaining attempts. Handlers may throw subclasses.
 */
export class UnrecoverableError extends WassalError {
  override name = "UnrecoverableError";
}

/** A relay told to take message types it has no route for: their messages would go dead. */
export class UnroutedTypesError extends InvalidArgumentError {
  override name = "UnroutedTypesError";
  readonly types: readonly string[];
  constructor(types: readonly string[]) {
    super(
      `the relay takes ${types.map((type) => JSON.stringify(type)).join(", ")} but has no route for ${types.length === 1 ? "it" : "them"}: give each a route (--route <type>=<destination>, routes.byType) or a default destination (--destination, routes.default), or, if their messages are enqueued with a destination of their own, say so (--own-destinations, routes.ownDestinations); a message with nowhere to go would be dead at once`,
      "UNROUTED_TYPES",
    );
    this.types = types;
  }
}

/** No handler is registered for a message's type: the message is dead, the worker carries on. */
export class UnknownMessageTypeError extends WassalError {
  override name = "UnknownMessageTypeError";
  constructor(type: string, known: readonly string[]) {
    super(
      "UNKNOWN_MESSAGE_TYPE",
      `no handler for message type ${JSON.stringify(type)} (this worker handles: ${known.length ? known.join(", ") : "nothing"}); register one, then redrive the message`,
    );
  }
}

/**
 * A handler ran past its maximum processing time: the attempt failed (retried as any failure is),
 * and the handler's signal was aborted with this error so it can stop. A result it commits later is
 * refused, as any stale owner's is.
 */
export class ProcessingTimeoutError extends WassalError {
  override name = "ProcessingTimeoutError";
  constructor(type: string, maxProcessingMs: number) {
    super(
      "PROCESSING_TIMEOUT",
      `the handler for message type ${JSON.stringify(type)} ran longer than its maximum processing time of ${maxProcessingMs} ms; the attempt failed and the handler's signal was aborted (make it finish sooner, or raise maxProcessingMs)`,
    );
  }
}

/** A message was claimed more times than allowed without finishing (its workers crashed or lost the lease each time). */
export class AttemptsExhaustedError extends WassalError {
  override name = "AttemptsExhaustedError";
  constructor(attempts: number, maxAttempts: number, lastError: string | null) {
    super(
      "ATTEMPTS_EXHAUSTED",
      `claimed ${attempts} times, more than the ${maxAttempts} allowed, without finishing (a worker died or lost its lease each time)${lastError ? `; last error: ${lastError}` : ""}`,
    );
  }
}

/** The worker is shutting down and gave the message back. */
export class ShutdownError extends WassalError {
  override name = "ShutdownError";
  constructor() {
    super("SHUTDOWN", "the worker is shutting down; the message was released for another worker");
  }
}

/**
 * A message was enqueued in a sharded outbox's transaction on a shard other than the one its
 * ordering key (or dedupe key) routes to: on that shard, its key's order would not hold. Nothing was
 * written. Open the transaction with the message's key as its route.
 */
export class WrongShardError extends InvalidArgumentError {
  override name = "WrongShardError";
  /** The shard the message belongs on. */
  readonly belongsOn: number;
  /** The shard whose transaction it was given to. */
  readonly givenTo: number;
  constructor(what: string, belongsOn: number, givenTo: number) {
    super(
      `a message with ${what} belongs on shard ${belongsOn}, not on shard ${givenTo} whose transaction it was given to; nothing was written. Open the transaction with that key as its route`,
      "WRONG_SHARD",
    );
    this.belongsOn = belongsOn;
    this.givenTo = givenTo;
  }
}
