// The exit codes of every wassal command.

export const EXIT = {
  /** Everything worked; for the lab, every check passed. */
  ok: 0,
  /** The work ran but did not succeed: a lab check failed, a named id was not redriven, a worker failed to stop cleanly. */
  failed: 1,
  /** Bad input: an unknown name, an invalid option, a database that cannot be used. */
  usage: 2,
  /** The environment failed, not Wassal or its input: the disk is full, an I/O error, out of memory. Free the resource and run again. */
  environment: 74,
  /** An error Wassal did not expect (a bug, or a fault it does not know how to name): report it with WASSAL_DEBUG=1. */
  internal: 70,
  /** Stopped at once by a second signal. */
  interrupted: 130,
} as const;
