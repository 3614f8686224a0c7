import { agentPoolOf, backendOfTenant } from '../platform/config/targets';
import { AppError } from '../platform/errors/app-error';
import { filesDigest, filesOfStack, type RunnerJobKind } from '../platform/iac/runner-job';
import { inTransaction, retryingContention } from '../platform/sql/transaction';
import { securityEvent } from '../platform/telemetry/security-events';
import { appendEvents, endedAgain, existingRun, nowOf, type ProvisioningContext, type RunnerExecution, type RunnerTarget } from './provisioning.context';
import { findEnvironmentStack, replaceWaiting, setWaiting } from './runs.repository';
import { isTerminal, RunErrors, stackOf, stepOf, type Run, type RunStep, type WaitingFor } from './run';
import { appendJobLog, cancelJobsOfRun, findJob, insertJob, latestJobOfRun, markLost, type RunnerJob, type StoredSpec } from './runner-jobs.repository';
import { getStackLock, type StackLock } from './stack-lock.repository';
import { requireRunners, type FinishedJob, type JobInputs } from './runner-jobs';
import { dispatchWatchers, wakeClaims } from './runner-job-wakeups';

/**
 * Runner jobs, the run's side (runner-jobs.ts): a plan or apply step dispatches its job, and the run's orchestration
 * collects it after its result event or at its deadline (the agents' side is runner-job-agents.service.ts).
 */

/** The open (queued or running) job of a run's step, as the step it makes the run wait on; undefined when none. */
export async function openJobStep(ctx: ProvisioningContext, run: Run): Promise<RunStep | undefined> {
  if (!ctx.runners) return undefined;
  const job = await retryingContention(() => latestJobOfRun(ctx.db, ctx.dialect, run.id));
  if (!job || (job.state !== 'queued' && job.state !== 'running')) return undefined;
  return runningStep(ctx.runners, job, nowOf(ctx));
}

/**
 * Dispatches the run's step as a job for the agent pool of its tenant on its target, under the stack lock the step
 * holds: the job, the run's wait for a runner and `RunnerJobDispatched` (which wakes event-driven pools) in one
 * transaction.
 */
export async function dispatchJob(ctx: ProvisioningContext, runners: RunnerExecution, run: Run, kind: RunnerJobKind, lock: StackLock, inputs: JobInputs): Promise<RunStep> {
  const runner = await runnerTargetOf(ctx, runners, run);
  const { target, engine, backend } = runner;
  // The agent pool of the run's tenant on the target: no agent of another tenant's pool may claim the job.
  const pool = agentPoolOf(runner, run.tenant);
  const files = filesOfStack(inputs.files, run.stack);
  const spec: StoredSpec = {
    id: ctx.ids.next('job'),
    kind,
    runId: run.id,
    pool,
    target,
    engine,
    stack: stackOf(run),
    files,
    filesDigest: filesDigest(files),
    config: inputs.config,
    options: inputs.options,
    ...(inputs.approvedPlan ? { approvedPlan: inputs.approvedPlan } : {}),
    ...(backend ? { backend: backendOfTenant(backend, run.tenant) } : {}),
    fencingToken: lock.version,
  };
  const at = nowOf(ctx);
  const dispatched = await inTransaction(ctx.db, async (trx) => {
    if (!(await setWaiting(trx, run.id, run.state, { kind: 'runner', pool, jobId: spec.id }, at))) return 'moved';
    // The run's row is locked from here on: a second dispatch of its apply (two hosts collecting its plan job) sees
    // the first one's job, and gives up its own, rolled back. A plan's apply is dispatched once, never twice.
    if (kind === 'apply' && (await isApplyDispatched(trx, ctx, run.id))) throw new DispatchMoved();
    // Another step of the run took the stack again meanwhile (two hosts collecting one lost job): the job goes out under
    // the newer lock version only, so none is left waiting under a version that is gone (its agent could do nothing).
    if ((await getStackLock(trx, spec.stack))?.version !== lock.version) throw new DispatchMoved();
    await cancelJobsOfRun(trx, run.id, at);
    await insertJob(trx, spec, at);
    await appendEvents(ctx, trx, [{ type: 'RunnerJobDispatched', subject: pool, correlationId: spec.id, tenant: run.tenant, data: { jobId: spec.id, runId: run.id, kind, pool, target } }]);
    return 'dispatched';
  }).catch((thrown: unknown) => {
    if (thrown instanceof DispatchMoved) return 'moved';
    throw thrown;
  });
  if (dispatched === 'moved') {
    const now = await existingRun(ctx, run.id);
    return (await openJobStep(ctx, now)) ?? stepOf(now);
  }
  wakeClaims(pool);
  for (const watch of dispatchWatchers.get(ctx) ?? []) watch(pool);
  return { outcome: 'running', jobId: spec.id, kind, until: new Date(queuedUntil(runners, at, at)).toISOString() };
}

