import { AppError, ensureError } from '../platform/errors/app-error';
import type { DesiredState } from '../platform/git/desired-state';
import type { ConfigOverrides, PlanOptions } from '../platform/iac/iac-runner';
import { jsonEqual, referenceKey } from '../platform/iac/iac-values';
import { planCounts, planDigest, type Plan } from '../platform/iac/plan';
import { updatePlanProblem } from '../platform/iac/pulumi-plan-mapping';
import { qualifiedStackName } from '../platform/iac/stack-ref';
import { inTransaction, retryingContention } from '../platform/sql/transaction';
import { ExternalErrors, type PolicyDecision } from './external-services.client';
import {
  appendEvents,
  existingRun,
  expectedFailure,
  failFast,
  failRunWith,
  giveBackStack,
  nowOf,
  permanentFailure,
  repositoryOf,
  type Failure,
  type ProvisioningContext,
} from './provisioning.context';
import { deletePolicyWait, findPolicyWait, insertArtifact, recordPlan, savePolicyWait } from './receipts.repository';
import { latestAppliedRun, rebaseRun, setRunProject, setWaiting, transitionRun } from './runs.repository';
import type { PlanReceipt, UndecidedPlanReceipt } from './receipt';
import { specificationDeclared } from './run-events';
import { approvalRequired, planExpiryMs, RunErrors, stackOf, stepOf, type Run, type RunStep, type WaitingFor } from './run';
import { checkProjectPolicy, readProject } from './source.service';
import { takeStack } from './stack-queue.service';
import { countUnbegunLostJobs, stackNeedsRefresh, type RunnerJob } from './runner-jobs.repository';
import { dispatchJob, openJobStep, refusedReport } from './runner-job-dispatch.service';
import { JobErrors, lossOf, type FinishedJob } from './runner-jobs';

/**
 * The plan step of a run: take the stack, plan, ask the GovernanceHost, record the plan receipt and
 * `SpecificationDeclared`; then the run waits for its approval or goes on to apply. A policy check the
 * GovernanceHost decides later keeps the plan waiting, without the stack, until `checkPolicy` finds it decided.
 */
export async function plan(ctx: ProvisioningContext, runId: string): Promise<RunStep> {
  let run = await existingRun(ctx, runId);
  // A plan waiting for its policy check is made: the wait goes on (a retried or replayed step, a new execution).
  if ((run.state !== 'queued' && run.state !== 'planning') || run.waitingFor?.kind === 'policy') return stepOf(run);
  // Its plan job is out (a retried or replayed step): wait for it rather than plan again.
  const open = await openJobStep(ctx, run);
  if (open) return open;
  // Taken in before stacks were tenant-qualified, by a migration that could not tell its project: read it now.
  if (run.project === '') {
    try {
      const { project } = await readProject(ctx, run.tenant, run.desiredState);
      await retryingContention(() => setRunProject(ctx.db, runId, project, nowOf(ctx)));
      run = await existingRun(ctx, runId);
    } catch (thrown) {
      return failRunWith(ctx, run, permanentFailure(thrown));
    }
  }
  const stack = await takeStack(ctx, run);
  if (!stack.taken) return stack.step;
  if (run.state === 'queued') {
    if (!(await retryingContention(() => transitionRun(ctx.db, runId, 'planning', nowOf(ctx), { waitingFor: null })))) {
      // Canceled or superseded while it took the stack.
      await giveBackStack(ctx, run);
      return stepOf(await existingRun(ctx, runId));
    }
    run = await existingRun(ctx, runId);
  } else if (run.waitingFor) {
    // A replanned run that waited for the stack.
    await retryingContention(() => setWaiting(ctx.db, runId, 'planning', null, nowOf(ctx)));
  }
  if (run.reason === 'pool-resize' || run.reason === 'reconciliation') run = await rebase(ctx, run);
  const startedAt = ctx.clock.now();
  let desired: DesiredState;
  try {
    desired = (await readProject(ctx, run.tenant, run.desiredState)).desired;
    checkProjectPolicy(ctx, desired);
  } catch (thrown) {
    return failRunWith(ctx, run, permanentFailure(thrown));
  }
  const options = await planOptionsFor(ctx, run);
  // The tenant's program is evaluated by a runner of the target's pool, never here.
  if (ctx.runners) return dispatchJob(ctx, ctx.runners, run, 'plan', stack.lock, { files: desired.files, config: configOf(run), options });
  const engine = ctx.engine;
  if (!engine) return failRunWith(ctx, run, { code: RunErrors.runnerUnavailable, message: 'the configured IaC runner cannot plan on this host' });
  let planned: Plan;
  try {
    planned = await engine.preview(stackOf(run), desired.files, configOf(run), options);
  } catch (thrown) {
    return failRunWith(ctx, run, planFailure(thrown));
  }
  return planned_(ctx, run, desired.path, planned, { name: engine.name, version: await engine.version() }, startedAt, options.refresh === true);
}

