// Where a lab run keeps its data. A backend opens one connection per simulated application
// instance (each worker gets its own), all on the same database.

import type { Clock } from "../outbox/clock.js";
import type { OutboxStore } from "../outbox/store.js";
import { WassalError } from "../outbox/errors.js";
import type { PaymentsRepository } from "../payments/types.js";
import type { OpenOutboxOptions } from "../stores/open-outbox.js";
import type { LabOutbox } from "./stores/open-lab-outbox.js";

/**
 * What another process needs to open the same database: openOutbox's arguments. `db` may hold a
 * password, so hand it over privately (the lab sends it over the IPC channel), never on a command line.
 */
export interface DatabaseTarget {
  readonly db: string;
  readonly options: Pick<OpenOutboxOptions, "schema" | "maxConnections">;
}

export interface LabConnection<Tx> {
  readonly store: OutboxStore<Tx>;
  readonly repository: PaymentsRepository<Tx>;
}

export interface LabBackend<Tx> {
  /** One line naming the store and its settings, for the report. */
  readonly description: string;
  /** Where the data lives (a file path, or a URL and schema). */
  readonly location: string;
  /** How a separate process (a child the lab kills) opens this database. */
  readonly target: DatabaseTarget;
  /** Opens a new connection (an application instance) using this clock. */
  connect(clock: Clock): Promise<LabConnection<Tx>>;
  /** Removes the data (unless the user asked to keep it) and reports what it did. */
  dispose(): Promise<string>;
}

/**
 * The connections a backend opened. `closeAll` closes every one, those still opening included
 * (an interrupted run may be mid-way through opening one, whose migration would otherwise put the
 * removed database back), and refuses new ones afterwards.
 */
export class OpenedConnections {
  readonly #opened: LabOutbox[] = [];
  readonly #opening = new Set<Promise<LabOutbox>>();
  #closed = false;

  async open(open: () => Promise<LabOutbox>): Promise<LabOutbox> {
    if (this.#closed) throw new WassalError("LAB_STOPPED", "the lab run is stopping: its database is being removed, so no connection can be opened");
    const opening = open();
    this.#opening.add(opening);
    try {
      const opened = await opening;
      this.#opened.push(opened);
      return opened;
    } finally {
      this.#opening.delete(opening);
    }
  }

  async closeAll(): Promise<void> {
    this.#closed = true;
    await Promise.allSettled([...this.#opening]);
    for (const opened of this.#opened.splice(0)) await opened.close();
  }
}
