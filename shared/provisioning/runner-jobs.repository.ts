import type { Selectable, Transaction } from 'kysely';
import type { RunnerJobOutcome, RunnerJobSpec } from '../platform/iac/runner-job';
import type { StackRef } from '../platform/iac/stack-ref';
import { appendedKeepingLast, firstRows, isUniqueViolation, type SqlDialect } from '../platform/sql/dialect';
import { Prepared } from '../platform/sql/prepared';
import type { DegradedReference } from './receipt';
import type { ProvisioningRunnerJobTable, ProvisioningTables } from './provisioning.tables';
import { forStack, type ProvisioningDb } from './stack-lock.repository';

type Db = ProvisioningDb | Transaction<ProvisioningTables>;

/** The spec as stored: without the lease time, which the claim sets. */
export type StoredSpec = Omit<RunnerJobSpec, 'leaseExpiresAt'>;

export interface RunnerJob {
  readonly id: string;
  readonly runId: string;
  readonly tenant: string;
  readonly kind: 'plan' | 'apply';
  readonly pool: string;
  readonly target: string;
  readonly state: ProvisioningRunnerJobTable['state'];
  readonly spec: StoredSpec;
  readonly fencingToken: number;
  readonly tokenHash?: string;
  readonly agent?: string;
  readonly lease?: { readonly id: string; readonly fencingToken: number };
  readonly createdAt: Date;
  readonly claimedAt?: Date;
  readonly leaseExpiresAt?: Date;
  readonly finishedAt?: Date;
  readonly outcome?: RunnerJobOutcome;
  readonly degraded?: readonly DegradedReference[];
  readonly log: string;
  /** When the host let the apply job's agent begin changing the target (absent: it changed nothing). */
  readonly applyBeganAt?: Date;
  /** Until when the job may run, from its claim (its target's maximum duration): its lease never reaches past it. */
  readonly deadlineAt?: Date;
}

/** A runner job whose outcome was accepted. */
export type FinishedJob = RunnerJob & { readonly outcome: RunnerJobOutcome };

/** The log excerpt a job keeps: its last this many characters. */
export const JOB_LOG_CHARS = 32 * 1024;

export async function insertJob(db: Db, spec: StoredSpec, at: number): Promise<void> {
  await db
    .insertInto('provisioning_runner_jobs')
    .values({
      id: spec.id,
      run_id: spec.runId,
      tenant_id: spec.stack.tenant,
      kind: spec.kind,
      pool: spec.pool,
      target: spec.target,
      state: 'queued',
      spec: JSON.stringify(spec),
      fencing_token: spec.fencingToken,
      token_hash: null,
      agent: null,
      lease_id: null,
      lease_fencing: null,
      created_at: at,
      claimed_at: null,
      lease_expires_at: null,
      finished_at: null,
      outcome: null,
      degraded: null,
      log: '',
      apply_began_at: null,
      deadline_at: null,
    })
    .execute();
}

export async function findJob(db: Db, dialect: SqlDialect, id: string): Promise<RunnerJob | undefined> {
  const [row] = (await findJobQuery.execute(db, dialect, { id })).rows;
  return row ? rowToJob(row) : undefined;
}

// Every job call reads its job, and every collect the run's latest: compiled once (prepared.ts).
const findJobQuery = new Prepared<ProvisioningTables, 'id', Selectable<ProvisioningRunnerJobTable>>((db, _dialect, p) =>
  db.selectFrom('provisioning_runner_jobs').selectAll().where('id', '=', p('id')),
);

const latestJobQuery = new Prepared<ProvisioningTables, 'runId', Selectable<ProvisioningRunnerJobTable>>((db, dialect, p) =>
  firstRows(db.selectFrom('provisioning_runner_jobs').selectAll().where('run_id', '=', p('runId')).orderBy('created_at', 'desc').orderBy('id', 'desc'), dialect, 1),
);

/** The run's newest job. */
export async function latestJobOfRun(db: Db, dialect: SqlDialect, runId: string): Promise<RunnerJob | undefined> {
  const [row] = (await latestJobQuery.execute(db, dialect, { runId })).rows;
  return row ? rowToJob(row) : undefined;
}

/** A queued job as a claim first looks at it: enough to take its capacity lease before reading the rest. */
export interface QueuedJob {
  readonly id: string;
  readonly tenant: string;
}

/**
 * The oldest queued jobs of an agent pool, first in first out: only jobs on its target and of the tenants it serves,
 * whatever a row's pool says, so no agent is handed another tenant's job even by a row naming its pool.
 */
