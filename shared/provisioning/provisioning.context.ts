import type { Transaction } from 'kysely';
import type { NewEvent } from '../platform/bus/events';
import { appendToOutbox } from '../platform/bus/outbox';
import { AppError, ensureError } from '../platform/errors/app-error';
import type { DesiredStateFetchSettings } from '../platform/git/desired-state';
import { redactUrl } from '../platform/git/repository-url';
import type { IacEngine } from '../platform/iac/iac-runner';
import type { RunnerTarget } from '../platform/config/targets';
export type { RunnerTarget } from '../platform/config/targets';
import type { SqlStore } from '../platform/sql/database';
import type { SqlDialect } from '../platform/sql/dialect';
import { inTransaction, retryingContention } from '../platform/sql/transaction';
import { recordRunEnded } from '../platform/telemetry/metrics';
import { stderrSecurityLog, type SecurityLog } from '../platform/telemetry/security-events';
import type { Clock, Ids } from '../platform/time/clock';
import { serviceUnavailable, unavailableCodeIn, type ExternalServices } from './external-services.client';
import { enqueueDeliveryReports } from './delivery-reports.repository';
import { deletePolicyWait } from './receipts.repository';
import { findRun, transitionRun } from './runs.repository';
import type { ProvisioningTables } from './provisioning.tables';
import type { PackagePolicy } from './package-policy';
import type { ProjectPolicy } from './project-policy';
import { provisioningFailed } from './run-events';
import type { LocalSourceAccess, SourcePolicy } from './source-policy';
import {
  DEFAULT_APPROVAL_POLICY,
  DEFAULT_PLAN_EXPIRY_MS,
  DEFAULT_POLICY_POLL_MS,
  DEFAULT_POLICY_TIMEOUT_MS,
  isTerminal,
  RunErrors,
  stackOf,
  stepOf,
  type ApprovalPolicy,
  type PlanExpiryPolicy,
  type Run,
  type RunStep,
} from './run';
import { provisioningDb, releaseStackLock, type ProvisioningDb } from './stack-lock.repository';
import { cancelJobsOfRun } from './runner-jobs.repository';
import { problemError } from '../platform/errors/catalogue';
import { ProvisioningErrors } from './errors';

/**
 * What every provisioning use case works with: the store, the clock and ids, the engine and the external services,
 * and the policies of this installation. Built once per host by `createProvisioningService`; the use case files
 * (intake, pool resize, reconciliation, stack queue, plan, apply, operator actions, views) take it first.
 */
export interface ProvisioningContext {
  readonly db: ProvisioningDb;
  readonly dialect: SqlDialect;
  readonly clock: Clock;
  readonly ids: Ids;
  /** Undefined when the configured runner cannot plan on this host (runs then fail saying so). */
  readonly engine: IacEngine | undefined;
  readonly services: ExternalServices;
  readonly knowsTenant: (tenant: string) => Promise<boolean>;
  readonly desiredState: DesiredStateFetchSettings | undefined;
  readonly sources: ProvisioningServiceOptions['sources'];
  readonly projects: ProjectPolicy;
  readonly packages: PackagePolicy;
  readonly timings: RunTimings;
  readonly stackLock: { readonly ttlMs: number; readonly renewEveryMs: number; readonly hostId: string };
  readonly planExpiry: PlanExpiryPolicy;
  readonly approvalPolicy: ApprovalPolicy;
  readonly unpinnedReleases: 'refuse' | 'allow';
  /** Runner jobs: how plans and applies leave the host. Undefined: the engine runs in this process (tests, bench). */
  readonly runners: RunnerExecution | undefined;
  readonly targets: EnvironmentTargets;
  /** Where security events (agents' reports the host refused to believe) are logged. */
  readonly securityLog: SecurityLog;
}

/**
 * The installation's targets as environments are put on them: the ControlPlaneApi's environment may name its target;
 * else the `RuntimeCloud__Targets` rules decide (by tenant, environment, tier). An environment's first run binds it
 * to that target with its stack.
 */
export interface EnvironmentTargets {
  /** Every target id of the installation. Example: `['local']`. */
  readonly ids: readonly string[];
  /** The target the rules put an environment on. */
  byRules(environment: { readonly tenant: string; readonly environment: string; readonly tier: string }): string;
}

