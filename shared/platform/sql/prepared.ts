import { CompiledQuery, type Compilable, type Kysely, type QueryResult, type RawBuilder, type Transaction } from 'kysely';
import type { SqlDialect } from './dialect';
import { nameStatement } from './named-statements';
import type { SyncConnection } from './database';

/**
 * A hot-path statement built and compiled once per dialect with named placeholders; each execution only fills in
 * the values. Kysely otherwise rebuilds and recompiles the same statement on every call, which on SQLite costs
 * about as much as running it.
 */
export class Prepared<DB, P extends string, R> {
  /**
   * By the store's dialect adapter, which a store's Kysely and its transactions share: compiled once per store. A
   * process holds one store in production, and tests hold many, whose compilers differ where dialects agree (the
   * T-SQL shadow is `mssql` compiled for PostgreSQL, tests/support/tsql-shadow.ts): by dialect alone, a statement
   * compiled for one would be run on another.
   */
  readonly #compiled = new WeakMap<object, { sql: string; slots: Slot<P>[] }>();
  constructor(private readonly build: (db: Kysely<DB> | Transaction<DB>, dialect: SqlDialect, p: (name: P) => never) => Compilable<R> | RawBuilder<R>) {}

  execute(db: Kysely<DB> | Transaction<DB>, dialect: SqlDialect, values: Readonly<Record<P, unknown>>): Promise<QueryResult<R>> {
    const { sql, parameters } = this.#compile(db, dialect, values);
    return db.executeQuery<R>(CompiledQuery.raw(sql, parameters));
  }

  /** SQLite: runs the statement within `SqliteTransactions.run`. */
  executeSync(connection: SyncConnection, values: Readonly<Record<P, unknown>>): QueryResult<R> {
    const { sql, parameters } = this.#compile(connection.db as Kysely<DB>, 'sqlite', values);
    return connection.execute<R>(sql, parameters);
  }

  #compile(db: Kysely<DB> | Transaction<DB>, dialect: SqlDialect, values: Readonly<Record<P, unknown>>): { sql: string; parameters: unknown[] } {
    // getExecutor() is Kysely's (marked internal); its adapter is the one object a store's Kysely and transactions share.
    const store = db.getExecutor().adapter;
    let entry = this.#compiled.get(store);
    if (!entry) {
      const marker = '\u0000placeholder:';
      const built = this.build(db, dialect, (name) => `${marker}${name}` as never);
      const compiled = 'isRawBuilder' in built ? built.compile(db) : built.compile();
      const slots = compiled.parameters.map((v): Slot<P> => (typeof v === 'string' && v.startsWith(marker) ? { name: v.slice(marker.length) as P } : { value: v }));
      entry = dialect === 'postgres' ? inlineConstants(compiled.sql, slots) : { sql: compiled.sql, slots };
      this.#compiled.set(store, entry);
      if (dialect === 'postgres') nameStatement(entry.sql);
    }
    const parameters = entry.slots.map((slot) => ('name' in slot ? values[slot.name] : slot.value));
    return { sql: entry.sql, parameters };
  }
}

/** A statement parameter: a named placeholder filled in per execution, or a constant of the statement. */
type Slot<P> = { name: P } | { value: unknown };

/**
 * PostgreSQL: writes the constants of a statement (values not filled in per execution) into its text as literals,
 * and renumbers the remaining placeholders. A named statement runs on a plan made once for all values (a generic
 * plan), which sees placeholders only: `retiring = $4` cannot use the index made for `retiring = 1`, `lease_id = $2`
 * is planned as if it could be any lease, and planning each execution afresh instead costs twice the execution.
 */
function inlineConstants<P>(text: string, slots: readonly Slot<P>[]): { sql: string; slots: Slot<P>[] } {
  const kept: Slot<P>[] = [];
  const renumbered = new Map<number, string>();
  slots.forEach((slot, index) => {
    const literal = 'value' in slot ? postgresLiteral(slot.value) : undefined;
    if (literal === undefined) {
      kept.push(slot);
      renumbered.set(index + 1, `$${kept.length}`);
    } else {
      renumbered.set(index + 1, literal);
    }
  });
  return { sql: text.replace(/\$(\d+)\b/g, (placeholder, n: string) => renumbered.get(Number(n)) ?? placeholder), slots: kept };
}

/** A string, integer or boolean as a PostgreSQL literal (standard_conforming_strings: only quotes are doubled); undefined for other values. */
function postgresLiteral(value: unknown): string | undefined {
  if (typeof value === 'string') return `'${value.replaceAll("'", "''")}'`;
  // Parenthesized when negative: `a -$1` must not become the comment `a --1`.
  if (typeof value === 'number' && Number.isSafeInteger(value)) return value < 0 ? `(${value})` : String(value);
  if (typeof value === 'boolean') return String(value);
  return undefined;
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