/** How many times a run's lost plan job is dispatched again; the next loss fails the run `PROVISIONING.RUNNER_TIMEOUT`. */
export const MAX_PLAN_REDISPATCHES = 3;

/**
 * The plan job of a run was lost (its runner went silent, or ran past its maximum duration). A plan changes nothing:
 * it is made again (a new job, under a new lock version), up to `MAX_PLAN_REDISPATCHES` times; then the run fails
 * `PROVISIONING.RUNNER_TIMEOUT` (an agent that dies on this plan, or a plan that never ends in time, each time).
 */
export async function planJobLost(ctx: ProvisioningContext, run: Run, job: RunnerJob): Promise<RunStep> {
  const losses = await retryingContention(() => countUnbegunLostJobs(ctx.db, run.id, 'plan'));
  if (losses <= MAX_PLAN_REDISPATCHES) return plan(ctx, run.id);
  return failRunWith(ctx, run, {
    code: RunErrors.runnerTimeout,
    message: `${losses} plan jobs of the run were lost, the last (${job.id}, by ${job.agent ?? 'its agent'}) ${lossOf(job)}; a plan is dispatched again at most ${MAX_PLAN_REDISPATCHES} times`,
  });
}

/** The plan job of a run finished: its plan goes on as a plan made here would; its plan error fails the run. */
export async function planJobFinished(ctx: ProvisioningContext, run: Run, job: FinishedJob): Promise<RunStep> {
  const { outcome } = job;
  if (outcome.kind !== 'plan') return failRunWith(ctx, run, { code: RunErrors.internal, message: `job ${job.id} is not a plan job` });
  if ('error' in outcome) return failRunWith(ctx, run, { code: outcome.error.code, message: outcome.error.message });
  const checked = await checkedPlan(ctx, job, outcome.plan);
  if ('refused' in checked) return failRunWith(ctx, run, checked.refused);
  const startedAt = job.claimedAt ?? job.createdAt;
  return planned_(ctx, run, run.desiredState.path, checked.plan, { ...outcome.runner, jobId: job.id }, startedAt, job.spec.options.refresh === true);
}

/**
 * The plan a job reported, as the host records it: the job's stack's (else the run fails `PLAN_NOT_OF_JOB`, a
 * security event), listing only references its project names, with an update plan that does only what its steps
 * do, and with its counts and digest computed
 * here from its content. The agent's own are not believed: the counts decide whether a person must approve, the
 * digest is what the approval binds to and what the apply must report. An agent whose digest or counts disagree
 * is logged as a security event; the plan goes on with the host's.
 */
