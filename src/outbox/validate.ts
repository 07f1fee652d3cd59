// Argument checks shared by every store, so each one rejects bad input with the same words.

import { InvalidArgumentError, LeaseLostError } from "./errors.js";
import type { ClaimOptions, Lease, LeaseLost } from "./types.js";

export const MAX_CLAIM_LIMIT = 1000;

export function checkOwner(owner: unknown): string {
  if (typeof owner !== "string" || owner.trim() === "" || owner.length > 200) {
    throw new InvalidArgumentError(`owner must be a non-empty string of at most 200 characters (got ${JSON.stringify(owner)})`);
  }
  return owner;
}

export function checkLeaseMs(leaseMs: unknown): number {
  if (typeof leaseMs !== "number" || !Number.isInteger(leaseMs) || leaseMs <= 0 || leaseMs > 2_147_483_647) {
    throw new InvalidArgumentError(`leaseMs must be a positive whole number of milliseconds (got ${String(leaseMs)})`);
  }
  return leaseMs;
}

export function checkClaimOptions(options: ClaimOptions): ClaimOptions {
  const { limit } = options;
  if (typeof limit !== "number" || !Number.isInteger(limit) || limit < 1 || limit > MAX_CLAIM_LIMIT) {
    throw new InvalidArgumentError(`limit must be a whole number from 1 to ${MAX_CLAIM_LIMIT} (got ${String(limit)})`);
  }
  return { limit, leaseMs: checkLeaseMs(options.leaseMs) };
}

/** A lease handed back to a store: its token must be one a claim could have issued. */
export function checkLease(lease: Lease): Lease {
  if (typeof lease?.token !== "number" || !Number.isSafeInteger(lease.token) || lease.token < 1) {
    throw new InvalidArgumentError(`lease.token must be a whole number >= 1 (got ${String(lease?.token)}); pass the lease a claim returned`);
  }
  return lease;
}

export function checkDelayMs(delayMs: unknown): number {
  if (typeof delayMs !== "number" || !Number.isFinite(delayMs) || delayMs < 0) {
    throw new InvalidArgumentError(`retryInMs must be a number of milliseconds >= 0 (got ${String(delayMs)})`);
  }
  return Math.round(delayMs);
}

export function checkMessageType(type: unknown): string {
  if (typeof type !== "string" || type.trim() === "" || type.length > 200) {
    throw new InvalidArgumentError(`message type must be a non-empty string of at most 200 characters (got ${JSON.stringify(type)})`);
  }
  return type;
}

/** The text recorded as a message's last error. */
export function describeError(error: unknown): string {
  if (error instanceof Error) {
    return `${error.name}: ${error.message}`.slice(0, 4000);
  }
  return String(error).slice(0, 4000);
}

/** Turns a lease-lost result into a thrown LeaseLostError; passes any other result through. */
export function assertHeld<R extends { readonly outcome: string }>(result: R | LeaseLost): R {
  if (result.outcome === "lease-lost") {
    const lost = result as LeaseLost;
    const detail =
      lost.current === null
        ? "the message no longer exists"
        : `the message is ${lost.current.status}, held by ${lost.current.lockedBy ?? "nobody"} under token ${lost.current.leaseToken}`;
    throw new LeaseLostError(lost.messageId, lost.token, detail);
  }
  return result as R;
}

export function checkBatchSize(batchSize: unknown): number {
  if (typeof batchSize !== "number" || !Number.isInteger(batchSize) || batchSize < 1 || batchSize > 100_000) {
    throw new InvalidArgumentError(`batchSize must be a whole number from 1 to 100000 (got ${String(batchSize)})`);
  }
  return batchSize;
}
