// A competing writer for chaos runs on SQLite: takes the database's write lock and holds it for a
// while, longer than the workers' busy_timeout, then lets go. Run as its own process:
//   node dist/chaos/lock-holder.js <database-file> <hold-ms>

import { holdWriteLock } from "../stores/sqlite/write-lock.js";

const [path, holdText] = process.argv.slice(2);
const holdMs = Number(holdText);
if (!path || !Number.isFinite(holdMs) || holdMs < 0) {
  process.stderr.write("usage: lock-holder <database-file> <hold-ms>\n");
  process.exit(2);
}
holdWriteLock(path, holdMs);
