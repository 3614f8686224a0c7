import type BetterSqlite3 from 'better-sqlite3';
import { existsSync, linkSync, mkdirSync, renameSync, rmSync } from 'node:fs';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import type { Config } from '../shared/platform/config/config';
import { createSqlStore } from '../shared/platform/sql/database';
import { migrateToLatest } from '../shared/platform/sql/migrations';
import { recordRestore } from '../shared/platform/sql/store-epoch';
import { allMigrations } from '../shared/migrations';
import { runningHosts } from './host-marker';

/**
 * `runtime-cloud backup`, `restore` and `restored`: the embedded store's backup (SQLite's online backup, safe while
 * a host writes), its restore (refused while a host runs on the state dir; written beside the store and renamed
 * over it), and the record of a restore (the store's epoch raised, its recovery pending: see shared/store-restore.ts),
 * which for PostgreSQL and Azure SQL follows the database's own restore.
 */

/** A refusal the CLI prints as it is, exiting non-zero. */
export class StoreCommandError extends Error {}

const SERVER_STORE = (dialect: string) =>
  `the store is ${dialect === 'postgres' ? 'PostgreSQL' : 'Azure SQL'}: its backups are the database's own (pg_dump / pg_restore; ` +
  `Azure SQL's automatic backups and point-in-time restore). After restoring it, run \`runtime-cloud restored\` against the ` +
  `restored database (docs/operations.md, "Store lost").`;

/** The SQLite file of a state dir's store, as the host resolves it. */
export function storeFile(config: Config, stateDir: string): string {
  if (config.store.dialect !== 'sqlite') throw new StoreCommandError(SERVER_STORE(config.store.dialect));
  const connection = config.store.connection;
  if (connection === ':memory:') throw new StoreCommandError('the store is in memory: there is nothing to back up or restore');
  return isAbsolute(connection) ? connection : join(stateDir, connection);
}

function openSqlite(file: string, options: BetterSqlite3.Options = {}): BetterSqlite3.Database {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const Sqlite = require('better-sqlite3') as typeof BetterSqlite3;
  return new Sqlite(file, { fileMustExist: true, ...options });
}

/**
 * Copies a SQLite database to `to` with the online backup API, in one step: the copy is one consistent snapshot
 * even while a host writes (a step spanning the whole file is one read transaction, never restarted).
 */
async function copyDatabase(from: string, to: string): Promise<void> {
  const source = openSqlite(from, { readonly: true });
  try {
    await source.backup(to, { progress: () => 0x7fffffff });
  } finally {
    source.close();
  }
}

/** Backs the store of a state dir up to `to` (default `<state dir>/backups/runtime-cloud-<time>.sqlite`). */
export async function backupStore(config: Config, stateDir: string, to: string | undefined, now: Date): Promise<string> {
  const file = storeFile(config, stateDir);
  if (!existsSync(file)) throw new StoreCommandError(`there is no store at ${file}`);
  const target = resolve(to ?? join(stateDir, 'backups', `runtime-cloud-${now.toISOString().replace(/[:.]/g, '-')}.sqlite`));
  if (existsSync(target)) throw new StoreCommandError(`${target} exists already: name a new file`);
  mkdirSync(dirname(target), { recursive: true });
  const partial = `${target}.partial`;
  rmSync(partial, { force: true });
  await copyDatabase(file, partial);
  renameSync(partial, target);
  return target;
}

export interface RestoreReport {
  readonly store: string;
  readonly epoch: number;
  /** Where the store that was replaced is kept. */
  readonly previous?: string;
}

/**
 * Replaces a state dir's store by a backup: refused while a host runs on the state dir. The backup is copied beside
 * the store, migrated, and its epoch raised above both its own and the replaced store's; then renamed over the
 * store (the replaced one is kept beside it). The next host to start does the recovery.
 */
export async function restoreStore(config: Config, stateDir: string, from: string, now: Date): Promise<RestoreReport> {
  const file = storeFile(config, stateDir);
  refuseWhileHostsRun(stateDir);
  const backup = resolve(from);
  if (!existsSync(backup)) throw new StoreCommandError(`there is no backup at ${backup}`);
  assertIsStore(backup);
  const staging = `${file}.restoring`;
  removeDatabase(staging);
  await copyDatabase(backup, staging);
  const replacedEpoch = existsSync(file) ? settledEpoch(file) : 0;
  const restored = createSqlStore({ dialect: 'sqlite', connection: staging });
  let epoch: number;
  try {
    await migrateToLatest(restored.db, 'sqlite', allMigrations);
    epoch = await recordRestore(restored.db, { at: now, from: backup, atLeast: replacedEpoch });
  } finally {
    await restored.close();
  }
  settledEpoch(staging);
  let previous: string | undefined;
  if (existsSync(file)) {
    previous = `${file}.before-restore-${now.toISOString().replace(/[:.]/g, '-')}`;
    linkSync(file, previous);
  }
  // Both files are checkpointed (no WAL): the rename makes the store the backup's, whole, in one step.
  renameSync(staging, file);
  for (const suffix of ['-wal', '-shm']) rmSync(`${file}${suffix}`, { force: true });
  return { store: file, epoch, ...(previous !== undefined ? { previous } : {}) };
}

/**
 * Records that a store was restored by other means (an Azure SQL point-in-time restore, pg_restore, a file copied
 * by hand): its epoch raised and its recovery pending, for the next host to start on it. Returns the new epoch.
 */
export async function recordStoreRestored(config: Config, stateDir: string, note: string, now: Date): Promise<number> {
  if (config.store.dialect === 'sqlite') refuseWhileHostsRun(stateDir);
  const store = createSqlStore({ dialect: config.store.dialect, connection: config.store.connection, baseDir: stateDir });
  try {
    await migrateToLatest(store.db, store.dialect, allMigrations);
    return await recordRestore(store.db, { at: now, from: note });
  } finally {
    await store.close();
  }
}

function refuseWhileHostsRun(stateDir: string): void {
  const hosts = runningHosts(stateDir);
  if (hosts.length > 0) {
    throw new StoreCommandError(`a host is running on ${stateDir} (process ${hosts.join(', ')}): stop it before restoring the store`);
  }
}

function assertIsStore(file: string): void {
  let database: BetterSqlite3.Database | undefined;
  try {
    database = openSqlite(file, { readonly: true });
    const found = database.prepare(`select name from sqlite_master where type = 'table' and name = 'kysely_migration'`).get();
    if (found === undefined) throw new StoreCommandError(`${file} is not a backup of a runtime-cloud store (it has no migrations table)`);
  } catch (error) {
    if (error instanceof StoreCommandError) throw error;
    throw new StoreCommandError(`${file} is not a SQLite database: ${error instanceof Error ? error.message : String(error)}`);
  } finally {
    database?.close();
  }
}

/** Checkpoints a database whole into its file (no WAL left) and answers its epoch (0 before epochs existed). */
function settledEpoch(file: string): number {
  const database = openSqlite(file);
  try {
    database.pragma('wal_checkpoint(TRUNCATE)');
    const table = database.prepare(`select name from sqlite_master where type = 'table' and name = 'runtime_cloud_store'`).get();
    const row = table === undefined ? undefined : (database.prepare('select epoch from runtime_cloud_store where id = 1').get() as { epoch: number } | undefined);
    database.pragma('journal_mode = DELETE');
    return Number(row?.epoch ?? 0);
  } finally {
    database.close();
  }
}

function removeDatabase(file: string): void {
  for (const suffix of ['', '-wal', '-shm', '-journal']) rmSync(`${file}${suffix}`, { force: true });
}