/** Rolls back a dispatch another one took over: an apply whose job is out already, a stack taken again since. */
class DispatchMoved extends Error {}

/**
 * Whether the run's latest job is an apply job (since its last plan job), not canceled, and not lost before its
 * agent began to apply (that one changed nothing: its apply may be dispatched again).
 */
async function isApplyDispatched(trx: Parameters<typeof latestJobOfRun>[0], ctx: ProvisioningContext, runId: string): Promise<boolean> {
  const latest = await latestJobOfRun(trx, ctx.dialect, runId);
  if (latest?.kind !== 'apply' || latest.state === 'canceled') return false;
  return !(latest.state === 'lost' && !latest.applyBeganAt);
}

/** The runner pool of the target the run's environment is bound to (else the one the rules give). */
async function runnerTargetOf(ctx: ProvisioningContext, runners: RunnerExecution, run: Run): Promise<RunnerTarget> {
  const bound = await retryingContention(() => findEnvironmentStack(ctx.db, run.tenant, run.environment.id));
  const id = bound?.target ?? ctx.targets.byRules({ tenant: run.tenant, environment: run.environment.id, tier: run.environment.tier });
  const found = runners.targets.find((t) => t.target === id);
  if (!found) throw new AppError(RunErrors.unknownTarget, 'not-found', `environment ${run.environment.id} lives on target ${id}, which this installation no longer has`, { target: id });
  return found;
}

/**
 * Where the run's job stands, for the orchestration (after the result event, or at its deadline): the outcome of a
 * finished job (handed to `finished`), still running (with the next deadline), lost, or past its claim deadline.
 */
export async function collectJob(
  ctx: ProvisioningContext,
  runId: string,
  jobId: string,
  handlers: {
    readonly finished: (run: Run, job: FinishedJob) => Promise<RunStep>;
    readonly lost: (run: Run, job: RunnerJob) => Promise<RunStep>;
    readonly unclaimed: (run: Run, job: RunnerJob) => Promise<RunStep>;
  },
): Promise<RunStep> {
  const runners = requireRunners(ctx);
  const run = await existingRun(ctx, runId);
  const job = await retryingContention(() => findJob(ctx.db, ctx.dialect, jobId));
  if (!job || job.runId !== runId) throw new AppError(RunErrors.internal, 'internal', `run ${runId} has no job ${jobId}`);
  const at = nowOf(ctx);
  if (isTerminal(run.state)) {
    await retryingContention(() => cancelJobsOfRun(ctx.db, run.id, at));
    return endedAgain(ctx, run);
  }
  if (job.state === 'done' && job.outcome) return collectFinished(ctx, run, { ...job, outcome: job.outcome }, handlers.finished);
  if (job.state === 'queued') return at >= job.createdAt.getTime() + runners.claimTimeoutMs ? handlers.unclaimed(run, job) : runningStep(runners, job, at);
  if (job.state === 'running') {
    if ((job.leaseExpiresAt?.getTime() ?? 0) > at) return runningStep(runners, job, at);
    if (!(await retryingContention(() => markLost(ctx.db, job.id, at)))) return collectJob(ctx, runId, jobId, handlers);
    if (job.lease) await runners.leases.release(job.tenant, job.lease).catch(() => undefined);
    return handlers.lost(run, { ...job, state: 'lost' });
  }
  if (job.state === 'lost') return handlers.lost(run, job);
  // Canceled: a newer job of the run, or none, is where the run stands.
  return whereRunStands(ctx, run, job, handlers.finished);
}

/**
 * Where a run stands that moved on from `job`: its newer job's step; that job collected first when it finished
 * already (the run's wait is for `job`, and the result event of the newer one came while it waited).
 */
