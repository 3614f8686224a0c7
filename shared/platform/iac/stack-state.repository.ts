import type { Kysely } from 'kysely';
import { AppError } from '../errors/app-error';
import { isUniqueViolation } from '../cloud/local-cloud.repository';
import type { AnyDb } from '../sql/database';
import { firstRows, type SqlDialect } from '../sql/dialect';
import type { StackState, StateResource } from './plan';

/** Row of `local_iac_stacks`. Times are epoch milliseconds. */
interface LocalIacStackTable {
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

export async function readStackState(db: StackStateDb, stack: string): Promise<StackState | undefined> {
  const row = await db.selectFrom('local_iac_stacks').selectAll().where('stack', '=', stack).executeTakeFirst();
  if (!row) return undefined;
  return { stack: row.stack, project: row.project, serial: Number(row.serial), resources: JSON.parse(row.resources) as StateResource[] };
}

/**
 * Writes `state` (its serial already the next one) only if the stored serial is still `state.serial - 1`: two
 * writers that read the same state cannot both write, the later fails with `PROVISIONING.STATE_CONFLICT`.
 */
export async function writeStackState(db: StackStateDb, state: StackState, now: number): Promise<void> {
  const values = { project: state.project, serial: state.serial, resources: JSON.stringify(state.resources), updated_at: now };
  if (state.serial === 1) {
    try {
      await db.insertInto('local_iac_stacks').values({ stack: state.stack, ...values }).execute();
      return;
    } catch (error) {
      if (!isUniqueViolation(error)) throw error;
      throw stateConflict(state);
    }
  }
  const result = await db
    .updateTable('local_iac_stacks')
    .set(values)
    .where('stack', '=', state.stack)
    .where('serial', '=', state.serial - 1)
    .executeTakeFirst();
  if (Number(result.numUpdatedRows) === 0) throw stateConflict(state);
}

/** One cheap read of the table: the health probe of the state store. */
export async function probeStackStates(db: StackStateDb, dialect: SqlDialect): Promise<void> {
  await firstRows(db.selectFrom('local_iac_stacks').select('stack'), dialect, 1).execute();
}

function stateConflict(state: StackState): AppError {
  return new AppError('PROVISIONING.STATE_CONFLICT', 'conflict', `the state of stack ${state.stack} changed during the apply`, {
    stack: state.stack,
    expectedSerial: state.serial - 1,
  });
}
