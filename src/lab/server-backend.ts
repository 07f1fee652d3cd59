// The lab on a database server: every run gets a fresh place of its own there (a schema on
// PostgreSQL, a database on MariaDB), removed at the end unless kept, so runs never see each other's rows.

import type { Clock } from "../outbox/clock.js";
import { OpenedConnections, type DatabaseTarget, type LabBackend, type LabConnection } from "./backend.js";
import { openLabOutbox } from "./stores/open-lab-outbox.js";
import { describeServer, type ScratchPlace, scratchPlace } from "./stores/places.js";

export class ServerLabBackend implements LabBackend<unknown> {
  readonly location: string;
  readonly description: string;
  readonly target: DatabaseTarget;
  readonly #place: ScratchPlace;
  readonly #keep: boolean;
  readonly #connections = new OpenedConnections();

  private constructor(place: ScratchPlace, description: string, keep: boolean) {
    this.#place = place;
    this.#keep = keep;
    this.location = place.location;
    this.target = { db: place.db, options: { ...place.options, maxConnections: 2 } };
    this.description = description;
  }

  /** Checks the server is reachable (one clear error if not) and picks a fresh place there. */
  static async open(url: string, keep: boolean): Promise<ServerLabBackend> {
    const description = await describeServer(url);
    return new ServerLabBackend(await scratchPlace(url, "", "lab"), description, keep);
  }

  async connect(clock: Clock): Promise<LabConnection<unknown>> {
    const opened = await this.#connections.open(() => openLabOutbox(this.target.db, { ...this.target.options, clock }));
    return { store: opened.store, repository: opened.payments };
  }

  async dispose(): Promise<string> {
    await this.#connections.closeAll();
    if (this.#keep) return `${this.#place.name} kept (--keep-db)`;
    await this.#place.remove();
    return `temporary ${this.#place.name} dropped`;
  }
}
