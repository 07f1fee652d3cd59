// Broker clients are optional peer dependencies: an app installs only its own broker's. This
// loads one when a publisher needs it, and says how to install it when it is missing.

import { WassalError } from "../outbox/errors.js";

/** A broker client that is not installed. */
export class MissingClientError extends WassalError {
  override name = "MissingClientError";
  constructor(pkg: string, purpose: string, options?: { cause?: unknown }) {
    super("MISSING_CLIENT", `${purpose} needs the package ${pkg}, which is not installed: run npm install ${pkg}`, options);
  }
}

export async function importOptional<T>(pkg: string, purpose: string): Promise<T> {
  try {
    return (await import(pkg)) as T;
  } catch (error) {
    if ((error as { code?: string }).code === "ERR_MODULE_NOT_FOUND") throw new MissingClientError(pkg, purpose, { cause: error });
    throw error;
  }
}
