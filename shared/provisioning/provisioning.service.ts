import { retryingContention } from '../platform/sql/transaction';
import { applyingRunOf, findEnvironmentStack } from './runs.repository';
import type { TenantFilter } from '../platform/auth/auth';
import type { CorrelatedEvent } from '../platform/bus/outbox';
import type { StackRef } from '../platform/iac/stack-ref';
import { heartbeatSchema, jobOutcomeSchema, type ClaimedJob } from '../platform/iac/runner-job';
import { parseJsonBody } from '../platform/validation/validation';
import { sendDeliveryReports, type SendResult } from './delivery-reports.service';
import { afterApproval, apply, applyJobFinished, applyJobLost, resolveJobReferences } from './apply.service';
import { intake, type IntakeMessage, type IntakeResult } from './intake.service';
import { approve, cancel, reject, replan, stackLock, unlockStack, type BrokenStackLock } from './operator.service';
import { checkPolicy, plan, planJobFinished, planJobLost } from './plan.service';
import { poolResize, type PoolResizeMessage, type PoolResizeResult } from './pool-resize.service';
import { createProvisioningContext, failRun, failRunWith, type ProvisioningContext, type ProvisioningServiceOptions, type RunTimings } from './provisioning.context';
import type { Rejection } from './rejections.repository';
import type { RunDetail } from './receipt';
import { reconcile, type ReconcileResult } from './reconciliation.service';
import type { ReconcileRequest } from './reconciliation';
import { RunErrors, type Run, type RunState, type RunStep } from './run';
import { acceptOutcome, authorizeTargetCall, claimJob, heartbeat, type TargetCallGrant } from './runner-job-agents.service';
import { collectJob } from './runner-job-dispatch.service';
import { watchDispatches } from './runner-job-wakeups';
import { type FinishedJob, type JobCaller } from './runner-jobs';
import { runnerAgents, runnerPools, type RunnerAgentView, type RunnerPoolView } from './runner-pools.service';
import { getRejection, getRun, listRuns, runEvents, type RunPage } from './run-queries.service';
import type { StackLock } from './stack-lock.repository';
import { nextWaitingRun } from './stack-queue.service';

export type { BrokenStackLock, IntakeResult, JobCaller, TargetCallGrant, PoolResizeResult, ProvisioningServiceOptions, ReconcileResult, RunPage, RunStep, RunTimings };

/**
 * The provisioning use cases; built once per host by `createDeps`. Each lives in a file of its own flow
 * (intake, pool-resize, reconciliation, stack-queue, plan, apply, operator, run-queries `.service.ts`), over one
 * `ProvisioningContext` (provisioning.context.ts).
 */
