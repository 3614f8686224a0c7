import { randomBytes } from 'node:crypto';
import { appendFileSync, copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Kysely } from 'kysely';
import { expect, inject } from 'vitest';
import type { OutboxTables } from '../../shared/platform/bus/outbox';
import { createSqlStore, type SqlDialect, type SqlStore } from '../../shared/platform/sql/database';
import { migrateToLatest } from '../../shared/platform/sql/migrations';
import { localHostMigrations as allMigrations } from '../../local/migrations';
import { assertOutboxMatchesContract } from './event-contracts';
import { adminQuery } from './postgres-admin';
import { checkTsql, describeTsqlProblems } from './tsql-grammar';
import { tsqlShadowStore } from './tsql-shadow';

/**
 * The dialects every store test runs against, as Kysely's own tests loop over theirs. PostgreSQL is included
 * when the global setup reached a server; otherwise its tests are skipped with the reason printed once.
 */
export const DIALECTS: readonly SqlDialect[] = ['sqlite', 'postgres'];

/**
 * The dialects of the repositories' own test suites: `DIALECTS`, and `mssql`, the T-SQL shadow (tsql-shadow.ts):
 * the repositories take their Azure SQL paths and build their Azure SQL statements, which run on PostgreSQL, and
 * every statement compiled for Azure SQL is checked against a T-SQL grammar when the database is dropped.
 */
export const REPOSITORY_DIALECTS: readonly SqlDialect[] = [...DIALECTS, 'mssql'];

export function postgresUrl(): string {
  return inject('postgresUrl');
}

export function postgresSkipReason(): string {
  return inject('postgresSkipReason');
}

/** True when this dialect's tests must be skipped here (the T-SQL shadow runs on PostgreSQL). */
export function skipDialect(dialect: SqlDialect): boolean {
  return dialect !== 'sqlite' && postgresUrl() === '';
}

export interface TestDatabase {
  readonly store: SqlStore;
  /** Settings that point a host (or a child process) at this same database. */
  readonly settings: Readonly<Record<string, string>>;
  /** DepsOverrides for createDeps: the schema to use on PostgreSQL, the folder for SQLite, the T-SQL shadow's store. */
  readonly overrides: { postgresSchema?: string; baseDir?: string; store?: SqlStore };
  /** Opens another connection pool to the same database (a second host). */
  connectAgain(): SqlStore;
  /**
   * Removes the database. Before that, every event in its `outbox` is checked against asyncapi.json
   * (tests/support/event-contracts.ts): drop() throws when one breaks it, after removing the database all the same.
   */
  drop(): Promise<void>;
}

/**
 * A database owned by one test file: a fresh SQLite file in a temporary folder, or a fresh PostgreSQL schema.
 * Migrated to the latest version unless `migrate` is false.
 */
export async function createTestDatabase(dialect: SqlDialect, options: { migrate?: boolean } = {}): Promise<TestDatabase> {
  if (dialect === 'sqlite') {
    const dir = mkdtempSync(join(tmpdir(), 'rch-sqlite-'));
    const file = join(dir, 'store.sqlite');
    if (options.migrate !== false) copyFileSync(await migratedSqliteTemplate(), file);
    const open = () => createSqlStore({ dialect, connection: file });
    const store = open();
    return {
      store,
      settings: { RuntimeCloud__Store__Dialect: 'sqlite', RuntimeCloud__Store__Connection: file },
      overrides: { baseDir: dir },
      connectAgain: open,
      async drop() {
        await store.close();
        try {
          await checkEvents(open, `the SQLite store ${file}`);
        } finally {
          rmSync(dir, { recursive: true, force: true });
        }
      },
    };
  }
  if (dialect === 'mssql') return createTsqlShadowDatabase(options);
  const url = postgresUrl();
  if (!url) throw new Error(`PostgreSQL tests must be skipped: ${postgresSkipReason()}`);
  const schema = `t_${randomBytes(6).toString('hex')}`;
  await adminQuery(url, `create schema ${schema}`);
  const open = () => createSqlStore({ dialect, connection: url, postgresSchema: schema });
  const store = open();
  const dropSchema = () => adminQuery(url, `drop schema if exists ${schema} cascade`);
  if (options.migrate !== false) {
    try {
      await migrateToLatest(store.db, dialect, allMigrations);
    } catch (error) {
      await store.close();
      await dropSchema();
      throw error;
    }
  }
  return {
    store,
    settings: {
      RuntimeCloud__Store__Dialect: 'postgres',
      RuntimeCloud__Store__Connection: `${url}${url.includes('?') ? '&' : '?'}options=-c%20search_path%3D${schema}`,
    },
    overrides: { postgresSchema: schema },
    connectAgain: open,
    async drop() {
      await store.close();
      try {
        await checkEvents(open, `the PostgreSQL schema ${schema}`);
      } finally {
        await dropSchema();
      }
    },
  };
}