/**
 * How this host hands plans and applies to runner agents (runner-jobs.ts): the target and pool of each
 * run's environment, the capacity leases its jobs hold, and the job lease's length.
 */
export interface RunnerExecution {
  /** Every target of the installation with its runner pool and the engine its runners use. */
  readonly targets: readonly RunnerTarget[];
  readonly leases: RunnerLeases;
  /** How long a job's lease holds without a heartbeat. Example: `60_000`. */
  readonly leaseTtlMs: number;
  /** How long a job waits for an agent of its pool before its run fails `PROVISIONING.RUNNER_UNAVAILABLE`. */
  readonly claimTimeoutMs: number;
}

/** Capacity leases of kind `runner` (the capacity module's), one per claimed job. */
export interface RunnerLeases {
  /** A lease of one unit of `pool` for the tenant; `refused` (why) when its quota or the pool is full. */
  acquire(request: { tenant: string; pool: string; holder: string; ttlMs: number; idempotencyKey: string }): Promise<{ id: string; fencingToken: number } | { refused: string }>;
  /** Renews it; false when it lapsed or was ended. */
  renew(tenant: string, lease: { id: string; fencingToken: number }, ttlMs: number): Promise<boolean>;
  release(tenant: string, lease: { id: string; fencingToken: number }): Promise<void>;
}

/** Durations the run orchestration waits with; they travel in its input, so the orchestrator reads no config. */
export interface RunTimings {
  /** How long a run waits for its approval before it fails with `PROVISIONING.APPROVAL_TIMEOUT`. */
  readonly approvalTimeoutMs: number;
  /** How long a run waiting for its stack sleeps before it asks again. */
  readonly lockRetryMs: number;
  /** How often a run whose plan waits for a policy check asks the GovernanceHost for the decision. */
  readonly policyPollMs: number;
  /** How long a run waits for a policy check before it fails with `PROVISIONING.POLICY_TIMEOUT`. */
  readonly policyTimeoutMs: number;
}

export interface ProvisioningServiceOptions {
  readonly store: SqlStore;
  readonly clock: Clock;
  readonly ids: Ids;
  /** The engine that plans and applies; undefined when the configured runner cannot (runs then fail saying so). */
  readonly engine: IacEngine | undefined;
  /**
   * The GovernanceHost (policy, secrets, audit evidence), ControlPlaneApi (environments, approvers), KnowledgeHost
   * (receipts as artifacts) and Config Platform (config references, degrading to last known values).
   * Example: `createLocalExternalServices({ store, clock, stateDir })`.
   */
  readonly services: ExternalServices;
  /** Whether a tenant exists. Example: a read of the capacity module's tenants. */
  readonly knowsTenant: (tenant: string) => Promise<boolean>;
  /** How desired state is read from Git. Example: `{ cacheDir: '.runtime-cloud/git-cache', fetchMaxBytes: 64 << 20 }`. */
  readonly desiredState?: DesiredStateFetchSettings;
  /**
   * Where a promotion's desired state may come from: the installation's rules (`RuntimeCloud__Provisioning__Sources`,
   * parsed) and what besides https: this host reads. Nothing the message names is fetched before these allow it.
   * Example: `{ policy: parseSourcePolicy(config.provisioning.sources), local: { localSources: false } }`.
   */
  readonly sources: { readonly policy: SourcePolicy; readonly local: LocalSourceAccess };
  /** Which projects may be planned (runtimes; project-policy.ts). Example: `{ runtimes: ['yaml'] }`. */
  readonly projects: ProjectPolicy;
  /**
   * Which Pulumi packages a program may use, and which versions (`RuntimeCloud__Provisioning__Packages`;
   * package-policy.ts). Example: `{ packages: { 'azure-native': '3.28.0', random: '4.21.2' } }`.
   */
  readonly packages: PackagePolicy;
  /** The stack lock's lease; a host that dies holding it frees the stack after this long. Example: `600_000`. */
  readonly stackLockTtlMs?: number;
  /** How often an apply renews its stack lock (it also renews before every step). Default: a third of the TTL. */
  readonly stackLockRenewEveryMs?: number;
  /** How long a plan may wait for approval. Example: `{ defaultMs: 86_400_000, byEnvironment: { production: 14_400_000 } }`. */
  readonly planExpiry?: PlanExpiryPolicy;
  /**
   * When a plan needs approval. Default: production plans and plans with a delete or replace step.
   * Example: `{ tiers: ['production'], onDeleteOrReplace: true, byEnvironment: { 'env-dev-1': { always: true } } }`.
   */
  readonly approval?: ApprovalPolicy;
  /**
   * A release the DeliveryHost answers without its desired state: refused (`PROVISIONING.RELEASE_NOT_PINNED`, the
   * default: a message never decides what a release is), or promoted as the message names it, where the DeliveryHost
   * is the local host's stand-in without a catalog (`delivery.json`). Example: `'allow'`.
   */
  readonly unpinnedReleases?: 'refuse' | 'allow';
  /** This host's name in stack locks. Example: `host-a`. */
  readonly hostId?: string;
  /** Example: `{ approvalTimeoutMs: 86_400_000, lockRetryMs: 1000, policyPollMs: 5000, policyTimeoutMs: 86_400_000 }`. */
  readonly timings?: Partial<RunTimings>;
  /** Runner jobs (runner-jobs.ts); omit to run the engine in this process (tests and the bench baseline). */
  readonly runners?: RunnerExecution;
  /** Where environments live. Default: one target, `local`. */
  readonly targets?: EnvironmentTargets;
  /** Where security event lines go (security-events.ts). Default: stderr. Example: `(line) => lines.push(line)`. */
  readonly securityLog?: SecurityLog;
}

