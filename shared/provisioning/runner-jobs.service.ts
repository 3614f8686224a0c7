import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { CloudResource } from '../platform/cloud/local-cloud';
import { agentPoolNamed, agentPoolOf, backendOfTenant, type AgentPool } from '../platform/config/targets';
import { AppError } from '../platform/errors/app-error';
import { filesDigest, filesOfStack, type ClaimedJob, type Heartbeat, type RunnerJobKind, type RunnerJobOutcome, type TargetCall } from '../platform/iac/runner-job';
import type { StackState } from '../platform/iac/plan';
import { qualifiedStackName } from '../platform/iac/stack-ref';
import { inTransaction, retryingContention } from '../platform/sql/transaction';
import { securityEvent } from '../platform/telemetry/security-events';
import { appendEvents, existingRun, nowOf, type ProvisioningContext, type RunnerExecution, type RunnerTarget } from './provisioning.context';
import { findEnvironmentStack, replaceWaiting, setWaiting } from './provisioning.repository';
import { isTerminal, RunErrors, stackOf, stepOf, type Run, type RunStep, type WaitingFor } from './run';
import {
  appendJobLog,
  cancelJobsOfRun,
  findJob,
  finishJob,
  insertJob,
  jobCounts,
  latestJobOfRun,
  listAgents,
  markClaimed,
  markLost,
  queuedJobs,
  renewJob,
  touchAgent,
  type RunnerJob,
  type StoredSpec,
} from './runner-jobs.repository';
import { getStackLock, renewStackLock, type StackLock } from './stack-lock.repository';

/**
 * Runner jobs: how a run's plan and apply leave the host (ARCHITECTURE.md, "IaC: targets, runner agents and
 * engines"). The plan or apply step dispatches a job for the pool of the run's target and the orchestration waits
 * for its result; an agent of the pool claims it (holding a capacity lease of kind `runner` for it), beats while it
 * runs (renewing that lease, the job's lease and the stack lock), and posts its outcome, which is accepted only
 * while the job's lease and the stack lock it runs under are current. A job may run until its deadline (its claim plus
 * its target's maximum duration for its kind): its lease is never renewed past it. A job whose lease lapses is lost,
 * however its agent beats: a plan is dispatched again (at most `MAX_PLAN_REDISPATCHES` times), an apply that began
 * fails its run (`PROVISIONING.RUNNER_LOST`) and is never dispatched again.
 */

export const JobErrors = {
  /** The job token is not this job's, or the job has ended. */
  unauthorized: 'RUNNER.JOB_TOKEN_INVALID',
  /** The job no longer runs under the stack lock (its lease lapsed, it was canceled, another run holds the stack). */
  superseded: 'RUNNER.JOB_SUPERSEDED',
  /** The call is not one this job may make (a plan job writing, a call for another stack). */
  refused: 'RUNNER.CALL_REFUSED',
  /** The pool credential names another pool than the one asked for, or than the job's (or its pool does not serve the job's tenant). */
  wrongPool: 'RUNNER.POOL_MISMATCH',
  /** A security event, not an error: a plan's reported digest or counts were not its content's; the host's were recorded. */
  planSummaryIgnored: 'RUNNER.PLAN_SUMMARY_IGNORED',
  /** No target has an agent pool of this id. */
  unknownPool: 'RUNNER.POOL_NOT_FOUND',
} as const;

/** What a dispatch hands to the job besides the run's stack and the lock: the step's inputs. */
export type JobInputs = Pick<StoredSpec, 'files' | 'config' | 'options' | 'approvedPlan'>;

