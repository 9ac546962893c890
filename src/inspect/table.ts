// The one table printer of the command line, in kubectl's shape: upper-case headers, every
// column left-aligned and padded to its widest cell, three spaces between columns (kubectl's
// tabwriter padding), no trailing spaces, "<none>" for an empty cell. `lab status`, `lab get`
// and `svc list` print through it, so every table a user sees lines up the same way.

export const NONE = '<none>';
const GAP = '   ';

/** A row: one string per column (empty or undefined prints as <none>). */
export type Row = readonly (string | number | undefined)[];

/** Renders headers and rows as lines; widths count code points, so "→" and "µ" align too. */
export function formatTable(headers: readonly string[], rows: readonly Row[]): string[] {
  const cells = rows.map((r) => headers.map((_, i) => cell(r[i])));
  const width = headers.map((h, i) => Math.max(len(h), ...cells.map((r) => len(r[i] ?? ''))));
  const line = (r: readonly string[]) =>
    r
      .map((c, i) => (i === r.length - 1 ? c : c + ' '.repeat(width[i]! - len(c))))
      .join(GAP)
      .trimEnd();
  return [line(headers.map((h) => h.toUpperCase())), ...cells.map(line)];
}

function cell(v: string | number | undefined): string {
  if (v === undefined || v === '') return NONE;
  return String(v);
}

function len(s: string): number {
  return [...s].length;
}
