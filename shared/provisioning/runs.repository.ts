import type { Transaction } from 'kysely';
import type { TenantFilter } from '../platform/auth/auth';
import { firstRows, type SqlDialect } from '../platform/sql/dialect';
import type { Reconciliation } from './reconciliation';
import { statesBefore, type PoolResize, type Run, type RunReason, type RunState, type WaitingFor } from './run';
import type { ProvisioningRunTable, ProvisioningTables } from './provisioning.tables';
import { forStack, type ProvisioningDb } from './stack-lock.repository';
import type { StackRef } from '../platform/iac/stack-ref';

/** The runs in SQL: a run's row, its state transitions and waits, and the environments' bindings to stacks. */
type Executor = ProvisioningDb | Transaction<ProvisioningTables>;

export const RUN_COLUMNS = [
  'seq',
  'id',
  'promotion_id',
  'tenant_id',
  'environment_id',
  'environment_name',
  'tier',
  'release_name',
  'release_version',
  'project',
  'stack',
  'repository',
  'commit_sha',
  'project_path',
  'requested_by',
  'reason',
  'origin',
  'reconciliation',
  'config',
  'state',
  'waiting_kind',
  'waiting_for',
  'plan_digest',
  'plan_expires_at',
  'approval_required',
  'error_code',
  'error_message',
  'superseded_by',
  'apply_began_at',
  'created_at',
  'updated_at',
  'finished_at',
] as const;

export type RunRow = Pick<ProvisioningRunTable, Exclude<(typeof RUN_COLUMNS)[number], 'seq'>> & { seq: number };

export function runRowToRun(row: RunRow): Run {
  return {
    id: row.id,
    seq: Number(row.seq),
    promotionId: row.promotion_id,
    tenant: row.tenant_id,
    environment: { id: row.environment_id, name: row.environment_name, tier: row.tier as Run['environment']['tier'] },
    release: { name: row.release_name, version: row.release_version },
    project: row.project,
    stack: row.stack,
    desiredState: { repository: row.repository, commit: row.commit_sha, path: row.project_path },
    requestedBy: row.requested_by,
    reason: row.reason as RunReason,
    ...(row.origin !== null ? { poolResize: JSON.parse(row.origin) as PoolResize } : {}),
    ...(row.reconciliation !== null ? { reconciliation: JSON.parse(row.reconciliation) as Reconciliation } : {}),
    ...(row.config !== null ? { config: JSON.parse(row.config) as NonNullable<Run['config']> } : {}),
    state: row.state as RunState,
    ...(row.waiting_for !== null ? { waitingFor: JSON.parse(row.waiting_for) as WaitingFor } : {}),
    ...(row.plan_digest !== null ? { planDigest: row.plan_digest } : {}),
    ...(row.plan_expires_at !== null ? { planExpiresAt: new Date(Number(row.plan_expires_at)) } : {}),
    ...(row.approval_required !== null ? { approvalRequired: Number(row.approval_required) === 1 } : {}),
    ...(row.error_code !== null ? { error: { code: row.error_code, message: row.error_message ?? '' } } : {}),
    ...(row.superseded_by !== null ? { supersededBy: row.superseded_by } : {}),
    ...(row.apply_began_at !== null ? { applyBeganAt: new Date(Number(row.apply_began_at)) } : {}),
    createdAt: new Date(Number(row.created_at)),
    updatedAt: new Date(Number(row.updated_at)),
    ...(row.finished_at !== null ? { finishedAt: new Date(Number(row.finished_at)) } : {}),
  };
}

export function byTenant<Q extends { where: (...args: never[]) => Q }>(query: Q, filter: TenantFilter): Q {
  if (filter.kind === 'all') return query;
  return (query.where as unknown as (c: string, op: string, v: string) => Q)('tenant_id', '=', filter.tenant);
}

