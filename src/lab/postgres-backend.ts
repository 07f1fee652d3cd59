// The lab on PostgreSQL: every run gets a fresh schema of its own (wassal_lab_<random>), dropped
// at the end unless kept, so runs never see each other's rows.

import { randomBytes } from "node:crypto";
import type { Clock } from "../outbox/clock.js";
import { dropSchema, postgresServerVersion, redactUrl } from "../stores/admin.js";
import { PostgresPaymentsRepository } from "../stores/postgres/payments-repository.js";
import { PostgresOutboxStore, type PostgresTx } from "../stores/postgres/postgres-outbox-store.js";
import type { LabBackend, LabConnection } from "./backend.js";

export class PostgresLabBackend implements LabBackend<PostgresTx> {
  readonly location: string;
  readonly description: string;
  readonly #url: string;
  readonly #schema: string;
  readonly #keep: boolean;
  readonly #connections: PostgresOutboxStore[] = [];

  private constructor(url: string, schema: string, version: string, keep: boolean) {
    this.#url = url;
    this.#schema = schema;
    this.#keep = keep;
    this.location = `${redactUrl(url)} (schema ${schema})`;
    this.description = `PostgreSQL ${version} (pg), READ COMMITTED, one pool per worker`;
  }

  /** Checks the server is reachable (one clear error if not) and picks a fresh schema name. */
  static async open(url: string, keep: boolean): Promise<PostgresLabBackend> {
    const version = await postgresServerVersion(url);
    return new PostgresLabBackend(url, `wassal_lab_${randomBytes(5).toString("hex")}`, version, keep);
  }

  async connect(clock: Clock): Promise<LabConnection<PostgresTx>> {
    const store = await PostgresOutboxStore.connect({ url: this.#url, schema: this.#schema, clock, maxConnections: 2 });
    this.#connections.push(store);
    await store.migrate();
    const repository = new PostgresPaymentsRepository(store);
    await repository.migrate();
    return { store, repository };
  }

  async dispose(): Promise<string> {
    for (const store of this.#connections) await store.close();
    if (this.#keep) return `schema ${this.#schema} kept (--keep-db)`;
    await dropSchema(this.#url, this.#schema);
    return `temporary schema ${this.#schema} dropped`;
  }
}
