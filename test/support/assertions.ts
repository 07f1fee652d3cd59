// Checks shared by the test files: what a command printed on error, and leases that must never
// overlap.

import { expect } from "vitest";

/** No "    at foo (file:line)" lines, no internal or file URLs, no "file.js:12": errors are messages, not stack traces. */
export function expectNoStack(text: string): void {
  expect(text).not.toMatch(/^\s+at .+/m);
  expect(text).not.toMatch(/node:internal|file:\/\/|\.js:\d+/);
}

/** `text` (stderr) holds exactly one non-empty line; returns it. */
export function oneLine(text: string): string {
  const lines = text.split("\n").filter((line) => line.trim() !== "");
  expect(lines, `stderr: ${JSON.stringify(text)}`).toHaveLength(1);
  return lines[0]!;
}

/** Commander's hint after a usage error: allowed as a second line after the error itself. */
export const HELP_HINT = "(run with --help for usage)";

/** The one error line of a failed command (the help hint aside), with no stack trace. */
export function errorLine(stderr: string): string {
  expectNoStack(stderr);
  return oneLine(
    stderr
      .split("\n")
      .filter((line) => line.trim() !== HELP_HINT)
      .join("\n"),
  );
}

/** One claim of a message as a process saw it: who held which token from when until when (epoch ms). */
export interface ClaimSpan {
  readonly messageId: string;
  readonly token: number;
  readonly owner: string;
  readonly claimedAt: number;
  readonly lockedUntil: number;
}

/**
 * What went wrong in a set of claims, as one line each (none when all is well): a token of one
 * message issued twice, or two claims of one message under different tokens whose leases
 * [claimedAt, lockedUntil) overlap, i.e. two owners holding the message at once.
 */
export function overlappingClaims(claims: readonly ClaimSpan[]): string[] {
  const byMessage = new Map<string, ClaimSpan[]>();
  for (const claim of claims) {
    const list = byMessage.get(claim.messageId);
    if (list === undefined) byMessage.set(claim.messageId, [claim]);
    else list.push(claim);
  }
  const problems: string[] = [];
  for (const [messageId, list] of byMessage) {
    for (let i = 0; i < list.length; i += 1) {
      for (let j = i + 1; j < list.length; j += 1) {
        const a = list[i]!;
        const b = list[j]!;
        if (a.token === b.token) {
          problems.push(`message ${messageId}: token ${a.token} issued twice (${a.owner}, ${b.owner})`);
        } else if (a.claimedAt < b.lockedUntil && b.claimedAt < a.lockedUntil) {
          problems.push(
            `message ${messageId}: ${a.owner}#${a.token} [${a.claimedAt}, ${a.lockedUntil}) overlaps ${b.owner}#${b.token} [${b.claimedAt}, ${b.lockedUntil})`,
          );
        }
      }
    }
  }
  return problems;
}