const DEFAULT_TIMINGS: RunTimings = {
  approvalTimeoutMs: 24 * 60 * 60 * 1000,
  lockRetryMs: 1000,
  policyPollMs: DEFAULT_POLICY_POLL_MS,
  policyTimeoutMs: DEFAULT_POLICY_TIMEOUT_MS,
};
const DEFAULT_STACK_LOCK_TTL_MS = 10 * 60 * 1000;

export function createProvisioningContext(options: ProvisioningServiceOptions): ProvisioningContext {
  const ttlMs = options.stackLockTtlMs ?? DEFAULT_STACK_LOCK_TTL_MS;
  return {
    db: provisioningDb(options.store.db),
    dialect: options.store.dialect,
    clock: options.clock,
    ids: options.ids,
    engine: options.engine,
    services: options.services,
    knowsTenant: options.knowsTenant,
    desiredState: options.desiredState,
    sources: options.sources,
    projects: options.projects,
    packages: options.packages,
    timings: { ...DEFAULT_TIMINGS, ...options.timings },
    stackLock: { ttlMs, renewEveryMs: options.stackLockRenewEveryMs ?? Math.max(1, Math.floor(ttlMs / 3)), hostId: options.hostId ?? options.ids.next('host') },
    planExpiry: options.planExpiry ?? { defaultMs: DEFAULT_PLAN_EXPIRY_MS, byEnvironment: {} },
    approvalPolicy: options.approval ?? DEFAULT_APPROVAL_POLICY,
    unpinnedReleases: options.unpinnedReleases ?? 'refuse',
    runners: options.runners,
    targets: options.targets ?? { ids: ['local'], byRules: () => 'local' },
    securityLog: options.securityLog ?? stderrSecurityLog,
  };
}

/** Why a run failed, was refused or went stale: a stable code and a message for people. */
export type Failure = { readonly code: string; readonly message: string };

export function nowOf(ctx: ProvisioningContext): number {
  return ctx.clock.now().getTime();
}

/**
 * Writes events to the outbox in the caller's transaction, and with a promotion run's terminal event its report to
 * the DeliveryHost (delivery-reports.service.ts). The report first: the outbox's lanes are the lock order's last step.
 */
export async function appendEvents(ctx: ProvisioningContext, trx: Transaction<ProvisioningTables>, events: readonly NewEvent[]): Promise<void> {
  await enqueueDeliveryReports(trx, events, nowOf(ctx));
  await appendToOutbox(trx, events, ctx.clock, ctx.ids);
}

/** The run's repository as views and events show it: without credentials. */
export function repositoryOf(run: Run): string {
  return redactUrl(run.desiredState.repository);
}