export interface ProvisioningService {
  readonly timings: RunTimings;
  /** Takes a message from the promotions queue: one run per promotion, or a recorded rejection. */
  intake(message: IntakeMessage): Promise<IntakeResult>;
  /** Takes a message of the events topic: a `PoolResizeRequested` becomes a run on the pool's stack. */
  poolResize(message: PoolResizeMessage): Promise<PoolResizeResult>;
  /**
   * An accepted reconciliation proposal becomes a queued run on its stack, one per proposal: the stack's latest
   * applied desired state, planned and applied with refresh and the request's ignore rules, approved as any run of
   * its environment. Throws `PROVISIONING.INVALID_RECONCILIATION` (validation) for a malformed request and
   * `PROVISIONING.UNKNOWN_STACK` (not-found) when no run applied the stack for that tenant and environment.
   */
  reconcile(request: ReconcileRequest): Promise<ReconcileResult>;
  /** Takes the stack, plans, records the plan receipt and `SpecificationDeclared`; then approval or apply. */
  plan(runId: string): Promise<RunStep>;
  /**
   * After a wait for a person (an approval, or a replan of a stale run): apply when approved, plan when replanned,
   * end when decided otherwise; a plan past its expiry goes stale; a wait that timed out fails the run.
   */
  afterApproval(runId: string, timedOut: boolean): Promise<RunStep>;
  /**
   * Asks the GovernanceHost where the policy check of a waiting plan stands: an allow records the plan (then
   * approval or apply, as after a plan), a deny fails the run, a check still pending waits on, or fails the run with
   * `PROVISIONING.POLICY_TIMEOUT` when the wait `timedOut`. A run no longer waiting says where it is.
   */
  checkPolicy(runId: string, timedOut: boolean): Promise<RunStep>;
  /**
   * Takes the stack, checks the stack's state is the one the plan was made against (else the run goes stale),
   * applies exactly the recorded plan while renewing the stack lock, records the apply receipt and the final state.
   */
  apply(runId: string): Promise<RunStep>;
  /** The orchestration gave up on a step: the run fails (if it has not ended) and gives its stack back. */
  failRun(runId: string, reason: string): Promise<RunStep>;
  approve(tenants: TenantFilter, runId: string, approval: { planDigest: string; by: string; comment?: string }): Promise<Run>;
  /** Rejects a run awaiting approval, a stale one, or one whose plan waits for a policy check. */
  reject(tenants: TenantFilter, runId: string, rejection: { reason: string; by: string }): Promise<Run>;
  /** A stale run goes back to planning: a fresh plan, which needs its own approval. */
  replan(tenants: TenantFilter, runId: string, by: string): Promise<Run>;
  /** Cancels a queued run. */
  cancel(tenants: TenantFilter, runId: string, by: string): Promise<Run>;
  /** Who holds a stack's lock; a caller bound to a tenant sees only its own tenant's stacks. */
  stackLock(tenants: TenantFilter, stack: StackRef): Promise<StackLock>;
  /** An operator breaks a stack's lock (recorded with who and why); `version` breaks only that version. */
  unlockStack(stack: StackRef, request: { by: string; reason: string; version?: number }): Promise<BrokenStackLock>;
  /**
   * The run to wake after a stack may have been released (by `run`'s step, by a cancel, by an operator): the first
   * run waiting for the stack, FIFO, while nothing holds its lock (or its lease lapsed); undefined while a run holds
   * it or none waits. Only a hint: the woken run takes the stack through the store like any other try.
   */
  nextWaitingRun(of: { readonly runId: string } | { readonly stack: StackRef }): Promise<string | undefined>;
  getRun(tenants: TenantFilter, runId: string): Promise<RunDetail>;
  /** The events written for the run (published or waiting to be), oldest first. */
  runEvents(tenants: TenantFilter, runId: string): Promise<CorrelatedEvent[]>;
  listRuns(tenants: TenantFilter, query: { environment?: string; state?: RunState; limit: number; cursor?: string; order?: 'oldest' | 'newest' }): Promise<RunPage>;
  /** A rejected message, by its messageId. */
  getRejection(messageId: string): Promise<Rejection | undefined>;
  /**
   * Where the run's runner job stands, after its result event or at its deadline: the step goes on with its
   * outcome; a lost plan job (silent, or past its maximum duration) is dispatched again, at most 3 times, then the
   * run fails (`PROVISIONING.RUNNER_TIMEOUT`); a lost apply fails the run (`PROVISIONING.RUNNER_LOST`); a job no
   * agent claimed in time fails it (`PROVISIONING.RUNNER_UNAVAILABLE`); a job still out says until when to wait.
   */
  collectJob(runId: string, jobId: string): Promise<RunStep>;
  /**
   * Sends the DeliveryHost the reports of promotion runs that ended and are not acknowledged yet (one pass; a report
   * that fails waits out its back-off). Each run is reported once (delivery-reports.service.ts).
   */
  sendDeliveryReports(): Promise<SendResult>;
  /** The run applying to the stack now, if one is (inventory skips a scan that would see it half applied). */
  applyingRun(stack: StackRef): Promise<string | undefined>;
  /** The target provisioning bound the tenant's environment to, once a run was made for it. */
  boundTarget(tenant: string, environment: string): Promise<string | undefined>;
  /** What runner agents call (runner-job-agents.service.ts), and what operators see of runner pools (runner-pools.service.ts). */
  readonly runners: RunnerJobs;
}

export interface RunnerJobs {
  /** The next job of the pool for the agent, waiting up to `waitMs` for one (a long poll). */
  claim(pool: string, agent: string, waitMs?: number): Promise<ClaimedJob | undefined>;
  /**
   * The host is stopping: every waiting claim answers now, and every later one at once, without a job; so the host's
   * drain of the requests in flight does not wait out the agents' long polls.
   */
  endClaimWaits(): void;
  // The job calls take their bodies as sent (JSON text) and validate them: 400 `REQUEST.INVALID` naming the fields.
  // Each is the job's only with its token, from an agent of the job's pool (`JobCaller`).
  /** A heartbeat (`Heartbeat`). */
  heartbeat(caller: JobCaller, body: string): Promise<{ leaseExpiresAt: string }>;
  /** What a call of the job to a target the host serves may touch (a local cloud target's; `write`: a change). */
  authorizeTargetCall(caller: JobCaller, write: boolean): Promise<TargetCallGrant>;
  /** Accepts a job's outcome (`RunnerJobOutcome`); returns the run whose orchestration to wake. */
  accept(caller: JobCaller, body: string): Promise<{ runId: string }>;
  /** The agent pools; those serving `tenant` only, when given. */
  pools(tenant?: string): Promise<RunnerPoolView[]>;
  agents(pool: string, tenant?: string): Promise<RunnerAgentView[]>;
  /** Calls `watch` with the agent pool of each job this host dispatches, until the returned function is called. */
  watchDispatches(watch: (pool: string) => void): () => void;
}

