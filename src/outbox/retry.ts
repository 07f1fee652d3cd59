// Exponential backoff with jitter: how long a failed message waits before its next attempt.

import { InvalidArgumentError } from "./errors.js";
import { MAX_RETRY_DELAY_MS } from "./validate.js";

export interface RetryPolicy {
  /** Attempts (claims) allowed in all; after the last one fails, the message is dead. */
  readonly maxAttempts: number;
  /** The wait after the first failed attempt. */
  readonly baseDelayMs: number;
  /** No wait is longer than this. */
  readonly maxDelayMs: number;
  /** 0 to 1: each wait is spread uniformly over ±jitter of its nominal value. */
  readonly jitter: number;
}

export const DEFAULT_RETRY: RetryPolicy = { maxAttempts: 5, baseDelayMs: 1_000, maxDelayMs: 300_000, jitter: 0.2 };

export function checkRetryPolicy(policy: RetryPolicy): RetryPolicy {
  const { maxAttempts, baseDelayMs, maxDelayMs, jitter } = policy;
  if (!Number.isInteger(maxAttempts) || maxAttempts < 1 || maxAttempts > 1000) {
    throw new InvalidArgumentError(`maxAttempts must be a whole number from 1 to 1000 (got ${String(maxAttempts)})`);
  }
  if (!Number.isFinite(baseDelayMs) || baseDelayMs < 0)
    throw new InvalidArgumentError(`baseDelayMs must be a number of milliseconds >= 0 (got ${String(baseDelayMs)})`);
  if (!Number.isFinite(maxDelayMs) || maxDelayMs < baseDelayMs || maxDelayMs > MAX_RETRY_DELAY_MS) {
    throw new InvalidArgumentError(
      `maxDelayMs must be a number of milliseconds from baseDelayMs to ${MAX_RETRY_DELAY_MS} (one year) (got ${String(maxDelayMs)})`,
    );
  }
  if (!Number.isFinite(jitter) || jitter < 0 || jitter > 1) throw new InvalidArgumentError(`jitter must be between 0 and 1 (got ${String(jitter)})`);
  return policy;
}

/**
 * The wait after attempt number `attempt` (1 for the first) failed:
 * min(maxDelay, base × 2^(attempt−1)), spread by ±jitter using `random` (0 ≤ random() < 1).
 */
export function backoffDelay(attempt: number, policy: RetryPolicy, random: () => number = Math.random): number {
  const nominal = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** Math.max(0, attempt - 1));
  const spread = 1 - policy.jitter + 2 * policy.jitter * random();
  return Math.round(Math.min(policy.maxDelayMs, nominal * spread));
}