/** A run to record: from a promotion, a pool resize or a reconciliation (then `key` is theirs, see the service). */
export interface NewRun {
  readonly id: string;
  /**
   * The business key, one run per key: the promotionId, `pool-resize:<event id>` or
   * `reconciliation:<proposal id>`. Stored as `promotion_id`, unique per tenant (`provisioning_runs_key`): a second
   * run of one tenant's key fails, while another tenant's equal key is another run.
   */
  readonly key: string;
  readonly tenant: string;
  readonly environment: Run['environment'];
  readonly release: Run['release'];
  /** Empty for a run rejected before its project was read. */
  readonly project: string;
  readonly stack: string;
  readonly desiredState: Run['desiredState'];
  readonly requestedBy: string;
  readonly reason: RunReason;
  readonly poolResize?: PoolResize;
  readonly reconciliation?: Reconciliation;
  readonly config?: Run['config'];
  readonly state: Extract<RunState, 'queued' | 'rejected'>;
  readonly error?: { readonly code: string; readonly message: string };
  readonly now: number;
}

/** Inserts a run and answers it with its sequence number. A second run of one key fails on the unique key. */
export async function insertRun(trx: Executor, run: NewRun): Promise<Run> {
  const { now } = run;
  await trx
    .insertInto('provisioning_runs')
    .values({
      id: run.id,
      promotion_id: run.key,
      tenant_id: run.tenant,
      environment_id: run.environment.id,
      environment_name: run.environment.name,
      tier: run.environment.tier,
      release_name: run.release.name,
      release_version: run.release.version,
      project: run.project,
      stack: run.stack,
      repository: run.desiredState.repository,
      commit_sha: run.desiredState.commit,
      project_path: run.desiredState.path,
      requested_by: run.requestedBy,
      reason: run.reason,
      origin: run.poolResize ? JSON.stringify(run.poolResize) : null,
      reconciliation: run.reconciliation ? JSON.stringify(run.reconciliation) : null,
      config: run.config ? JSON.stringify(run.config) : null,
      state: run.state,
      waiting_kind: null,
      waiting_for: null,
      plan_digest: null,
      plan_expires_at: null,
      approval_required: null,
      plan_receipt: null,
      apply_receipt: null,
      error_code: run.error?.code ?? null,
      error_message: run.error?.message ?? null,
      superseded_by: null,
      created_at: now,
      updated_at: now,
      finished_at: run.state === 'rejected' ? now : null,
    })
    .execute();
  const inserted = await findRun(trx, run.id);
  if (!inserted) throw new Error(`run ${run.id} was not found after its insert`);
  return inserted;
}

export async function findRun(db: Executor, id: string, tenants: TenantFilter = { kind: 'all' }): Promise<Run | undefined> {
  const row = await byTenant(db.selectFrom('provisioning_runs').select(RUN_COLUMNS).where('id', '=', id), tenants).executeTakeFirst();
  return row ? runRowToRun(row) : undefined;
}

/** The tenant's run of a business key (a promotion id, a pool resize's or a reconciliation's key): keys are per tenant. */
export async function findRunByPromotion(db: Executor, tenant: string, promotionId: string): Promise<Run | undefined> {
  const row = await db.selectFrom('provisioning_runs').select(RUN_COLUMNS).where('tenant_id', '=', tenant).where('promotion_id', '=', promotionId).executeTakeFirst();
  return row ? runRowToRun(row) : undefined;
}

export interface RunListQuery {
  /** An environment's id or name. */
  readonly environment?: string;
  readonly state?: RunState;
  /** Runs with ids after this one (`newest`: before it). */
  readonly after?: string;
  readonly limit: number;
  /** `oldest` first (the default: the order they were taken in) or `newest` first. */
  readonly order?: 'oldest' | 'newest';
}

