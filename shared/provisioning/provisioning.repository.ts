import type { PolicyDecision } from './external-services.client';
import type { Kysely, Transaction } from 'kysely';
import type { TenantFilter } from '../platform/auth/auth';
import type { BusTables } from '../platform/bus/bus.tables';
import { AppError } from '../platform/errors/app-error';
import type { ApplyResult, Plan } from '../platform/iac/plan';
import { firstRows, type SqlDialect } from '../platform/sql/dialect';
import type { Reconciliation } from './reconciliation';
import { stackOf, statesBefore, type PoolResize, type Run, type RunReason, type RunState, type WaitingFor } from './run';
import type { ProvisioningApprovalTable, ProvisioningRunTable, ProvisioningTables } from './provisioning.tables';
import { forStack, type ProvisioningDb } from './stack-lock.repository';
import type { StackRef } from '../platform/iac/stack-ref';

/** The provisioning store: runs, receipts, decisions and rejected messages. Row types stay in this file. */
type Executor = ProvisioningDb | Transaction<ProvisioningTables>;

/**
 * The plan receipt: what was planned, from which commit, by which runner, and whether it needs approval.
 *
 * BREAKING-CHANGE SHAPE: stored write-once with the run and shown by the HTTP API; the `plan` inside is the engine's
 * `Plan` (its own schema, `planSchema`), which is what an apply carries out. References appear as references.
 */
export interface PlanReceipt {
  readonly runId: string;
  /** The stack's own name; `qualifiedStack` is its identity, `tenant/project/stack` (absent in older receipts). */
  readonly stack: string;
  readonly qualifiedStack?: string;
  /** Without credentials. */
  readonly repository: string;
  readonly commit: string;
  readonly path: string;
  readonly runner: ReceiptRunner;
  /** The plan read the target first (a reconciliation; a stack whose last apply lost its runner). */
  readonly refreshed?: boolean;
  readonly approvalRequired: boolean;
  readonly approvalReasons: readonly string[];
  readonly plan: Plan;
  /** ISO-8601 UTC. */
  readonly startedAt: string;
  readonly finishedAt: string;
  /** ISO-8601 UTC: an approval after this is refused as stale (`PROVISIONING.PLAN_STALE`). */
  readonly expiresAt?: string;
  /** The GovernanceHost's policy decision (an allow: a denied plan is not recorded, the run fails). */
  readonly policy?: PolicyDecision;
  /**
   * Set when the GovernanceHost decided later (it answered `pending`): its check id, when the run asked for the
   * decision and when it found it made (ISO-8601 UTC). The plan was made at `finishedAt`, before the check.
   */
  readonly policyCheck?: { readonly checkId: string; readonly requestedAt: string; readonly decidedAt: string };
}

/** A plan receipt before the GovernanceHost's decision: what a run waiting for a policy check keeps. */
export type UndecidedPlanReceipt = Omit<PlanReceipt, 'policy' | 'policyCheck'>;

/** A run's plan waiting for the GovernanceHost to decide its policy check. */
export interface PolicyWait {
  readonly checkId: string;
  readonly receipt: UndecidedPlanReceipt;
  readonly requestedAt: Date;
}

/**
 * The apply receipt: the engine's result (per-resource results, outputs, status, error code, times) and who ran it.
 *
 * BREAKING-CHANGE SHAPE: stored write-once with the run's final state and shown by the HTTP API.
 */
/** The engine that made a plan or an apply, and where a runner job did: the agent and the job. */
export interface ReceiptRunner {
  readonly name: string;
  readonly version: string;
  readonly agent?: string;
  readonly jobId?: string;
  /** The engine's own time in the runner job, ms. */
  readonly engineMs?: number;
}

