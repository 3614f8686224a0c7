import {
  Kysely,
  LimitNode,
  OperationNodeTransformer,
  PostgresQueryCompiler,
  ReferenceNode,
  ReturningNode,
  SelectionNode,
  SelectModifierNode,
  ValueNode,
  AliasNode,
  IdentifierNode,
  type CompiledQuery,
  type DeleteQueryNode,
  type Dialect,
  type InsertQueryNode,
  type OutputNode,
  type QueryCompiler,
  type QueryId,
  type RawNode,
  type RootOperationNode,
  type SelectQueryNode,
  type UpdateQueryNode,
} from 'kysely';
import { postgresDialect, type SqlStore } from '../../shared/platform/sql/database';
import { LOCK_ALIAS, RuntimeCloudMssqlQueryCompiler } from '../../shared/platform/sql/dialect';

/**
 * The T-SQL shadow: a store that the product sees as Azure SQL (`dialect: 'mssql'`), so every repository builds
 * its Azure SQL statements and takes its Azure SQL code paths (the slot ledger's grant and release transactions,
 * MERGE upserts, TOP, OUTPUT), but that runs on a PostgreSQL schema, so the repositories' own tests run on it
 * (`REPOSITORY_DIALECTS`) and assert on real results.
 *
 * The hook is the dialect's query compiler, the one place where every statement's text is made: builders, raw
 * `sql`, and `Prepared` statements (compiled once, then run as text) all pass through it, nested subqueries only
 * as part of the statement around them (a Kysely plugin would see each subquery alone, and its changes would leak
 * into the statement around it). It compiles each statement twice: with the product's T-SQL compiler
 * (RuntimeCloudMssqlQueryCompiler, as the production store does), whose text is recorded, and with Kysely's
 * PostgreSQL compiler after `PostgresForm` has put the few T-SQL-only nodes in PostgreSQL's terms, which is what
 * runs. What is recorded is exactly what Azure SQL would be sent; what runs only stands in for it. Compiling the
 * statements that SQLite and PostgreSQL run with the T-SQL compiler instead would be neither: the repositories build
 * other statements (LIMIT, RETURNING, ON CONFLICT, PostgreSQL's batched grants) and take other paths for them.
 *
 * The check (tsql-grammar.ts) runs when the file's shadow database is dropped, after its tests, in the worker that
 * ran them: vitest runs test files in parallel workers in no set order, so a test file of its own could not count
 * on the others having run, and a global teardown would need the statements handed across processes and would
 * report a failure apart from the tests that made it. Statements a test sends itself (to inspect rows) are
 * recorded and checked too.
 */
export function tsqlShadowStore(options: { readonly connection: string; readonly postgresSchema: string }, recorded: Set<string>): SqlStore {
  const postgres = postgresDialect({ dialect: 'postgres', ...options });
  const dialect: Dialect = {
    createAdapter: () => postgres.createAdapter(),
    createDriver: () => postgres.createDriver(),
    createIntrospector: (db) => postgres.createIntrospector(db),
    createQueryCompiler: () => new ShadowCompiler(recorded),
  };
  const db = new Kysely<unknown>({ dialect }) as SqlStore['db'];
  return { db, dialect: 'mssql', close: () => db.destroy() };
}

class ShadowCompiler implements QueryCompiler {
  constructor(private readonly recorded: Set<string>) {}

  compileQuery(node: RootOperationNode, queryId: QueryId): CompiledQuery {
    if (/^(Create|Alter|Drop)/.test(node.kind)) {
      throw new Error(
        `the T-SQL shadow runs no DDL (${node.kind}): its schema is PostgreSQL's, made by the postgres migrations; ` +
          'the Azure SQL migrations are checked by tests/unit/mssql-schema.test.ts',
      );
    }
    this.recorded.add(new RuntimeCloudMssqlQueryCompiler().compileQuery(node, queryId).sql);
    return new PostgresQueryCompiler().compileQuery(new PostgresForm().transformNode(node, queryId), queryId);
  }
}

/** Where T-SQL's spelling is not PostgreSQL's (see the helpers of shared/platform/sql/dialect.ts), PostgreSQL's. */
class PostgresForm extends OperationNodeTransformer {
  /** TOP (n) is LIMIT n; a table aliased for lock hints (LOCK_ALIAS) is locked by FOR UPDATE [SKIP LOCKED]. */
  protected override transformSelectQuery(node: SelectQueryNode, queryId?: QueryId): SelectQueryNode {
    const select = super.transformSelectQuery(node, queryId);
    const { top, ...rest } = select;
    const lock = lockModeOf(select);
    const modifiers = lock === undefined ? [] : lock === 'skip' ? ['ForUpdate', 'SkipLocked'] : ['ForUpdate'];
    return Object.freeze({
      ...rest,
      ...(top ? { limit: LimitNode.create(ValueNode.createImmediate(top.expression)) } : {}),
      ...(modifiers.length > 0
        ? { endModifiers: [...(select.endModifiers ?? []), ...modifiers.map((m) => SelectModifierNode.create(m as 'ForUpdate' | 'SkipLocked'))] }
        : {}),
    });
  }

  protected override transformInsertQuery(node: InsertQueryNode, queryId?: QueryId): InsertQueryNode {
    return returningForOutput(super.transformInsertQuery(node, queryId));
  }

  protected override transformUpdateQuery(node: UpdateQueryNode, queryId?: QueryId): UpdateQueryNode {
    return returningForOutput(super.transformUpdateQuery(node, queryId));
  }

  protected override transformDeleteQuery(node: DeleteQueryNode, queryId?: QueryId): DeleteQueryNode {
    return returningForOutput(super.transformDeleteQuery(node, queryId));
  }

  /** The one T-SQL expression written as raw SQL on an Azure SQL path: the fencing sequence's next value. */
  protected override transformRaw(node: RawNode, queryId?: QueryId): RawNode {
    const raw = super.transformRaw(node, queryId);
    return Object.freeze({ ...raw, sqlFragments: raw.sqlFragments.map((f) => f.replace(/\bnext value for (\w+)/g, "nextval('$1')")) });
  }
}

function lockModeOf(select: SelectQueryNode): 'skip' | 'wait' | undefined {
  for (const from of select.from?.froms ?? []) {
    if (AliasNode.is(from) && IdentifierNode.is(from.alias)) {
      if (from.alias.name === LOCK_ALIAS.skip) return 'skip';
      if (from.alias.name === LOCK_ALIAS.wait) return 'wait';
    }
  }
  return undefined;
}

/** OUTPUT inserted.c / deleted.c is RETURNING c. */
function returningForOutput<N extends { readonly output?: OutputNode; readonly returning?: ReturningNode }>(node: N): N {
  if (!node.output) return node;
  const selections = node.output.selections.map((s) => {
    if (!SelectionNode.is(s) || !ReferenceNode.is(s.selection)) return s as SelectionNode;
    const { table } = s.selection;
    const pseudo = table !== undefined && ['inserted', 'deleted'].includes(table.table.identifier.name);
    return pseudo ? SelectionNode.create(Object.freeze({ ...s.selection, table: undefined })) : s;
  });
  const { output: _output, ...rest } = node;
  return Object.freeze({ ...rest, returning: ReturningNode.create(selections) }) as N;
}
