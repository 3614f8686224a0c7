import type { Kysely, Transaction } from 'kysely';
import { isUniqueViolation, LOCK_ALIAS, lockingRows, returningColumns, type SqlDialect } from '../platform/sql/dialect';
import type { StackRef } from '../platform/iac/stack-ref';
import type { AnyDb } from '../platform/sql/database';
import type { ProvisioningStackLockTable, ProvisioningTables } from './provisioning.tables';

export type ProvisioningDb = Kysely<ProvisioningTables>;

export function provisioningDb(db: AnyDb): ProvisioningDb {
  return db as ProvisioningDb;
}

/** Who holds a stack (`tenant/project/stack`), until when, and the lock's version (bumped on every acquisition). */
export interface StackLock {
  readonly stack: StackRef;
  readonly holderRun: string;
  readonly holderHost: string;
  readonly acquiredAt: Date;
  readonly expiresAt: Date;
  readonly version: number;
}

export type StackLockOutcome = { readonly acquired: true; readonly lock: StackLock } | { readonly acquired: false; readonly heldBy: StackLock };

export interface StackLockRequest {
  readonly stack: StackRef;
  readonly run: string;
  readonly host: string;
  /** Epoch ms. */
  readonly now: number;
  readonly ttlMs: number;
}

const COLUMNS = ['tenant_id', 'project', 'stack', 'holder_run', 'holder_host', 'acquired_at', 'expires_at', 'version'] as const;

function rowToLock(row: ProvisioningStackLockTable): StackLock {
  return {
    stack: { tenant: row.tenant_id, project: row.project, stack: row.stack },
    holderRun: row.holder_run,
    holderHost: row.holder_host,
    acquiredAt: new Date(Number(row.acquired_at)),
    expiresAt: new Date(Number(row.expires_at)),
    version: Number(row.version),
  };
}

/**
 * Narrows a query of a table that names a stack by `tenant_id`, `project` and `stack` (the lock table's key; the
 * runs) to one stack.
 */
export function forStack<Q>(query: Q, stack: StackRef): Q {
  const where = (q: Q, column: string, value: string) => (q as unknown as { where: (c: string, op: '=', v: string) => Q }).where(column, '=', value);
  return where(where(where(query, 'tenant_id', stack.tenant), 'project', stack.project), 'stack', stack.stack);
}

/**
 * Takes a stack's lock for a run: when nobody holds it, when the holder's lease has lapsed (its host died or hung),
 * or when the run holds it already (a retried step of the same run). Each statement decides on its own row, so two
 * hosts asking at once never both get it. Otherwise answers who holds it.
 */
export async function acquireStackLock(db: ProvisioningDb, dialect: SqlDialect, request: StackLockRequest): Promise<StackLockOutcome> {
  const { stack, run, host, now, ttlMs } = request;
  for (;;) {
    const taken = await returningColumns<ProvisioningStackLockTable>(
      forStack(
        db.updateTable('provisioning_stack_locks').set((eb) => ({ holder_run: run, holder_host: host, acquired_at: now, expires_at: now + ttlMs, version: eb('version', '+', 1) })),
        stack,
      ).where((eb) => eb.or([eb('expires_at', '<=', now), eb('holder_run', '=', run)])),
      dialect,
      COLUMNS,
    ).execute();
    if (taken[0]) return { acquired: true, lock: rowToLock(taken[0]) };
    const inserted = await insertIfAbsent(db, dialect, { tenant_id: stack.tenant, project: stack.project, stack: stack.stack, holder_run: run, holder_host: host, acquired_at: now, expires_at: now + ttlMs, version: 1 });
    if (inserted) return { acquired: true, lock: rowToLock(inserted) };
    const holder = await forStack(db.selectFrom('provisioning_stack_locks').selectAll(), stack).executeTakeFirst();
    // Released between the two statements: ask again.
    if (holder) return { acquired: false, heldBy: rowToLock(holder) };
  }
}

/** Inserts the lock row unless one exists; a concurrent insert of the same stack loses on the primary key. */
async function insertIfAbsent(db: ProvisioningDb, dialect: SqlDialect, row: ProvisioningStackLockTable): Promise<ProvisioningStackLockTable | undefined> {
  try {
    const rows = await returningColumns<ProvisioningStackLockTable>(db.insertInto('provisioning_stack_locks').values(row), dialect, COLUMNS).execute();
    return rows[0];
  } catch (thrown) {
    if (isUniqueViolation(thrown)) return undefined;
    throw thrown;
  }
}

/** Extends the lock while its holder works; false when the run no longer holds this version of it. */
export async function renewStackLock(db: ProvisioningDb, lock: Pick<StackLock, 'stack' | 'holderRun' | 'version'>, now: number, ttlMs: number): Promise<boolean> {
  const result = await forStack(db.updateTable('provisioning_stack_locks').set({ expires_at: now + ttlMs }), lock.stack)
    .where('holder_run', '=', lock.holderRun)
    .where('version', '=', lock.version)
    .where('expires_at', '>', now)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

/** Gives the lock up; false when the run did not hold it (it lapsed and was taken, or was broken). */
export async function releaseStackLock(db: ProvisioningDb, stack: StackRef, run: string): Promise<boolean> {
  const result = await forStack(db.deleteFrom('provisioning_stack_locks'), stack).where('holder_run', '=', run).executeTakeFirst();
  return Number(result.numDeletedRows) === 1;
}

export async function getStackLock(db: ProvisioningDb, stack: StackRef): Promise<StackLock | undefined> {
  const row = await forStack(db.selectFrom('provisioning_stack_locks').selectAll(), stack).executeTakeFirst();
  return row ? rowToLock(row) : undefined;
}

/**
 * An operator breaks a stack's lock: the lock row goes and the break is recorded (who, why, whom it was taken
 * from) in the same transaction. Returns the lock that was broken, or undefined when nobody held it (or not the
 * version asked for).
 */
export async function breakStackLock(
  trx: Transaction<ProvisioningTables>,
  dialect: SqlDialect,
  request: {
    id: string;
    stack: StackRef;
    by: string;
    reason: string;
    now: number;
    /** Break only this version of the lock: a retried request must not break a lock taken after the first. */
    version?: number;
  },
): Promise<StackLock | undefined> {
  const { tenant, project, stack } = request.stack;
  let query = trx
    .selectFrom(`provisioning_stack_locks as ${LOCK_ALIAS.wait}`)
    .selectAll(LOCK_ALIAS.wait)
    .where(`${LOCK_ALIAS.wait}.tenant_id`, '=', tenant)
    .where(`${LOCK_ALIAS.wait}.project`, '=', project)
    .where(`${LOCK_ALIAS.wait}.stack`, '=', stack);
  if (request.version !== undefined) query = query.where(`${LOCK_ALIAS.wait}.version`, '=', request.version);
  const row = await lockingRows(query, dialect, 'wait').executeTakeFirst();
  if (!row) return undefined;
  await trx
    .insertInto('provisioning_lock_breaks')
    .values({
      id: request.id,
      tenant_id: row.tenant_id,
      project: row.project,
      stack: row.stack,
      holder_run: row.holder_run,
      holder_host: row.holder_host,
      broken_by: request.by,
      reason: request.reason,
      broken_at: request.now,
    })
    .execute();
  await forStack(trx.deleteFrom('provisioning_stack_locks'), request.stack).execute();
  return rowToLock(row);
}
