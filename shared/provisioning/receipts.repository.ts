import type { Transaction } from 'kysely';
import type { TenantFilter } from '../platform/auth/auth';
import { type Run, type RunState, type WaitingFor } from './run';
import type { ProvisioningApprovalTable, ProvisioningTables } from './provisioning.tables';
import { type ProvisioningDb } from './stack-lock.repository';
import type { ApplyReceipt, Decision, PlanReceipt, PolicyWait, RefusedApproval, RunArtifact, RunDetail, UndecidedPlanReceipt } from './receipt';
import { byTenant, RUN_COLUMNS, runRowToRun, waitingColumns } from './runs.repository';
import { problemError } from '../platform/errors/catalogue';
import { ProvisioningErrors } from './errors';

/**
 * A run's plans, receipts and decisions in SQL (shapes in receipt.ts): receipts are written once, with the state
 * they move the run to; a replan keeps the replaced plan; a plan waits here for its policy check.
 */
type Executor = ProvisioningDb | Transaction<ProvisioningTables>;

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

const receiptWritten = (id: string, receipt: string) =>
  problemError(ProvisioningErrors.receiptImmutable, `run ${id} already has a ${receipt} receipt, or is not in the state to record one`, { runId: id });

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
