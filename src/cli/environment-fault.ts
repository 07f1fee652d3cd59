// Failures of the machine rather than of Wassal or its input: a full disk, an I/O error, memory
// running out. They get their own exit code (EXIT.environment) and one line saying what to free,
// instead of the internal error's "report it". Told apart by the error codes the system, SQLite
// and PostgreSQL give, anywhere along the error's chain of causes.

/** What each code means, as the one line says it. */
const FAULTS: ReadonlyArray<readonly [test: (code: string) => boolean, what: string, fix: string]> = [
  [
    (c) => c === "ENOSPC" || c === "EDQUOT" || c === "SQLITE_FULL" || c === "53100",
    "the disk is full",
    "free space where the database (or the file written) lives",
  ],
  [(c) => c === "EIO" || c.startsWith("SQLITE_IOERR") || c === "58030", "an I/O error", "check the disk and the file system"],
  [(c) => c === "EROFS", "the file system is read-only", "remount it read-write or use a path on a writable one"],
  [
    (c) => c === "ENOMEM" || c === "SQLITE_NOMEM" || c === "53200" || c === "ERR_MEMORY_ALLOCATION_FAILED",
    "out of memory",
    "free memory or give the process more",
  ],
  [(c) => c === "53000", "the database server is out of resources", "check the server's connection and memory limits"],
];

/** V8's own words when an allocation fails. */
const OUT_OF_MEMORY = /Array buffer allocation failed|Invalid string length|Cannot create a string longer than/;

export interface EnvironmentFault {
  /** e.g. "the disk is full". */
  readonly what: string;
  /** The code seen, e.g. "SQLITE_FULL". */
  readonly code: string;
  /** What to do. */
  readonly fix: string;
}

/** The environmental failure behind an error (or any of its causes), if it is one. */
export function environmentFault(error: unknown): EnvironmentFault | undefined {
  const seen = new Set<unknown>();
  for (let e: unknown = error; e !== null && typeof e === "object" && !seen.has(e); e = (e as { cause?: unknown }).cause) {
    seen.add(e);
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string") {
      const fault = FAULTS.find(([test]) => test(code));
      if (fault) return { what: fault[1], code, fix: fault[2] };
    }
    if (e instanceof RangeError && OUT_OF_MEMORY.test(e.message))
      return { what: "out of memory", code: "RangeError", fix: "free memory or give the process more" };
  }
  return undefined;
}