/** A page of runs in id order (ids are time-ordered, so this is the order they were taken in), or the reverse. */
export async function listRuns(db: Executor, dialect: SqlDialect, tenants: TenantFilter, q: RunListQuery): Promise<Run[]> {
  let query = byTenant(db.selectFrom('provisioning_runs').select(RUN_COLUMNS), tenants);
  if (q.environment !== undefined) {
    const environment = q.environment;
    query = query.where((eb) => eb.or([eb('environment_id', '=', environment), eb('environment_name', '=', environment)]));
  }
  if (q.state !== undefined) query = query.where('state', '=', q.state);
  const newest = q.order === 'newest';
  if (q.after !== undefined) query = query.where('id', newest ? '<' : '>', q.after);
  return (await firstRows(query.orderBy('id', newest ? 'desc' : 'asc'), dialect, q.limit).execute()).map(runRowToRun);
}

export interface RunChange {
  readonly waitingFor?: WaitingFor | null;
  readonly error?: { readonly code: string; readonly message: string } | null;
  readonly supersededBy?: string;
  readonly finished?: boolean;
}

/** Narrows which runs a transition moves: only from these states, only while the run waits for this kind. */
export interface RunGuard {
  readonly from?: readonly RunState[];
  readonly waitingKind?: WaitingFor['kind'];
}

/**
 * Moves a run to `to` when it is in a state that may move there (the transition table, narrowed by `guard`), and
 * applies `change`. False when the run was not in such a state: another writer (a cancel, a supersede, a retried
 * step) got there first, and the caller reads the run again.
 */
