import { AppError, ensureError } from '../platform/errors/app-error';
import { crashPoint } from '../platform/faults/crash-points';
import type { DesiredState } from '../platform/git/desired-state';
import { qualifiedStackName } from '../platform/iac/stack-ref';
import { referenceKey, type JsonValue } from '../platform/iac/iac-values';
import { applyDivergence, type Plan, type ResolveReferences } from '../platform/iac/plan';
import { inTransaction, retryingContention } from '../platform/sql/transaction';
import { recordRunEnded } from '../platform/telemetry/metrics';
import { ExternalErrors, type ReferenceScope } from './external-services.client';
import type { PlanOptions } from '../platform/iac/iac-runner';
import type { ClaimedJob } from '../platform/iac/runner-job';
import { configOf, planOptionsFor } from './plan.service';
import { clearStackRefresh, countUnbegunLostJobs, markStackForRefresh, type RunnerJob } from './runner-jobs.repository';
import { dispatchJob, openJobStep, refusedReport } from './runner-job-dispatch.service';
import { lossOf, type FinishedJob } from './runner-jobs';
import {
  appendEvents,
  existingRun,
  expectedFailure,
  failFast,
  failRunWith,
  endedAgain,
  giveBackStack,
  nowOf,
  permanentFailure,
  repositoryOf,
  type Failure,
  type ProvisioningContext,
} from './provisioning.context';
import { findRunDetail, insertArtifact, readPlanReceipt, recordApply } from './receipts.repository';
import { markApplyBegan, setWaiting, transitionRun } from './runs.repository';
import type { ApplyReceipt, DegradedReference, PlanReceipt } from './receipt';
import { provisioningApplied, provisioningFailed, specificationAppliedOf } from './run-events';
import { RunErrors, stackOf, stepOf, type Run, type RunStep, type WaitingFor } from './run';
import { checkProjectPolicy, readProject } from './source.service';
import { keepStackLock, takeStack } from './stack-queue.service';
import { problemError } from '../platform/errors/catalogue';
import { ProvisioningErrors } from './errors';

/**
 * The apply step of a run, and the wait for a person before it: an approval (or a replan of a stale plan) lets the
 * run apply exactly the recorded plan, on the stack's state the plan was made against, while it keeps its stack
 * lock; the apply receipt, the final state and its events are recorded in one transaction, then the receipt and the
 * evidence are stored at the KnowledgeHost and the GovernanceHost.
 */

/**
 * After a wait for a person (an approval, or a replan of a stale run): apply when approved, plan when replanned,
 * end when decided otherwise; a plan past its expiry goes stale; a wait that timed out fails the run.
 */
export async function afterApproval(ctx: ProvisioningContext, runId: string, timedOut: boolean): Promise<RunStep> {
  const run = await existingRun(ctx, runId);
  if (run.state === 'awaiting-approval') {
    if (timedOut) return failRunWith(ctx, run, { code: RunErrors.approvalTimeout, message: `no decision on the plan within ${ctx.timings.approvalTimeoutMs} ms` });
    const expired = expiredPlan(run, nowOf(ctx));
    return expired ? goStale(ctx, run, expired) : stepOf(run);
  }
  if (run.state === 'stale' && timedOut) {
    return failRunWith(ctx, run, { code: RunErrors.approvalTimeout, message: `the plan went stale and nobody replanned or rejected the run within ${ctx.timings.approvalTimeoutMs} ms` });
  }
  return stepOf(run);
}

/** Why an approval now would come too late, or undefined while the plan may still be approved. */
export function expiredPlan(run: Run, at: number): Failure | undefined {
  if (!run.planExpiresAt || at < run.planExpiresAt.getTime()) return undefined;
  return { code: RunErrors.planStale, message: `the plan ${run.planDigest ?? ''} expired at ${run.planExpiresAt.toISOString()} before it was approved; replan the run` };
}

/** Marks the run's plan stale (it waits for a replan or a rejection) and gives its stack back. */
async function goStale(ctx: ProvisioningContext, run: Run, reason: Failure): Promise<RunStep> {
  const waitingFor: WaitingFor = { kind: 'replan', planDigest: run.planDigest ?? '' };
  const moved = await retryingContention(() => transitionRun(ctx.db, run.id, 'stale', nowOf(ctx), { error: reason, waitingFor }));
  await giveBackStack(ctx, run);
  return moved ? { outcome: 'stale', reason: reason.message } : stepOf(await existingRun(ctx, run.id));
}