async function whereRunStands(ctx: ProvisioningContext, run: Run, job: RunnerJob, finished: (run: Run, job: FinishedJob) => Promise<RunStep>): Promise<RunStep> {
  const latest = await retryingContention(() => latestJobOfRun(ctx.db, ctx.dialect, run.id));
  if (latest && latest.id !== job.id && latest.state === 'done' && latest.outcome) return collectFinished(ctx, run, { ...latest, outcome: latest.outcome }, finished);
  return (await openJobStep(ctx, run)) ?? stepOf(run);
}

/** How long one host may take to collect a finished job before another may take it over (it crashed meanwhile). */
const COLLECT_CLAIM_MS = 60_000;

/**
 * Collects a finished job's outcome once: the result endpoint collects it at once, and the run's deadline timer may
 * fire meanwhile, so the collector first claims the run's wait (a compare-and-set on it: `collectingUntil`, expiring
 * after `COLLECT_CLAIM_MS`). A claim another holds answers "running" until it ends; a job collected already (the run
 * moved on: a newer job, another state, another wait) answers where the run stands now. A collect that fails gives
 * its claim back, so the orchestration's retries of it go on as before.
 */
async function collectFinished(
  ctx: ProvisioningContext,
  run: Run,
  job: FinishedJob,
  finished: (run: Run, job: FinishedJob) => Promise<RunStep>,
): Promise<RunStep> {
  const waiting = run.waitingFor ?? null;
  if (!(await awaitsCollect(ctx, run, job))) return whereRunStands(ctx, run, job, finished);
  const at = nowOf(ctx);
  if (waiting?.kind === 'runner' && waiting.collectingUntil !== undefined && Date.parse(waiting.collectingUntil) > at) {
    return { outcome: 'running', jobId: job.id, kind: job.kind, until: waiting.collectingUntil };
  }
  const claim: WaitingFor = { kind: 'runner', pool: job.pool, jobId: job.id, collectingUntil: new Date(at + COLLECT_CLAIM_MS).toISOString() };
  if (!(await retryingContention(() => replaceWaiting(ctx.db, run.id, waiting, claim, at)))) {
    return collectFinished(ctx, await existingRun(ctx, run.id), job, finished);
  }
  try {
    return await finished({ ...run, waitingFor: claim }, job);
  } catch (thrown) {
    await retryingContention(() => replaceWaiting(ctx.db, run.id, claim, null, nowOf(ctx))).catch(() => undefined);
    throw thrown;
  }
}

/**
 * Whether the run still stands where its finished job left it: planning (not waiting for a policy check) or applying
 * as the job's kind says, waiting for nothing but this job, which is its latest.
 */
async function awaitsCollect(ctx: ProvisioningContext, run: Run, job: FinishedJob): Promise<boolean> {
  if (run.state !== (job.kind === 'plan' ? 'planning' : 'applying')) return false;
  const waiting = run.waitingFor;
  if (waiting && (waiting.kind !== 'runner' || waiting.jobId !== job.id)) return false;
  const latest = await retryingContention(() => latestJobOfRun(ctx.db, ctx.dialect, run.id));
  return latest?.id === job.id;
}

/**
 * The run's next look at its job: the job's lease while it runs; while it waits for an agent, one job lease from now
 * (a claim does not wake the run, so this is how soon it notices the job's lease), or its claim deadline if sooner.
 */
function runningStep(runners: RunnerExecution, job: RunnerJob, at: number): RunStep {
  const until = job.state === 'running' && job.leaseExpiresAt ? job.leaseExpiresAt.getTime() : queuedUntil(runners, job.createdAt.getTime(), at);
  return { outcome: 'running', jobId: job.id, kind: job.kind, until: new Date(until).toISOString() };
}

function queuedUntil(runners: RunnerExecution, createdAt: number, at: number): number {
  return Math.min(createdAt + runners.claimTimeoutMs, at + runners.leaseTtlMs);
}

/**
 * A report of the job that the host does not believe (security-events.ts): logged as a security event and kept in
 * the job's log, so the run's operators see it beside what the agent said it did.
 */
export async function refusedReport(ctx: ProvisioningContext, job: RunnerJob, code: string, reason: string): Promise<void> {
  const at = ctx.clock.now();
  securityEvent(ctx.securityLog, { code, reason, tenant: job.tenant, runId: job.runId, jobId: job.id, pool: job.pool, ...(job.agent ? { agent: job.agent } : {}) }, at);
  await retryingContention(() => appendJobLog(ctx.db, ctx.dialect, job.id, [`${at.toISOString()} host refused the ${job.kind} report of ${job.agent ?? 'its agent'} (${code}): ${reason}`]));
}