async function checkedPlan(ctx: ProvisioningContext, job: FinishedJob, reported: Plan): Promise<{ plan: Plan } | { refused: Failure }> {
  const { stack } = job.spec;
  const problem =
    reported.project !== stack.project || reported.stack !== stack.stack
      ? `the plan is of stack ${reported.project}/${reported.stack}, not of the job's ${stack.project}/${stack.stack}`
      : (unnamedReference(job, reported) ?? updatePlanProblem(reported));
  if (problem !== undefined) {
    await refusedReport(ctx, job, RunErrors.planNotOfJob, problem);
    return { refused: { code: RunErrors.planNotOfJob, message: `the plan runner ${job.agent ?? ''} reported was refused: ${problem}` } };
  }
  const { schemaVersion, project, steps, outputs } = reported;
  const plan: Plan = { ...reported, counts: planCounts(steps), digest: planDigest({ schemaVersion, project, stack: reported.stack, steps, outputs }) };
  if (plan.digest !== reported.digest || !jsonEqual(plan.counts, reported.counts)) {
    await refusedReport(ctx, job, JobErrors.planSummaryIgnored, `the plan's digest ${reported.digest} and counts ${JSON.stringify(reported.counts)} are not its content's (${plan.digest}, ${JSON.stringify(plan.counts)}): the host records its own`);
  }
  return { plan };
}

/**
 * Why a reference of the reported plan is not one the job's project names, or undefined: the host resolves a plan's
 * references for its apply job (secrets included), so a plan may list only what the job's files or config name.
 * The check is textual (the reference's name somewhere in a file or the config): enough to refuse a reference the
 * project never mentions, which is what would let an agent ask for a secret nobody approved it to use.
 */
function unnamedReference(job: FinishedJob, plan: Plan): string | undefined {
  const named = [...Object.values(job.spec.files), JSON.stringify(job.spec.config)];
  const unnamed = plan.references.find((reference) => {
    const name = 'secretRef' in reference ? reference.secretRef : reference.configRef;
    return !named.some((text) => text.includes(name));
  });
  return unnamed ? `the plan lists the reference ${referenceKey(unnamed)}, which the job's project does not name` : undefined;
}

/** A plan error: a refresh that cannot read the target fails the run as an apply to it does, with its code. */
function planFailure(thrown: unknown): Failure {
  const error = ensureError(thrown);
  if (error instanceof AppError && error.code === RunErrors.targetUnreachable) return { code: error.code, message: error.message };
  return expectedFailure(error);
}

/**
 * A plan is made (here or by a runner): ask the GovernanceHost, then record it (approval or apply next), wait for
 * the policy check, or fail the run on a deny.
 */
async function planned_(ctx: ProvisioningContext, run: Run, path: string, planned: Plan, runner: PlanReceipt['runner'], startedAt: Date, refreshed: boolean): Promise<RunStep> {
  const runId = run.id;
  const decision = approvalRequired(run.environment, planned.counts, ctx.approvalPolicy);
  const receipt: UndecidedPlanReceipt = {
    runId,
    stack: run.stack,
    qualifiedStack: qualifiedStackName(stackOf(run)),
    repository: repositoryOf(run),
    commit: run.desiredState.commit,
    path,
    runner,
    ...(refreshed ? { refreshed } : {}),
    approvalRequired: decision.required,
    approvalReasons: decision.reasons,
    plan: planned,
    startedAt: startedAt.toISOString(),
    finishedAt: ctx.clock.now().toISOString(),
    // Counted from the plan, also when a policy check holds it up: the plan's age is what makes it stale.
    expiresAt: new Date(nowOf(ctx) + planExpiryMs(ctx.planExpiry, run.environment)).toISOString(),
  };
  // Fail-fast: a GovernanceHost that does not answer throws (the activity retries; the run keeps its stack meanwhile),
  // and when the retries run out the run fails with PROVISIONING.GOVERNANCE_UNAVAILABLE. Never an allow by default.
  const policy = await failFast(ExternalErrors.governanceUnavailable, 'the GovernanceHost', () =>
    ctx.services.governance.decide({
      runId,
      tenant: run.tenant,
      environment: run.environment,
      stack: run.stack,
      planDigest: planned.digest,
      steps: planned.steps.map((s) => ({ urn: s.urn, type: s.type, op: s.op })),
    }),
  );
  if (policy.decision === 'pending') return awaitPolicy(ctx, run, receipt, policy.checkId);
  if (policy.decision === 'deny') return failRunWith(ctx, run, policyDenied(policy));
  return recordPlanned(ctx, run, { ...receipt, policy });
}

