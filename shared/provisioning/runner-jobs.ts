import { createHash } from 'node:crypto';
import { agentPoolNamed, type AgentPool } from '../platform/config/targets';
import { AppError } from '../platform/errors/app-error';
import { qualifiedStackName } from '../platform/iac/stack-ref';
import { type ProvisioningContext, type RunnerExecution } from './provisioning.context';
import { RunErrors } from './run';
import { type FinishedJob, type RunnerJob, type StoredSpec } from './runner-jobs.repository';

/**
 * Runner jobs: how a run's plan and apply leave the host (docs/architecture.md, "IaC: targets, runner agents and
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

export type { FinishedJob };

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

export function requireRunners(ctx: ProvisioningContext): RunnerExecution {
  if (!ctx.runners) throw new AppError(RunErrors.runnerUnavailable, 'not-found', 'this host runs no runner jobs');
  return ctx.runners;
}

/** The agent pool an id names; `RUNNER.POOL_NOT_FOUND` when it names none (a credential for a pool no target has). */
export function servedPool(runners: RunnerExecution, pool: string): AgentPool {
  const served = agentPoolNamed(runners.targets, pool);
  if (!served) throw new AppError(JobErrors.unknownPool, 'not-found', `there is no runner pool ${pool}`, { pool });
  return served;
}

export function superseded(job: RunnerJob): AppError {
  return new AppError(JobErrors.superseded, 'conflict', `job ${job.id} no longer runs under the lock of stack ${qualifiedStackName(job.spec.stack)} (version ${job.fencingToken}): its lease lapsed, it was canceled, or another run holds the stack`, {
    jobId: job.id,
    fencingToken: job.fencingToken,
  });
}

export function refused(job: RunnerJob, why: string): AppError {
  return new AppError(JobErrors.refused, 'forbidden', `job ${job.id}: ${why}`, { jobId: job.id });
}

export function hashToken(token: string): string {
  return createHash('sha256').update(token).digest('hex');
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
