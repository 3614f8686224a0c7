import { sql } from 'kysely';
import { Request } from 'tedious';
import { RequestTokenHandler } from 'tedious/lib/token/handler';
import { ErrorMessageToken } from 'tedious/lib/token/token';
import { afterAll, describe, expect, it } from 'vitest';
import { createSqlStore, type SqlStore } from '../../shared/platform/sql/database';
import { isUniqueViolation } from '../../shared/platform/sql/dialect';
import { createTestDatabase, postgresSkipReason, skipDialect, type TestDatabase } from '../support/databases';

/** The error the store throws for `statement`, run after the table `probe (id primary key, name unique, n)` has row (1, 'a', 0). */
async function errorOf(store: SqlStore, statement: string): Promise<unknown> {
  return sql.raw(statement).execute(store.db).then(
    () => undefined,
    (error: unknown) => error,
  );
}

async function withProbeTable(store: SqlStore): Promise<void> {
  await sql`create table probe (id int primary key, name varchar(20) not null unique, n int not null check (n >= 0))`.execute(store.db);
  await sql`insert into probe (id, name, n) values (1, 'a', 0)`.execute(store.db);
}

/** The statements of each case: two unique violations, and failures that are not one. */
const DUPLICATE_KEY = `insert into probe (id, name, n) values (1, 'b', 0)`;
const DUPLICATE_UNIQUE = `insert into probe (id, name, n) values (2, 'a', 0)`;
const CHECK_FAILS = `insert into probe (id, name, n) values (3, 'c', -1)`;
const NOT_NULL_FAILS = `insert into probe (id, name, n) values (4, null, 0)`;
const NO_SUCH_TABLE = `insert into nowhere (id) values (1)`;

describe('isUniqueViolation on SQLite (in memory)', () => {
  const store = createSqlStore({ dialect: 'sqlite', connection: ':memory:' });
  afterAll(() => store.close());

  it('when a primary key or a unique column is repeated, then it is a unique violation; a check, a not-null or a missing table is not', async () => {
    await withProbeTable(store);
    expect(isUniqueViolation(await errorOf(store, DUPLICATE_KEY))).toBe(true);
    expect(isUniqueViolation(await errorOf(store, DUPLICATE_UNIQUE))).toBe(true);
    for (const statement of [CHECK_FAILS, NOT_NULL_FAILS, NO_SUCH_TABLE]) {
      const error = await errorOf(store, statement);
      expect(error, statement).toBeInstanceOf(Error);
      expect(isUniqueViolation(error), statement).toBe(false);
    }
  });
});

const skipPostgres = skipDialect('postgres');
if (skipPostgres) console.warn(`[sql-unique-violation] PostgreSQL SKIPPED: ${postgresSkipReason()}`);

describe.skipIf(skipPostgres)('isUniqueViolation on PostgreSQL', () => {
  let database: TestDatabase | undefined;
  afterAll(() => database?.drop());

  it('when a primary key or a unique column is repeated, then it is a unique violation; a check, a not-null or a missing table is not', async () => {
    database = await createTestDatabase('postgres', { migrate: false });
    const { store } = database;
    await withProbeTable(store);
    expect(isUniqueViolation(await errorOf(store, DUPLICATE_KEY))).toBe(true);
    expect(isUniqueViolation(await errorOf(store, DUPLICATE_UNIQUE))).toBe(true);
    for (const statement of [CHECK_FAILS, NOT_NULL_FAILS, NO_SUCH_TABLE]) {
      const error = await errorOf(store, statement);
      expect(error, statement).toBeInstanceOf(Error);
      expect(isUniqueViolation(error), statement).toBe(false);
    }
  });
});

/**
 * No SQL Server runs here (the T-SQL shadow runs on PostgreSQL, so its errors are PostgreSQL's). The errors are made
 * by tedious' own token handler from the ERROR tokens SQL Server sends, which is how Kysely's mssql driver gets them.
 */
function tediousErrorOf(...numbers: number[]): unknown {
  const request = new Request('insert into probe (id, name, n) values (1, \'b\', 0)', () => undefined);
  const connection = { emit: () => true };
  const handler = new (RequestTokenHandler as unknown as new (c: unknown, r: unknown) => { onErrorMessage(t: unknown): void })(connection, request);
  for (const number of numbers) {
    handler.onErrorMessage(new ErrorMessageToken({ number, state: 1, class: 14, message: `error ${number}`, serverName: 'sql', procName: '', lineNumber: 1 }));
  }
  return (request as unknown as { error: unknown }).error;
}

describe('isUniqueViolation on Azure SQL (errors as tedious makes them)', () => {
  it('when SQL Server reports 2627 (a PRIMARY KEY or UNIQUE constraint) or 2601 (a unique index), then it is a unique violation', () => {
    expect(isUniqueViolation(tediousErrorOf(2627))).toBe(true);
    expect(isUniqueViolation(tediousErrorOf(2601))).toBe(true);
  });

  it('when one request reports several errors (an AggregateError), then one unique violation among them is enough', () => {
    const error = tediousErrorOf(547, 2627);
    expect(error).toBeInstanceOf(AggregateError);
    expect(isUniqueViolation(error)).toBe(true);
    expect(isUniqueViolation(tediousErrorOf(547, 515))).toBe(false);
  });

  it('when SQL Server reports a check (547), a null (515), a deadlock (1205) or a missing object (208), then it is not', () => {
    for (const number of [547, 515, 1205, 208]) expect(isUniqueViolation(tediousErrorOf(number)), String(number)).toBe(false);
  });

  it('when what is thrown is no error at all, then it is not', () => {
    for (const thrown of [undefined, null, 'duplicate', 2627, {}]) expect(isUniqueViolation(thrown)).toBe(false);
  });
});