/**
 * Takes the stack, checks the stack's state is the one the plan was made against (else the run goes stale),
 * applies exactly the recorded plan while renewing the stack lock, records the apply receipt and the final state.
 */
export async function apply(ctx: ProvisioningContext, runId: string): Promise<RunStep> {
  const run = await existingRun(ctx, runId);
  if (run.state !== 'applying') {
    // A retry of an apply whose result is recorded but whose receipt or evidence did not reach its service.
    if (run.state === 'applied' || run.state === 'failed') {
      await archiveApply(ctx, run);
      return endedAgain(ctx, run);
    }
    return stepOf(run);
  }
  // Its apply job is out (a retried or replayed step): wait for it; never a second apply.
  const open = await openJobStep(ctx, run);
  if (open) return open;
  const stack = await takeStack(ctx, run);
  if (!stack.taken) return stack.step;
  if (run.waitingFor) await retryingContention(() => setWaiting(ctx.db, runId, 'applying', null, nowOf(ctx)));
  const receipt = await retryingContention(() => readPlanReceipt(ctx.db, runId));
  if (!receipt) return failRunWith(ctx, run, { code: RunErrors.internal, message: 'the run has no plan receipt to apply' });
  let desired: DesiredState;
  const stackRef = stackOf(run);
  try {
    desired = (await readProject(ctx, run.tenant, run.desiredState)).desired;
    checkProjectPolicy(ctx, desired);
  } catch (thrown) {
    return failRunWith(ctx, run, permanentFailure(thrown));
  }
  const options = await planOptionsFor(ctx, run);
  // The runner checks the state's serial, plans again and applies only the recorded plan; references are resolved
  // for its job when it claims it.
  if (ctx.runners) return dispatchJob(ctx, ctx.runners, run, 'apply', stack.lock, { files: desired.files, config: configOf(run), options, approvedPlan: receipt.plan });
  const engine = ctx.engine;
  if (!engine) return failRunWith(ctx, run, { code: RunErrors.runnerUnavailable, message: 'the configured IaC runner cannot apply on this host' });
  // An earlier try began the engine's changes and did not record their end (the host died in between).
  if (run.applyBeganAt) return applyInterrupted(ctx, run, engine.name, run.applyBeganAt, options);
  let current: Plan;
  try {
    // Only the state's serial is read here: no refresh (the apply refreshes, and a target that cannot be read
    // fails the apply with its receipt, as for any run).
    current = await engine.preview(stackRef, desired.files, configOf(run), { ...options, refresh: false });
  } catch (thrown) {
    return failRunWith(ctx, run, expectedFailure(thrown));
  }
  // A plan is an answer about the state it was made against. Once another run applied the stack, or something was
  // imported into it, the approver's reading of the plan no longer holds, even where the steps come out the same.
  if (current.baseSerial !== receipt.plan.baseSerial) return goStale(ctx, run, stateMoved(run, receipt.plan.baseSerial, current.baseSerial));
  // The engine plans again and applies only when that plan's digest is the recorded (and, where required,
  // approved) one. References are resolved here, inside the apply activity and before the first change: a
  // GovernanceHost that does not answer throws (retried, nothing applied); a Config Platform that does not answer
  // degrades.
  const references = await resolveForApply(ctx, receipt.plan, { tenant: run.tenant, runId: run.id });
  // Everything the receipt needs is read before the apply: between the engine's changes and the transaction that
  // records them nothing may fail, since a retry of this step would find the state moved and call the run stale
  // although its changes were made.
  const runner = { name: engine.name, version: await engine.version() };
  // From here the stack may change: a try of this step that finds the mark never applies again.
  if (!(await retryingContention(() => markApplyBegan(ctx.db, runId, nowOf(ctx))))) return stepOf(await existingRun(ctx, runId));
  const keeper = keepStackLock(ctx, run, stack.lock);
  let result;
  try {
    result = await engine.apply(stackRef, desired.files, configOf(run), receipt.plan, references.resolve, { ...options, beforeStep: keeper.beforeStep });
  } finally {
    await keeper.stop();
  }
  crashPoint('apply:engine-applied', runId);
  return recordApplied(ctx, run, receipt, {
    runId,
    stack: run.stack,
    qualifiedStack: qualifiedStackName(stackRef),
    commit: run.desiredState.commit,
    runner,
    result,
    ...(references.degraded.length > 0 ? { degraded: references.degraded } : {}),
  }, options);
}

