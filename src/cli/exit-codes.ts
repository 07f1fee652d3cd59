// The exit codes of every wassal command.

export const EXIT = {
  /** Everything worked; for the lab, every check passed. */
  ok: 0,
  /** The work ran but did not succeed (a lab check failed), or an unexpected error. */
  failed: 1,
  /** Bad input: an unknown name, an invalid option, a database that cannot be used. */
  usage: 2,
  /** Stopped at once by a second signal. */
  interrupted: 130,
} as const;
