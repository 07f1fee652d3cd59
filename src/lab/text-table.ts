// Plain-text tables for reports: left-aligned columns, a rule under the header.

export function textTable(header: readonly string[], rows: ReadonlyArray<ReadonlyArray<string | number | boolean | null>>): string {
  const cells = [header.map(String), ...rows.map((row) => row.map((cell) => (cell === null ? "-" : String(cell))))];
  const widths = header.map((_, i) => Math.max(...cells.map((row) => (row[i] ?? "").length)));
  const line = (row: readonly string[]) =>
    row
      .map((cell, i) => cell.padEnd(widths[i] ?? 0))
      .join("  ")
      .trimEnd();
  const [head, ...body] = cells;
  return [line(head ?? []), widths.map((w) => "-".repeat(w)).join("  "), ...body.map(line)].join("\n");
}

/** A section heading. */
export function heading(title: string): string {
  return `\n== ${title} ${"=".repeat(Math.max(3, 76 - title.length))}\n`;
}

/** HH:MM:SS.mmm of a UTC time. */
export function clockTime(at: Date): string {
  return at.toISOString().slice(11, 23);
}
