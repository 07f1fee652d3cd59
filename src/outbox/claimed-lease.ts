// The lease a claim hands back, built from what the claim read back and what it wrote itself.
// A claim sets status, owner, lease end (which is also available_at) and clears processed_at;
// stores return only the other columns (each RETURNING column costs time per row), and this one
// function states what the claim wrote, for every store.

import type { JsonValue, Lease, OutboxMessage } from "./types.js";

/** The columns a claim did not write: read back from the claimed row. */
export interface ClaimReadBack {
  readonly id: string;
  readonly type: string;
  readonly dedupeKey: string | null;
  readonly key: string | null;
  readonly keySeq: number | null;
  readonly headers: Readonly<Record<string, string>>;
  readonly destination: string | null;
  readonly priority: number;
  readonly singletonKey: string | null;
  readonly payload: JsonValue;
  readonly createdAt: Date;
  readonly token: number;
  readonly attempts: number;
  readonly lastError: string | null;
}

export function claimedLease(read: ClaimReadBack, owner: string, lockedUntil: Date, reclaimedFrom: string | null): Lease {
  const message: OutboxMessage = {
    id: read.id,
    type: read.type,
    dedupeKey: read.dedupeKey,
    key: read.key,
    keySeq: read.keySeq,
    headers: read.headers,
    destination: read.destination,
    priority: read.priority,
    singletonKey: read.singletonKey,
    payload: read.payload,
    status: "processing",
    createdAt: read.createdAt,
    availableAt: lockedUntil,
    lockedBy: owner,
    lockedUntil,
    leaseToken: read.token,
    attempts: read.attempts,
    lastError: read.lastError,
    processedAt: null,
  };
  return { messageId: read.id, owner, token: read.token, lockedUntil, message, reclaimedFrom };
}
