import {
  AliasNode,
  IdentifierNode,
  MssqlQueryCompiler,
  sql,
  type Compilable,
  type ComparisonOperator,
  type Insertable,
  type Kysely,
  type MergeQueryNode,
  type OperationNode,
  type RawBuilder,
  type TableNode,
  type Updateable,
} from 'kysely';

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
 * by concurrent writers loses no line): `substr(column || text, -n)` in SQLite; `right(concat(column, text), n)` in
 * PostgreSQL and T-SQL, the text through `coalesce(…, '')`, which gives PostgreSQL's concat() a type for the parameter.
 */
export function appendedKeepingLast(dialect: SqlDialect, column: string, text: string, n: number): RawBuilder<string> {
  if (dialect === 'sqlite') return sql<string>`substr(${sql.ref(column)} || ${text}, ${-n})`;
  return sql<string>`right(concat(${sql.ref(column)}, coalesce(${text}, '')), ${n})`;
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

/**
 * One row inserted, or, when a row with its key exists, updated or left as it is. Example:
 * `{ values: { id, edition, updated_at: now }, key: ['id'], update: { edition, updated_at: now } }`.
 */
export interface Upsert<Row> {
  /** The row to insert when none has its key. */
  readonly values: Insertable<Row>;
  /** The columns of the primary key or unique index that `values` must not repeat. Example: `['topic', 'message_id']`. */
  readonly key: readonly (keyof Row & string)[];
  /** What to set on the existing row; without it the existing row stays as it is (insert if absent). */
  readonly update?: Updateable<Row>;
  /** Updates the existing row only when it holds `column op value`. Example: `['accepted_at', '<=', cutoff]`. */
  readonly updateWhen?: readonly [column: keyof Row & string, op: ComparisonOperator, value: unknown];
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- one statement for any table; `Row` types the columns
type AnyTableDb = Kysely<any>;

/**
 * Runs an upsert (see `Upsert`) and resolves to the rows it inserted or updated: 1, or 0 when the key existed and
 * nothing was set. PostgreSQL and SQLite say `INSERT … ON CONFLICT (key) DO NOTHING | DO UPDATE SET … [WHERE …]`;
 * T-SQL has no ON CONFLICT and says `MERGE … WITH (HOLDLOCK)` on the key (the hint is the compiler's, below), with
 * the same outcomes: a concurrent upsert of the same key waits for this one and then finds its row. Name the row
 * type: `upsertRow<CapacityTenantTable>(trx, dialect, 'capacity_tenants', …)`.
 */
export async function upsertRow<Row>(db: AnyTableDb, dialect: SqlDialect, table: string, upsert: Upsert<Row>): Promise<number> {
  const { values, key, update, updateWhen } = upsert as Upsert<Record<string, unknown>>;
  if (dialect !== 'mssql') {
    const result = await db
      .insertInto(table)
      .values(values)
      .onConflict((oc) => {
        const conflict = oc.columns(key);
        if (!update) return conflict.doNothing();
        const set = conflict.doUpdateSet(update);
        return updateWhen ? set.where(`${table}.${updateWhen[0]}`, updateWhen[1], updateWhen[2]) : set;
      })
      .executeTakeFirst();
    return Number(result.numInsertedOrUpdatedRows ?? 0n);
  }
  const merge = db
    .mergeInto(table)
    // One source row; the key's values are matched against the target, and inserted from `values`.
    .using(db.selectNoFrom(sql.lit(1).as('one')).as('source'), (join) =>
      key.reduce((on, column) => on.on(`${table}.${column}`, '=', values[column]), join),
    );
  const matched = !update
    ? merge
    : (updateWhen ? merge.whenMatchedAnd(`${table}.${updateWhen[0]}`, updateWhen[1], updateWhen[2]) : merge.whenMatched()).thenUpdateSet(update);
  const result = await matched.whenNotMatched().thenInsertValues(values).executeTakeFirst();
  return Number(result.numChangedRows ?? 0n);
}

/**
 * Kysely's T-SQL compiler, plus the lock hints for tables aliased by `LOCK_ALIAS`, and `WITH (HOLDLOCK)` on the
 * target of every MERGE: each is an upsert of one key (`upsertRow`), and without the hint two of them can both find
 * no row and both insert, the second failing on the key; with it the first holds the key (range) until it commits.
 */
export class RuntimeCloudMssqlQueryCompiler extends MssqlQueryCompiler {
  #mergeTarget: OperationNode | undefined;

  protected override visitAlias(node: AliasNode): void {
    super.visitAlias(node);
    const hint = IdentifierNode.is(node.alias) ? MSSQL_HINTS[node.alias.name] : undefined;
    if (hint) this.append(hint);
  }

  protected override visitMergeQuery(node: MergeQueryNode): void {
    // T-SQL puts a MERGE's hint after its target table, before any alias: `merge into t with (holdlock) as a`.
    this.#mergeTarget = AliasNode.is(node.into) ? node.into.node : node.into;
    super.visitMergeQuery(node);
  }

  protected override visitTable(node: TableNode): void {
    super.visitTable(node);
    if (node !== this.#mergeTarget) return;
    this.#mergeTarget = undefined;
    this.append(' with (holdlock)');
  }
}

/** A duplicate key on PostgreSQL, SQLite or Azure SQL. */
export function isUniqueViolation(error: unknown): boolean {
  const { code, number } = (error ?? {}) as { code?: unknown; number?: unknown };
  return code === '23505' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY' || code === 'SQLITE_CONSTRAINT_UNIQUE' || number === 2601 || number === 2627;
}
