// The environment of a child process a test starts (the CLI, a worker script): the test runner's
// own, less the variables that would change what the CLI does or prints behind the test's back.

/**
 * Removed from the inherited environment: WASSAL_DATABASE_URL would redirect --db (and every
 * command that defaults to it), WASSAL_DEBUG adds stack traces to error output.
 */
export const SCRUBBED_VARIABLES = ["WASSAL_DATABASE_URL", "WASSAL_DEBUG"] as const;

/** process.env without SCRUBBED_VARIABLES, then `set` on top (which may set them again on purpose). */
export function childEnv(set: Readonly<Record<string, string>> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const name of SCRUBBED_VARIABLES) delete env[name];
  return { ...env, ...set };
}
