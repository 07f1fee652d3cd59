// Kysely and Drizzle take raw SQL as a template of text and values, and number the values in their
// own dialect's style. A statement with `?` placeholders is cut at them into that template.

/**
 * A `?` statement as the library's own template: its text pieces and values interleaved by
 * `text` and `value`, joined by `join` (Kysely's and Drizzle's sql.raw, their value markers, sql.join).
 */
export function asTemplate<T, R>(
  sql: string,
  params: readonly unknown[],
  parts: { readonly text: (piece: string) => T; readonly value: (param: unknown) => T; readonly join: (chunks: T[]) => R },
): R {
  const pieces = sql.split("?");
  if (pieces.length !== params.length + 1) throw new Error(`the statement has ${pieces.length - 1} placeholders for ${params.length} values`);
  return parts.join(pieces.flatMap((piece, index) => (index < params.length ? [parts.text(piece), parts.value(params[index])] : [parts.text(piece)])));
}
