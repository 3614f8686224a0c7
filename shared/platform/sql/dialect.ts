import { IdentifierNode, MssqlQueryCompiler, sql, type AliasNode, type Compilable, type RawBuilder } from 'kysely';

export type SqlDialect = 'sqlite' | 'postgres' | 'mssql';

/**
 * The few places where one Kysely query has to be spelled differently per dialect, in one home, so repositories
 * read as one query code base.
 */

/** `RETURNING cols` (PostgreSQL, SQLite) or `OUTPUT inserted.cols` (T-SQL) on an INSERT or UPDATE. */
export function returningColumns<R>(query: unknown, dialect: SqlDialect, columns: readonly string[]): Compilable<R> & { execute(): Promise<R[]> } {
  const q = query as {
    returning(columns: readonly string[]): Compilable<R> & { execute(): Promise<R[]> };
    output(columns: readonly string[]): Compilable<R> & { execute(): Promise<R[]> };
  };
  return dialect === 'mssql' ? q.output(columns.map((c) => `inserted.${c}`)) : q.returning(columns);
}

/** The first `n` rows: `LIMIT n`, or `TOP (n)` in T-SQL. */
export function firstRows<Q extends { limit(n: number): Q; top(n: number): Q }>(query: Q, dialect: SqlDialect, n: number): Q {
  return dialect === 'mssql' ? query.top(n) : query.limit(n);
}

/**
 * `column` with `text` appended, cut to its last `n` characters, in the statement itself (a log excerpt appended to
 * by concurrent writers loses no line): `substr(…, -n)` in SQLite, `right(…, n)` in PostgreSQL and T-SQL.
 */
export function appendedKeepingLast(dialect: SqlDialect, column: string, text: string, n: number): RawBuilder<string> {
  // `||` in SQLite and PostgreSQL (whose concat() cannot type a bare parameter), concat() in T-SQL.
  const appended = dialect === 'mssql' ? sql<string>`concat(${sql.ref(column)}, ${text})` : sql<string>`${sql.ref(column)} || ${text}`;
  return dialect === 'sqlite' ? sql<string>`substr(${appended}, ${-n})` : sql<string>`right(${appended}, ${n})`;
}

/**
 * Row locks for a SELECT that claims rows: `skip` passes over rows other transactions hold (a grant claiming free
 * slots), `wait` waits for them (an administrator re-laying a pool's slots). PostgreSQL says `FOR UPDATE [SKIP
 * LOCKED]` after the query; T-SQL says `WITH (UPDLOCK, READPAST | HOLDLOCK, ROWLOCK)` after the table, which Kysely
 * cannot express, so the compiler below adds it to a table aliased `LOCK_ALIAS[mode]`: give the table that alias
 * and pass the query through `lockingRows`. SQLite has one writer at a time and needs neither.
 */
export const LOCK_ALIAS = { skip: 'claimable', wait: 'locked' } as const;
export type LockMode = keyof typeof LOCK_ALIAS;

const MSSQL_HINTS: Readonly<Record<string, string>> = {
  [LOCK_ALIAS.skip]: ' with (updlock, readpast, rowlock)',
  [LOCK_ALIAS.wait]: ' with (updlock, holdlock, rowlock)',
};

export function lockingRows<Q extends { forUpdate(): Q; skipLocked(): Q }>(query: Q, dialect: SqlDialect, mode: LockMode): Q {
  if (dialect !== 'postgres') return query;
  return mode === 'skip' ? query.forUpdate().skipLocked() : query.forUpdate();
}

/** Kysely's T-SQL compiler, plus the lock hints for tables aliased by `LOCK_ALIAS`. */
export class RuntimeCloudMssqlQueryCompiler extends MssqlQueryCompiler {
  protected override visitAlias(node: AliasNode): void {
    super.visitAlias(node);
    const hint = IdentifierNode.is(node.alias) ? MSSQL_HINTS[node.alias.name] : undefined;
    if (hint) this.append(hint);
  }
}
