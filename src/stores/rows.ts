// Rows as the drivers read them, mapped to the library's shapes once. The two databases hand back
// the same columns in different forms (SQLite: epoch milliseconds and JSON text; PostgreSQL: Date
// objects and parsed jsonb), so each mapper takes the form it is given.

import type { ScheduleRecord } from "../outbox/driver.js";
import type { LimitRecord, LimitUse } from "../outbox/limits.js";
import type {
  AuditAction,
  AuditEntry,
  JsonValue,
  LeaseOperation,
  MessageHolder,
  MessageState,
  MessageStatus,
  MessageText,
  OutboxMessage,
} from "../outbox/types.js";

/** A time column: epoch milliseconds (SQLite) or a Date (PostgreSQL). */
export type TimeValue = number | Date;

export function toDate(value: TimeValue): Date {
  return value instanceof Date ? value : new Date(value);
}

function toDateOrNull(value: TimeValue | null): Date | null {
  return value === null ? null : toDate(value);
}

/** An outbox_messages row with every column. */
export interface MessageRow {
  id: number | string;
  type: string;
  dedupe_key: string | null;
  ordering_key: string | null;
  /** The key's sequence number (a bigint: text on PostgreSQL), or null. */
  key_seq: number | string | null;
  /** JSON text (SQLite) or an already parsed object (PostgreSQL jsonb), or null. */
  headers: unknown;
  destination: string | null;
  priority: number;
  singleton_key: string | null;
  /** JSON text (SQLite) or an already parsed value (PostgreSQL jsonb). */
  payload: unknown;
  status: string;
  created_at: TimeValue;
  available_at: TimeValue;
  locked_by: string | null;
  locked_until: TimeValue | null;
  lease_token: number;
  attempts: number;
  last_error: string | null;
  processed_at: TimeValue | null;
}

const NO_HEADERS: Readonly<Record<string, string>> = Object.freeze({});

/** Stored headers (JSON text, a parsed jsonb object, or null) as the message shows them. */
export function toHeaders(value: unknown, isText: boolean): Readonly<Record<string, string>> {
  if (value === null || value === undefined) return NO_HEADERS;
  return (isText ? JSON.parse(value as string) : value) as Record<string, string>;
}

/**
 * A row read through another library (an ORM's raw query) in the form the mappers take: some hand
 * back 64-bit integers as BigInt, which become numbers (the id is made a string by the mapper).
 */
export function fromForeignRow(row: Readonly<Record<string, unknown>> | undefined): MessageRow {
  if (row === undefined) throw new Error("the insert returned no row");
  const plain: Record<string, unknown> = {};
  for (const [column, value] of Object.entries(row)) {
    // A BIGINT time may come as a BigInt, or as decimal text (TypeORM's mysql2 default, bigNumberStrings).
    plain[column] =
      typeof value === "bigint" && column !== "id"
        ? Number(value)
        : typeof value === "string" && MILLISECOND_COLUMNS.has(column) && /^\d+$/.test(value)
          ? Number(value)
          : value;
  }
  return plain as unknown as MessageRow;
}

/** The columns a store may keep as epoch milliseconds (SQLite, MariaDB). */
const MILLISECOND_COLUMNS: ReadonlySet<string> = new Set(["created_at", "available_at", "locked_until", "processed_at"]);

/** Orders rows by id (a 64-bit integer as a number, a BigInt or decimal text): an INSERT's RETURNING promises no order. */
export function byId(a: { readonly id: unknown }, b: { readonly id: unknown }): number {
  const x = BigInt(a.id as string | number | bigint);
  const y = BigInt(b.id as string | number | bigint);
  return x < y ? -1 : x > y ? 1 : 0;
}