export async function queuedJobs(db: Db, dialect: SqlDialect, of: { pool: string; target: string; tenants: readonly string[] }, limit: number): Promise<QueuedJob[]> {
  if (of.tenants.length === 0) return [];
  const rows = await firstRows(
    db
      .selectFrom('provisioning_runner_jobs')
      .select(['id', 'tenant_id'])
      .where('pool', '=', of.pool)
      .where('target', '=', of.target)
      .where('tenant_id', 'in', of.tenants)
      .where('state', '=', 'queued')
      .orderBy('created_at')
      .orderBy('id'),
    dialect,
    limit,
  ).execute();
  return rows.map((row) => ({ id: row.id, tenant: row.tenant_id }));
}

/** How many jobs of the pool were queued before `job` and wait still. */
export async function queuePosition(db: Db, job: Pick<RunnerJob, 'pool' | 'createdAt'>): Promise<number> {
  const row = await db
    .selectFrom('provisioning_runner_jobs')
    .select((eb) => eb.fn.countAll<number>().as('n'))
    .where('pool', '=', job.pool)
    .where('state', '=', 'queued')
    .where('created_at', '<', job.createdAt.getTime())
    .executeTakeFirst();
  return Number(row?.n ?? 0) + 1;
}

/**
 * Claims a queued job for an agent: only one claim of a job wins (the update is conditional on the job still being
 * queued), so two agents polling at once never both run it. `leaseExpiresAt` is at most `deadlineAt`.
 */