export function createProvisioningService(options: ProvisioningServiceOptions): ProvisioningService {
  const ctx = createProvisioningContext(options);
  const claimWaits = new AbortController();
  return {
    timings: ctx.timings,
    intake: (message) => intake(ctx, message),
    poolResize: (message) => poolResize(ctx, message),
    reconcile: (request) => reconcile(ctx, request),
    plan: (runId) => plan(ctx, runId),
    afterApproval: (runId, timedOut) => afterApproval(ctx, runId, timedOut),
    checkPolicy: (runId, timedOut) => checkPolicy(ctx, runId, timedOut),
    apply: (runId) => apply(ctx, runId),
    failRun: (runId, reason) => failRun(ctx, runId, reason),
    approve: (tenants, runId, approval) => approve(ctx, tenants, runId, approval),
    reject: (tenants, runId, rejection) => reject(ctx, tenants, runId, rejection),
    replan: (tenants, runId, by) => replan(ctx, tenants, runId, by),
    cancel: (tenants, runId, by) => cancel(ctx, tenants, runId, by),
    stackLock: (tenants, stack) => stackLock(ctx, tenants, stack),
    unlockStack: (stack, request) => unlockStack(ctx, stack, request),
    nextWaitingRun: (of) => nextWaitingRun(ctx, of),
    getRun: (tenants, runId) => getRun(ctx, tenants, runId),
    runEvents: (tenants, runId) => runEvents(ctx, tenants, runId),
    listRuns: (tenants, query) => listRuns(ctx, tenants, query),
    getRejection: (messageId) => getRejection(ctx, messageId),
    sendDeliveryReports: () => sendDeliveryReports(ctx),
    applyingRun: (stack) => retryingContention(() => applyingRunOf(ctx.db, stack)),
    boundTarget: async (tenant, environment) => (await retryingContention(() => findEnvironmentStack(ctx.db, tenant, environment)))?.target,
    collectJob: (runId, jobId) =>
      collectJob(ctx, runId, jobId, {
        finished: (run, job) => (job.kind === 'plan' ? planThenApply(ctx, run, job) : applyJobFinished(ctx, run, job)),
        // A plan changes nothing: a lost one is made again (a new job, under a new lock version), a few times. An apply
        // is only while its agent had not begun it.
        lost: (run, job) => (job.kind === 'plan' ? planJobLost(ctx, run, job) : applyJobLost(ctx, run, job)),
        unclaimed: (run, job) =>
          failRunWith(ctx, run, { code: RunErrors.runnerUnavailable, message: `no runner of pool ${job.pool} claimed ${job.kind} job ${job.id} within ${ctx.runners?.claimTimeoutMs ?? 0} ms` }),
      }),
    runners: {
      claim: (pool, agent, waitMs) => claimJob(ctx, pool, agent, (job) => resolveJobReferences(ctx, job), waitMs, claimWaits.signal),
      endClaimWaits: () => claimWaits.abort(),
      heartbeat: (caller, body) => heartbeat(ctx, caller, parseJsonBody(body || '{}', heartbeatSchema)),
      authorizeTargetCall: (caller, write) => authorizeTargetCall(ctx, caller, write),
      accept: (caller, body) => acceptOutcome(ctx, caller, parseJsonBody(body, jobOutcomeSchema)),
      pools: (tenant) => runnerPools(ctx, tenant),
      agents: (pool, tenant) => runnerAgents(ctx, pool, tenant),
      watchDispatches: (watch) => watchDispatches(ctx, watch),
    },
  };
}

/**
 * A finished plan job whose plan needs no approval goes straight on to its apply in the same activity (the apply job
 * dispatched under the stack lock the plan holds), instead of the orchestration calling the apply activity next: a
 * run with runner jobs then takes one activity and one orchestration episode less. Its answer, the apply job
 * running, is a new job the orchestration waits for.
 */
async function planThenApply(ctx: ProvisioningContext, run: Run, job: FinishedJob): Promise<RunStep> {
  const step = await planJobFinished(ctx, run, job);
  if (step.outcome !== 'applying') return step;
  // The stack busy after all (its lock lapsed meanwhile): the orchestration's apply step waits for it as usual.
  const applying = await apply(ctx, run.id);
  return applying.outcome === 'waiting' ? step : applying;
}
