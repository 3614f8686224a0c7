import type { Kysely } from 'kysely';
import { AppError } from '../../shared/platform/errors/app-error';
import { isUniqueViolation } from '../../shared/platform/sql/dialect';
import type { AnyDb, SqlStore } from '../../shared/platform/sql/database';
import { retryingContention } from '../../shared/platform/sql/transaction';
import type { Clock } from '../../shared/platform/time/clock';
import { firstRows, type SqlDialect } from '../../shared/platform/sql/dialect';
import type { StackState, StateResource } from '../../shared/platform/iac/plan';
import { qualifiedStackName, type StackRef } from '../../shared/platform/iac/stack-ref';

/** Row of `local_iac_stacks`, one per `tenant/project/stack`. Times are epoch milliseconds. */
interface LocalIacStackTable {
  tenant_id: string;
  stack: string;
  project: string;
  serial: number;
  /** JSON array of StateResource. */
  resources: string;
  updated_at: number;
}

interface StackStateTables {
  local_iac_stacks: LocalIacStackTable;
}

export type StackStateDb = Kysely<StackStateTables>;

export function stackStateDb(db: AnyDb): StackStateDb {
  return db as StackStateDb;
}

export async function readStackState(db: StackStateDb, ref: StackRef): Promise<StackState | undefined> {
  const row = await db
    .selectFrom('local_iac_stacks')
    .selectAll()
    .where('tenant_id', '=', ref.tenant)
    .where('project', '=', ref.project)
    .where('stack', '=', ref.stack)
    .executeTakeFirst();
  if (!row) return undefined;
  return { stack: row.stack, project: row.project, serial: Number(row.serial), resources: JSON.parse(row.resources) as StateResource[] };
}

/**
 * Writes `state` (its serial already the next one) only if the stored serial is still `state.serial - 1`: two
 * writers that read the same state cannot both write, the later fails with `PROVISIONING.STATE_CONFLICT`.
 */
export async function writeStackState(db: StackStateDb, tenant: string, state: StackState, now: number): Promise<void> {
  const ref: StackRef = { tenant, project: state.project, stack: state.stack };
  const values = { serial: state.serial, resources: JSON.stringify(state.resources), updated_at: now };
  if (state.serial === 1) {
    try {
      await db.insertInto('local_iac_stacks').values({ tenant_id: tenant, project: state.project, stack: state.stack, ...values }).execute();
      return;
    } catch (error) {
      if (!isUniqueViolation(error)) throw error;
      throw stateConflict(ref, state.serial);
    }
  }
  const result = await db
    .updateTable('local_iac_stacks')
    .set(values)
    .where('tenant_id', '=', tenant)
    .where('project', '=', state.project)
    .where('stack', '=', state.stack)
    .where('serial', '=', state.serial - 1)
    .executeTakeFirst();
  if (Number(result.numUpdatedRows) === 0) throw stateConflict(ref, state.serial);
}

/** One cheap read of the table: the health probe of the state store. */
export async function probeStackStates(db: StackStateDb, dialect: SqlDialect): Promise<void> {
  await firstRows(db.selectFrom('local_iac_stacks').select('stack'), dialect, 1).execute();
}

function stateConflict(ref: StackRef, serial: number): AppError {
  const stack = qualifiedStackName(ref);
  return new AppError('PROVISIONING.STATE_CONFLICT', 'conflict', `the state of stack ${stack} changed during the apply`, { stack, expectedSerial: serial - 1 });
}

/**
 * Where the local engine keeps the state of its stacks: per `tenant/project/stack`, each write conditional on the
 * serial it read (`PROVISIONING.STATE_CONFLICT` otherwise). `probe` is the health check of the store behind it.
 */
export interface StackStates {
  read(stack: StackRef): Promise<StackState | undefined>;
  /** Writes `state`, whose serial is already the next one. */
  write(stack: StackRef, state: StackState): Promise<void>;
  probe(): Promise<void>;
}

/** Stack states in the host's SQL store (`local_iac_stacks`). */
export function sqlStackStates(store: SqlStore, clock: Clock): StackStates {
  const db = stackStateDb(store.db);
  return {
    read: (stack) => retryingContention(() => readStackState(db, stack)),
    write: (stack, state) => retryingContention(() => writeStackState(db, stack.tenant, state, clock.now().getTime())),
    probe: () => probeStackStates(db, store.dialect),
  };
}