/** The apply job of a run finished: the state moved (stale), the apply's result recorded, or its error. */
export async function applyJobFinished(ctx: ProvisioningContext, run: Run, job: FinishedJob): Promise<RunStep> {
  const { outcome } = job;
  const receipt = await retryingContention(() => readPlanReceipt(ctx.db, run.id));
  if (outcome.kind !== 'apply' || !receipt) return failRunWith(ctx, run, { code: RunErrors.internal, message: `job ${job.id} is not an apply job of a planned run` });
  if ('stateMoved' in outcome) {
    // An agent checks the state before it asks to begin; "nothing applied" after that is not to be believed.
    if (job.applyBeganAt) return applyDiverged(ctx, run, job, 'it reports the state moved and nothing applied, after the host recorded that its apply began', { stateMoved: outcome.stateMoved });
    return goStale(ctx, run, stateMoved(run, receipt.plan.baseSerial, outcome.stateMoved.baseSerial));
  }
  if ('error' in outcome) {
    // After the host recorded that the apply began, an error says nothing of what was changed before it.
    if (job.applyBeganAt) return applyErredAfterBegin(ctx, run, job, outcome.error);
    return failRunWith(ctx, run, { code: outcome.error.code, message: outcome.error.message });
  }
  const divergence = applyDivergence(receipt.plan, outcome.result);
  if (divergence !== undefined) return applyDiverged(ctx, run, job, divergence, outcome.result);
  return recordApplied(ctx, run, receipt, {
    runId: run.id,
    stack: run.stack,
    qualifiedStack: qualifiedStackName(stackOf(run)),
    commit: run.desiredState.commit,
    runner: { ...outcome.runner, jobId: job.id },
    result: outcome.result,
    ...(job.degraded && job.degraded.length > 0 ? { degraded: job.degraded } : {}),
  }, job.spec.options);
}

/**
 * The apply job's agent reported what the approved plan is not (`applyDivergence`): the run fails
 * `PROVISIONING.APPLY_DIVERGED` with a receipt of what the agent reported, the stack is marked to refresh before its
 * next plan (what the agent changed is not known), and the host logs a security event. Nothing of the report is
 * published as applied.
 */
async function applyDiverged(ctx: ProvisioningContext, run: Run, job: FinishedJob, reason: string, reported: NonNullable<ApplyReceipt['diverged']>['reported']): Promise<RunStep> {
  await refusedReport(ctx, job, RunErrors.applyDiverged, reason);
  const message = `the runner ${job.agent ?? ''} of apply job ${job.id} reported what the approved plan is not (${reason}); what it changed is not known, so the stack's next plan refreshes first`;
  return recordUnknownApply(ctx, run, { code: RunErrors.applyDiverged, message }, {
    runner: { ...job.outcome.runner, ...(job.agent ? { agent: job.agent } : {}), jobId: job.id },
    startedAt: job.claimedAt ?? job.createdAt,
    diverged: { reason, reported },
    options: job.spec.options,
  });
}

/**
 * The apply job's agent reported an error (no result) after its apply began: the run fails with that error, and as
 * what the apply changed before it is not known, with a receipt listing the plan's steps as unknown and the stack
 * marked to refresh before its next plan.
 */
function applyErredAfterBegin(ctx: ProvisioningContext, run: Run, job: FinishedJob, error: Failure): Promise<RunStep> {
  const message = `${error.message} (reported by the runner ${job.agent ?? ''} of apply job ${job.id} after its apply began: what it changed is not known, so the stack's next plan refreshes first)`;
  return recordUnknownApply(ctx, run, { code: error.code, message }, {
    runner: { ...job.outcome.runner, ...(job.agent ? { agent: job.agent } : {}), jobId: job.id },
    startedAt: job.claimedAt ?? job.createdAt,
    options: job.spec.options,
  });
}

/** Apply jobs of one run lost before their agent began to apply: at this many the run fails instead of dispatching another. */
export const MAX_UNBEGUN_APPLY_LOSSES = 3;