export function readRun(ctx: ProvisioningContext, id: string): Promise<Run | undefined> {
  return retryingContention(() => findRun(ctx.db, id));
}

export async function existingRun(ctx: ProvisioningContext, id: string): Promise<Run> {
  const run = await readRun(ctx, id);
  if (!run) throw problemError(ProvisioningErrors.runNotFound, `there is no run ${id}`, { runId: id });
  return run;
}

/** Gives the run's stack lock back, if it still holds it. */
export async function giveBackStack(ctx: ProvisioningContext, run: Run): Promise<void> {
  await retryingContention(() => releaseStackLock(ctx.db, stackOf(run), run.id));
}

/**
 * A step retried after its run ended: the run gives its stack back again, since a crash may have come between the
 * commit that ended it and the give-back (which releases only a lock this run still holds), and the runs queued on
 * the stack would otherwise wait out the lock's whole lease.
 */
export async function endedAgain(ctx: ProvisioningContext, run: Run): Promise<RunStep> {
  await giveBackStack(ctx, run);
  return stepOf(run);
}

/** Ends a run as failed with its one `ProvisioningFailed`, and gives its stack back. */
export async function failRunWith(ctx: ProvisioningContext, run: Run, failure: Failure): Promise<RunStep> {
  const ended = await inTransaction(ctx.db, async (trx) => {
    const at = nowOf(ctx);
    if (!(await transitionRun(trx, run.id, 'failed', at, { error: failure, waitingFor: null, finished: true }))) return false;
    await deletePolicyWait(trx, run.id);
    await cancelJobsOfRun(trx, run.id, at);
    const failed: Run = { ...run, state: 'failed', error: failure, finishedAt: new Date(at) };
    await appendEvents(ctx, trx, [provisioningFailed(failed, repositoryOf(run), { code: failure.code, reason: failure.message, finishedAt: new Date(at) })]);
    return true;
  });
  if (ended) recordRunEnded('failed', nowOf(ctx) - run.createdAt.getTime());
  await giveBackStack(ctx, run);
  return ended ? { outcome: 'ended', state: 'failed' } : stepOf(await existingRun(ctx, run.id));
}

/** The orchestration gave up on a step: the run fails (if it has not ended) and gives its stack back. */
export async function failRun(ctx: ProvisioningContext, runId: string, reason: string): Promise<RunStep> {
  const run = await existingRun(ctx, runId);
  if (isTerminal(run.state)) return endedAgain(ctx, run);
  // A step that gave up because a fail-fast service did not answer ends the run with that service's code.
  return failRunWith(ctx, run, { code: unavailableCodeIn(reason) ?? RunErrors.internal, message: reason });
}

/** Counts a run that an operator ended, once its transaction committed. */
export function counted(ctx: ProvisioningContext, run: Run): Run {
  recordRunEnded(run.state, (run.finishedAt ?? ctx.clock.now()).getTime() - run.createdAt.getTime());
  return run;
}

/**
 * An expected failure (an AppError) that retrying cannot cure, as the run's error. Transient ones (`unavailable`:
 * a Git remote that did not answer) and anything unexpected are thrown, so the step is retried.
 */
export function permanentFailure(thrown: unknown): Failure {
  const error = ensureError(thrown);
  if (error instanceof AppError && error.kind !== 'unavailable') return { code: error.code, message: error.message };
  throw error;
}

/** Plan errors of the engine (`IAC.*`) end the run; anything else is a fault and is thrown. */
export function expectedFailure(thrown: unknown): Failure {
  const error = ensureError(thrown);
  if (error instanceof AppError && error.kind !== 'unavailable' && error.kind !== 'internal') return { code: error.code, message: error.message };
  throw error;
}

/**
 * Calls a fail-fast service: its own expected answers (an AppError that is not `unavailable`, such as an unknown
 * reference) pass; anything else, a service that did not answer, becomes `code` (kind `unavailable`), which the
 * caller throws on so the step is retried and, when the retries run out, the run fails with that code.
 */
export async function failFast<T>(code: string, service: string, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (thrown) {
    const error = ensureError(thrown);
    if (error instanceof AppError && (error.code === code || (error.kind !== 'unavailable' && error.kind !== 'internal'))) throw error;
    throw serviceUnavailable(code, service, error);
  }
}
