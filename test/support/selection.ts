// Variables that narrow what a test file runs (WASSAL_TEST_STORES, WASSAL_RACE_VARIANTS): a
// comma-separated list of names, all of them when unset or empty. A filter that names something
// unknown, or that leaves nothing to run, fails the file when it is collected, with the variable
// and its valid values in the message, instead of letting the file pass with no test run.

const key = (name: string) => name.trim().toLowerCase();
const quoted = (names: readonly string[]) => names.map((name) => JSON.stringify(name)).join(", ");

/**
 * The items of `all` that `value` (the variable's value: comma-separated names, compared without
 * case and surrounding spaces) names, in `all`'s order; every item when `value` names none.
 * Throws, naming the variable and the valid values, when it names something not in `all`.
 */
export function selectNamed<T>(variable: string, value: string | undefined, all: readonly T[], nameOf: (item: T) => string): T[] {
  const names = (value ?? "")
    .split(",")
    .map(key)
    .filter((name) => name !== "");
  if (names.length === 0) return [...all];
  const unknown = names.filter((name) => !all.some((item) => key(nameOf(item)) === name));
  if (unknown.length > 0) throw new Error(`${variable} names unknown value(s) ${quoted(unknown)}; valid values: ${quoted(all.map(nameOf))}`);
  return all.filter((item) => names.includes(key(nameOf(item))));
}

/**
 * The one item of `all` that `value` (of `variable`) names, or `fallback` when it names none
 * (unset or empty). Throws, naming the variable and the valid values, when it names something
 * unknown or more than one.
 */
export function selectOne<T extends string>(variable: string, value: string | undefined, all: readonly T[], fallback: T): T {
  const selected = selectNamed(variable, value, all, (item) => item);
  if (selected.length === all.length && (value ?? "").replaceAll(",", "").trim() === "") return fallback;
  const [one] = selected;
  if (selected.length !== 1 || one === undefined)
    throw new Error(`${variable} names ${selected.length} values (${quoted(selected)}); it takes one of ${quoted(all)}`);
  return one;
}

/** The error for a selection that leaves no test to run: names the variable, its value, why, and the valid values. */
export function nothingToRun(variable: string, value: string | undefined, validValues: readonly string[], why: string): Error {
  const shown = value === undefined || value.trim() === "" ? "unset" : JSON.stringify(value);
  return new Error(`${variable} (${shown}) leaves no test to run here: ${why}; valid values: ${quoted(validValues)}`);
}

/** Something a test file can run on when it is available here (a store, say). */
export interface Runnable {
  readonly name: string;
  /**
   * Whether it can run here; absent means always. One that returns false should say why loudly
   * itself, or throw when it must run (under CI).
   */
  available?(): Promise<boolean>;
}

/**
 * The items of `all` that `value` (of `variable`) selects and that are available here, in
 * `all`'s order. Throws when the selection names something unknown or leaves nothing available.
 */
export async function selectRunnable<T extends Runnable>(variable: string, value: string | undefined, all: readonly T[]): Promise<T[]> {
  const selected = selectNamed(variable, value, all, (item) => item.name);
  const runnable: T[] = [];
  for (const item of selected) if (item.available === undefined || (await item.available())) runnable.push(item);
  if (runnable.length === 0) {
    throw nothingToRun(
      variable,
      value,
      all.map((item) => item.name),
      `${selected.map((item) => item.name).join(" and ")} ${selected.length === 1 ? "is" : "are"} not available`,
    );
  }
  return runnable;
}