/**
 * The apply job's runner went silent or ran past its maximum duration (its lease lapsed). Before the host recorded
 * that its apply began (the agent beats with `applyBegins` before its first change, and every write of the job is
 * refused without it) the agent changed nothing: the apply is dispatched again, until `MAX_UNBEGUN_APPLY_LOSSES` jobs
 * were lost so (an agent that dies on this job each time). After that record, what it changed is not known: the run
 * fails `RUNNER_LOST`.
 */
export async function applyJobLost(ctx: ProvisioningContext, run: Run, job: RunnerJob): Promise<RunStep> {
  if (job.applyBeganAt) return applyRunnerLost(ctx, run, job);
  const losses = await retryingContention(() => countUnbegunLostJobs(ctx.db, run.id, 'apply'));
  if (losses < MAX_UNBEGUN_APPLY_LOSSES) return apply(ctx, run.id);
  return failRunWith(ctx, run, {
    code: RunErrors.runnerLost,
    message: `${losses} apply jobs of the run were lost before their runner began to apply (the last, ${job.id}, by ${job.agent ?? 'its agent'}, ${lossOf(job)}); nothing was applied`,
  });
}

/**
 * The apply job's runner went silent (or ran past its maximum duration) after it began to apply: the run fails
 * `PROVISIONING.RUNNER_LOST` with a receipt of what the host heard (its log, the target calls it recorded), the stack
 * is marked to refresh before its next plan, and the apply is never dispatched again.
 */
async function applyRunnerLost(ctx: ProvisioningContext, run: Run, job: RunnerJob): Promise<RunStep> {
  const message = `the runner ${job.agent ?? ''} of apply job ${job.id} ${lossOf(job)}; what it changed is not known, so the apply is not repeated and the stack's next plan refreshes first`;
  return recordUnknownApply(ctx, run, { code: RunErrors.runnerLost, message }, {
    runner: { name: job.spec.engine, version: 'unknown', ...(job.agent ? { agent: job.agent } : {}), jobId: job.id },
    startedAt: job.claimedAt ?? job.createdAt,
    runnerLost: { ...(job.agent ? { agent: job.agent } : {}), ...(job.leaseExpiresAt ? { lastHeardAt: job.leaseExpiresAt.toISOString() } : {}), log: job.log },
    options: job.spec.options,
  });
}

/**
 * The host died while its own engine applied (a try of the apply step found the apply begun and not recorded): the
 * run fails `PROVISIONING.APPLY_INTERRUPTED` with a receipt, the stack is marked to refresh before its next plan,
 * and the apply is never repeated.
 */
function applyInterrupted(ctx: ProvisioningContext, run: Run, engine: string, beganAt: Date, options: PlanOptions): Promise<RunStep> {
  const message = `the host stopped while its engine applied the plan (begun at ${beganAt.toISOString()}); what it changed is not known, so the apply is not repeated and the stack's next plan refreshes first`;
  return recordUnknownApply(ctx, run, { code: RunErrors.applyInterrupted, message }, { runner: { name: engine, version: 'unknown' }, startedAt: beganAt, options });
}

/**
 * Ends an apply whose changes are not known (its runner lost, the host stopped, its agent's report not believed): a
 * failed receipt listing the plan's steps as unknown, the stack marked to refresh.
 */
async function recordUnknownApply(
  ctx: ProvisioningContext,
  run: Run,
  error: Failure,
  known: {
    readonly runner: ApplyReceipt['runner'];
    readonly startedAt: Date;
    readonly runnerLost?: ApplyReceipt['runnerLost'];
    readonly diverged?: ApplyReceipt['diverged'];
    readonly options: PlanOptions;
  },
): Promise<RunStep> {
  const receipt = await retryingContention(() => readPlanReceipt(ctx.db, run.id));
  if (!receipt) return failRunWith(ctx, run, { code: RunErrors.internal, message: 'the run has no plan receipt' });
  const plan = receipt.plan;
  const at = nowOf(ctx);
  const stackRef = stackOf(run);
  await retryingContention(() => markStackForRefresh(ctx.db, stackRef, run.id, error.message, at));
  return recordApplied(ctx, run, receipt, {
    runId: run.id,
    stack: run.stack,
    qualifiedStack: qualifiedStackName(stackRef),
    commit: run.desiredState.commit,
    runner: known.runner,
    result: {
      status: 'failed',
      stack: run.stack,
      planDigest: plan.digest,
      serial: plan.baseSerial,
      resources: plan.steps.map((s) => ({ urn: s.urn, name: s.name, type: s.type, op: s.op, status: 'unknown' as const })),
      outputs: {},
      error,
      startedAt: known.startedAt.toISOString(),
      finishedAt: new Date(at).toISOString(),
    },
    ...(known.runnerLost ? { runnerLost: known.runnerLost } : {}),
    ...(known.diverged ? { diverged: known.diverged } : {}),
  }, known.options);
}

