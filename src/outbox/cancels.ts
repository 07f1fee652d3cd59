// How a cancel (store.cancel) shows in the audit trail: a "dead" row whose owner is "cancel", or
// "cancel: <reason>". One place makes the name and one reads it back, for the protocol, the
// timeline, the dashboard and the chaos checker alike.

import type { AuditEntry } from "./types.js";

const OWNER = "cancel";
const WITH_REASON = `${OWNER}: `;

/** The owner a cancel records (and names a cancelled row's lockedBy): "cancel", or "cancel: <reason>". */
export function cancelOwner(reason: string | undefined): string {
  return reason === undefined || reason === "" ? OWNER : `${WITH_REASON}${reason}`;
}

/** Whether an owner is a cancel's. */
export function isCancelOwner(owner: string): boolean {
  return owner === OWNER || owner.startsWith(WITH_REASON);
}

/** Whether an audit row records a cancel (rather than a death). */
export function isCancelEntry(entry: Pick<AuditEntry, "action" | "owner">): boolean {
  return entry.action === "dead" && isCancelOwner(entry.owner);
}

/** The reason a cancel's owner carries, or null. */
export function cancelReason(owner: string): string | null {
  return owner.startsWith(WITH_REASON) ? owner.slice(WITH_REASON.length) : null;
}
