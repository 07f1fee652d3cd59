// Waiting with a deadline instead of sleeping: poll an observable condition, or race a promise
// against a deadline. Both fail with a message naming what was awaited.

/**
 * Calls `probe` every `intervalMs` until it returns something other than undefined (or false),
 * and returns that. Throws, naming `what` and the last value seen, when `timeoutMs` passes.
 * A probe that throws ends the wait with its error (for "the process died while we waited").
 */
export async function until<T>(
  what: string,
  probe: () => T | undefined | false | Promise<T | undefined | false>,
  options: { timeoutMs?: number; intervalMs?: number; last?: () => unknown } = {},
): Promise<T> {
  const timeoutMs = options.timeoutMs ?? 20_000;
  const intervalMs = options.intervalMs ?? 50;
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined && value !== false) return value;
    if (performance.now() > deadline) {
      const last = options.last ? ` (last seen: ${JSON.stringify(options.last())})` : "";
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last}`);
    }
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

/**
 * Resolves with `promise`, or rejects after `ms`, naming `what` (a deadline, not a pause). `what`
 * may be a function, called at the deadline (to include, say, what a process printed by then).
 */
export function within<T>(what: string | (() => string), promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise.finally(() => clearTimeout(timer)),
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${typeof what === "string" ? what : what()}`)), ms);
    }),
  ]);
}