export interface ApplyReceipt {
  readonly runId: string;
  /** As in the plan receipt. */
  readonly stack: string;
  readonly qualifiedStack?: string;
  readonly commit: string;
  readonly runner: ReceiptRunner;
  readonly result: ApplyResult;
  /**
   * The Config Platform references the apply used a last known value for, because the platform did not answer:
   * the reference, why, and when that value was current (ISO-8601 UTC). Absent when none.
   */
  readonly degraded?: readonly DegradedReference[];
  /**
   * The apply's runner went silent (its job's lease lapsed): what the host last heard of it and what its job changed
   * on the target as the host recorded it. The result's resources are `unknown` where the runner reported nothing.
   */
  readonly runnerLost?: { readonly agent?: string; readonly lastHeardAt?: string; readonly log: string };
  /**
   * The apply's agent reported what the approved plan is not (`PROVISIONING.APPLY_DIVERGED`): why, and what it
   * reported, as it reported it (its result, or that the state had moved). The result's resources are `unknown`.
   */
  readonly diverged?: { readonly reason: string; readonly reported: ApplyResult | { readonly stateMoved: { readonly baseSerial: number } } };
}

/** BREAKING-CHANGE SHAPE: part of the apply receipt. */
export interface DegradedReference {
  readonly ref: string;
  readonly reason: string;
  readonly lastKnownAt: string;
}

/** What a run stored at an external service, by the service's id. */
export interface RunArtifact {
  /** `plan-receipt` and `apply-receipt` at the KnowledgeHost; `audit-evidence` at the GovernanceHost. */
  readonly kind: 'plan-receipt' | 'apply-receipt' | 'audit-evidence';
  readonly id: string;
  readonly recordedAt: Date;
}

export interface Decision {
  readonly decision: 'approved' | 'rejected';
  readonly planDigest: string;
  readonly by: string;
  readonly comment?: string;
  readonly at: Date;
}

/** A plan of the run that went stale and was replaced by a replan, with the decision on it if there was one. */
export interface ReplacedPlan {
  readonly planDigest: string;
  readonly planReceipt: PlanReceipt;
  readonly decision?: Decision;
  /** Why it went stale. */
  readonly stale: { readonly code: string; readonly message: string };
  readonly replannedBy: string;
  readonly replannedAt: Date;
}

/** An approval refused because its approver had asked for the run where a second person must approve. */
export interface RefusedApproval {
  readonly by: string;
  readonly planDigest: string;
  readonly code: string;
  readonly reason: string;
  readonly at: Date;
}

export interface RunDetail {
  readonly run: Run;
  /** Approvals refused as self-approvals, oldest first. */
  readonly refusedApprovals: readonly RefusedApproval[];
  readonly planReceipt?: PlanReceipt;
  readonly applyReceipt?: ApplyReceipt;
  readonly decision?: Decision;
  /** Earlier plans of the run, oldest first (a run has them only when it was replanned). */
  readonly replacedPlans: readonly ReplacedPlan[];
  /** Its receipts' artifact ids and its apply's evidence id, oldest first. */
  readonly artifacts: readonly RunArtifact[];
}

export interface Rejection {
  readonly messageId: string;
  readonly promotionId?: string;
  readonly tenantId?: string;
  readonly code: string;
  readonly reason: string;
  readonly problems: readonly { field: string; message: string }[];
  readonly receivedAt: Date;
}

