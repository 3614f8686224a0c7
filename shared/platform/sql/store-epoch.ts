import { sql, type Kysely, type Migration } from 'kysely';
import type { AnyDb } from './database';
import { sqlTypes, type MigrationSource } from './migrations';

/**
 * The store's epoch: how many times the store was restored from a backup (or an Azure SQL point-in-time restore).
 * A restore loses what was written after the backup, so whatever the store counted since (fencing tokens) may
 * count again from a lower value: each restore raises the epoch, and what must stay strictly increasing across a
 * restore is counted within the epoch (capacity: a fencing token is `epoch × EPOCH_SPAN + counter`).
 *
 * One row. A restore also leaves the recovery to do (`recovery_pending`): the first host to start on the restored
 * store does it (see shared/store-restore.ts) and records the window it opened.
 */
export interface StoreEpochTable {
  /** Always 1: the table holds one row. */
  id: number;
  epoch: number;
  /** When the last restore was recorded (epoch ms), and from what (a file, or the operator's note). */
  restored_at: number | null;
  restored_from: string | null;
  /** 1 from a restore until a host has begun the recovery. */
  recovery_pending: number;
  /** The recovery window a host opened after the last restore: [started, until). */
  recovery_started_at: number | null;
  recovery_until: number | null;
}

export interface StoreEpochTables {
  runtime_cloud_store: StoreEpochTable;
}

/** What the store says about its restores. */
export interface StoreEpoch {
  readonly epoch: number;
  readonly restoredAt?: Date;
  readonly restoredFrom?: string;
  readonly recoveryPending: boolean;
  readonly recovery?: { readonly startedAt: Date; readonly until: Date };
}

/**
 * The span of one epoch in anything counted per epoch. Decimal, so a token reads as its epoch and its count
 * (`3000000000042`: epoch 3, the 42nd). 10^12 per epoch lasts over six years of grants at 5,000 a second.
 */
export const EPOCH_SPAN = 1_000_000_000_000;

/** The largest epoch: tokens stay within 15 decimal digits (what the release API accepts), and safe JS integers. */
export const MAX_EPOCH = 999;

export const storeEpochMigrations: MigrationSource = (dialect) => {
  const t = sqlTypes(dialect);
  const migration: Migration = {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('runtime_cloud_store')
        .addColumn('id', 'integer', (c) => c.primaryKey())
        .addColumn('epoch', 'bigint', (c) => c.notNull())
        .addColumn('restored_at', 'bigint')
        .addColumn('restored_from', t.text)
        .addColumn('recovery_pending', 'integer', (c) => c.notNull())
        .addColumn('recovery_started_at', 'bigint')
        .addColumn('recovery_until', 'bigint')
        .execute();
      // Existing stores are epoch 0: the fencing tokens they handed out keep their values.
      await sql`insert into runtime_cloud_store (id, epoch, recovery_pending) values (1, 0, 0)`.execute(db);
    },
  };
  return { '20261203-10-store-epoch': migration };
};

function epochDb(db: AnyDb): Kysely<StoreEpochTables> {
  return db as Kysely<StoreEpochTables>;
}

export async function readStoreEpoch(db: AnyDb): Promise<StoreEpoch> {
  const row = await epochDb(db).selectFrom('runtime_cloud_store').selectAll().where('id', '=', 1).executeTakeFirstOrThrow();
  const at = (ms: number | null) => (ms === null ? undefined : new Date(Number(ms)));
  const started = at(row.recovery_started_at);
  const until = at(row.recovery_until);
  return {
    epoch: Number(row.epoch),
    ...(row.restored_at !== null ? { restoredAt: at(row.restored_at)! } : {}),
    ...(row.restored_from !== null ? { restoredFrom: row.restored_from } : {}),
    recoveryPending: Number(row.recovery_pending) === 1,
    ...(started && until ? { recovery: { startedAt: started, until } } : {}),
  };
}

/**
 * Records a restore: the epoch becomes one more than both the restored store's and `atLeast` (the epoch of the
 * store it replaced, which may be later than the backup's), and the recovery is pending. Returns the new epoch.
 */
export async function recordRestore(db: AnyDb, restore: { at: Date; from: string; atLeast?: number }): Promise<number> {
  const { epoch } = await readStoreEpoch(db);
  const next = Math.max(epoch, restore.atLeast ?? 0) + 1;
  if (next > MAX_EPOCH) throw new Error(`the store has been restored ${MAX_EPOCH} times: its fencing tokens would leave 15 digits`);
  await epochDb(db)
    .updateTable('runtime_cloud_store')
    .set({ epoch: next, restored_at: restore.at.getTime(), restored_from: restore.from, recovery_pending: 1, recovery_started_at: null, recovery_until: null })
    .where('id', '=', 1)
    .execute();
  return next;
}

/**
 * Opens the recovery window a restore left pending, once: of several hosts starting at once one wins; the others
 * (and every later start) find nothing pending and answer false.
 */
export async function beginRecovery(db: AnyDb, window: { at: Date; until: Date }): Promise<boolean> {
  const result = await epochDb(db)
    .updateTable('runtime_cloud_store')
    .set({ recovery_pending: 0, recovery_started_at: window.at.getTime(), recovery_until: window.until.getTime() })
    .where('id', '=', 1)
    .where('recovery_pending', '=', 1)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

/** The store's epoch × EPOCH_SPAN, read inside a statement (so a token is always of the store's own epoch). */
export function epochBase() {
  return sql<number>`(select epoch * ${sql.lit(EPOCH_SPAN)} from runtime_cloud_store where id = 1)`;
}