/** `payloadIsText`: the payload column holds JSON text to parse (SQLite), not a parsed value. */
export function toMessage(row: MessageRow, payloadIsText: boolean): OutboxMessage {
  return {
    id: String(row.id),
    type: row.type,
    dedupeKey: row.dedupe_key,
    key: row.ordering_key,
    keySeq: row.key_seq === null || row.key_seq === undefined ? null : Number(row.key_seq),
    headers: toHeaders(row.headers, payloadIsText),
    destination: row.destination,
    priority: Number(row.priority),
    singletonKey: row.singleton_key,
    payload: (payloadIsText ? JSON.parse(row.payload as string) : row.payload) as JsonValue,
    status: row.status as MessageStatus,
    createdAt: toDate(row.created_at),
    availableAt: toDate(row.available_at),
    lockedBy: row.locked_by,
    lockedUntil: toDateOrNull(row.locked_until),
    leaseToken: row.lease_token,
    attempts: row.attempts,
    lastError: row.last_error,
    processedAt: toDateOrNull(row.processed_at),
  };
}

/** An outbox_messages row without its payload and headers. */
export type MessageStateRow = Omit<MessageRow, "payload" | "headers">;

/** The row without its payload and headers (toMessage's fields, written out again: toMessage is on the claim path, and stays one object literal). */
export function toMessageState(row: MessageStateRow): MessageState {
  return {
    id: String(row.id),
    type: row.type,
    dedupeKey: row.dedupe_key,
    key: row.ordering_key,
    keySeq: row.key_seq === null || row.key_seq === undefined ? null : Number(row.key_seq),
    destination: row.destination,
    priority: Number(row.priority),
    singletonKey: row.singleton_key,
    status: row.status as MessageStatus,
    createdAt: toDate(row.created_at),
    availableAt: toDate(row.available_at),
    lockedBy: row.locked_by,
    lockedUntil: toDateOrNull(row.locked_until),
    leaseToken: row.lease_token,
    attempts: row.attempts,
    lastError: row.last_error,
    processedAt: toDateOrNull(row.processed_at),
  };
}

/** A state row with the payload and headers as JSON text (perhaps cut) and the whole texts' sizes in bytes. */
export interface MessageTextRow extends MessageStateRow {
  payload_text: string;
  payload_bytes: number | string;
  headers_text: string;
  headers_bytes: number | string;
}

export function toMessageText(row: MessageTextRow): MessageText {
  const excerpt = (text: string, bytes: number | string) => ({ text, bytes: Number(bytes), cut: Buffer.byteLength(text) < Number(bytes) });
  return { ...toMessageState(row), payload: excerpt(row.payload_text, row.payload_bytes), headers: excerpt(row.headers_text, row.headers_bytes) };
}

export interface HolderRow {
  status: string;
  locked_by: string | null;
  locked_until: TimeValue | null;
  lease_token: number;
  /** 1 while the message waits behind an earlier message of its ordering key. */
  key_state?: number;
}

export function toHolder(row: HolderRow | undefined): MessageHolder | null {
  if (row === undefined) return null;
  return { status: row.status as MessageStatus, lockedBy: row.locked_by, lockedUntil: toDateOrNull(row.locked_until), leaseToken: row.lease_token };
}

/** A refused write's holder as its statement returns it beside its own columns (all null when the message was gone, or nothing was refused). */
export interface HeldRow {
  held_status: string | null;
  held_by: string | null;
  held_until: TimeValue | null;
  held_token: number | null;
}

export function toHeldHolder(row: HeldRow): MessageHolder | null {
  if (row.held_status === null) return null;
  return { status: row.held_status as MessageStatus, lockedBy: row.held_by, lockedUntil: toDateOrNull(row.held_until), leaseToken: row.held_token ?? 0 };
}

/** The holder a claim of one named message found, and whether the message waits behind its key. */
export function toFoundHolder(row: HolderRow): MessageHolder & { readonly waiting: boolean } {
  return {
    status: row.status as MessageStatus,
    lockedBy: row.locked_by,
    lockedUntil: toDateOrNull(row.locked_until),
    leaseToken: row.lease_token,
    waiting: row.key_state === 1,
  };
}

