import type { Transaction } from 'kysely';
import { samePerson, type TenantFilter } from '../platform/auth/auth';
import { AppError } from '../platform/errors/app-error';
import { qualifiedStackName, type StackRef } from '../platform/iac/stack-ref';
import { inTransaction, retryingContention } from '../platform/sql/transaction';
import { expiredPlan } from './apply.service';
import { ExternalErrors } from './external-services.client';
import { appendEvents, counted, failFast, nowOf, repositoryOf, type Failure, type ProvisioningContext } from './provisioning.context';
import { deletePolicyWait, findDecision, insertDecision, insertRefusedApproval, replacePlan, runRequesters } from './receipts.repository';
import { findRun, transitionRun } from './runs.repository';
import type { ProvisioningTables } from './provisioning.tables';
import { provisioningFailed } from './run-events';
import { RunErrors, secondPersonRequired, type Run, type RunState } from './run';
import { breakStackLock, getStackLock, type StackLock } from './stack-lock.repository';
import { problemError } from '../platform/errors/catalogue';
import { ProvisioningErrors } from './errors';

/**
 * What operators do to runs and stacks: decide on a plan (approve, reject), replan a stale run, cancel a queued
 * one, and see or break a stack's lock. Each decision is one transaction guarded by the state it was read in, so
 * two operators (or an operator and a step) acting at once cannot both succeed.
 */

/** A stack lock an operator broke, and the record of it. */
export interface BrokenStackLock {
  readonly lock: StackLock;
  readonly by: string;
  readonly reason: string;
  readonly brokenAt: Date;
}

export async function approve(ctx: ProvisioningContext, tenants: TenantFilter, runId: string, approval: { planDigest: string; by: string; comment?: string }): Promise<Run> {
  // Who may approve is the ControlPlaneApi's to say (fail-fast: when it does not answer, nobody approves).
  const target = await retryingContention(() => findRun(ctx.db, runId, tenants));
  if (target) {
    const environment = await failFast(ExternalErrors.controlPlaneUnavailable, 'the ControlPlaneApi', () => ctx.services.controlPlane.environment(target.tenant, target.environment.id));
    if (!environment || (environment.approvers !== undefined && !environment.approvers.some((approver) => samePerson(approver, approval.by)))) {
      throw problemError(ProvisioningErrors.approverNotAllowed, `${approval.by} may not approve plans of environment ${target.environment.id}`, {
        runId,
        environment: target.environment.id,
        by: approval.by,
      });
    }
  }
  const outcome = await inTransaction(ctx.db, async (trx): Promise<{ approved: Run } | { stale: Run; reason: Failure } | { refused: AppError }> => {
    const run = await visible(trx, tenants, runId);
    if (run.state === 'stale') return { stale: run, reason: run.error ?? { code: RunErrors.planStale, message: 'the plan is stale' } };
    if (run.state !== 'awaiting-approval') throw notAwaitingApproval(run);
    const at = nowOf(ctx);
    // Four eyes: where a second person must approve, whoever asked for the run (or for its fresh plan) may not. Persons
    // are compared as the identity platform names them (auth.ts `samePerson`), never by a token's pairwise `sub`.
    if (secondPersonRequired(run.environment, ctx.approvalPolicy) && (await runRequesters(trx, run)).some((requester) => samePerson(requester, approval.by))) {
      const refused = problemError(ProvisioningErrors.selfApproval, `${approval.by} asked for run ${runId}, and environment ${run.environment.id} needs a second person to approve it`, {
        runId,
        environment: run.environment.id,
        by: approval.by,
      });
      // Committed although the approval is refused: the attempt stays on the run's record.
      await insertRefusedApproval(trx, { id: ctx.ids.next('refusal'), runId, by: approval.by, planDigest: approval.planDigest, code: refused.code, reason: refused.message, at: new Date(at) });
      return { refused };
    }
    const expired = expiredPlan(run, at);
    if (expired) {
      // Committed although the approval is refused: the run shows stale with the reason, and waits for a replan.
      if (!(await transitionRun(trx, runId, 'stale', at, { error: expired, waitingFor: { kind: 'replan', planDigest: run.planDigest ?? '' } }))) {
        throw notAwaitingApproval(await visible(trx, tenants, runId));
      }
      return { stale: run, reason: expired };
    }
    if (run.planDigest !== approval.planDigest) {
      // An approval is of one plan: a digest the approver did not read from this run's receipt approves nothing.
      throw problemError(ProvisioningErrors.planDigestMismatch, 'the approval names another plan than the one recorded for this run', {
        runId,
        approvedDigest: approval.planDigest,
        planDigest: run.planDigest,
      });
    }
    if (!(await transitionRun(trx, runId, 'applying', at, { waitingFor: null }))) throw notAwaitingApproval(await visible(trx, tenants, runId));
    await insertDecision(trx, runId, { decision: 'approved', planDigest: approval.planDigest, by: approval.by, ...(approval.comment !== undefined ? { comment: approval.comment } : {}), at: new Date(at) });
    return { approved: await visible(trx, tenants, runId) };
  });
  if ('refused' in outcome) throw outcome.refused;
  if ('stale' in outcome) throw planStale(outcome.stale, outcome.reason);
  return outcome.approved;
}

