import {
  Kysely,
  MssqlAdapter,
  MssqlIntrospector,
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
 */
export function recordingMssql(answer: (query: RecordedQuery) => QueryResult<unknown> = () => ({ rows: [], numAffectedRows: 1n })): {
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
      createAdapter: () => new MssqlAdapter(),
      createDriver: () => driver,
      createIntrospector: (inner) => new MssqlIntrospector(inner),
      createQueryCompiler: () => new RuntimeCloudMssqlQueryCompiler(),
    },
  }) as AnyDb;
  return { db, queries };
}
