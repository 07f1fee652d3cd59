// Opens an outbox for the payments lab, the payments commands and the chaos harness: the outbox
// as openOutbox opens it, plus the payments tables, which only these create.

import type { PaymentsRepository } from "../../payments/types.js";
import { type OpenedOutbox, type OpenOutboxOptions, openOutbox } from "../../stores/open-outbox.js";
import { paymentsRepositoryFor } from "./lab-stores.js";

export interface LabOutbox extends OpenedOutbox {
  readonly payments: PaymentsRepository<unknown>;
}

/** Opens and migrates the outbox and the payments tables (or, with readOnly, only opens them). */
export async function openLabOutbox(db: string, options: OpenOutboxOptions = {}): Promise<LabOutbox> {
  const opened = await openOutbox(db, options);
  try {
    const payments = paymentsRepositoryFor(opened.store);
    if (!options.readOnly) await payments.migrate();
    return { ...opened, payments };
  } catch (error) {
    await opened.close();
    throw error;
  }
}

/** Opens the lab's outbox, runs `work` with it, and closes it whatever happens. */
export async function withLabOutbox<T>(db: string, options: OpenOutboxOptions, work: (outbox: LabOutbox) => Promise<T>): Promise<T> {
  const outbox = await openLabOutbox(db, options);
  try {
    return await work(outbox);
  } finally {
    await outbox.close();
  }
}
