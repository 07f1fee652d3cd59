// Kysely and Drizzle take raw SQL as a template of text and values, and number the values in their
// own dialect's style. A statement with `?` placeholders is cut at them into that template.

/** The text between `?` placeholders: one more piece than there are values. */
export function piecesAround(sql: string, params: readonly unknown[]): string[] {
  const pieces = sql.split("?");
  if (pieces.length !== params.length + 1) throw new Error(`the statement has ${pieces.length - 1} placeholders for ${params.length} values`);
  return pieces;
}

/** Interleaves the pieces and values: piece, value, piece, …, piece. */
export function interleave<T>(pieces: readonly string[], params: readonly unknown[], text: (piece: string) => T, value: (param: unknown) => T): T[] {
  return pieces.flatMap((piece, index) => (index < params.length ? [text(piece), value(params[index])] : [text(piece)]));
}