function stateMoved(run: Run, planned: number, now: number): Failure {
  return {
    code: RunErrors.planStale,
    message: `the state of stack ${qualifiedStackName(stackOf(run))} changed since the plan was made (serial ${planned}, now ${now}); nothing was applied; replan the run`,
  };
}

/**
 * Records an apply's receipt, the run's end and its events in one transaction, then gives the stack back and
 * archives the receipt. An apply that refreshed and succeeded clears the stack's refresh mark.
 */
async function recordApplied(ctx: ProvisioningContext, run: Run, receipt: PlanReceipt, applyReceipt: ApplyReceipt, options: PlanOptions): Promise<RunStep> {
  const runId = run.id;
  const { result } = applyReceipt;
  const to = result.status === 'applied' ? 'applied' : 'failed';
  const error = result.error ? { code: result.error.code, message: result.error.message } : undefined;
  await inTransaction(ctx.db, async (trx) => {
    const at = nowOf(ctx);
    await recordApply(trx, runId, applyReceipt, to, error, at);
    if (to === 'applied' && options.refresh) await clearStackRefresh(trx, stackOf(run));
    const ended: Run = { ...run, state: to, finishedAt: new Date(at), ...(error ? { error } : {}) };
    const repository = repositoryOf(run);
    const events =
      to === 'applied'
        ? [
            specificationAppliedOf(ended, repository, result),
            provisioningApplied(ended, repository, { planDigest: result.planDigest, counts: receipt.plan.counts, finishedAt: new Date(at) }),
          ]
        : [provisioningFailed(ended, repository, { code: error?.code ?? RunErrors.internal, reason: error?.message ?? 'the apply failed', finishedAt: new Date(at) })];
    await appendEvents(ctx, trx, events);
  });
  recordRunEnded(to, nowOf(ctx) - run.createdAt.getTime());
  await giveBackStack(ctx, run);
  await archiveApply(ctx, await existingRun(ctx, runId));
  return { outcome: 'ended', state: to };
}

/**
 * Each reference of the plan, resolved once: secrets at the GovernanceHost (fail-fast: a service that does not
 * answer throws), config at the Config Platform (degrade: its last known value, noted for the receipt; without one,
 * `PROVISIONING.CONFIG_UNAVAILABLE`). A reference that cannot be resolved makes the engine refuse the apply before
 * its first change. Values stay in memory, for the engine only.
 */
async function resolveForApply(ctx: ProvisioningContext, plan: Plan, scope: ReferenceScope): Promise<{ resolve: ResolveReferences; degraded: DegradedReference[] }> {
  const values = new Map<string, { value: JsonValue } | { error: AppError }>();
  const degraded: DegradedReference[] = [];
  for (const reference of plan.references) {
    if ('secretRef' in reference) {
      try {
        values.set(referenceKey(reference), { value: await failFast(ExternalErrors.governanceUnavailable, 'the GovernanceHost', () => ctx.services.governance.resolveSecret(reference.secretRef, scope)) });
      } catch (thrown) {
        const error = ensureError(thrown);
        if (!(error instanceof AppError) || error.kind === 'unavailable') throw error;
        values.set(referenceKey(reference), { error });
      }
    } else {
      values.set(referenceKey(reference), await resolveConfig(ctx, reference.configRef, scope, degraded));
    }
  }
  const resolve: ResolveReferences = (reference) => {
    const entry = values.get(referenceKey(reference));
    if (!entry) return Promise.reject(problemError(ProvisioningErrors.referenceUnresolved, `the reference ${referenceKey(reference)} is not in the approved plan`));
    return 'error' in entry ? Promise.reject(entry.error) : Promise.resolve(entry.value);
  };
  return { resolve, degraded };
}