/** Rejects a run awaiting approval, a stale one, or one whose plan waits for a policy check. */
export async function reject(ctx: ProvisioningContext, tenants: TenantFilter, runId: string, rejection: { reason: string; by: string }): Promise<Run> {
  const rejected = await inTransaction(ctx.db, async (trx) => {
    const run = await visible(trx, tenants, runId);
    // A plan waiting for its policy check is a plan an operator may decide against without waiting for the check.
    const policyWait = run.state === 'planning' && run.waitingFor?.kind === 'policy' ? run.waitingFor : undefined;
    if (run.state !== 'awaiting-approval' && run.state !== 'stale' && !policyWait) throw notAwaitingApproval(run);
    const at = nowOf(ctx);
    const error = { code: RunErrors.rejected, message: `rejected by ${rejection.by}: ${rejection.reason}` };
    // Only from the state it was read in: a run planning for another reason (replanned, holding its stack) is not rejected.
    const guard = { from: [run.state], ...(policyWait ? { waitingKind: 'policy' as const } : {}) };
    if (!(await transitionRun(trx, runId, 'rejected', at, { error, waitingFor: null, finished: true }, guard))) throw notAwaitingApproval(await visible(trx, tenants, runId));
    if (policyWait) await deletePolicyWait(trx, runId);
    // A plan that was approved and went stale at its apply keeps that approval as its decision; the rejection of
    // the run is then its error and its ProvisioningFailed.
    if (!(await findDecision(trx, runId))) {
      const planDigest = policyWait?.planDigest ?? run.planDigest ?? '';
      await insertDecision(trx, runId, { decision: 'rejected', planDigest, by: rejection.by, comment: rejection.reason, at: new Date(at) });
    }
    const ended = await visible(trx, tenants, runId);
    await appendEvents(ctx, trx, [provisioningFailed(ended, repositoryOf(run), { code: error.code, reason: error.message, finishedAt: new Date(at) })]);
    return ended;
  });
  return counted(ctx, rejected);
}

/** A stale run goes back to planning: a fresh plan, which needs its own approval. */
export async function replan(ctx: ProvisioningContext, tenants: TenantFilter, runId: string, by: string): Promise<Run> {
  return inTransaction(ctx.db, async (trx) => {
    const run = await visible(trx, tenants, runId);
    const notStale = (state: RunState) => problemError(ProvisioningErrors.runNotStale, `run ${runId} is ${state}; only a stale run can be replanned`, { runId, state });
    if (run.state !== 'stale') throw notStale(run.state);
    if (!(await replacePlan(trx, run, { id: ctx.ids.next('plan'), by, now: nowOf(ctx) }))) throw notStale((await visible(trx, tenants, runId)).state);
    return visible(trx, tenants, runId);
  });
}

