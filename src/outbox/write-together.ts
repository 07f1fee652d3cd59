// Business writes that a group commit may make in one call: a handler returns
// `finalize: finalizeTogether(writer, item)`, and the members of a group that share `writer` are
// written by one `writer(tx, items)`, so a domain can write one statement for many messages.

import { InvalidArgumentError } from "./errors.js";
import type { Finalize } from "./types.js";

/** Writes the business side of several completions in one go, inside the completion's transaction. */
export type TogetherWriter<Tx, T> = (tx: Tx, items: readonly T[]) => void | Promise<void>;

const TOGETHER = Symbol("wassal.finalizeTogether");

interface Together<Tx> {
  readonly writer: TogetherWriter<Tx, unknown>;
  readonly item: unknown;
}

/**
 * A business write that can share one call with its group's: alone it runs `writer(tx, [item])`;
 * in a group commit, the members whose finalize names the same `writer` (the same function) run
 * as one `writer(tx, items)`, the items in the group's order. Create `writer` once (not per
 * message), or nothing is shared. If that call throws, the group runs again with each member alone
 * in a savepoint, so one bad item fails only its own message.
 */
export function finalizeTogether<Tx, T>(writer: TogetherWriter<Tx, T>, item: T): Finalize<Tx> {
  if (typeof writer !== "function")
    throw new InvalidArgumentError(`finalizeTogether needs a writer function, (tx, items) => …, made once and shared (got ${typeof writer})`);
  const finalize = (tx: Tx) => writer(tx, [item]);
  const together: Together<Tx> = { writer: writer as TogetherWriter<Tx, unknown>, item };
  Object.defineProperty(finalize, TOGETHER, { value: together });
  return finalize;
}

/** One step of a group's business writes: a member's own finalize, or one shared writer's call for several members. */
export interface WriteStep<Tx> {
  /** The members (indexes in the group) this step writes for. */
  readonly members: readonly number[];
  readonly run: (tx: Tx) => void | Promise<void>;
}

/**
 * The business writes of a group, in member order: a shared writer runs once, at its first
 * member's place, with the items of all its members. `finalizes[i]` undefined: nothing to write.
 */
export function planWrites<Tx>(finalizes: readonly (Finalize<Tx> | undefined)[]): WriteStep<Tx>[] {
  const steps: WriteStep<Tx>[] = [];
  const shared = new Map<TogetherWriter<Tx, unknown>, { members: number[]; items: unknown[] }>();
  for (const [index, finalize] of finalizes.entries()) {
    if (finalize === undefined) continue;
    const together = (finalize as { [TOGETHER]?: Together<Tx> })[TOGETHER];
    if (together === undefined) {
      steps.push({ members: [index], run: finalize });
      continue;
    }
    const known = shared.get(together.writer);
    if (known) {
      known.members.push(index);
      known.items.push(together.item);
      continue;
    }
    const step = { members: [index], items: [together.item] };
    shared.set(together.writer, step);
    steps.push({ members: step.members, run: (tx) => together.writer(tx, step.items) });
  }
  return steps;
}
