// Another library's raw SQL may number its parameters ($1, $2…, as node-postgres does) or take `?`
// in order (Knex, Drizzle, SQLite drivers). The stores write each statement in their own style;
// these turn it into the other, for enqueue through a foreign transaction. The statements they are
// used on hold no other `$n` or `?` (no string literals with them, no jsonb `?` operators).

/** `$n` placeholders as `?` in order of appearance, each bound to its value (a number used twice is bound twice). */
export function numberedToQuestion(sql: string, params: readonly unknown[]): { sql: string; params: unknown[] } {
  const bound: unknown[] = [];
  const text = sql.replace(/\$(\d+)/g, (_, n: string) => {
    const index = Number(n) - 1;
    if (index < 0 || index >= params.length) throw new Error(`placeholder $${n} has no parameter (${params.length} given)`);
    bound.push(params[index]);
    return "?";
  });
  return { sql: text, params: bound };
}

/** `?` placeholders as `$1…$n` in order. */
export function questionToNumbered(sql: string): string {
  let n = 0;
  return sql.replace(/\?/g, () => `$${++n}`);
}