/**
 * Asks the GovernanceHost where the policy check of a waiting plan stands: an allow records the plan (then
 * approval or apply, as after a plan), a deny fails the run, a check still pending waits on, or fails the run with
 * `PROVISIONING.POLICY_TIMEOUT` when the wait `timedOut`. A run no longer waiting says where it is.
 */
export async function checkPolicy(ctx: ProvisioningContext, runId: string, timedOut: boolean): Promise<RunStep> {
  const run = await existingRun(ctx, runId);
  const waiting = run.waitingFor;
  if (run.state !== 'planning' || waiting?.kind !== 'policy') return stepOf(run);
  const wait = await retryingContention(() => findPolicyWait(ctx.db, runId));
  if (!wait || wait.checkId !== waiting.checkId) return failRunWith(ctx, run, { code: RunErrors.internal, message: `the plan waiting for policy check ${waiting.checkId} is not stored` });
  let answer;
  try {
    // Fail-fast as at plan: a GovernanceHost that does not answer throws, and the activity retries.
    answer = await failFast(ExternalErrors.governanceUnavailable, 'the GovernanceHost', () => ctx.services.governance.policyCheck(wait.checkId));
  } catch (thrown) {
    const error = ensureError(thrown);
    // A check the service lost will never be decided: waiting out the timeout would only hide that.
    if (error instanceof AppError && error.code === ExternalErrors.policyCheckUnknown) return failRunWith(ctx, run, { code: error.code, message: error.message });
    throw error;
  }
  if (answer.decision === 'pending') {
    if (!timedOut) return stepOf(run);
    return failRunWith(ctx, run, {
      code: RunErrors.policyTimeout,
      message: `the GovernanceHost did not decide policy check ${wait.checkId} of plan ${waiting.planDigest} within ${ctx.timings.policyTimeoutMs} ms`,
    });
  }
  if (answer.decision === 'deny') return failRunWith(ctx, run, policyDenied(answer));
  return recordPlanned(ctx, run, {
    ...wait.receipt,
    policy: answer,
    policyCheck: { checkId: wait.checkId, requestedAt: wait.requestedAt.toISOString(), decidedAt: ctx.clock.now().toISOString() },
  });
}

const policyDenied = (policy: Extract<PolicyDecision, { decision: 'deny' }>): Failure => ({
  code: ExternalErrors.policyDenied,
  message: `policy ${policy.policy} denied the plan: ${policy.reason}`,
});

/**
 * Records a plan the GovernanceHost allowed (its receipt, artifact and `SpecificationDeclared`) and moves the run
 * on to its approval or its apply. A run that ended meanwhile (rejected while its policy check was pending) stays
 * as it is.
 */
async function recordPlanned(ctx: ProvisioningContext, run: Run, receipt: PlanReceipt): Promise<RunStep> {
  const runId = run.id;
  const planned = receipt.plan;
  // The receipt is stored at the KnowledgeHost before it is recorded here, so a recorded plan always has its artifact.
  const planArtifact = await failFast(ExternalErrors.knowledgeUnavailable, 'the KnowledgeHost', () => ctx.services.knowledge.putReceipt({ runId, tenant: run.tenant, kind: 'plan-receipt', content: receipt }));
  const to = receipt.approvalRequired ? 'awaiting-approval' : 'applying';
  const waitingFor: WaitingFor | null = receipt.approvalRequired ? { kind: 'approval', planDigest: planned.digest } : null;
  try {
    await inTransaction(ctx.db, async (trx) => {
      await recordPlan(trx, runId, receipt, to, waitingFor, nowOf(ctx));
      await insertArtifact(trx, runId, { kind: 'plan-receipt', id: planArtifact, recordedAt: new Date(nowOf(ctx)) });
      await deletePolicyWait(trx, runId);
      const resources = planned.steps.map((s) => ({ urn: s.urn, type: s.type, name: s.name, op: s.op }));
      await appendEvents(ctx, trx, [specificationDeclared(run, receipt.repository, { digest: planned.digest, counts: planned.counts, resources })]);
    });
  } catch (thrown) {
    const current = await existingRun(ctx, runId);
    if (current.state !== 'planning') return stepOf(current);
    throw thrown;
  }
  // A run that waits for a person gives its stack back meanwhile: others may plan and apply, and the digest check
  // at apply refuses this plan if they changed what it was made against.
  if (receipt.approvalRequired) {
    await giveBackStack(ctx, run);
    return { outcome: 'awaiting-approval', planDigest: planned.digest, ...(receipt.expiresAt !== undefined ? { planExpiresAt: receipt.expiresAt } : {}) };
  }
  return { outcome: 'applying' };
}

