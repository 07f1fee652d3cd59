// The lab on a SQLite file: a fresh temporary file by default (deleted at the end unless kept),
// or a file the user names, which must not already hold Wassal data.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Clock } from "../outbox/clock.js";
import { DatabaseOpenError } from "../outbox/errors.js";
import { sqliteHoldsTables, sqliteVersion } from "./stores/admin.js";
import { openLabOutbox } from "./stores/open-lab-outbox.js";
import { OpenedConnections, type DatabaseTarget, type LabBackend, type LabConnection } from "./backend.js";

export interface SqliteBackendOptions {
  /** A file to use instead of a temporary one; it is kept. */
  readonly path?: string;
  /** Keep the temporary file at the end. */
  readonly keep?: boolean;
  /** Scenario name, used in the temporary folder's name. */
  readonly label: string;
}

export class SqliteLabBackend implements LabBackend<unknown> {
  readonly location: string;
  readonly description: string;
  readonly target: DatabaseTarget;
  readonly #tempDir: string | null;
  readonly #keep: boolean;
  readonly #connections = new OpenedConnections();

  constructor(options: SqliteBackendOptions) {
    if (options.path !== undefined) {
      if (sqliteHoldsTables(options.path, ["outbox_messages", "payments"])) {
        throw new DatabaseOpenError(
          `${options.path} already holds Wassal tables; the lab needs an empty database (give a new file path, or leave out --db for a temporary one)`,
        );
      }
      this.location = options.path;
      this.#tempDir = null;
      this.#keep = true;
    } else {
      this.#tempDir = mkdtempSync(join(tmpdir(), `wassal-${options.label}-`));
      this.location = join(this.#tempDir, "wassal-outbox.db");
      this.#keep = options.keep ?? false;
    }
    this.target = { db: this.location, options: {} };
    this.description = `SQLite ${sqliteVersion()} (better-sqlite3), WAL, synchronous=FULL, one connection per worker`;
  }

  async connect(clock: Clock): Promise<LabConnection<unknown>> {
    const opened = await this.#connections.open(() => openLabOutbox(this.location, { clock }));
    return { store: opened.store, repository: opened.payments };
  }

  async dispose(): Promise<string> {
    await this.#connections.closeAll();
    if (this.#tempDir === null) return `database kept at ${this.location} (you named it with --db)`;
    if (this.#keep) return `database kept at ${this.location} (--keep-db)`;
    rmSync(this.#tempDir, { recursive: true, force: true });
    return `temporary database ${this.location} deleted`;
  }
}
