// Database drivers and broker clients are optional peer dependencies: an app installs only the
// ones it uses. These load one when it is first needed, and say how to install it when it is
// missing. The core names no package; callers do.

import { createRequire } from "node:module";
import { WassalError } from "./errors.js";

/** A driver or client package that is not installed. */
export class MissingClientError extends WassalError {
  override name = "MissingClientError";
  constructor(pkg: string, purpose: string, options?: { cause?: unknown }) {
    super("MISSING_CLIENT", `${purpose} needs the package ${pkg}, which is not installed: run npm install ${pkg}`, options);
  }
}

function isMissing(error: unknown, pkg: string): boolean {
  const { code, message } = error as { code?: string; message?: string };
  // Only the package itself missing, not a module it fails to find inside.
  return (code === "ERR_MODULE_NOT_FOUND" || code === "MODULE_NOT_FOUND") && typeof message === "string" && message.includes(`'${pkg}'`);
}

/** Loads an ES module or CommonJS package by dynamic import. */
export async function importOptional<T>(pkg: string, purpose: string): Promise<T> {
  try {
    return (await import(pkg)) as T;
  } catch (error) {
    if (isMissing(error, pkg)) throw new MissingClientError(pkg, purpose, { cause: error });
    throw error;
  }
}

const requireHere = createRequire(import.meta.url);

/** Loads a CommonJS package at once (for code that must stay synchronous), resolved from here. */
export function requireOptional<T>(pkg: string, purpose: string): T {
  try {
    return requireHere(pkg) as T;
  } catch (error) {
    if (isMissing(error, pkg)) throw new MissingClientError(pkg, purpose, { cause: error });
    throw error;
  }
}