const RUN_COLUMNS = [
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

type RunRow = Pick<ProvisioningRunTable, Exclude<(typeof RUN_COLUMNS)[number], 'seq'>> & { seq: number };

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

function byTenant<Q extends { where: (...args: never[]) => Q }>(query: Q, filter: TenantFilter): Q {
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

export async function findRunDetail(db: Executor, id: string, tenants: TenantFilter): Promise<RunDetail | undefined> {
  const row = await byTenant(db.selectFrom('provisioning_runs').select([...RUN_COLUMNS, 'plan_receipt', 'apply_receipt']).where('id', '=', id), tenants).executeTakeFirst();
  if (!row) return undefined;
  const decision = await db.selectFrom('provisioning_approvals').selectAll().where('run_id', '=', id).executeTakeFirst();
  const replaced = await db.selectFrom('provisioning_replaced_plans').selectAll().where('run_id', '=', id).orderBy('replanned_at').orderBy('id').execute();
  const artifacts = await listArtifacts(db, id);
  const refused = await db.selectFrom('provisioning_refused_approvals').selectAll().where('run_id', '=', id).orderBy('refused_at').orderBy('id').execute();
  return {
    artifacts,
    refusedApprovals: refused.map((r) => ({ by: r.refused_by, planDigest: r.plan_digest, code: r.code, reason: r.reason, at: new Date(Number(r.refused_at)) })),
    run: runRowToRun(row),
    ...(row.plan_receipt !== null ? { planReceipt: JSON.parse(row.plan_receipt) as PlanReceipt } : {}),
    ...(row.apply_receipt !== null ? { applyReceipt: JSON.parse(row.apply_receipt) as ApplyReceipt } : {}),
    ...(decision ? { decision: decisionRowToDecision(decision) } : {}),
    replacedPlans: replaced.map((r) => ({
      planDigest: r.plan_digest,
      planReceipt: JSON.parse(r.plan_receipt) as PlanReceipt,
      ...(r.decision !== null ? { decision: storedDecision(JSON.parse(r.decision) as StoredDecision) } : {}),
      stale: { code: r.stale_code, message: r.stale_message },
      replannedBy: r.replanned_by,
      replannedAt: new Date(Number(r.replanned_at)),
    })),
  };
}

/** A decision as the replaced-plans table keeps it (JSON, time as epoch ms). */
type StoredDecision = Omit<Decision, 'at'> & { readonly at: number };

function storedDecision(stored: StoredDecision): Decision {
  return { ...stored, at: new Date(stored.at) };
}

function decisionRowToDecision(row: ProvisioningApprovalTable): Decision {
  return {
    decision: row.decision as Decision['decision'],
    planDigest: row.plan_digest,
    by: row.decided_by,
    ...(row.comment !== null ? { comment: row.comment } : {}),
    at: new Date(Number(row.decided_at)),
  };
}

export interface RunListQuery {
  /** An environment's id or name. */
  readonly environment?: string;
  readonly state?: RunState;
  /** Runs with ids after this one. */
  readonly after?: string;
  readonly limit: number;
}

/** A page of runs in id order (ids are time-ordered, so this is the order they were taken in). */
export async function listRuns(db: Executor, dialect: SqlDialect, tenants: TenantFilter, q: RunListQuery): Promise<Run[]> {
  let query = byTenant(db.selectFrom('provisioning_runs').select(RUN_COLUMNS), tenants);
  if (q.environment !== undefined) {
    const environment = q.environment;
    query = query.where((eb) => eb.or([eb('environment_id', '=', environment), eb('environment_name', '=', environment)]));
  }
  if (q.state !== undefined) query = query.where('state', '=', q.state);
  if (q.after !== undefined) query = query.where('id', '>', q.after);
  return (await firstRows(query.orderBy('id'), dialect, q.limit).execute()).map(runRowToRun);
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

function waitingColumns(waitingFor: WaitingFor | null | undefined): Partial<Pick<ProvisioningRunTable, 'waiting_kind' | 'waiting_for'>> {
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

const receiptWritten = (id: string, receipt: string) =>
  new AppError('PROVISIONING.RECEIPT_IMMUTABLE', 'conflict', `run ${id} already has a ${receipt} receipt, or is not in the state to record one`, { runId: id });

/**
 * Records the plan receipt and moves the run from planning to `to`, in one statement that only succeeds while the
 * run is planning and has no plan receipt: a receipt once written is never replaced.
 */
export async function recordPlan(
  trx: Executor,
  id: string,
  receipt: PlanReceipt,
  to: Extract<RunState, 'awaiting-approval' | 'applying'>,
  waitingFor: WaitingFor | null,
  now: number,
): Promise<void> {
  const result = await trx
    .updateTable('provisioning_runs')
    .set({
      state: to,
      plan_receipt: JSON.stringify(receipt),
      plan_digest: receipt.plan.digest,
      plan_expires_at: receipt.expiresAt !== undefined ? Date.parse(receipt.expiresAt) : null,
      approval_required: receipt.approvalRequired ? 1 : 0,
      ...waitingColumns(waitingFor),
      updated_at: now,
    })
    .where('id', '=', id)
    .where('state', '=', 'planning')
    .where('plan_receipt', 'is', null)
    .executeTakeFirst();
  if (Number(result.numUpdatedRows) !== 1) throw receiptWritten(id, 'plan');
}

/** Records the apply receipt with the run's final state; like `recordPlan`, it succeeds once only. */
export async function recordApply(
  trx: Executor,
  id: string,
  receipt: ApplyReceipt,
  to: Extract<RunState, 'applied' | 'failed'>,
  error: { code: string; message: string } | undefined,
  now: number,
): Promise<void> {
  const result = await trx
    .updateTable('provisioning_runs')
    .set({
      state: to,
      apply_receipt: JSON.stringify(receipt),
      waiting_kind: null,
      waiting_for: null,
      ...(error ? { error_code: error.code, error_message: error.message } : {}),
      updated_at: now,
      finished_at: now,
    })
    .where('id', '=', id)
    .where('state', '=', 'applying')
    .where('apply_receipt', 'is', null)
    .executeTakeFirst();
  if (Number(result.numUpdatedRows) !== 1) throw receiptWritten(id, 'apply');
}

/**
 * A replan of a stale run, in the caller's transaction: its stale plan (receipt and decision, unchanged) moves to
 * `provisioning_replaced_plans`, and the run goes back to planning without a plan, so the fresh plan is recorded
 * (write-once, like the first) and needs its own approval. False when the run is not stale (any more).
 */
export async function replacePlan(trx: Transaction<ProvisioningTables>, run: Run, replan: { id: string; by: string; now: number }): Promise<boolean> {
  const row = await trx.selectFrom('provisioning_runs').select(['plan_receipt', 'plan_digest']).where('id', '=', run.id).where('state', '=', 'stale').executeTakeFirst();
  if (!row?.plan_receipt || row.plan_digest === null) return false;
  const decision = await trx.selectFrom('provisioning_approvals').selectAll().where('run_id', '=', run.id).executeTakeFirst();
  const moved: StoredDecision | undefined = decision ? { ...decisionRowToDecision(decision), at: Number(decision.decided_at) } : undefined;
  await trx
    .insertInto('provisioning_replaced_plans')
    .values({
      id: replan.id,
      run_id: run.id,
      plan_digest: row.plan_digest,
      plan_receipt: row.plan_receipt,
      decision: moved ? JSON.stringify(moved) : null,
      stale_code: run.error?.code ?? '',
      stale_message: run.error?.message ?? '',
      replanned_by: replan.by,
      replanned_at: replan.now,
    })
    .execute();
  if (decision) await trx.deleteFrom('provisioning_approvals').where('run_id', '=', run.id).execute();
  const result = await trx
    .updateTable('provisioning_runs')
    .set({
      state: 'planning',
      plan_receipt: null,
      plan_digest: null,
      plan_expires_at: null,
      approval_required: null,
      waiting_kind: null,
      waiting_for: null,
      error_code: null,
      error_message: null,
      updated_at: replan.now,
    })
    .where('id', '=', run.id)
    .where('state', '=', 'stale')
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

/** Keeps a run's plan while its policy check is undecided, replacing the one of an earlier check of the run. */
export async function savePolicyWait(trx: Executor, runId: string, wait: PolicyWait): Promise<void> {
  await trx.deleteFrom('provisioning_policy_checks').where('run_id', '=', runId).execute();
  await trx
    .insertInto('provisioning_policy_checks')
    .values({ run_id: runId, check_id: wait.checkId, plan_digest: wait.receipt.plan.digest, plan_receipt: JSON.stringify(wait.receipt), requested_at: wait.requestedAt.getTime() })
    .execute();
}

export async function findPolicyWait(db: Executor, runId: string): Promise<PolicyWait | undefined> {
  const row = await db.selectFrom('provisioning_policy_checks').selectAll().where('run_id', '=', runId).executeTakeFirst();
  return row ? { checkId: row.check_id, receipt: JSON.parse(row.plan_receipt) as UndecidedPlanReceipt, requestedAt: new Date(Number(row.requested_at)) } : undefined;
}

/** Drops a run's waiting plan: it was recorded, or the run ended without it. */
export async function deletePolicyWait(trx: Executor, runId: string): Promise<void> {
  await trx.deleteFrom('provisioning_policy_checks').where('run_id', '=', runId).execute();
}

/** The plan receipt of a run, for its apply. */
export async function readPlanReceipt(db: Executor, id: string): Promise<PlanReceipt | undefined> {
  const row = await db.selectFrom('provisioning_runs').select('plan_receipt').where('id', '=', id).executeTakeFirst();
  return row?.plan_receipt ? (JSON.parse(row.plan_receipt) as PlanReceipt) : undefined;
}

export async function findDecision(db: Executor, runId: string): Promise<Decision | undefined> {
  const row = await db.selectFrom('provisioning_approvals').selectAll().where('run_id', '=', runId).executeTakeFirst();
  return row ? decisionRowToDecision(row) : undefined;
}

/** Records the one decision on a run; a second fails on the primary key. */
export async function insertDecision(trx: Executor, runId: string, decision: Decision): Promise<void> {
  await trx
    .insertInto('provisioning_approvals')
    .values({
      run_id: runId,
      decision: decision.decision,
      plan_digest: decision.planDigest,
      decided_by: decision.by,
      comment: decision.comment ?? null,
      decided_at: decision.at.getTime(),
    })
    .execute();
}

/** Records a message that was not a promotion; false when this message was recorded before (a redelivery). */
export async function insertRejection(trx: Executor, rejection: Rejection): Promise<boolean> {
  const known = await trx.selectFrom('provisioning_rejections').select('message_id').where('message_id', '=', rejection.messageId).executeTakeFirst();
  if (known) return false;
  await trx
    .insertInto('provisioning_rejections')
    .values({
      message_id: rejection.messageId,
      promotion_id: rejection.promotionId ?? null,
      tenant_id: rejection.tenantId ?? null,
      code: rejection.code,
      reason: rejection.reason,
      problems: JSON.stringify(rejection.problems),
      received_at: rejection.receivedAt.getTime(),
    })
    .execute();
  return true;
}

export async function findRejection(db: Executor, messageId: string): Promise<Rejection | undefined> {
  const row = await db.selectFrom('provisioning_rejections').selectAll().where('message_id', '=', messageId).executeTakeFirst();
  if (!row) return undefined;
  return {
    messageId: row.message_id,
    ...(row.promotion_id !== null ? { promotionId: row.promotion_id } : {}),
    ...(row.tenant_id !== null ? { tenantId: row.tenant_id } : {}),
    code: row.code,
    reason: row.reason,
    problems: JSON.parse(row.problems) as Rejection['problems'],
    receivedAt: new Date(Number(row.received_at)),
  };
}

/**
 * The same connection (or transaction) typed for the platform's inbox functions: the inbox is one of the
 * provisioning tables, the embedded queue's tables are not, so the types need a cast.
 */
export function inboxOf(db: Executor): Kysely<BusTables> {
  return db as unknown as Kysely<BusTables>;
}

/** Records what a run stored at an external service; recording the same id again changes nothing. */
export async function insertArtifact(trx: Executor, runId: string, artifact: RunArtifact): Promise<void> {
  const known = await trx
    .selectFrom('provisioning_run_artifacts')
    .select('external_id')
    .where('run_id', '=', runId)
    .where('kind', '=', artifact.kind)
    .where('external_id', '=', artifact.id)
    .executeTakeFirst();
  if (known) return;
  await trx.insertInto('provisioning_run_artifacts').values({ run_id: runId, kind: artifact.kind, external_id: artifact.id, recorded_at: artifact.recordedAt.getTime() }).execute();
}

export async function listArtifacts(db: Executor, runId: string): Promise<RunArtifact[]> {
  const rows = await db.selectFrom('provisioning_run_artifacts').selectAll().where('run_id', '=', runId).orderBy('recorded_at').orderBy('kind').execute();
  return rows.map((r) => ({ kind: r.kind as RunArtifact['kind'], id: r.external_id, recordedAt: new Date(Number(r.recorded_at)) }));
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

/** Whoever asked for the run: its requester, and every operator who asked for a fresh plan of it. */
export async function runRequesters(db: Executor, run: Pick<Run, 'id' | 'requestedBy'>): Promise<string[]> {
  const replans = await db.selectFrom('provisioning_replaced_plans').select('replanned_by').where('run_id', '=', run.id).execute();
  return [...new Set([run.requestedBy, ...replans.map((r) => r.replanned_by)])];
}

/** Records an approval refused as a self-approval. */
export async function insertRefusedApproval(trx: Executor, refusal: { id: string; runId: string } & RefusedApproval): Promise<void> {
  await trx
    .insertInto('provisioning_refused_approvals')
    .values({ id: refusal.id, run_id: refusal.runId, refused_by: refusal.by, plan_digest: refusal.planDigest, code: refusal.code, reason: refusal.reason, refused_at: refusal.at.getTime() })
    .execute();
}