export async function transitionRun(trx: Executor, id: string, to: RunState, now: number, change: RunChange = {}, guard: RunGuard = {}): Promise<boolean> {
  const from = statesBefore(to).filter((state) => guard.from === undefined || guard.from.includes(state));
  if (from.length === 0) throw new Error(`no run state moves to ${to}${guard.from ? ` from ${guard.from.join(', ')}` : ''}`);
  const result = await trx
    .updateTable('provisioning_runs')
    .set({
      state: to,
      updated_at: now,
      ...waitingColumns(change.waitingFor),
      ...(change.error === null ? { error_code: null, error_message: null } : {}),
      ...(change.error ? { error_code: change.error.code, error_message: change.error.message } : {}),
      ...(change.supersededBy !== undefined ? { superseded_by: change.supersededBy } : {}),
      ...(change.finished ? { finished_at: now } : {}),
    })
    .where('id', '=', id)
    .where('state', 'in', from)
    .$if(guard.waitingKind !== undefined, (q) => q.where('waiting_kind', '=', guard.waitingKind ?? ''))
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

export function waitingColumns(waitingFor: WaitingFor | null | undefined): Partial<Pick<ProvisioningRunTable, 'waiting_kind' | 'waiting_for'>> {
  if (waitingFor === undefined) return {};
  if (waitingFor === null) return { waiting_kind: null, waiting_for: null };
  return { waiting_kind: waitingFor.kind, waiting_for: JSON.stringify(waitingFor) };
}

/**
 * Records that the host's engine begins the run's apply, while the run is still applying and not begun; false when
 * it is not so (an earlier try of the step began it).
 */
export async function markApplyBegan(db: Executor, id: string, now: number): Promise<boolean> {
  const result = await db
    .updateTable('provisioning_runs')
    .set({ apply_began_at: now, updated_at: now })
    .where('id', '=', id)
    .where('state', '=', 'applying')
    .where('apply_began_at', 'is', null)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

/** The run applying to the stack now, if one is. */
export async function applyingRunOf(db: Executor, stack: StackRef): Promise<string | undefined> {
  const row = await db
    .selectFrom('provisioning_runs')
    .select('id')
    .where('tenant_id', '=', stack.tenant)
    .where('project', '=', stack.project)
    .where('stack', '=', stack.stack)
    .where('state', '=', 'applying')
    .executeTakeFirst();
  return row?.id;
}

/** Records (or clears) what a run waits for, while it stays in `state`; false when it has moved on meanwhile. */
export async function setWaiting(db: Executor, id: string, state: RunState, waitingFor: WaitingFor | null, now: number): Promise<boolean> {
  const result = await db
    .updateTable('provisioning_runs')
    .set({ ...waitingColumns(waitingFor), updated_at: now })
    .where('id', '=', id)
    .where('state', '=', state)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

/**
 * Replaces what a run waits for only if it still waits for exactly `expected` (compare-and-set on the stored JSON);
 * false when another writer changed it first.
 */
export async function replaceWaiting(db: Executor, id: string, expected: WaitingFor | null, next: WaitingFor | null, now: number): Promise<boolean> {
  const result = await db
    .updateTable('provisioning_runs')
    .set({ ...waitingColumns(next), updated_at: now })
    .where('id', '=', id)
    .where((eb) => (expected === null ? eb('waiting_for', 'is', null) : eb('waiting_for', '=', JSON.stringify(expected))))
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

/**
 * The latest applied run of a stack (a promotion's or an earlier resize's): it says where the stack's project lives
 * (repository, commit, path) and which environment of its tenant it serves.
 */
export async function latestAppliedRun(db: Executor, dialect: SqlDialect, stack: StackRef): Promise<Run | undefined> {
  const row = await firstRows(
    forStack(db.selectFrom('provisioning_runs').select(RUN_COLUMNS), stack).where('state', '=', 'applied').orderBy('seq', 'desc'),
    dialect,
    1,
  ).executeTakeFirst();
  return row ? runRowToRun(row) : undefined;
}

/**
 * Points a planning pool-resize run at the desired state its stack runs now (the latest applied run's), so the
 * resize changes the size and nothing else: a promotion applied while the resize waited is not undone. A
 * reconciliation run takes that run's release and config too (`also`): it applies again what the stack runs.
 */
export async function rebaseRun(
  db: Executor,
  id: string,
  desiredState: Run['desiredState'],
  now: number,
  also?: { readonly release: Run['release']; readonly config: Run['config'] },
): Promise<boolean> {
  const result = await db
    .updateTable('provisioning_runs')
    .set({
      repository: desiredState.repository,
      commit_sha: desiredState.commit,
      project_path: desiredState.path,
      ...(also ? { release_name: also.release.name, release_version: also.release.version, config: also.config ? JSON.stringify(also.config) : null } : {}),
      updated_at: now,
    })
    .where('id', '=', id)
    .where('state', '=', 'planning')
    .where('plan_receipt', 'is', null)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

/** The stack (and the target, where bound) an environment of a tenant is bound to, if a run bound it. */
export async function findEnvironmentStack(db: Executor, tenant: string, environmentId: string): Promise<(StackRef & { readonly target?: string }) | undefined> {
  const row = await db
    .selectFrom('provisioning_environment_stacks')
    .select(['tenant_id', 'project', 'stack', 'target'])
    .where('tenant_id', '=', tenant)
    .where('environment_id', '=', environmentId)
    .executeTakeFirst();
  return row ? { tenant: row.tenant_id, project: row.project, stack: row.stack, ...(row.target !== null ? { target: row.target } : {}) } : undefined;
}

/** Binds an environment to its stack and target; a second binding of the environment fails on the primary key. */
export async function bindEnvironmentStack(trx: Executor, binding: { tenant: string; environmentId: string; stack: StackRef; target: string; runId: string; at: number }): Promise<void> {
  await trx
    .insertInto('provisioning_environment_stacks')
    .values({
      tenant_id: binding.tenant,
      environment_id: binding.environmentId,
      project: binding.stack.project,
      stack: binding.stack.stack,
      target: binding.target,
      bound_by_run: binding.runId,
      bound_at: binding.at,
    })
    .execute();
}

/** Records the project of a run that has none yet (one taken in before stacks were tenant-qualified). */
export async function setRunProject(db: Executor, id: string, project: string, now: number): Promise<void> {
  await db.updateTable('provisioning_runs').set({ project, updated_at: now }).where('id', '=', id).where('project', '=', '').execute();
}
