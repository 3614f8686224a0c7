/** A benchmark's rows: what `npm run bench` prints and writes to bench/results.json. Figures only, never asserted. */
export interface Row {
  readonly name: string;
  readonly value: string;
  readonly note?: string;
}

export type Print = (row: Row) => void;

/** Rows collected as a benchmark prints them; each is shown on stderr at once, so a long run shows progress. */
export function rowCollector(): { readonly rows: Row[]; readonly print: Print } {
  const rows: Row[] = [];
  return {
    rows,
    print: (row) => {
      rows.push(row);
      process.stderr.write(`  ${row.name}: ${row.value}${row.note ? ` (${row.note})` : ''}\n`);
    },
  };
}

/** The rows as one table, `row | value (note)`. */
export function tableOf(rows: readonly Row[]): string {
  const width = Math.max(3, ...rows.map((r) => r.name.length));
  const lines = rows.map((row) => `${row.name.padEnd(width)} | ${row.value}${row.note ? `  (${row.note})` : ''}`);
  return `${'row'.padEnd(width)} | value\n${'-'.repeat(width)}-|-${'-'.repeat(40)}\n${lines.join('\n')}\n`;
}

/**
 * The figure a value states, for results.json: a plain number, a ratio (`0.71×`) or a number with its unit
 * (`12.5 ms`, `3.1 MiB`); undefined for values that hold several figures (`p50 9 ms, p95 19 ms`), which stay text.
 */
export function figureOf(value: string): number | undefined {
  const match = /^(-?\d+(?:\.\d+)?)\s*(?:×|ms|s|MiB|%)?$/.exec(value.replace(/,/g, '').trim());
  return match ? Number(match[1]) : undefined;
}