/**
 * The T-SQL shadow of a fresh PostgreSQL schema (see tsql-shadow.ts). Its drop() also parses every distinct
 * statement its stores compiled for Azure SQL, and throws when one is not T-SQL (see tsql-shadow.ts for why the
 * check is here). A host in this process gets a shadow store of its own through `overrides` (each read makes one;
 * the host's deps close it); the settings name the dialect `mssql` with a PostgreSQL URL, so a host in another
 * process, which cannot share the shadow, fails to start instead of running the PostgreSQL paths unchecked.
 */
async function createTsqlShadowDatabase(options: { migrate?: boolean }): Promise<TestDatabase> {
  const base = await createTestDatabase('postgres', options);
  const schema = base.overrides.postgresSchema ?? '';
  const recorded = new Set<string>();
  const open = () => tsqlShadowStore({ connection: postgresUrl(), postgresSchema: schema }, recorded);
  const store = open();
  return {
    store,
    settings: { ...base.settings, RuntimeCloud__Store__Dialect: 'mssql' },
    get overrides() {
      return { store: open() };
    },
    connectAgain: open,
    async drop() {
      await store.close();
      await base.drop();
      const check = await checkTsql(recorded);
      // RUNTIME_CLOUD_TEST_TSQL_REPORT=<file> appends what each shadow checked (JSON lines), to count it over a run.
      const report = process.env.RUNTIME_CLOUD_TEST_TSQL_REPORT;
      if (report) appendFileSync(report, `${JSON.stringify({ file: expect.getState().testPath, ...check, statements: [...recorded] })}\n`);
      const problems = describeTsqlProblems(`of the T-SQL shadow of ${schema}`, check);
      if (problems) throw new Error(problems);
    },
  };
}

/** Checks the outbox through a connection of its own: the test may have closed its store already. */
let sqliteTemplate: Promise<string> | undefined;

/**
 * A SQLite store migrated to the latest version, once per worker process, that each migrated test database starts
 * as a copy of: migrating runs some 200 statements of DDL (about 70 ms), the copy a file of a few hundred kB. The
 * migrations hold nothing random or timed, so a copy is the store they would have made. Closed, so the file holds
 * everything (no write-ahead log beside it) and stays in WAL mode.
 */
function migratedSqliteTemplate(): Promise<string> {
  sqliteTemplate ??= (async () => {
    const dir = mkdtempSync(join(tmpdir(), 'rch-sqlite-template-'));
    process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
    const file = join(dir, 'store.sqlite');
    const store = createSqlStore({ dialect: 'sqlite', connection: file });
    try {
      await migrateToLatest(store.db, 'sqlite', allMigrations);
    } finally {
      await store.close();
    }
    return file;
  })();
  return sqliteTemplate;
}

async function checkEvents(open: () => SqlStore, where: string): Promise<void> {
  const reader = open();
  try {
    await assertOutboxMatchesContract(reader.db as Kysely<OutboxTables>, where);
  } finally {
    await reader.close();
  }
}
