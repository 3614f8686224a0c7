import { CompiledQuery, type Compilable, type Kysely, type QueryResult, type Transaction } from 'kysely';
import type { SqlDialect } from './dialect';
import { nameStatement } from './named-statements';

/**
 * A hot-path statement built and compiled once per dialect with named placeholders; each execution only fills in
 * the values. Kysely otherwise rebuilds and recompiles the same statement on every call, which on SQLite costs
 * about as much as running it.
 */
export class Prepared<DB, P extends string, R> {
  readonly #compiled = new Map<SqlDialect, { sql: string; slots: ({ name: P } | { value: unknown })[] }>();
  constructor(private readonly build: (db: Kysely<DB> | Transaction<DB>, dialect: SqlDialect, p: (name: P) => never) => Compilable<R>) {}

  execute(db: Kysely<DB> | Transaction<DB>, dialect: SqlDialect, values: Readonly<Record<P, unknown>>): Promise<QueryResult<R>> {
    let entry = this.#compiled.get(dialect);
    if (!entry) {
      const marker = '\u0000placeholder:';
      const compiled = this.build(db, dialect, (name) => `${marker}${name}` as never).compile();
      entry = {
        sql: compiled.sql,
        slots: compiled.parameters.map((v) =>
          typeof v === 'string' && v.startsWith(marker) ? { name: v.slice(marker.length) as P } : { value: v },
        ),
      };
      this.#compiled.set(dialect, entry);
      if (dialect === 'postgres') nameStatement(entry.sql);
    }
    const parameters = entry.slots.map((slot) => ('name' in slot ? values[slot.name] : slot.value));
    return db.executeQuery<R>(CompiledQuery.raw(entry.sql, parameters));
  }
}

/** One Prepared statement per value of a number that T-SQL's TOP takes only as a literal (units, batch sizes). */
export function preparedPer<DB, P extends string, R>(build: (n: number) => Prepared<DB, P, R>): (n: number) => Prepared<DB, P, R> {
  const byN = new Map<number, Prepared<DB, P, R>>();
  return (n) => {
    let prepared = byN.get(n);
    if (!prepared) byN.set(n, (prepared = build(n)));
    return prepared;
  };
}

/** Rows an INSERT, UPDATE or DELETE touched, whichever way the driver reports them. */
export function affectedRows(result: QueryResult<unknown>): number {
  return Number(result.numAffectedRows ?? 0n);
}