/**
 * The values of an apply job's references, resolved for that job when its agent claims it (as `resolveForApply`
 * does for an apply in this process): sent to the agent with the claim, never stored.
 */
export async function resolveJobReferences(ctx: ProvisioningContext, job: RunnerJob): Promise<{ values: NonNullable<ClaimedJob['references']>; degraded: DegradedReference[] }> {
  const plan = job.spec.approvedPlan;
  if (!plan) return { values: {}, degraded: [] };
  const { resolve, degraded } = await resolveForApply(ctx, plan, { tenant: job.tenant, runId: job.runId });
  const values: Record<string, { value: JsonValue } | { error: { code: string; message: string } }> = {};
  for (const reference of plan.references) {
    try {
      values[referenceKey(reference)] = { value: await resolve(reference) };
    } catch (thrown) {
      const error = ensureError(thrown);
      values[referenceKey(reference)] = { error: { code: error instanceof AppError ? error.code : 'PROVISIONING.REFERENCE_UNRESOLVED', message: error.message } };
    }
  }
  return { values, degraded };
}

async function resolveConfig(ctx: ProvisioningContext, reference: string, scope: ReferenceScope, degraded: DegradedReference[]): Promise<{ value: JsonValue } | { error: AppError }> {
  let answer: JsonValue;
  try {
    answer = await ctx.services.configPlatform.resolve(reference, scope);
  } catch (thrown) {
    const error = ensureError(thrown);
    // The platform answered that it has no such reference: no last known value stands in for that.
    if (error instanceof AppError && error.kind === 'not-found') return { error };
    const last = await ctx.services.lastKnownConfig.get(scope.tenant, reference);
    if (!last) {
      return {
        error: problemError(ProvisioningErrors.configUnavailable, `the Config Platform did not answer for ${reference} and there is no last known value of it; nothing was applied`, {
          reference,
        }),
      };
    }
    degraded.push({ ref: reference, reason: `the Config Platform did not answer (${error instanceof AppError ? error.code : 'error'})`, lastKnownAt: last.at.toISOString() });
    return { value: last.value };
  }
  await ctx.services.lastKnownConfig.put(scope.tenant, reference, answer, ctx.clock.now());
  return { value: answer };
}

/**
 * Stores an ended apply's receipt at the KnowledgeHost and its evidence at the GovernanceHost, each once (both
 * answer the same id for the same content). Fail-fast: a service that does not answer throws, and the activity's
 * retry comes back here; the run's detail shows which of the two it has.
 */
async function archiveApply(ctx: ProvisioningContext, run: Run): Promise<void> {
  const detail = await retryingContention(() => findRunDetail(ctx.db, run.id, { kind: 'all' }));
  if (!detail?.applyReceipt) return;
  const has = (kind: string) => detail.artifacts.find((a) => a.kind === kind)?.id;
  let receiptArtifact = has('apply-receipt');
  if (!receiptArtifact) {
    const content = detail.applyReceipt;
    receiptArtifact = await failFast(ExternalErrors.knowledgeUnavailable, 'the KnowledgeHost', () => ctx.services.knowledge.putReceipt({ runId: run.id, tenant: run.tenant, kind: 'apply-receipt', content }));
    const id = receiptArtifact;
    await retryingContention(() => insertArtifact(ctx.db, run.id, { kind: 'apply-receipt', id, recordedAt: ctx.clock.now() }));
  }
  if (has('audit-evidence')) return;
  const applyArtifact = receiptArtifact;
  const result = detail.applyReceipt.result;
  const approvedBy = detail.decision?.decision === 'approved' ? detail.decision.by : undefined;
  const evidence = await failFast(ExternalErrors.governanceUnavailable, 'the GovernanceHost', () =>
    ctx.services.governance.recordEvidence({
      runId: run.id,
      tenant: run.tenant,
      environment: run.environment.id,
      stack: run.stack,
      planDigest: result.planDigest,
      ...(approvedBy !== undefined ? { approvedBy } : {}),
      result: result.status,
      ...(result.error ? { errorCode: result.error.code } : {}),
      applyReceiptArtifact: applyArtifact,
      at: (run.finishedAt ?? ctx.clock.now()).toISOString(),
    }),
  );
  await retryingContention(() => insertArtifact(ctx.db, run.id, { kind: 'audit-evidence', id: evidence, recordedAt: ctx.clock.now() }));
}
