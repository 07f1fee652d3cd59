// The lab on PostgreSQL: every run gets a fresh schema of its own (wassal_lab_<random>), dropped
// at the end unless kept, so runs never see each other's rows.

import { randomBytes } from "node:crypto";
import type { Clock } from "../outbox/clock.js";
import { dropSchema, postgresServerVersion, redactUrl } from "../stores/admin.js";
import { openOutbox } from "../stores/open-outbox.js";
import { OpenedConnections, type DatabaseTarget, type LabBackend, type LabConnection } from "./backend.js";

export class PostgresLabBackend implements LabBackend<unknown> {
  readonly location: string;
  readonly description: string;
  readonly target: DatabaseTarget;
  readonly #url: string;
  readonly #schema: string;
  readonly #keep: boolean;
  readonly #connections = new OpenedConnections();

  private constructor(url: string, schema: string, version: string, keep: boolean) {
    this.#url = url;
    this.#schema = schema;
    this.#keep = keep;
    this.location = `${redactUrl(url)} (schema ${schema})`;
    this.target = { db: url, options: { schema, maxConnections: 2 } };
    this.description = `PostgreSQL ${version} (pg), READ COMMITTED, one pool per worker`;
  }

  /** Checks the server is reachable (one clear error if not) and picks a fresh schema name. */
  static async open(url: string, keep: boolean): Promise<PostgresLabBackend> {
    const version = await postgresServerVersion(url);
    return new PostgresLabBackend(url, `wassal_lab_${randomBytes(5).toString("hex")}`, version, keep);
  }

  async connect(clock: Clock): Promise<LabConnection<unknown>> {
    const opened = await this.#connections.open(() => openOutbox(this.#url, { ...this.target.options, clock }));
    return { store: opened.store, repository: opened.payments };
  }

  async dispose(): Promise<string> {
    await this.#connections.closeAll();
    if (this.#keep) return `schema ${this.#schema} kept (--keep-db)`;
    await dropSchema(this.#url, this.#schema);
    return `temporary schema ${this.#schema} dropped`;
  }
}
