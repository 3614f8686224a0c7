import {
  Kysely,
  MssqlAdapter,
  MssqlIntrospector,
  PostgresAdapter,
  PostgresQueryCompiler,
  type CompiledQuery,
  type DatabaseConnection,
  type Driver,
  type QueryResult,
} from 'kysely';
import type { AnyDb } from '../../shared/platform/sql/database';
import { RuntimeCloudMssqlQueryCompiler } from '../../shared/platform/sql/dialect';

export interface RecordedQuery {
  readonly sql: string;
  readonly parameters: readonly unknown[];
}

/**
 * A Kysely instance with the product's Azure SQL (T-SQL) compiler (Kysely's, plus lock hints) and a driver that records each compiled
 * statement instead of sending it. Calling a repository function against it shows exactly the T-SQL it would
 * send to Azure SQL. `answer` supplies the result of each statement (default: no rows, one affected row).
 * `compiledFor: 'postgres'` records what a store that the product sees as Azure SQL but whose statements are compiled
 * for PostgreSQL sends (as the T-SQL shadow, tests/support/tsql-shadow.ts, is).
 */
export function recordingMssql(
  answer: (query: RecordedQuery) => QueryResult<unknown> = () => ({ rows: [], numAffectedRows: 1n }),
  compiledFor: 'mssql' | 'postgres' = 'mssql',
): {
  db: AnyDb;
  queries: RecordedQuery[];
} {
  const queries: RecordedQuery[] = [];
  const connection: DatabaseConnection = {
    executeQuery<R>(compiled: CompiledQuery): Promise<QueryResult<R>> {
      const query = { sql: compiled.sql, parameters: compiled.parameters };
      queries.push(query);
      return Promise.resolve(answer(query) as QueryResult<R>);
    },
    async *streamQuery() {
      throw new Error('streaming is not recorded');
    },
  };
  const driver: Driver = {
    init: () => Promise.resolve(),
    acquireConnection: () => Promise.resolve(connection),
    beginTransaction: async () => {
      queries.push({ sql: 'begin transaction', parameters: [] });
    },
    commitTransaction: async () => {
      queries.push({ sql: 'commit', parameters: [] });
    },
    rollbackTransaction: async () => {
      queries.push({ sql: 'rollback', parameters: [] });
    },
    releaseConnection: () => Promise.resolve(),
    destroy: () => Promise.resolve(),
  };
  const db = new Kysely<unknown>({
    dialect: {
      createAdapter: () => (compiledFor === 'mssql' ? new MssqlAdapter() : new PostgresAdapter()),
      createDriver: () => driver,
      createIntrospector: (inner) => new MssqlIntrospector(inner),
      createQueryCompiler: () => (compiledFor === 'mssql' ? new RuntimeCloudMssqlQueryCompiler() : new PostgresQueryCompiler()),
    },
  }) as AnyDb;
  return { db, queries };
}
