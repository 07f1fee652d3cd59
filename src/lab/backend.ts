// Where a lab run keeps its data. A backend opens one connection per simulated application
// instance (each worker gets its own), all on the same database.

import type { Clock } from "../outbox/clock.js";
import type { OutboxStore } from "../outbox/store.js";
import type { PaymentsRepository } from "../payments/types.js";

export interface LabConnection<Tx> {
  readonly store: OutboxStore<Tx>;
  readonly repository: PaymentsRepository<Tx>;
}

export interface LabBackend<Tx> {
  /** One line naming the store and its settings, for the report. */
  readonly description: string;
  /** Where the data lives (a file path, or a URL and schema). */
  readonly location: string;
  /** Opens a new connection (an application instance) using this clock. */
  connect(clock: Clock): Promise<LabConnection<Tx>>;
  /** Removes the data (unless the user asked to keep it) and reports what it did. */
  dispose(): Promise<string>;
}