export interface AuditRow {
  message_id: number | string;
  lease_token: number;
  owner: string;
  action: string;
  at: TimeValue;
  previous_status: string | null;
  previous_owner: string | null;
  previous_locked_until: TimeValue | null;
  operation: string | null;
}

export function toAuditEntry(row: AuditRow): AuditEntry {
  return {
    messageId: String(row.message_id),
    token: row.lease_token,
    owner: row.owner,
    action: row.action as AuditAction,
    at: toDate(row.at),
    previousStatus: row.previous_status as MessageStatus | null,
    previousOwner: row.previous_owner,
    previousLockedUntil: toDateOrNull(row.previous_locked_until),
    operation: row.operation as LeaseOperation | null,
  };
}

/** What a cancel reads of its message first (cancelTarget): its holder, type, key and place in the key. */
export interface CancelRow extends HolderRow {
  type: string;
  ordering_key: string | null;
  key_seq: number | string | null;
}

/** The message as a cancel found it, for CancelAttempt.before. */
export function toCancelTarget(
  row: CancelRow,
): MessageHolder & { readonly type: string; readonly key: string | null; readonly keySeq: number | null; readonly holdsKey: boolean } {
  return {
    status: row.status as MessageStatus,
    lockedBy: row.locked_by,
    lockedUntil: toDateOrNull(row.locked_until),
    leaseToken: Number(row.lease_token),
    type: row.type,
    key: row.ordering_key,
    keySeq: row.key_seq === null ? null : Number(row.key_seq),
    holdsKey: row.ordering_key !== null && Number(row.key_state ?? 0) === 0,
  };
}

/** An outbox_schedules row (times: epoch milliseconds, as a number or BIGINT text, or a Date). */
export interface ScheduleRow {
  name: string;
  cron: string;
  timezone: string;
  backfill_ms: number | string;
  version: number | string;
  type: string;
  payload: string;
  headers: string | null;
  ordering_key: string | null;
  destination: string | null;
  priority: number | string;
  next_at: number | string | Date | null;
  last_tick_at: number | string | Date | null;
  created_at: number | string | Date;
  updated_at: number | string | Date;
}

function scheduleTime(value: number | string | Date): Date {
  return value instanceof Date ? value : new Date(Number(value));
}

export function toScheduleRecord(row: ScheduleRow): ScheduleRecord {
  return {
    name: row.name,
    cron: row.cron,
    timezone: row.timezone,
    backfillMs: Number(row.backfill_ms),
    version: Number(row.version),
    type: row.type,
    payload: row.payload,
    headers: row.headers,
    key: row.ordering_key,
    destination: row.destination,
    priority: Number(row.priority),
    nextAt: row.next_at === null ? null : scheduleTime(row.next_at),
    lastTickAt: row.last_tick_at === null ? null : scheduleTime(row.last_tick_at),
    createdAt: scheduleTime(row.created_at),
    updatedAt: scheduleTime(row.updated_at),
  };
}

/** An outbox_limits row (times as in ScheduleRow). */
export interface LimitRow {
  type: string;
  concurrency: number | string | null;
  rate_count: number | string | null;
  rate_interval_ms: number | string | null;
  created_at: number | string | Date;
  updated_at: number | string | Date;
}

const numberOrNull = (value: number | string | null): number | null => (value === null ? null : Number(value));

export function toLimitRecord(row: LimitRow): LimitRecord {
  return {
    type: row.type,
    concurrency: numberOrNull(row.concurrency),
    rateCount: numberOrNull(row.rate_count),
    rateIntervalMs: numberOrNull(row.rate_interval_ms),
    createdAt: scheduleTime(row.created_at),
    updatedAt: scheduleTime(row.updated_at),
  };
}

/** What a type's claims hold (a limit's use), as counted: numbers or BIGINT text. */
export function toLimitUse(row: { running: number | string | null; started: number | string | null } | undefined): LimitUse {
  return { running: Number(row?.running ?? 0), started: Number(row?.started ?? 0) };
}