/**
 * The GovernanceHost decides the plan later: the run keeps the plan and what it waits for, and gives its stack back
 * meanwhile, as a run waiting for its approval does (a review may take hours; the check at apply refuses the plan
 * if others changed the stack meanwhile).
 */
async function awaitPolicy(ctx: ProvisioningContext, run: Run, receipt: UndecidedPlanReceipt, checkId: string): Promise<RunStep> {
  const since = ctx.clock.now();
  const waitingFor = { kind: 'policy', checkId, planDigest: receipt.plan.digest, since: since.toISOString() } as const;
  const waits = await inTransaction(ctx.db, async (trx) => {
    if (!(await setWaiting(trx, run.id, 'planning', waitingFor, since.getTime()))) return false;
    await savePolicyWait(trx, run.id, { checkId, receipt, requestedAt: since });
    return true;
  });
  await giveBackStack(ctx, run);
  if (!waits) return stepOf(await existingRun(ctx, run.id));
  return { outcome: 'awaiting-policy', checkId, planDigest: waitingFor.planDigest, since: waitingFor.since };
}

/**
 * A pool resize changes the size of what the stack runs now: when another run applied the stack since the resize
 * was taken in, it plans that run's desired state instead of the one it was given. A reconciliation applies again
 * what the stack runs now: that run's desired state, release and config (a promotion or a resize applied while it
 * waited is not undone).
 */
async function rebase(ctx: ProvisioningContext, run: Run): Promise<Run> {
  const current = await retryingContention(() => latestAppliedRun(ctx.db, ctx.dialect, stackOf(run)));
  if (!current) return run;
  const { repository, commit, path } = current.desiredState;
  const sameState = repository === run.desiredState.repository && commit === run.desiredState.commit && path === run.desiredState.path;
  if (run.reason !== 'reconciliation') {
    if (sameState) return run;
    await retryingContention(() => rebaseRun(ctx.db, run.id, current.desiredState, nowOf(ctx)));
    return existingRun(ctx, run.id);
  }
  const sameRest = jsonEqual(current.release, run.release) && jsonEqual(current.config ?? null, run.config ?? null);
  if (sameState && sameRest) return run;
  await retryingContention(() => rebaseRun(ctx.db, run.id, current.desiredState, nowOf(ctx), { release: current.release, config: current.config }));
  return existingRun(ctx, run.id);
}

/** A run's stack config: what the run sets over the stack file (a pool resize's `poolSize`). */
export function configOf(run: Run): ConfigOverrides {
  return run.config ?? {};
}

/**
 * How a run plans, the same for its plan and its apply (the apply re-plans, and the digests must agree): a
 * reconciliation against what the target holds, with its proposal's ignore rules; a run on a stack whose last
 * apply lost its runner against what the target holds too; every other run against the recorded state.
 */
export async function planOptionsFor(ctx: ProvisioningContext, run: Run): Promise<PlanOptions> {
  if (run.reconciliation) return { refresh: true, ignore: run.reconciliation.ignore };
  return (await retryingContention(() => stackNeedsRefresh(ctx.db, stackOf(run)))) ? { refresh: true } : {};
}
