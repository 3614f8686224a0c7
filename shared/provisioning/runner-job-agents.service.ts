import { randomBytes, timingSafeEqual } from 'node:crypto';
import { agentPoolNamed, type AgentPool } from '../platform/config/targets';
import { AppError } from '../platform/errors/app-error';
import { type ClaimedJob, type Heartbeat, type RunnerJobOutcome } from '../platform/iac/runner-job';
import { type StackRef } from '../platform/iac/stack-ref';
import { inTransaction, retryingContention } from '../platform/sql/transaction';
import { existingRun, nowOf, type ProvisioningContext, type RunnerExecution } from './provisioning.context';
import { setWaiting } from './runs.repository';
import { appendJobLog, findJob, finishJob, markClaimed, queuedJobs, renewJob, touchAgent, type RunnerJob } from './runner-jobs.repository';
import { getStackLock, renewStackLock, type StackLock } from './stack-lock.repository';
import { type JobCaller, JobErrors, hashToken, refused, requireRunners, servedPool, superseded } from './runner-jobs';
import { dispatchedOrAfter } from './runner-job-wakeups';

/**
 * Runner jobs, the agents' side (runner-jobs.ts): an agent claims a job of its pool (a long poll), beats while it
 * runs, and posts its outcome; a job's calls to a target the host serves (a local cloud) are granted here. Every call
 * is the job's only with its token, from an agent of its pool, and writes only under the job's stack lock.
 */

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
    try {
      references = job.kind === 'apply' ? await resolve(job) : { values: {}, degraded: [] };
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
export async function current(ctx: ProvisioningContext, job: RunnerJob): Promise<StackLock | undefined> {
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

/**
 * A call of a job to its target that the host serves (a local cloud target, whose resources and stack state the
 * local host's job endpoints hold: local/cloud/job-target-calls.ts). What the call may touch is the grant's: its
 * tenant's scope, its stack. Only the job's token from an agent of its pool, only a job of the local engine; a write
 * only for an apply job that began, while it runs under its stack lock (fenced).
 */
export interface TargetCallGrant {
  readonly jobId: string;
  readonly tenant: string;
  readonly stack: StackRef;
  readonly target: string;
  /** Appends a line to the job's log (writes are recorded). */
  record(line: string): Promise<void>;
  /** The refusal of a call the grant does not cover (403 `RUNNER.CALL_REFUSED`), for the caller to throw. */
  refuse(why: string): AppError;
}

export async function authorizeTargetCall(ctx: ProvisioningContext, caller: JobCaller, write: boolean): Promise<TargetCallGrant> {
  const job = await authenticJob(ctx, caller);
  if (job.spec.engine !== 'local') throw refused(job, `target ${job.target} is not a local cloud: its runners reach it with their own identity`);
  if (write) await fenceWrite(ctx, job);
  return {
    jobId: job.id,
    tenant: job.tenant,
    stack: job.spec.stack,
    target: job.spec.target,
    record: (line) => retryingContention(() => appendJobLog(ctx.db, ctx.dialect, job.id, [`${new Date(nowOf(ctx)).toISOString()} target ${line}`])),
    refuse: (why) => refused(job, why),
  };
}
