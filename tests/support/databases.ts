import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Kysely } from 'kysely';
import { inject } from 'vitest';
import type { OutboxTables } from '../../shared/platform/bus/outbox';
import { createSqlStore, type SqlDialect, type SqlStore } from '../../shared/platform/sql/database';
import { migrateToLatest } from '../../shared/platform/sql/migrations';
import { allMigrations } from '../../shared/migrations';
import { assertOutboxMatchesContract } from './event-contracts';
import { adminQuery } from './postgres-admin';

/**
 * The dialects every store test runs against, as Kysely's own tests loop over theirs. PostgreSQL is included
 * when the global setup reached a server; otherwise its tests are skipped with the reason printed once.
 */
export const DIALECTS: readonly SqlDialect[] = ['sqlite', 'postgres'];

export function postgresUrl(): string {
  return inject('postgresUrl');
}

export function postgresSkipReason(): string {
  return inject('postgresSkipReason');
}

/** True when this dialect's tests must be skipped here. */
export function skipDialect(dialect: SqlDialect): boolean {
  return dialect === 'postgres' && postgresUrl() === '';
}

export interface TestDatabase {
  readonly store: SqlStore;
  /** Settings that point a host (or a child process) at this same database. */
  readonly settings: Readonly<Record<string, string>>;
  /** DepsOverrides for createDeps: the schema to use on PostgreSQL, the folder for SQLite. */
  readonly overrides: { postgresSchema?: string; baseDir?: string };
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
    const open = () => createSqlStore({ dialect, connection: file });
    const store = open();
    if (options.migrate !== false) await migrateToLatest(store.db, dialect, allMigrations);
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
  if (dialect !== 'postgres') throw new Error(`no test database for ${dialect}`);
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


/** Checks the outbox through a connection of its own: the test may have closed its store already. */
async function checkEvents(open: () => SqlStore, where: string): Promise<void> {
  const reader = open();
  try {
    await assertOutboxMatchesContract(reader.db as Kysely<OutboxTables>, where);
  } finally {
    await reader.close();
  }
}