/** Cancels a queued run. */
export async function cancel(ctx: ProvisioningContext, tenants: TenantFilter, runId: string, by: string): Promise<Run> {
  const canceled = await inTransaction(ctx.db, async (trx) => {
    const run = await visible(trx, tenants, runId);
    const refuse = (state: RunState) =>
      problemError(ProvisioningErrors.runNotCancelable, `run ${runId} is ${state}; only a queued run can be canceled`, { runId, state });
    if (run.state !== 'queued') throw refuse(run.state);
    const at = nowOf(ctx);
    const error = { code: RunErrors.canceled, message: `canceled by ${by}` };
    if (!(await transitionRun(trx, runId, 'canceled', at, { error, waitingFor: null, finished: true }))) throw refuse((await visible(trx, tenants, runId)).state);
    const ended = await visible(trx, tenants, runId);
    await appendEvents(ctx, trx, [provisioningFailed(ended, repositoryOf(run), { code: error.code, reason: error.message, finishedAt: new Date(at) })]);
    return ended;
  });
  return counted(ctx, canceled);
}

/** Who holds a stack's lock; a caller bound to a tenant sees only its own tenant's stacks. */
export async function stackLock(ctx: ProvisioningContext, tenants: TenantFilter, stack: StackRef): Promise<StackLock> {
  if (tenants.kind === 'one' && tenants.tenant !== stack.tenant) throw notLocked(stack);
  const lock = await retryingContention(() => getStackLock(ctx.db, stack));
  if (!lock) throw notLocked(stack);
  return lock;
}

/** An operator breaks a stack's lock (recorded with who and why); `version` breaks only that version. */
export async function unlockStack(ctx: ProvisioningContext, stack: StackRef, request: { by: string; reason: string; version?: number }): Promise<BrokenStackLock> {
  const at = nowOf(ctx);
  const lock = await inTransaction(ctx.db, (trx) =>
    breakStackLock(trx, ctx.dialect, { id: ctx.ids.next('lockbreak'), stack, by: request.by, reason: request.reason, now: at, ...(request.version !== undefined ? { version: request.version } : {}) }),
  );
  if (lock) return { lock, by: request.by, reason: request.reason, brokenAt: new Date(at) };
  const current = await retryingContention(() => getStackLock(ctx.db, stack));
  if (current && request.version !== undefined) {
    const name = qualifiedStackName(stack);
    throw problemError(ProvisioningErrors.stackLockVersionMismatch, `the lock of stack ${name} is at version ${current.version}, not ${request.version}; nothing was broken`, {
      stack: name,
      version: current.version,
      requestedVersion: request.version,
    });
  }
  throw notLocked(stack);
}

async function visible(trx: Transaction<ProvisioningTables>, tenants: TenantFilter, runId: string): Promise<Run> {
  const run = await findRun(trx, runId, tenants);
  if (!run) throw problemError(ProvisioningErrors.runNotFound, `there is no run ${runId}`, { runId });
  return run;
}

const notAwaitingApproval = (run: Run) =>
  problemError(ProvisioningErrors.runNotAwaitingApproval, `run ${run.id} is ${run.state}, not awaiting approval`, { runId: run.id, state: run.state });

const planStale = (run: Run, reason: Failure) =>
  problemError(ProvisioningErrors.planStale, reason.message, {
    runId: run.id,
    state: 'stale',
    ...(run.planDigest !== undefined ? { planDigest: run.planDigest } : {}),
    ...(run.planExpiresAt ? { planExpiresAt: run.planExpiresAt.toISOString() } : {}),
  });

const notLocked = (stack: StackRef) =>
  problemError(ProvisioningErrors.stackNotLocked, `nothing holds the lock of stack ${qualifiedStackName(stack)}`, { stack: qualifiedStackName(stack) });