/** A runner job whose outcome was accepted. */
export type FinishedJob = RunnerJob & { readonly outcome: RunnerJobOutcome };

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
 * An agent of `pool` asks for work: the oldest queued job of the pool, of a tenant the pool serves, whose tenant's
 * runner quota has room (a lease of the target's capacity pool), with a fresh job token; undefined when there is
 * none. Apply jobs get the values of their plan's references, resolved by `resolve` for this job only (never stored).
 */
export async function claimJob(
  ctx: ProvisioningContext,
  pool: string,
  agent: string,
  resolve: (job: RunnerJob) => Promise<{ values: NonNullable<ClaimedJob['references']>; degraded: NonNullable<RunnerJob['degraded']> }>,
  waitMs = 0,
  /** Ends the wait (the host is stopping). */
  waits?: AbortSignal,
): Promise<ClaimedJob | undefined> {
  const served = servedPool(requireRunners(ctx), pool);
  // A long poll: a dispatch on this host wakes the claim at once; one on another host is seen at the next look.
  const deadline = Date.now() + waitMs;
  for (let looks = 0; ; looks++) {
    // A stopping host hands out no job: the agent that got it would be stopped with it.
    if (waits?.aborted) return undefined;
    const claimed = await claimNow(ctx, served, agent, resolve);
    // The agent is online from its claim on: a successful claim records its job with it, a waiting one says so once.
    if (!claimed && looks === 0) await retryingContention(() => touchAgent(ctx.db, pool, agent, null, nowOf(ctx)));
    const left = deadline - Date.now();
    if (claimed || left <= 0) return claimed;
    await dispatchedOrAfter(pool, Math.min(left, CLAIM_LOOK_MS), waits);
  }
}

/** How often a waiting claim looks for jobs dispatched by other hosts. */
const CLAIM_LOOK_MS = 250;
const waitingClaims = new Map<string, Set<() => void>>();

function dispatchedOrAfter(pool: string, ms: number, waits: AbortSignal | undefined): Promise<void> {
  return new Promise((done) => {
    const waiters = waitingClaims.get(pool) ?? new Set<() => void>();
    waitingClaims.set(pool, waiters);
    const wake = () => {
      clearTimeout(timer);
      waiters.delete(wake);
      waits?.removeEventListener('abort', wake);
      done();
    };
    const timer = setTimeout(wake, ms);
    waiters.add(wake);
    waits?.addEventListener('abort', wake);
  });
}

/**
 * One dispatched job wakes one waiting claim (the longest waiting): waking them all would have every other agent
 * race for the same job and lose. A claim that finds nothing after all waits on; the others still look on their own.
 */
function wakeClaims(pool: string): void {
  const [first] = waitingClaims.get(pool) ?? [];
  first?.();
}

/** Per provisioning service (one per host): several hosts may run in one process (tests). */
const dispatchWatchers = new WeakMap<ProvisioningContext, Set<(pool: string) => void>>();

/**
 * Calls `watch` with the agent pool of every job this host dispatches, until the returned function is called: the
 * local host starts a pool's agents on its first job (it cannot know the tenants in advance).
 */
export function watchDispatches(ctx: ProvisioningContext, watch: (pool: string) => void): () => void {
  const watchers = dispatchWatchers.get(ctx) ?? new Set();
  dispatchWatchers.set(ctx, watchers);
  watchers.add(watch);
  return () => watchers.delete(watch);
}

/** The agent pool an id names; `RUNNER.POOL_NOT_FOUND` when it names none (a credential for a pool no target has). */
function servedPool(runners: RunnerExecution, pool: string): AgentPool {
  const served = agentPoolNamed(runners.targets, pool);
  if (!served) throw new AppError(JobErrors.unknownPool, 'not-found', `there is no runner pool ${pool}`, { pool });
  return served;
}

async function claimNow(
  ctx: ProvisioningContext,
  served: AgentPool,
  agent: string,
  resolve: (job: RunnerJob) => Promise<{ values: NonNullable<ClaimedJob['references']>; degraded: NonNullable<RunnerJob['degraded']> }>,
): Promise<ClaimedJob | undefined> {
  const runners = requireRunners(ctx);
  const pool = served.id;
  for (const queued of await retryingContention(() => queuedJobs(ctx.db, ctx.dialect, { pool, target: served.runner.target, tenants: served.tenants }, 20))) {
    // Keyed by this claim, not by the job: a claim that died holding the lease (its host killed before the claim
    // was recorded, or a fail-fast service down) must not keep every later claim of the job from its lease, and
    // the lease it leaves lapses with its TTL. The lease is of the target's capacity pool, which all its agent
    // pools share, within the tenant's runner quota.
    const lease = await runners.leases.acquire({ tenant: queued.tenant, pool: served.runner.pool, holder: agent, ttlMs: runners.leaseTtlMs, idempotencyKey: `runner-job:${queued.id}:${randomBytes(8).toString('hex')}` });
    // This tenant's runner quota is used up: a job of another tenant may go first.
    if ('refused' in lease) continue;
    const job = await retryingContention(() => findJob(ctx.db, ctx.dialect, queued.id));
    if (!job || job.state !== 'queued') {
      // Another agent claimed it (or it was canceled) meanwhile.
      await runners.leases.release(queued.tenant, lease);
      continue;
    }
    let references: Awaited<ReturnType<typeof resolve>>;
    let state: StackState | undefined;
    try {
      references = job.kind === 'apply' ? await resolve(job) : { values: {}, degraded: [] };
      // The stand-in for the state backend: the job is the stack's only writer while it holds the lock, so the state
      // as claimed is the one it starts from.
      state = runners.local && job.spec.engine === 'local' ? await runners.local.states.read(job.spec.stack) : undefined;
    } catch (thrown) {
      // A fail-fast service did not answer: the job stays queued for a later claim, and its lease goes back now.
      await runners.leases.release(job.tenant, lease);
      throw thrown;
    }
    const token = randomBytes(32).toString('base64url');
    const at = nowOf(ctx);
    // The job's target (queued jobs are of the served pool's target) says how long a job of its kind may run.
    const deadlineAt = at + served.runner.maxJobMs[job.kind];
    const leaseExpiresAt = leaseFrom(runners, at, deadlineAt);
    const run = await existingRun(ctx, job.runId);
    const claimed = await inTransaction(ctx.db, async (trx) => {
      if (!(await markClaimed(trx, job.id, { agent, tokenHash: hashToken(token), lease, at, leaseExpiresAt, deadlineAt, degraded: references.degraded }))) return false;
      await setWaiting(trx, run.id, run.state, null, at);
      await touchAgent(trx, pool, agent, job.id, at);
      return true;
    });
    if (!claimed) {
      // Another agent claimed it first.
      await runners.leases.release(job.tenant, lease);
      continue;
    }
    return {
      job: { ...job.spec, leaseExpiresAt: new Date(leaseExpiresAt).toISOString() },
      token,
      heartbeatMs: Math.max(1, Math.floor(runners.leaseTtlMs / 4)),
      ...(job.kind === 'apply' ? { references: references.values } : {}),
      ...(job.spec.engine === 'local' ? { state: state ?? null } : {}),
    };
  }
  return undefined;
}

/**
 * A running job's heartbeat: renews the job's lease, its capacity lease and the stack lock, and records the log
 * lines. `RUNNER.JOB_SUPERSEDED` (409) once the job no longer runs under the stack lock: the agent stops. The beat
 * an apply job's agent sends before its first change (`applyBegins`) records that the apply began.
 */
export async function heartbeat(ctx: ProvisioningContext, caller: JobCaller, beat: Heartbeat): Promise<{ leaseExpiresAt: string }> {
  const runners = requireRunners(ctx);
  const job = await authenticJob(ctx, caller);
  if (beat.applyBegins && job.kind !== 'apply') throw refused(job, 'a plan job changes nothing');
  const at = nowOf(ctx);
  const lock = await current(ctx, job);
  // Every running job has its deadline (set at its claim; the migration that added it gave older jobs theirs).
  const leaseExpiresAt = leaseFrom(runners, at, job.deadlineAt?.getTime() ?? Number.POSITIVE_INFINITY);
  // One transaction: the log lines are kept whatever the renewal finds; the agent is seen with its job once renewed.
  const renewed = await inTransaction(ctx.db, async (trx) => {
    await appendJobLog(trx, ctx.dialect, job.id, beat.log);
    if (!lock || !(await renewStackLock(trx, lock, at, Math.max(ctx.stackLock.ttlMs, runners.leaseTtlMs))) || !(await renewJob(trx, job.id, at, leaseExpiresAt, beat.applyBegins))) return false;
    await touchAgent(trx, job.pool, job.agent ?? 'unknown', job.id, at);
    return true;
  });
  if (!renewed) throw superseded(job);
  // A capacity lease that lapsed may be granted to another holder: the job no longer holds its capacity.
  if (job.lease && !(await runners.leases.renew(job.tenant, job.lease, runners.leaseTtlMs))) throw superseded(job);
  return { leaseExpiresAt: new Date(leaseExpiresAt).toISOString() };
}

/**
 * A job's lease from `at`: one lease length, but never past the job's deadline. So a job past its maximum duration is
 * lost as one whose agent went silent is, by the host's clock, whatever its agent says.
 */
function leaseFrom(runners: RunnerExecution, at: number, deadlineAt: number): number {
  return Math.min(at + runners.leaseTtlMs, deadlineAt);
}

/** Why a lost job was lost, for its run's error and receipt: it ran past its deadline, or its runner went silent. */
export function lossOf(job: RunnerJob): string {
  const lapsedAt = job.leaseExpiresAt?.toISOString() ?? 'its claim';
  if (job.deadlineAt && job.leaseExpiresAt && job.leaseExpiresAt.getTime() >= job.deadlineAt.getTime()) {
    const minutes = (job.deadlineAt.getTime() - (job.claimedAt ?? job.createdAt).getTime()) / 60_000;
    return `ran past its maximum duration of ${minutes} minutes (at ${lapsedAt})`;
  }
  return `went silent (its lease lapsed at ${lapsedAt})`;
}

/** The job's stack state (jobs on a local cloud target: the stand-in for the per-tenant state backend). */
export async function jobState(ctx: ProvisioningContext, caller: JobCaller): Promise<StackState | undefined> {
  const job = await authenticJob(ctx, caller);
  return localOf(ctx, job).states.read(job.spec.stack);
}

/** Writes the job's stack state: apply jobs only, while they run under the stack lock, for their own stack only. */
export async function writeJobState(ctx: ProvisioningContext, caller: JobCaller, state: StackState): Promise<void> {
  const job = await authenticJob(ctx, caller);
  const local = localOf(ctx, job);
  const { stack } = job.spec;
  if (state.stack !== stack.stack || state.project !== stack.project) throw refused(job, `the state is of stack ${state.project}/${state.stack}, not ${stack.project}/${stack.stack}`);
  await fenceWrite(ctx, job);
  await local.states.write(stack, state);
}

/**
 * A call of the job to its local cloud target, in its tenant's scope only: a resource of another scope is not
 * found; writes are for apply jobs running under the stack lock, and each is recorded in the job's log.
 */
export async function targetCall(ctx: ProvisioningContext, caller: JobCaller, call: TargetCall): Promise<{ resource?: CloudResource; deleted?: boolean }> {
  const job = await authenticJob(ctx, caller);
  const { cloud } = localOf(ctx, job);
  const { target } = job.spec;
  const scope = job.tenant;
  const own = async (id: string) => {
    const found = await cloud.get(target, id);
    return found && found.scope === scope ? found : undefined;
  };
  if (call.op === 'get') {
    const resource = await own(call.id);
    return resource ? { resource } : {};
  }
  await fenceWrite(ctx, job);
  const record = (line: string) => retryingContention(() => appendJobLog(ctx.db, ctx.dialect, job.id, [`${new Date(nowOf(ctx)).toISOString()} target ${line}`]));
  switch (call.op) {
    case 'recordApply':
      await cloud.recordApply(target, { stack: job.spec.stack, planDigest: call.planDigest });
      await record(`apply ${call.planDigest} began`);
      return {};
    case 'create': {
      if (!call.urn.startsWith(`urn:pulumi:${job.spec.stack.stack}::${job.spec.stack.project}::`)) throw refused(job, `the urn ${call.urn} is not of the job's stack`);
      const resource = await cloud.create(target, { scope, urn: call.urn, type: call.type, properties: call.properties });
      await record(`created ${resource.type} ${resource.id} (${resource.urn})`);
      return { resource };
    }
    case 'update': {
      if (!(await own(call.id))) throw new AppError('LOCAL_CLOUD.NOT_FOUND', 'not-found', `there is no resource ${call.id}`);
      const resource = await cloud.update(target, call.id, call.properties);
      await record(`updated ${resource.type} ${resource.id}`);
      return { resource };
    }
    case 'adopt': {
      // Pulumi's import: a resource of the job's tenant becomes one of the job's stack.
      if (!call.urn.startsWith(`urn:pulumi:${job.spec.stack.stack}::${job.spec.stack.project}::`)) throw refused(job, `the urn ${call.urn} is not of the job's stack`);
      if (!(await own(call.id))) throw new AppError('LOCAL_CLOUD.NOT_FOUND', 'not-found', `there is no resource ${call.id}`);
      const resource = await cloud.adopt(target, call.id, call.urn);
      await record(`adopted ${resource.type} ${resource.id} as ${resource.urn}`);
      return { resource };
    }
    case 'delete': {
      if (!(await own(call.id))) return { deleted: false };
      const deleted = await cloud.delete(target, call.id);
      await record(`deleted ${call.id}`);
      return { deleted };
    }
  }
}

/**
 * Accepts a job's outcome: only from the job's token, while the job runs under the stack lock it was given and its
 * lease holds. A late or superseded outcome is refused (409) and recorded in the job's log; nothing of it is used.
 * Returns the run to wake.
 */
export async function acceptOutcome(ctx: ProvisioningContext, caller: JobCaller, outcome: RunnerJobOutcome): Promise<{ runId: string }> {
  const runners = requireRunners(ctx);
  // A late outcome (the job lost, canceled) is recorded as refused, so its job's log says what became of it.
  const job = await authenticJob(ctx, caller, true);
  if (outcome.kind !== job.kind) throw refused(job, `a ${job.kind} job cannot report a ${outcome.kind} outcome`);
  const at = nowOf(ctx);
  const lock = await current(ctx, job);
  // The outcome and the agent free again, in one transaction.
  const accepted =
    job.state === 'running' &&
    lock !== undefined &&
    (await inTransaction(ctx.db, async (trx) => {
      if (!(await finishJob(trx, job.id, outcome, at))) return false;
      await touchAgent(trx, job.pool, job.agent ?? 'unknown', null, at);
      return true;
    }));
  if (!accepted) {
    await retryingContention(() => appendJobLog(ctx.db, ctx.dialect, job.id, [`${new Date(at).toISOString()} host refused the ${outcome.kind} outcome: the job no longer runs under stack lock ${job.fencingToken}`]));
    throw superseded(job);
  }
  if (job.lease) await runners.leases.release(job.tenant, job.lease);
  return { runId: job.runId };
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
    return stepOf(run);
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

function requireRunners(ctx: ProvisioningContext): RunnerExecution {
  if (!ctx.runners) throw new AppError(RunErrors.runnerUnavailable, 'not-found', 'this host runs no runner jobs');
  return ctx.runners;
}

function localOf(ctx: ProvisioningContext, job: RunnerJob): NonNullable<RunnerExecution['local']> {
  const local = requireRunners(ctx).local;
  if (!local || job.spec.engine !== 'local') throw refused(job, `target ${job.target} is not a local cloud: its runners reach it with their own identity`);
  return local;
}

/**
 * Who calls for a job: the job's token, and the pool its agent's credential serves (the credential's `runner_pool`,
 * or the pool its Entra client is mapped to). A job token alone opens nothing: it must come from an agent of the job's
 * pool, and that pool must serve the job's tenant.
 */
export interface JobCaller {
  readonly jobId: string;
  readonly token: string;
  readonly pool: string | undefined;
}

/**
 * The job a caller may act for: the token must be the job's (401), the caller's pool the job's, serving the job's
 * tenant on its target (403), and the job running (unless `ended` jobs are asked for too). Checked before anything
 * changes, so a refused call leaves no trace.
 */
async function authenticJob(ctx: ProvisioningContext, caller: JobCaller, ended = false): Promise<RunnerJob> {
  const job = await retryingContention(() => findJob(ctx.db, ctx.dialect, caller.jobId));
  const presented = Buffer.from(hashToken(caller.token));
  const expected = Buffer.from(job?.tokenHash ?? '');
  if (!job || expected.length !== presented.length || !timingSafeEqual(presented, expected)) {
    throw new AppError(JobErrors.unauthorized, 'unauthorized', 'the job token is not valid for this job');
  }
  const served = caller.pool === undefined ? undefined : agentPoolNamed(requireRunners(ctx).targets, caller.pool);
  if (caller.pool !== job.pool || served?.runner.target !== job.target || !served.tenants.includes(job.tenant)) {
    throw new AppError(JobErrors.wrongPool, 'forbidden', `this credential serves runner pool ${caller.pool ?? '(none)'}, which does not run job ${job.id}`, { jobId: job.id });
  }
  if (job.state !== 'running' && !ended) throw superseded(job);
  return job;
}

/** The stack lock the job runs under, while it is current (held by the job's run at the job's version, unexpired). */
async function current(ctx: ProvisioningContext, job: RunnerJob): Promise<StackLock | undefined> {
  const at = nowOf(ctx);
  if ((job.leaseExpiresAt?.getTime() ?? 0) <= at) return undefined;
  const lock = await retryingContention(() => getStackLock(ctx.db, job.spec.stack));
  if (!lock || lock.holderRun !== job.runId || lock.version !== job.fencingToken || lock.expiresAt.getTime() <= at) return undefined;
  return lock;
}

/**
 * A write of the job (state, target): apply jobs only, once the host recorded that their apply began (so a lost job
 * without that record changed nothing), and only while the job runs under its stack lock.
 */
async function fenceWrite(ctx: ProvisioningContext, job: RunnerJob): Promise<void> {
  if (job.kind !== 'apply') throw refused(job, 'a plan job changes nothing');
  if (!job.applyBeganAt) throw refused(job, 'the apply has not begun: its agent beats with applyBegins before its first change');
  if (!(await current(ctx, job))) throw superseded(job);
}

function superseded(job: RunnerJob): AppError {
  return new AppError(JobErrors.superseded, 'conflict', `job ${job.id} no longer runs under the lock of stack ${qualifiedStackName(job.spec.stack)} (version ${job.fencingToken}): its lease lapsed, it was canceled, or another run holds the stack`, {
    jobId: job.id,
    fencingToken: job.fencingToken,
  });
}

function refused(job: RunnerJob, why: string): AppError {
  return new AppError(JobErrors.refused, 'forbidden', `job ${job.id}: ${why}`, { jobId: job.id });
}

function hashToken(token: string): string {
  return createHash('sha256').update(token).digest('hex');
}

/** An agent pool as operators see it: its target, the tenants it serves, agents online, jobs running and waiting. */
export interface RunnerPoolView {
  readonly pool: string;
  readonly target: string;
  readonly engine: 'local' | 'pulumi';
  /** The target's capacity pool, whose `runner` leases the pool's jobs hold. Example: `local-runner`. */
  readonly capacityPool: string;
  readonly tenants: readonly string[];
  /** Agents heard from within two job leases. */
  readonly agentsOnline: number;
  readonly jobsRunning: number;
  readonly jobsWaiting: number;
}

export interface RunnerAgentView {
  readonly agent: string;
  readonly online: boolean;
  readonly jobId?: string;
  /** ISO-8601 UTC. */
  readonly lastHeartbeat: string;
}

/**
 * The agent pools: every group the installation configured, and every tenant's own pool with open jobs or agents
 * online; only those serving `tenant` when one is given (a tenant sees no other tenant's pool).
 */
export async function runnerPools(ctx: ProvisioningContext, tenant?: string): Promise<RunnerPoolView[]> {
  const runners = requireRunners(ctx);
  const counts = await retryingContention(() => jobCounts(ctx.db));
  const online = onlineSince(ctx, runners);
  const agents = (await retryingContention(() => listAgents(ctx.db))).filter((a) => a.lastSeen.getTime() >= online);
  const ids = new Set([...runners.targets.flatMap((t) => t.groups.map((g) => g.id)), ...counts.map((c) => c.pool), ...agents.map((a) => a.pool)]);
  // A row of a pool no target has any longer (its configuration changed) is nobody's pool: not listed.
  const pools = [...ids].flatMap((id) => agentPoolNamed(runners.targets, id) ?? []).filter((p) => tenant === undefined || p.tenants.includes(tenant));
  return pools
    .sort((a, b) => a.runner.target.localeCompare(b.runner.target) || a.id.localeCompare(b.id))
    .map(({ id, runner, tenants }) => ({
      pool: id,
      target: runner.target,
      engine: runner.engine,
      capacityPool: runner.pool,
      tenants,
      agentsOnline: agents.filter((a) => a.pool === id).length,
      jobsRunning: counts.find((c) => c.pool === id && c.state === 'running')?.n ?? 0,
      jobsWaiting: counts.find((c) => c.pool === id && c.state === 'queued')?.n ?? 0,
    }));
}

/** An agent pool's agents; `RUNNER.POOL_NOT_FOUND` for a pool no target has, or one not serving `tenant` when given. */
export async function runnerAgents(ctx: ProvisioningContext, pool: string, tenant?: string): Promise<RunnerAgentView[]> {
  const runners = requireRunners(ctx);
  const served = servedPool(runners, pool);
  if (tenant !== undefined && !served.tenants.includes(tenant)) throw new AppError(JobErrors.unknownPool, 'not-found', `there is no runner pool ${pool}`, { pool });
  const online = onlineSince(ctx, runners);
  return (await retryingContention(() => listAgents(ctx.db, pool))).map((a) => ({
    agent: a.agent,
    online: a.lastSeen.getTime() >= online,
    ...(a.jobId !== undefined ? { jobId: a.jobId } : {}),
    lastHeartbeat: a.lastSeen.toISOString(),
  }));
}

function onlineSince(ctx: ProvisioningContext, runners: RunnerExecution): number {
  return nowOf(ctx) - 2 * runners.leaseTtlMs;
}
