import { createHash } from 'node:crypto';

/**
 * Statements PostgreSQL keeps prepared on each connection (named statements): their text is parsed and planned once
 * per connection instead of on every execution. Only the hot-path statements of `Prepared` are named, a set that
 * is fixed by the code, so the statements a connection keeps stay few.
 */
const names = new Map<string, string>();

/** Marks `text` as a statement to keep prepared. */
export function nameStatement(text: string): void {
  if (!names.has(text)) names.set(text, `rc_${createHash('sha256').update(text).digest('hex').slice(0, 24)}`);
}

/** The name `text` is prepared under, or undefined for a statement sent unnamed. */
export function statementName(text: string): string | undefined {
  return names.get(text);
}
