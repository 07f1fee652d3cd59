// How a store reports the outcome of lease operations on its event stream, written once so
// that every store reports the same events for the same outcome.

import type { EventHub } from "./events.js";
import type { ClaimMessageResult, Lease, LeaseLost, MessageHolder } from "./types.js";

export type LeaseOperation = "renew" | "complete" | "fail" | "release";

/** A claim of up to `limit` messages: one claim-won per lease, or one claim-empty. */
export function reportClaims(events: EventHub, owner: string, limit: number, at: Date, leases: readonly Lease[]): void {
  if (leases.length === 0) events.emit({ type: "claim-empty", at, owner, limit });
  for (const lease of leases) {
    events.emit({ type: "claim-won", at, owner, messageId: lease.messageId, token: lease.token, lockedUntil: lease.lockedUntil, reclaimedFrom: lease.reclaimedFrom });
  }
}

/** A claim of one named message: won, blocked, or (not claimable) empty. */
export function reportClaimOne(events: EventHub, owner: string, messageId: string, at: Date, result: ClaimMessageResult): void {
  if (result.outcome === "claimed") {
    reportClaims(events, owner, 1, at, [result.lease]);
  } else if (result.outcome === "blocked") {
    events.emit({ type: "claim-blocked", at, owner, messageId, heldBy: result.heldBy, lockedUntil: result.lockedUntil });
  } else {
    events.emit({ type: "claim-empty", at, owner, limit: 1 });
  }
}

/** A lease operation that found its token no longer current: reports it and builds the result. */
export function leaseLost(events: EventHub, lease: Lease, operation: LeaseOperation, at: Date, current: MessageHolder | null): LeaseLost {
  events.emit({ type: "lease-lost", at, owner: lease.owner, messageId: lease.messageId, token: lease.token, operation, heldBy: current?.lockedBy ?? null, currentToken: current?.leaseToken ?? null });
  return { outcome: "lease-lost", messageId: lease.messageId, token: lease.token, current };
}