export async function markClaimed(
  db: Db,
  id: string,
  claim: { agent: string; tokenHash: string; lease: { id: string; fencingToken: number }; at: number; leaseExpiresAt: number; deadlineAt: number; degraded: readonly DegradedReference[] },
): Promise<boolean> {
  const result = await db
    .updateTable('provisioning_runner_jobs')
    .set({
      state: 'running',
      agent: claim.agent,
      token_hash: claim.tokenHash,
      lease_id: claim.lease.id,
      lease_fencing: claim.lease.fencingToken,
      claimed_at: claim.at,
      lease_expires_at: claim.leaseExpiresAt,
      deadline_at: claim.deadlineAt,
      degraded: claim.degraded.length > 0 ? JSON.stringify(claim.degraded) : null,
    })
    .where('id', '=', id)
    .where('state', '=', 'queued')
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

/**
 * Renews a running job's lease while it has not lapsed; false when it has (or the job ended). With `applyBegins`,
 * the same conditional update records that the apply job's agent begins changing the target: a job marked lost
 * first is refused here, so a lost job without the mark never changed anything.
 */
export async function renewJob(db: Db, id: string, at: number, leaseExpiresAt: number, applyBegins = false): Promise<boolean> {
  const result = await db
    .updateTable('provisioning_runner_jobs')
    .set({ lease_expires_at: leaseExpiresAt, ...(applyBegins ? { apply_began_at: at } : {}) })
    .where('id', '=', id)
    .where('state', '=', 'running')
    .where('lease_expires_at', '>', at)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

/** Appends lines to the job's log excerpt, keeping its tail. */
export async function appendJobLog(db: Db, dialect: SqlDialect, id: string, lines: readonly string[]): Promise<void> {
  if (lines.length === 0) return;
  const appended = appendedKeepingLast(dialect, 'log', lines.map((l) => `${l}\n`).join(''), JOB_LOG_CHARS);
  await db.updateTable('provisioning_runner_jobs').set({ log: appended }).where('id', '=', id).execute();
}

/** Records a running job's outcome; false when the job is no longer running (lost, canceled, already done). */
export async function finishJob(db: Db, id: string, outcome: RunnerJobOutcome, at: number): Promise<boolean> {
  const result = await db
    .updateTable('provisioning_runner_jobs')
    .set({ state: 'done', outcome: JSON.stringify(outcome), finished_at: at })
    .where('id', '=', id)
    .where('state', '=', 'running')
    .where('lease_expires_at', '>', at)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

/** A running job whose lease lapsed is lost; false when it is not (renewed meanwhile, or ended). */
export async function markLost(db: Db, id: string, at: number): Promise<boolean> {
  const result = await db
    .updateTable('provisioning_runner_jobs')
    .set({ state: 'lost', finished_at: at })
    .where('id', '=', id)
    .where('state', '=', 'running')
    .where('lease_expires_at', '<=', at)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

/**
 * How many of the run's jobs of `kind` were lost before their agent began to apply (every lost plan job; each was
 * dispatched again).
 */
export async function countUnbegunLostJobs(db: Db, runId: string, kind: RunnerJob['kind']): Promise<number> {
  const row = await db
    .selectFrom('provisioning_runner_jobs')
    .select((eb) => eb.fn.countAll<number>().as('n'))
    .where('run_id', '=', runId)
    .where('kind', '=', kind)
    .where('state', '=', 'lost')
    .where('apply_began_at', 'is', null)
    .executeTakeFirst();
  return Number(row?.n ?? 0);
}

/** Ends the run's jobs that have not ended (the run ended, was superseded, or its plan is dispatched again). */
export async function cancelJobsOfRun(db: Db, runId: string, at: number): Promise<void> {
  await db.updateTable('provisioning_runner_jobs').set({ state: 'canceled', finished_at: at }).where('run_id', '=', runId).where('state', 'in', ['queued', 'running']).execute();
}

/** Jobs by pool and state, for the runner pools' view. */
export async function jobCounts(db: Db): Promise<Array<{ pool: string; state: string; n: number }>> {
  const rows = await db
    .selectFrom('provisioning_runner_jobs')
    .select(['pool', 'state', (eb) => eb.fn.countAll<number>().as('n')])
    .where('state', 'in', ['queued', 'running'])
    .groupBy(['pool', 'state'])
    .execute();
  return rows.map((r) => ({ pool: r.pool, state: r.state, n: Number(r.n) }));
}

/** Notes that an agent of the pool was heard from, and the job it runs (none while it polls). */
export async function touchAgent(db: Db, pool: string, agent: string, jobId: string | null, at: number): Promise<void> {
  const updated = await db.updateTable('provisioning_runner_agents').set({ job_id: jobId, last_seen: at }).where('pool', '=', pool).where('agent', '=', agent).executeTakeFirst();
  if (Number(updated.numUpdatedRows) === 1) return;
  try {
    await db.insertInto('provisioning_runner_agents').values({ pool, agent, job_id: jobId, last_seen: at }).execute();
  } catch (error) {
    // Its first two calls raced: the other inserted the row.
    if (!isUniqueViolation(error)) throw error;
  }
}

export async function listAgents(db: Db, pool?: string): Promise<Array<{ pool: string; agent: string; jobId?: string; lastSeen: Date }>> {
  let query = db.selectFrom('provisioning_runner_agents').selectAll().orderBy('pool').orderBy('agent');
  if (pool !== undefined) query = query.where('pool', '=', pool);
  return (await query.execute()).map((r) => ({ pool: r.pool, agent: r.agent, ...(r.job_id !== null ? { jobId: r.job_id } : {}), lastSeen: new Date(Number(r.last_seen)) }));
}

/** Marks a stack to be refreshed before its next plan (an apply on it lost its runner). */
export async function markStackForRefresh(db: Db, stack: StackRef, runId: string, reason: string, at: number): Promise<void> {
  const updated = await forStack(db.updateTable('provisioning_stack_refresh').set({ run_id: runId, reason, since: at }), stack).executeTakeFirst();
  if (Number(updated.numUpdatedRows) === 1) return;
  await db.insertInto('provisioning_stack_refresh').values({ tenant_id: stack.tenant, project: stack.project, stack: stack.stack, run_id: runId, reason, since: at }).execute();
}

export async function stackNeedsRefresh(db: Db, stack: StackRef): Promise<boolean> {
  return (await forStack(db.selectFrom('provisioning_stack_refresh').select('run_id'), stack).executeTakeFirst()) !== undefined;
}

/** An apply that refreshed the stack recorded what the target holds: the mark goes. */
export async function clearStackRefresh(db: Db, stack: StackRef): Promise<void> {
  await forStack(db.deleteFrom('provisioning_stack_refresh'), stack).execute();
}

function rowToJob(row: Selectable<ProvisioningRunnerJobTable>): RunnerJob {
  const time = (v: number | null) => (v === null ? undefined : new Date(Number(v)));
  const claimedAt = time(row.claimed_at);
  const leaseExpiresAt = time(row.lease_expires_at);
  const finishedAt = time(row.finished_at);
  return {
    id: row.id,
    runId: row.run_id,
    tenant: row.tenant_id,
    kind: row.kind,
    pool: row.pool,
    target: row.target,
    state: row.state,
    spec: JSON.parse(row.spec) as StoredSpec,
    fencingToken: Number(row.fencing_token),
    ...(row.token_hash !== null ? { tokenHash: row.token_hash } : {}),
    ...(row.agent !== null ? { agent: row.agent } : {}),
    ...(row.lease_id !== null ? { lease: { id: row.lease_id, fencingToken: Number(row.lease_fencing) } } : {}),
    createdAt: new Date(Number(row.created_at)),
    ...(claimedAt ? { claimedAt } : {}),
    ...(leaseExpiresAt ? { leaseExpiresAt } : {}),
    ...(finishedAt ? { finishedAt } : {}),
    ...(row.outcome !== null ? { outcome: JSON.parse(row.outcome) as RunnerJobOutcome } : {}),
    ...(row.degraded !== null ? { degraded: JSON.parse(row.degraded) as DegradedReference[] } : {}),
    log: row.log,
    ...(row.apply_began_at !== null ? { applyBeganAt: new Date(Number(row.apply_began_at)) } : {}),
    ...(row.deadline_at !== null ? { deadlineAt: new Date(Number(row.deadline_at)) } : {}),
  };
}


