import type { Transaction } from 'kysely';
import { firstRows, type SqlDialect } from '../platform/sql/dialect';
import { stackOf, type Run } from './run';
import type { ProvisioningTables } from './provisioning.tables';
import { forStack, type ProvisioningDb } from './stack-lock.repository';
import type { StackRef } from '../platform/iac/stack-ref';

/** The queue of runs of a stack: which run waits before which, and which queued runs a newer one replaces. */
type Executor = ProvisioningDb | Transaction<ProvisioningTables>;

/**
 * An earlier run of the stack that must take the stack before `run` does (FIFO): one still queued, or one approved
 * and waiting for the lock to apply. Runs waiting for an approval do not hold others up.
 */
export async function earlierWaitingRun(db: Executor, dialect: SqlDialect, run: Pick<Run, 'tenant' | 'project' | 'stack' | 'seq'>): Promise<string | undefined> {
  const row = await firstRows(
    forStack(db.selectFrom('provisioning_runs').select('id'), stackOf(run))
      .where('seq', '<', run.seq)
      .where((eb) => eb.or([eb('state', '=', 'queued'), eb.and([eb('state', '=', 'applying'), eb('waiting_kind', '=', 'stack-lock')])]))
      .orderBy('seq'),
    dialect,
    1,
  ).executeTakeFirst();
  return row?.id;
}

/**
 * The first run of the stack in its FIFO order that waits to take the stack: one still queued, or one that tried
 * to take it and found it busy (approved and waiting to apply, or replanned and waiting to plan).
 */
export async function firstWaitingRun(db: Executor, dialect: SqlDialect, stack: StackRef): Promise<string | undefined> {
  const row = await firstRows(
    forStack(db.selectFrom('provisioning_runs').select('id'), stack)
      .where((eb) => eb.or([eb('state', '=', 'queued'), eb.and([eb('state', 'in', ['planning', 'applying']), eb('waiting_kind', '=', 'stack-lock')])]))
      .orderBy('seq'),
    dialect,
    1,
  ).executeTakeFirst();
  return row?.id;
}

/**
 * Queued runs of the same tenant, environment, stack and reason that came before `run`: a newer promotion replaces
 * older promotions, a newer pool size older resizes, a newer accepted reconciliation older ones (each applies the
 * stack's latest desired state again against what the target holds then, so the newest proposal's ignore rules
 * are the operator's last word). Runs of different reasons never replace each other: each carries a change the
 * other does not (a promotion plans against the recorded state, so it would not undo drift a reconciliation was
 * accepted for).
 */
export async function queuedRunsBefore(trx: Executor, run: Run): Promise<string[]> {
  const rows = await forStack(trx.selectFrom('provisioning_runs').select('id'), stackOf(run))
    .where('environment_id', '=', run.environment.id)
    .where('reason', '=', run.reason)
    .where('state', '=', 'queued')
    .where('seq', '<', run.seq)
    .orderBy('seq')
    .execute();
  return rows.map((r) => r.id);
}
