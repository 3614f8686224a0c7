import type { Transaction } from 'kysely';
import type { TenantFilter } from '../platform/auth/auth';
import type { NewEvent } from '../platform/bus/events';
import { markInboundProcessed, recordInbound } from '../platform/bus/inbox.repository';
import { appendToOutbox } from '../platform/bus/outbox';
import { decodeCursor, encodeCursor } from '../platform/http/cursor';
import { AppError, ensureError } from '../platform/errors/app-error';
import { loadDesiredState, type DesiredState, type LoadDesiredStateOptions } from '../platform/git/desired-state';
import { redactUrl } from '../platform/git/repository-url';
import type { ConfigOverrides, IacEngine, PlanOptions } from '../platform/iac/iac-runner';
import { jsonEqual, referenceKey, type JsonValue } from '../platform/iac/iac-values';
import { heldIgnoreProblem, type Plan, type ResolveReferences } from '../platform/iac/plan';
import { ExternalErrors, serviceUnavailable, unavailableCodeIn, type ExternalServices, type PolicyDecision } from './external-services.client';
import type { SqlStore } from '../platform/sql/database';
import { inTransaction, retryingContention } from '../platform/sql/transaction';
import { recordRunEnded } from '../platform/telemetry/metrics';
import type { Clock, Ids } from '../platform/time/clock';
import { describeFieldProblems, type FieldProblem } from '../platform/validation/validation';
import { parsePoolResize, poolResizeKey, type PoolResizeRequested } from './pool-resize';
import { parsePromotion, type PromotionApproved } from './promotion';
import { parseReconcileRequest, reconciliationKey, type ReconcileRequest } from './reconciliation';
import {
  findDecision,
  findRejection,
  findRun,
  findRunByPromotion,
  findRunDetail,
  inboxOf,
  insertArtifact,
  insertDecision,
  insertRejection,
  insertRun,
  isUniqueViolation,
  latestAppliedRun,
  listRuns,
  queuedRunsBefore,
  readPlanReceipt,
  rebaseRun,
  deletePolicyWait,
  findPolicyWait,
  savePolicyWait,
  recordApply,
  recordPlan,
  replacePlan,
  setWaiting,
  transitionRun,
  earlierWaitingRun,
  firstWaitingRun,
  type ApplyReceipt,
  type DegradedReference,
  type NewRun,
  type PlanReceipt,
  type Rejection,
  type RunDetail,
  type UndecidedPlanReceipt,
} from './provisioning.repository';
import type { ProvisioningTables } from './provisioning.tables';
import { provisioningFailed, provisioningApplied, poolResizeRejected, promotionRejected, specificationApplied, specificationDeclared } from './run-events';
import {
  approvalRequired,
  DEFAULT_APPROVAL_POLICY,
  DEFAULT_PLAN_EXPIRY_MS,
  DEFAULT_POLICY_POLL_MS,
  DEFAULT_POLICY_TIMEOUT_MS,
  isTerminal,
  planExpiryMs,
  POOL_SIZE_CONFIG_KEY,
  RunErrors,
  type ApprovalPolicy,
  type PlanExpiryPolicy,
  type Run,
  type RunState,
  type WaitingFor,
} from './run';
import { acquireStackLock, breakStackLock, getStackLock, provisioningDb, releaseStackLock, renewStackLock, type StackLock } from './stack-lock.repository';

/** The inbox module name of provisioning messages. */
export const PROVISIONING_MODULE = 'provisioning';

export type IntakeResult =
  /** A new run, queued: start its orchestration. */
  | { readonly outcome: 'accepted'; readonly run: Run }
  /** The promotion has a run already (a redelivery or a resend): start its orchestration if it is not running. */
  | { readonly outcome: 'duplicate'; readonly run: Run }
  /** Not a valid promotion: recorded (a rejected run, or a rejection row when no run can be made) with its reason. */
  | { readonly outcome: 'rejected'; readonly run?: Run; readonly code: string; readonly reason: string }
  /** The messageId was used before for another message: nothing was done. */
  | { readonly outcome: 'ignored'; readonly reason: string };

export type PoolResizeResult =
  /** A new pool-resize run, queued: start its orchestration. */
  | { readonly outcome: 'accepted'; readonly run: Run }
  /** The event has a run already (a redelivery): start its orchestration if it is not running. */
  | { readonly outcome: 'duplicate'; readonly run: Run }
  /** Not a resize provisioning can carry out (malformed, or a stack it never applied): recorded with the reason. */
  | { readonly outcome: 'rejected'; readonly code: string; readonly reason: string }
  /** Another event of the topic, not for provisioning. */
  | { readonly outcome: 'ignored'; readonly reason: string };

export type ReconcileResult =
  /** A new reconciliation run, queued: start its orchestration (`startRun`, functions/provisioning). */
  | { readonly outcome: 'accepted'; readonly run: Run }
  /** The proposal has a run already (asked again): start its orchestration if it has not ended and is not running. */
  | { readonly outcome: 'duplicate'; readonly run: Run };

/**
 * Where a run's orchestration stands after a step; the orchestrator decides what to wait for from it.
 *
 * BREAKING-CHANGE SHAPE: activity results are stored in Durable history and replayed.
 */
export type RunStep =
  /** Not ready: the stack is busy (or an earlier run goes first); try the same step again later. */
  | { readonly outcome: 'waiting'; readonly waitingFor: WaitingFor }
  /** The run (replanned) needs a fresh plan: plan next. */
  | { readonly outcome: 'planning' }
  /** `planExpiresAt` (ISO-8601): when the plan goes stale unless approved; absent in histories from before it. */
  | { readonly outcome: 'awaiting-approval'; readonly planDigest: string; readonly planExpiresAt?: string }
  /**
   * The plan waits, without the stack, for the GovernanceHost to decide its policy check: ask again
   * (`checkPolicy`) until it is decided. `since` (ISO-8601): when the check was asked for.
   */
  | { readonly outcome: 'awaiting-policy'; readonly checkId: string; readonly planDigest: string; readonly since: string }
  | { readonly outcome: 'applying' }
  /** The plan went stale: the run waits for an operator to replan or reject it. */
  | { readonly outcome: 'stale'; readonly reason: string }
  | { readonly outcome: 'ended'; readonly state: RunState };

export interface RunPage {
  readonly items: readonly Run[];
  readonly nextCursor?: string;
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

/** A stack lock an operator broke, and the record of it. */
export interface BrokenStackLock {
  readonly lock: StackLock;
  readonly by: string;
  readonly reason: string;
  readonly brokenAt: Date;
}

/** The provisioning use cases; built once per host by `createDeps`. */
export interface ProvisioningService {
  readonly timings: RunTimings;
  /** Takes a message from the promotions queue: one run per promotion, or a recorded rejection. */
  intake(message: { readonly messageId: string; readonly body: unknown }): Promise<IntakeResult>;
  /** Takes a message of the events topic: a `PoolResizeRequested` becomes a run on the pool's stack. */
  poolResize(message: { readonly messageId: string; readonly body: unknown }): Promise<PoolResizeResult>;
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
  /** Who holds a stack's lock; a tenant sees only a lock held by one of its runs. */
  stackLock(tenants: TenantFilter, stack: string): Promise<StackLock>;
  /** An operator breaks a stack's lock (recorded with who and why); `version` breaks only that version. */
  unlockStack(stack: string, request: { by: string; reason: string; version?: number }): Promise<BrokenStackLock>;
  /**
   * The run to wake after a stack may have been released (by `run`'s step, by a cancel, by an operator): the first
   * run waiting for the stack, FIFO, while nothing holds its lock (or its lease lapsed); undefined while a run holds
   * it or none waits. Only a hint: the woken run takes the stack through the store like any other try.
   */
  nextWaitingRun(of: { readonly runId: string } | { readonly stack: string }): Promise<string | undefined>;
  getRun(tenants: TenantFilter, runId: string): Promise<RunDetail>;
  listRuns(tenants: TenantFilter, query: { environment?: string; state?: RunState; limit: number; cursor?: string }): Promise<RunPage>;
  /** A rejected message, by its messageId. */
  getRejection(messageId: string): Promise<Rejection | undefined>;
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
  /** How desired state is read from Git. Example: `{ cacheDir: '.runtime-cloud/git-cache' }`. */
  readonly desiredState?: LoadDesiredStateOptions;
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
  /** This host's name in stack locks. Example: `host-a`. */
  readonly hostId?: string;
  /** Example: `{ approvalTimeoutMs: 86_400_000, lockRetryMs: 1000, policyPollMs: 5000, policyTimeoutMs: 86_400_000 }`. */
  readonly timings?: Partial<RunTimings>;
}

const DEFAULT_TIMINGS: RunTimings = {
  approvalTimeoutMs: 24 * 60 * 60 * 1000,
  lockRetryMs: 1000,
  policyPollMs: DEFAULT_POLICY_POLL_MS,
  policyTimeoutMs: DEFAULT_POLICY_TIMEOUT_MS,
};
const DEFAULT_STACK_LOCK_TTL_MS = 10 * 60 * 1000;

/** Thrown inside an intake transaction to roll it back when its messageId was already used for another message. */
class MessageIdReused extends Error {}

type Failure = { readonly code: string; readonly message: string };

export function createProvisioningService(options: ProvisioningServiceOptions): ProvisioningService {
  const { store, clock, ids, engine, services, knowsTenant } = options;
  const db = provisioningDb(store.db);
  const dialect = store.dialect;
  const timings: RunTimings = { ...DEFAULT_TIMINGS, ...options.timings };
  const lockTtlMs = options.stackLockTtlMs ?? DEFAULT_STACK_LOCK_TTL_MS;
  const renewEveryMs = options.stackLockRenewEveryMs ?? Math.max(1, Math.floor(lockTtlMs / 3));
  const planExpiry: PlanExpiryPolicy = options.planExpiry ?? { defaultMs: DEFAULT_PLAN_EXPIRY_MS, byEnvironment: {} };
  const approvalPolicy: ApprovalPolicy = options.approval ?? DEFAULT_APPROVAL_POLICY;
  const hostId = options.hostId ?? ids.next('host');
  const now = () => clock.now().getTime();
  const outbox = (trx: Transaction<ProvisioningTables>, events: readonly NewEvent[]) => appendToOutbox(trx, events, clock, ids);
  const repositoryOf = (run: Run) => redactUrl(run.desiredState.repository);
  const read = (id: string) => retryingContention(() => findRun(db, id));

  async function existing(id: string): Promise<Run> {
    const run = await read(id);
    if (!run) throw new AppError('PROVISIONING.RUN_NOT_FOUND', 'not-found', `there is no run ${id}`, { runId: id });
    return run;
  }

  /** Where a run stands, for a step that found it already moved on (a retried or replayed step). */
  function stepOf(run: Run): RunStep {
    if (isTerminal(run.state)) return { outcome: 'ended', state: run.state };
    if (run.state === 'awaiting-approval') {
      return { outcome: 'awaiting-approval', planDigest: run.planDigest ?? '', ...(run.planExpiresAt ? { planExpiresAt: run.planExpiresAt.toISOString() } : {}) };
    }
    if (run.state === 'applying') return { outcome: 'applying' };
    if (run.state === 'stale') return { outcome: 'stale', reason: run.error?.message ?? 'the plan is stale' };
    if (run.state === 'planning' && run.waitingFor?.kind === 'policy') {
      const { checkId, planDigest, since } = run.waitingFor;
      return { outcome: 'awaiting-policy', checkId, planDigest, since };
    }
    if (run.state === 'planning') return { outcome: 'planning' };
    return { outcome: 'waiting', waitingFor: run.waitingFor ?? { kind: 'stack-lock', stack: run.stack } };
  }

  // ---- intake -----------------------------------------------------------------------------------------------------

  async function intake(message: { readonly messageId: string; readonly body: unknown }): Promise<IntakeResult> {
    const parsed = parsePromotion(message.body);
    if (parsed.outcome === 'invalid') return rejectMessage(message.messageId, message.body, parsed.problems);
    const promotion = parsed.promotion;
    const known = await retryingContention(() => findRunByPromotion(db, promotion.promotionId));
    if (known) return duplicate(known, message.messageId);
    // Outside the transaction: it reads Git. A transient failure here throws, and the message is delivered again.
    const refusal = await checkPromotion(promotion);
    try {
      return await inTransaction(db, (trx) => recordRun(trx, promotion, message.messageId, refusal));
    } catch (thrown) {
      if (thrown instanceof MessageIdReused) {
        return { outcome: 'ignored', reason: `messageId ${message.messageId} was used before for another message` };
      }
      // Another host took the same promotion in at the same moment: its run is the one.
      if (isUniqueViolation(thrown)) {
        const winner = await retryingContention(() => findRunByPromotion(db, promotion.promotionId));
        if (winner) return duplicate(winner, message.messageId);
      }
      throw thrown;
    }
  }

  /**
   * One transaction, in the lock order (run rows, then the inbox and the outbox): the run, the runs it supersedes,
   * the inbox entry and the events.
   */
  async function recordRun(trx: Transaction<ProvisioningTables>, promotion: PromotionApproved, messageId: string, refusal: Failure | undefined): Promise<IntakeResult> {
    const at = now();
    const run = await insertRun(trx, { ...promotionRun(promotion), id: ids.next('run'), state: refusal ? 'rejected' : 'queued', ...(refusal ? { error: refusal } : {}), now: at });
    const events: NewEvent[] = [];
    if (refusal) {
      events.push(provisioningFailed(run, repositoryOf(run), { code: refusal.code, reason: refusal.message, finishedAt: new Date(at) }));
    } else {
      // A newer promotion of the same environment replaces what is still queued for it: applying the older one first
      // would only be undone.
      events.push(...(await supersedeQueued(trx, run, `promotion ${promotion.promotionId}`, at)));
    }
    const inbox = inboxOf(trx);
    const inbound = await recordInbound(inbox, { module: PROVISIONING_MODULE, messageId, businessKey: promotion.promotionId }, clock);
    if (!inbound.isNew) throw new MessageIdReused();
    await markInboundProcessed(inbox, { module: PROVISIONING_MODULE, messageId, outcome: refusal ? 'rejected' : 'queued' }, clock);
    await outbox(trx, events);
    return refusal ? { outcome: 'rejected', run, code: refusal.code, reason: refusal.message } : { outcome: 'accepted', run };
  }

  /** Supersedes the queued runs `run` replaces (see queuedRunsBefore); answers their `ProvisioningFailed` events. */
  async function supersedeQueued(trx: Transaction<ProvisioningTables>, run: Run, what: string, at: number): Promise<NewEvent[]> {
    const events: NewEvent[] = [];
    for (const older of await queuedRunsBefore(trx, run)) {
      const error = { code: RunErrors.superseded, message: `superseded by run ${run.id} (${what})` };
      if (!(await transitionRun(trx, older, 'superseded', at, { supersededBy: run.id, error, waitingFor: null, finished: true }))) continue;
      const superseded = await findRun(trx, older);
      if (superseded) events.push(provisioningFailed(superseded, repositoryOf(superseded), { code: error.code, reason: error.message, finishedAt: new Date(at) }));
    }
    return events;
  }

  async function duplicate(run: Run, messageId: string): Promise<IntakeResult> {
    // Recorded so the resend is visible in the inbox; a redelivery of the same messageId records nothing new.
    await retryingContention(() => recordInbound(inboxOf(db), { module: PROVISIONING_MODULE, messageId, businessKey: run.promotionId }, clock));
    return { outcome: 'duplicate', run };
  }

  /**
   * Why a well-formed promotion cannot become a run, or undefined when it can: an unknown tenant, or desired state
   * that is not there (repository, commit, path). Transient failures (Git remote unreachable) are thrown.
   */
  async function checkPromotion(promotion: PromotionApproved): Promise<Failure | undefined> {
    if (!(await knowsTenant(promotion.tenantId))) {
      return { code: RunErrors.unknownTenant, message: `the tenant ${promotion.tenantId} is not known to this host` };
    }
    // Fail-fast: a ControlPlaneApi that does not answer throws, and the message is delivered again.
    const environment = await failFast(ExternalErrors.controlPlaneUnavailable, 'the ControlPlaneApi', () => services.controlPlane.environment(promotion.tenantId, promotion.environment.id));
    if (!environment) {
      return { code: ExternalErrors.unknownEnvironment, message: `the control plane does not know environment ${promotion.environment.id} of tenant ${promotion.tenantId}` };
    }
    try {
      await loadDesiredState(promotion.desiredState, options.desiredState);
      return undefined;
    } catch (thrown) {
      return permanentFailure(thrown);
    }
  }

  async function rejectMessage(messageId: string, body: unknown, problems: readonly FieldProblem[]): Promise<IntakeResult> {
    const code = RunErrors.invalidPromotion;
    const reason = `the message is not a valid PromotionApproved: ${describeFieldProblems(problems)}`;
    const readable = readableIds(body);
    await inTransaction(db, async (trx) => {
      const at = clock.now();
      const rejection: Rejection = { messageId, ...readable, code, reason, problems, receivedAt: at };
      // A redelivery of this message: recorded and announced already.
      if (!(await insertRejection(trx, rejection))) return;
      const inbox = inboxOf(trx);
      // Keyed by the message, not by a promotion id it may name: a malformed message must not shadow a valid one.
      await recordInbound(inbox, { module: PROVISIONING_MODULE, messageId, businessKey: `invalid:${messageId}` }, clock);
      await markInboundProcessed(inbox, { module: PROVISIONING_MODULE, messageId, outcome: 'rejected' }, clock);
      await outbox(trx, [promotionRejected({ messageId, ...readable, code, reason, problems, at })]);
    });
    return { outcome: 'rejected', code, reason };
  }

  // ---- pool resizes -----------------------------------------------------------------------------------------------

  /**
   * A `PoolResizeRequested` of the capacity module becomes a run on the pool's stack (`iacStack`), with the new size
   * as the config `poolSize`. Where the stack's project lives, and whose it is, says the stack's latest applied run:
   * the resize plans that desired state (repository, commit, path; tenant and environment) with only the size
   * changed. A stack no run has applied is refused: nothing says where its project is.
   */
  async function poolResize(message: { readonly messageId: string; readonly body: unknown }): Promise<PoolResizeResult> {
    const parsed = parsePoolResize(message.body);
    if (parsed.outcome === 'other') return { outcome: 'ignored', reason: `${parsed.type} is not for provisioning` };
    if (parsed.outcome === 'invalid') {
      const reason = `the message is not a valid PoolResizeRequested: ${describeFieldProblems(parsed.problems)}`;
      return rejectResize(message.messageId, { ...(parsed.pool !== undefined ? { pool: parsed.pool } : {}), code: RunErrors.invalidPoolResize, reason, problems: parsed.problems });
    }
    const resize = parsed.resize;
    const known = await retryingContention(() => findRunByPromotion(db, poolResizeKey(resize.eventId)));
    if (known) return duplicateResize(known, message.messageId);
    const base = await retryingContention(() => latestAppliedRun(db, dialect, resize.iacStack));
    if (!base) {
      const reason = `pool ${resize.pool} names stack ${resize.iacStack}, which no run has applied: where its project lives is not known`;
      return rejectResize(message.messageId, { pool: resize.pool, stack: resize.iacStack, eventId: resize.eventId, code: RunErrors.unknownStack, reason, problems: [] });
    }
    try {
      return await inTransaction(db, (trx) => recordResize(trx, resize, base, message.messageId));
    } catch (thrown) {
      if (thrown instanceof MessageIdReused) return { outcome: 'ignored', reason: `messageId ${message.messageId} was used before for another message` };
      // Another host took the same event in at the same moment: its run is the one.
      if (isUniqueViolation(thrown)) {
        const winner = await retryingContention(() => findRunByPromotion(db, poolResizeKey(resize.eventId)));
        if (winner) return duplicateResize(winner, message.messageId);
      }
      throw thrown;
    }
  }

  /** One transaction in the lock order (run rows, then inbox and outbox): the run, the older resizes it replaces. */
  async function recordResize(trx: Transaction<ProvisioningTables>, resize: PoolResizeRequested, base: Run, messageId: string): Promise<PoolResizeResult> {
    const at = now();
    const run = await insertRun(trx, {
      id: ids.next('run'),
      key: poolResizeKey(resize.eventId),
      tenant: base.tenant,
      environment: base.environment,
      release: base.release,
      stack: resize.iacStack,
      desiredState: base.desiredState,
      requestedBy: `pool ${resize.pool}`,
      reason: 'pool-resize',
      poolResize: { pool: resize.pool, eventId: resize.eventId, fromCapacity: resize.fromCapacity, toCapacity: resize.toCapacity },
      config: { ...base.config, [POOL_SIZE_CONFIG_KEY]: resize.toCapacity },
      state: 'queued',
      now: at,
    });
    // A newer size of the pool replaces a resize still queued: only the latest size is worth applying.
    const events = await supersedeQueued(trx, run, `pool ${resize.pool} resized to ${resize.toCapacity}`, at);
    const inbox = inboxOf(trx);
    const inbound = await recordInbound(inbox, { module: PROVISIONING_MODULE, messageId, businessKey: run.promotionId }, clock);
    if (!inbound.isNew) throw new MessageIdReused();
    await markInboundProcessed(inbox, { module: PROVISIONING_MODULE, messageId, outcome: 'queued' }, clock);
    await outbox(trx, events);
    return { outcome: 'accepted', run };
  }

  async function duplicateResize(run: Run, messageId: string): Promise<PoolResizeResult> {
    await retryingContention(() => recordInbound(inboxOf(db), { module: PROVISIONING_MODULE, messageId, businessKey: run.promotionId }, clock));
    return { outcome: 'duplicate', run };
  }

  /** Records a resize that cannot become a run, once per message, with its one `ProvisioningFailed`. */
  async function rejectResize(
    messageId: string,
    refusal: { pool?: string; stack?: string; eventId?: string; code: string; reason: string; problems: readonly FieldProblem[] },
  ): Promise<PoolResizeResult> {
    await inTransaction(db, async (trx) => {
      const at = clock.now();
      if (!(await insertRejection(trx, { messageId, code: refusal.code, reason: refusal.reason, problems: refusal.problems, receivedAt: at }))) return;
      const inbox = inboxOf(trx);
      await recordInbound(inbox, { module: PROVISIONING_MODULE, messageId, businessKey: `invalid:${messageId}` }, clock);
      await markInboundProcessed(inbox, { module: PROVISIONING_MODULE, messageId, outcome: 'rejected' }, clock);
      await outbox(trx, [poolResizeRejected({ messageId, ...refusal, at })]);
    });
    return { outcome: 'rejected', code: refusal.code, reason: refusal.reason };
  }

  // ---- reconciliations --------------------------------------------------------------------------------------------

  /**
   * An operator accepted an inventory reconciliation proposal: a run that applies the stack's latest applied desired
   * state (repository, commit, path, release, config; tenant and environment) again, planned against what the
   * target holds. Like a pool resize, a stack no run has applied is refused: nothing says where its project is.
   */
  async function reconcile(request: ReconcileRequest): Promise<ReconcileResult> {
    const parsed = parseReconcileRequest(request);
    const problems =
      parsed.outcome === 'invalid'
        ? parsed.problems
        : parsed.request.ignore.flatMap((rule, i) => {
            const problem = heldIgnoreProblem(rule.path);
            return problem ? [{ field: `ignore.${i}.path`, message: problem }] : [];
          });
    if (parsed.outcome === 'invalid' || problems.length > 0) {
      throw new AppError(RunErrors.invalidReconciliation, 'validation', `the reconciliation request is not valid: ${describeFieldProblems(problems)}`, { errors: problems });
    }
    const valid = parsed.request;
    const key = reconciliationKey(valid.proposalId);
    const known = await retryingContention(() => findRunByPromotion(db, key));
    if (known) return { outcome: 'duplicate', run: known };
    const base = await retryingContention(() => latestAppliedRun(db, dialect, valid.stack));
    // Another tenant's stack reads as unknown, so a request cannot learn that it exists.
    if (!base || base.tenant !== valid.tenant || base.environment.id !== valid.environmentId) {
      throw new AppError(
        RunErrors.unknownStack,
        'not-found',
        `no run has applied stack ${valid.stack} for environment ${valid.environmentId} of tenant ${valid.tenant}: there is no desired state to reconcile it to`,
        { stack: valid.stack, environmentId: valid.environmentId, proposalId: valid.proposalId },
      );
    }
    try {
      return await inTransaction(db, (trx) => recordReconciliation(trx, valid, base));
    } catch (thrown) {
      // The same proposal accepted twice at the same moment: the run that got in is the one.
      if (isUniqueViolation(thrown)) {
        const winner = await retryingContention(() => findRunByPromotion(db, key));
        if (winner) return { outcome: 'duplicate', run: winner };
      }
      throw thrown;
    }
  }

  /** One transaction in the lock order (run rows, then the outbox): the run, the older reconciliations it replaces. */
  async function recordReconciliation(trx: Transaction<ProvisioningTables>, request: ReconcileRequest, base: Run): Promise<ReconcileResult> {
    const at = now();
    const run = await insertRun(trx, {
      id: ids.next('run'),
      key: reconciliationKey(request.proposalId),
      tenant: base.tenant,
      environment: base.environment,
      release: base.release,
      stack: request.stack,
      desiredState: base.desiredState,
      requestedBy: request.requestedBy,
      reason: 'reconciliation',
      reconciliation: { proposalId: request.proposalId, ignore: request.ignore.map((r) => ({ scope: { ...r.scope }, path: r.path })) },
      ...(base.config ? { config: base.config } : {}),
      state: 'queued',
      now: at,
    });
    // See queuedRunsBefore: only an older reconciliation of the stack still queued is replaced.
    const events = await supersedeQueued(trx, run, `reconciliation proposal ${request.proposalId}`, at);
    await outbox(trx, events);
    return { outcome: 'accepted', run };
  }

  // ---- the stack --------------------------------------------------------------------------------------------------

  /**
   * Takes the run's stack lock, first in first out: a run that does not hold the lock yet lets an earlier run of the
   * stack that waits for it go first. When it cannot, records what it waits for.
   */
  async function takeStack(run: Run): Promise<{ readonly taken: true; readonly lock: StackLock } | { readonly taken: false; readonly step: RunStep }> {
    const at = now();
    const current = await retryingContention(() => getStackLock(db, run.stack));
    const holdsIt = current?.holderRun === run.id && current.expiresAt.getTime() > at;
    if (!holdsIt) {
      const ahead = await retryingContention(() => earlierWaitingRun(db, dialect, run));
      if (ahead) return wait(run, { kind: 'stack-lock', stack: run.stack, queuedBehind: ahead, ...(current ? { heldBy: current.holderRun } : {}) });
    }
    const outcome = await retryingContention(() => acquireStackLock(db, dialect, { stack: run.stack, run: run.id, host: hostId, now: at, ttlMs: lockTtlMs }));
    if (!outcome.acquired) return wait(run, { kind: 'stack-lock', stack: run.stack, heldBy: outcome.heldBy.holderRun });
    return { taken: true, lock: outcome.lock };
  }

  async function wait(run: Run, waitingFor: WaitingFor): Promise<{ taken: false; step: RunStep }> {
    if (await retryingContention(() => setWaiting(db, run.id, run.state, waitingFor, now()))) return { taken: false, step: { outcome: 'waiting', waitingFor } };
    // Moved on meanwhile (canceled, superseded): say where it is.
    return { taken: false, step: stepOf(await existing(run.id)) };
  }

  async function giveBackStack(run: Run): Promise<void> {
    await retryingContention(() => releaseStackLock(db, run.stack, run.id));
  }

  /**
   * Keeps the stack lock of an applying run: renews it every `renewEveryMs` and before every step, so a long apply
   * keeps its lease. Once a renewal finds the lock gone (its lease lapsed while the host stalled, or an operator
   * broke it) another run may hold the stack: `beforeStep` then throws and the engine stops before its next step.
   */
  function keepStackLock(run: Run, lock: StackLock) {
    let lost: AppError | undefined;
    let renewing: Promise<void> = Promise.resolve();
    const renew = (): Promise<void> =>
      (renewing = renewing.then(async () => {
        if (lost) return;
        try {
          if (await retryingContention(() => renewStackLock(db, lock, now(), lockTtlMs))) return;
        } catch {
          // The store did not answer: the lease holds until it lapses, and the next renewal asks again.
          return;
        }
        lost = new AppError(RunErrors.stackLockLost, 'conflict', `run ${run.id} lost the lock of stack ${run.stack} during its apply (its lease lapsed or an operator broke it); the apply stopped`, {
          runId: run.id,
          stack: run.stack,
          version: lock.version,
        });
      }));
    const timer = setInterval(() => void renew(), renewEveryMs);
    timer.unref();
    const beforeStep = async (): Promise<void> => {
      await renew();
      if (lost) throw lost;
    };
    const stop = async (): Promise<void> => {
      clearInterval(timer);
      await renewing;
    };
    return { beforeStep, stop };
  }

  /** Marks the run's plan stale (it waits for a replan or a rejection) and gives its stack back. */
  async function goStale(run: Run, reason: Failure): Promise<RunStep> {
    const waitingFor: WaitingFor = { kind: 'replan', planDigest: run.planDigest ?? '' };
    const moved = await retryingContention(() => transitionRun(db, run.id, 'stale', now(), { error: reason, waitingFor }));
    await giveBackStack(run);
    return moved ? { outcome: 'stale', reason: reason.message } : stepOf(await existing(run.id));
  }

  /** Why an approval now would come too late, or undefined while the plan may still be approved. */
  function expiredPlan(run: Run, at: number): Failure | undefined {
    if (!run.planExpiresAt || at < run.planExpiresAt.getTime()) return undefined;
    return { code: RunErrors.planStale, message: `the plan ${run.planDigest ?? ''} expired at ${run.planExpiresAt.toISOString()} before it was approved; replan the run` };
  }

  // ---- plan, approval, apply --------------------------------------------------------------------------------------

  async function plan(runId: string): Promise<RunStep> {
    let run = await existing(runId);
    // A plan waiting for its policy check is made: the wait goes on (a retried or replayed step, a new execution).
    if ((run.state !== 'queued' && run.state !== 'planning') || run.waitingFor?.kind === 'policy') return stepOf(run);
    const stack = await takeStack(run);
    if (!stack.taken) return stack.step;
    if (run.state === 'queued') {
      if (!(await retryingContention(() => transitionRun(db, runId, 'planning', now(), { waitingFor: null })))) {
        // Canceled or superseded while it took the stack.
        await giveBackStack(run);
        return stepOf(await existing(runId));
      }
      run = await existing(runId);
    } else if (run.waitingFor) {
      // A replanned run that waited for the stack.
      await retryingContention(() => setWaiting(db, runId, 'planning', null, now()));
    }
    if (run.reason === 'pool-resize' || run.reason === 'reconciliation') run = await rebase(run);
    const startedAt = clock.now();
    if (!engine) return fail(run, { code: RunErrors.runnerUnavailable, message: 'the configured IaC runner cannot plan on this host' });
    let desired: DesiredState;
    try {
      desired = await loadDesiredState(run.desiredState, options.desiredState);
    } catch (thrown) {
      return fail(run, permanentFailure(thrown));
    }
    let planned: Plan;
    try {
      planned = await engine.preview(run.stack, desired.files, configOf(run), planOptionsOf(run));
    } catch (thrown) {
      // A refresh reads the target: one that cannot be reached fails the run as it fails an apply, with its code.
      const error = ensureError(thrown);
      if (error instanceof AppError && error.code === RunErrors.targetUnreachable) return fail(run, { code: error.code, message: error.message });
      return fail(run, expectedFailure(error));
    }
    const decision = approvalRequired(run.environment, planned.counts, approvalPolicy);
    const receipt: UndecidedPlanReceipt = {
      runId,
      stack: run.stack,
      repository: repositoryOf(run),
      commit: run.desiredState.commit,
      path: desired.path,
      runner: { name: engine.name, version: await engine.version() },
      approvalRequired: decision.required,
      approvalReasons: decision.reasons,
      plan: planned,
      startedAt: startedAt.toISOString(),
      finishedAt: clock.now().toISOString(),
      // Counted from the plan, also when a policy check holds it up: the plan's age is what makes it stale.
      expiresAt: new Date(now() + planExpiryMs(planExpiry, run.environment)).toISOString(),
    };
    // Fail-fast: a GovernanceHost that does not answer throws (the activity retries; the run keeps its stack meanwhile),
    // and when the retries run out the run fails with PROVISIONING.GOVERNANCE_UNAVAILABLE. Never an allow by default.
    const policy = await failFast(ExternalErrors.governanceUnavailable, 'the GovernanceHost', () =>
      services.governance.decide({
        runId,
        tenant: run.tenant,
        environment: run.environment,
        stack: run.stack,
        planDigest: planned.digest,
        steps: planned.steps.map((s) => ({ urn: s.urn, type: s.type, op: s.op })),
      }),
    );
    if (policy.decision === 'pending') return awaitPolicy(run, receipt, policy.checkId);
    if (policy.decision === 'deny') return fail(run, policyDenied(policy));
    return recordPlanned(run, { ...receipt, policy });
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
  async function recordPlanned(run: Run, receipt: PlanReceipt): Promise<RunStep> {
    const runId = run.id;
    const planned = receipt.plan;
    // The receipt is stored at the KnowledgeHost before it is recorded here, so a recorded plan always has its artifact.
    const planArtifact = await failFast(ExternalErrors.knowledgeUnavailable, 'the KnowledgeHost', () => services.knowledge.putReceipt({ runId, kind: 'plan-receipt', content: receipt }));
    const to = receipt.approvalRequired ? 'awaiting-approval' : 'applying';
    const waitingFor: WaitingFor | null = receipt.approvalRequired ? { kind: 'approval', planDigest: planned.digest } : null;
    try {
      await inTransaction(db, async (trx) => {
        await recordPlan(trx, runId, receipt, to, waitingFor, now());
        await insertArtifact(trx, runId, { kind: 'plan-receipt', id: planArtifact, recordedAt: new Date(now()) });
        await deletePolicyWait(trx, runId);
        const resources = planned.steps.map((s) => ({ urn: s.urn, type: s.type, name: s.name, op: s.op }));
        await outbox(trx, [specificationDeclared(run, receipt.repository, { digest: planned.digest, counts: planned.counts, resources })]);
      });
    } catch (thrown) {
      const current = await existing(runId);
      if (current.state !== 'planning') return stepOf(current);
      throw thrown;
    }
    // A run that waits for a person gives its stack back meanwhile: others may plan and apply, and the digest check
    // at apply refuses this plan if they changed what it was made against.
    if (receipt.approvalRequired) {
      await giveBackStack(run);
      return { outcome: 'awaiting-approval', planDigest: planned.digest, ...(receipt.expiresAt !== undefined ? { planExpiresAt: receipt.expiresAt } : {}) };
    }
    return { outcome: 'applying' };
  }

  /**
   * The GovernanceHost decides the plan later: the run keeps the plan and what it waits for, and gives its stack back
   * meanwhile, as a run waiting for its approval does (a review may take hours; the check at apply refuses the plan
   * if others changed the stack meanwhile).
   */
  async function awaitPolicy(run: Run, receipt: UndecidedPlanReceipt, checkId: string): Promise<RunStep> {
    const since = clock.now();
    const waitingFor = { kind: 'policy', checkId, planDigest: receipt.plan.digest, since: since.toISOString() } as const;
    const waits = await inTransaction(db, async (trx) => {
      if (!(await setWaiting(trx, run.id, 'planning', waitingFor, since.getTime()))) return false;
      await savePolicyWait(trx, run.id, { checkId, receipt, requestedAt: since });
      return true;
    });
    await giveBackStack(run);
    if (!waits) return stepOf(await existing(run.id));
    return { outcome: 'awaiting-policy', checkId, planDigest: waitingFor.planDigest, since: waitingFor.since };
  }

  async function checkPolicy(runId: string, timedOut: boolean): Promise<RunStep> {
    const run = await existing(runId);
    const waiting = run.waitingFor;
    if (run.state !== 'planning' || waiting?.kind !== 'policy') return stepOf(run);
    const wait = await retryingContention(() => findPolicyWait(db, runId));
    if (!wait || wait.checkId !== waiting.checkId) return fail(run, { code: RunErrors.internal, message: `the plan waiting for policy check ${waiting.checkId} is not stored` });
    let answer;
    try {
      // Fail-fast as at plan: a GovernanceHost that does not answer throws, and the activity retries.
      answer = await failFast(ExternalErrors.governanceUnavailable, 'the GovernanceHost', () => services.governance.policyCheck(wait.checkId));
    } catch (thrown) {
      const error = ensureError(thrown);
      // A check the service lost will never be decided: waiting out the timeout would only hide that.
      if (error instanceof AppError && error.code === ExternalErrors.policyCheckUnknown) return fail(run, { code: error.code, message: error.message });
      throw error;
    }
    if (answer.decision === 'pending') {
      if (!timedOut) return stepOf(run);
      return fail(run, { code: RunErrors.policyTimeout, message: `the GovernanceHost did not decide policy check ${wait.checkId} of plan ${waiting.planDigest} within ${timings.policyTimeoutMs} ms` });
    }
    if (answer.decision === 'deny') return fail(run, policyDenied(answer));
    return recordPlanned(run, {
      ...wait.receipt,
      policy: answer,
      policyCheck: { checkId: wait.checkId, requestedAt: wait.requestedAt.toISOString(), decidedAt: clock.now().toISOString() },
    });
  }

  /**
   * A pool resize changes the size of what the stack runs now: when another run applied the stack since the resize
   * was taken in, it plans that run's desired state instead of the one it was given. A reconciliation applies again
   * what the stack runs now: that run's desired state, release and config (a promotion or a resize applied while it
   * waited is not undone).
   */
  async function rebase(run: Run): Promise<Run> {
    const current = await retryingContention(() => latestAppliedRun(db, dialect, run.stack));
    if (!current) return run;
    const { repository, commit, path } = current.desiredState;
    const sameState = repository === run.desiredState.repository && commit === run.desiredState.commit && path === run.desiredState.path;
    if (run.reason !== 'reconciliation') {
      if (sameState) return run;
      await retryingContention(() => rebaseRun(db, run.id, current.desiredState, now()));
      return existing(run.id);
    }
    const sameRest = jsonEqual(current.release, run.release) && jsonEqual(current.config ?? null, run.config ?? null);
    if (sameState && sameRest) return run;
    await retryingContention(() => rebaseRun(db, run.id, current.desiredState, now(), { release: current.release, config: current.config }));
    return existing(run.id);
  }

  async function afterApproval(runId: string, timedOut: boolean): Promise<RunStep> {
    const run = await existing(runId);
    if (run.state === 'awaiting-approval') {
      if (timedOut) return fail(run, { code: RunErrors.approvalTimeout, message: `no decision on the plan within ${timings.approvalTimeoutMs} ms` });
      const expired = expiredPlan(run, now());
      return expired ? goStale(run, expired) : stepOf(run);
    }
    if (run.state === 'stale' && timedOut) {
      return fail(run, { code: RunErrors.approvalTimeout, message: `the plan went stale and nobody replanned or rejected the run within ${timings.approvalTimeoutMs} ms` });
    }
    return stepOf(run);
  }

  async function apply(runId: string): Promise<RunStep> {
    const run = await existing(runId);
    if (run.state !== 'applying') {
      // A retry of an apply whose result is recorded but whose receipt or evidence did not reach its service.
      if (run.state === 'applied' || run.state === 'failed') await archiveApply(run);
      return stepOf(run);
    }
    const stack = await takeStack(run);
    if (!stack.taken) return stack.step;
    if (run.waitingFor) await retryingContention(() => setWaiting(db, runId, 'applying', null, now()));
    const receipt = await retryingContention(() => readPlanReceipt(db, runId));
    if (!receipt) return fail(run, { code: RunErrors.internal, message: 'the run has no plan receipt to apply' });
    if (!engine) return fail(run, { code: RunErrors.runnerUnavailable, message: 'the configured IaC runner cannot apply on this host' });
    let desired: DesiredState;
    let current: Plan;
    try {
      desired = await loadDesiredState(run.desiredState, options.desiredState);
    } catch (thrown) {
      return fail(run, permanentFailure(thrown));
    }
    try {
      // Only the state's serial is read here: no refresh (the apply refreshes, and a target that cannot be read
      // fails the apply with its receipt, as for any run).
      current = await engine.preview(run.stack, desired.files, configOf(run), { ...planOptionsOf(run), refresh: false });
    } catch (thrown) {
      return fail(run, expectedFailure(thrown));
    }
    // A plan is an answer about the state it was made against. Once another run applied the stack, or something was
    // imported into it, the approver's reading of the plan no longer holds, even where the steps come out the same.
    if (current.baseSerial !== receipt.plan.baseSerial) {
      return goStale(run, {
        code: RunErrors.planStale,
        message: `the state of stack ${run.stack} changed since the plan was made (serial ${receipt.plan.baseSerial}, now ${current.baseSerial}); nothing was applied; replan the run`,
      });
    }
    // The engine plans again and applies only when that plan's digest is the recorded (and, where required,
    // approved) one; references are resolved inside it, and only there.
    // References are resolved here, inside the apply activity and before the first change: a GovernanceHost that does
    // not answer throws (retried, nothing applied); a Config Platform that does not answer degrades.
    const references = await resolveForApply(receipt.plan);
    const keeper = keepStackLock(run, stack.lock);
    let result;
    try {
      result = await engine.apply(run.stack, desired.files, configOf(run), receipt.plan, references.resolve, { ...planOptionsOf(run), beforeStep: keeper.beforeStep });
    } finally {
      await keeper.stop();
    }
    const applyReceipt: ApplyReceipt = {
      runId,
      stack: run.stack,
      commit: run.desiredState.commit,
      runner: { name: engine.name, version: await engine.version() },
      result,
      ...(references.degraded.length > 0 ? { degraded: references.degraded } : {}),
    };
    const to = result.status === 'applied' ? 'applied' : 'failed';
    const error = result.error ? { code: result.error.code, message: result.error.message } : undefined;
    await inTransaction(db, async (trx) => {
      const at = now();
      await recordApply(trx, runId, applyReceipt, to, error, at);
      const ended: Run = { ...run, state: to, finishedAt: new Date(at), ...(error ? { error } : {}) };
      const repository = repositoryOf(run);
      const events =
        to === 'applied'
          ? [
              specificationApplied(ended, repository, {
                planDigest: result.planDigest,
                resources: result.resources.map((r) => ({
                  urn: r.urn,
                  type: r.type,
                  name: r.name,
                  op: r.op,
                  ...(r.id ? { id: r.id } : {}),
                  // What the resource should hold, for inventory: the inputs the state records (references unresolved).
                  ...(r.inputs && r.op !== 'delete' ? { properties: r.inputs } : {}),
                  // Paths the project itself leaves alone: inventory lists drift there as ignored, never as a finding.
                  ...(r.ignoreChanges && r.op !== 'delete' ? { ignoreChanges: r.ignoreChanges } : {}),
                })),
                outputs: result.outputs,
              }),
              provisioningApplied(ended, repository, { planDigest: result.planDigest, counts: receipt.plan.counts, finishedAt: new Date(at) }),
            ]
          : [provisioningFailed(ended, repository, { code: error?.code ?? RunErrors.internal, reason: error?.message ?? 'the apply failed', finishedAt: new Date(at) })];
      await outbox(trx, events);
    });
    recordRunEnded(to, now() - run.createdAt.getTime());
    await giveBackStack(run);
    await archiveApply(await existing(runId));
    return { outcome: 'ended', state: to };
  }

  /**
   * Each reference of the plan, resolved once: secrets at the GovernanceHost (fail-fast: a service that does not
   * answer throws), config at the Config Platform (degrade: its last known value, noted for the receipt; without one,
   * `PROVISIONING.CONFIG_UNAVAILABLE`). A reference that cannot be resolved makes the engine refuse the apply before
   * its first change. Values stay in memory, for the engine only.
   */
  async function resolveForApply(plan: Plan): Promise<{ resolve: ResolveReferences; degraded: DegradedReference[] }> {
    const values = new Map<string, { value: JsonValue } | { error: AppError }>();
    const degraded: DegradedReference[] = [];
    for (const reference of plan.references) {
      if ('secretRef' in reference) {
        try {
          values.set(referenceKey(reference), { value: await failFast(ExternalErrors.governanceUnavailable, 'the GovernanceHost', () => services.governance.resolveSecret(reference.secretRef)) });
        } catch (thrown) {
          const error = ensureError(thrown);
          if (!(error instanceof AppError) || error.kind === 'unavailable') throw error;
          values.set(referenceKey(reference), { error });
        }
      } else {
        values.set(referenceKey(reference), await resolveConfig(reference.configRef, degraded));
      }
    }
    const resolve: ResolveReferences = (reference) => {
      const entry = values.get(referenceKey(reference));
      if (!entry) return Promise.reject(new AppError('PROVISIONING.REFERENCE_UNRESOLVED', 'not-found', `the reference ${referenceKey(reference)} is not in the approved plan`));
      return 'error' in entry ? Promise.reject(entry.error) : Promise.resolve(entry.value);
    };
    return { resolve, degraded };
  }

  async function resolveConfig(reference: string, degraded: DegradedReference[]): Promise<{ value: JsonValue } | { error: AppError }> {
    let answer: JsonValue;
    try {
      answer = await services.configPlatform.resolve(reference);
    } catch (thrown) {
      const error = ensureError(thrown);
      // The platform answered that it has no such reference: no last known value stands in for that.
      if (error instanceof AppError && error.kind === 'not-found') return { error };
      const last = await services.lastKnownConfig.get(reference);
      if (!last) {
        return {
          error: new AppError(ExternalErrors.configUnavailable, 'unavailable', `the Config Platform did not answer for ${reference} and there is no last known value of it; nothing was applied`, {
            reference,
          }),
        };
      }
      degraded.push({ ref: reference, reason: `the Config Platform did not answer (${error instanceof AppError ? error.code : 'error'})`, lastKnownAt: last.at.toISOString() });
      return { value: last.value };
    }
    await services.lastKnownConfig.put(reference, answer, clock.now());
    return { value: answer };
  }

  /**
   * Stores an ended apply's receipt at the KnowledgeHost and its evidence at the GovernanceHost, each once (both
   * answer the same id for the same content). Fail-fast: a service that does not answer throws, and the activity's
   * retry comes back here; the run's detail shows which of the two it has.
   */
  async function archiveApply(run: Run): Promise<void> {
    const detail = await retryingContention(() => findRunDetail(db, run.id, { kind: 'all' }));
    if (!detail?.applyReceipt) return;
    const has = (kind: string) => detail.artifacts.find((a) => a.kind === kind)?.id;
    let receiptArtifact = has('apply-receipt');
    if (!receiptArtifact) {
      const content = detail.applyReceipt;
      receiptArtifact = await failFast(ExternalErrors.knowledgeUnavailable, 'the KnowledgeHost', () => services.knowledge.putReceipt({ runId: run.id, kind: 'apply-receipt', content }));
      const id = receiptArtifact;
      await retryingContention(() => insertArtifact(db, run.id, { kind: 'apply-receipt', id, recordedAt: clock.now() }));
    }
    if (has('audit-evidence')) return;
    const applyArtifact = receiptArtifact;
    const result = detail.applyReceipt.result;
    const approvedBy = detail.decision?.decision === 'approved' ? detail.decision.by : undefined;
    const evidence = await failFast(ExternalErrors.governanceUnavailable, 'the GovernanceHost', () =>
      services.governance.recordEvidence({
        runId: run.id,
        tenant: run.tenant,
        environment: run.environment.id,
        stack: run.stack,
        planDigest: result.planDigest,
        ...(approvedBy !== undefined ? { approvedBy } : {}),
        result: result.status,
        ...(result.error ? { errorCode: result.error.code } : {}),
        applyReceiptArtifact: applyArtifact,
        at: (run.finishedAt ?? clock.now()).toISOString(),
      }),
    );
    await retryingContention(() => insertArtifact(db, run.id, { kind: 'audit-evidence', id: evidence, recordedAt: clock.now() }));
  }

  /** Counts a run that an operator ended, once its transaction committed. */
  function counted(run: Run): Run {
    recordRunEnded(run.state, (run.finishedAt ?? clock.now()).getTime() - run.createdAt.getTime());
    return run;
  }

  /** Ends a run as failed with its one `ProvisioningFailed`, and gives its stack back. */
  async function fail(run: Run, failure: Failure): Promise<RunStep> {
    const ended = await inTransaction(db, async (trx) => {
      const at = now();
      if (!(await transitionRun(trx, run.id, 'failed', at, { error: failure, waitingFor: null, finished: true }))) return false;
      await deletePolicyWait(trx, run.id);
      const failed: Run = { ...run, state: 'failed', error: failure, finishedAt: new Date(at) };
      await outbox(trx, [provisioningFailed(failed, repositoryOf(run), { code: failure.code, reason: failure.message, finishedAt: new Date(at) })]);
      return true;
    });
    if (ended) recordRunEnded('failed', now() - run.createdAt.getTime());
    await giveBackStack(run);
    return ended ? { outcome: 'ended', state: 'failed' } : stepOf(await existing(run.id));
  }

  async function failRun(runId: string, reason: string): Promise<RunStep> {
    const run = await existing(runId);
    if (isTerminal(run.state)) return stepOf(run);
    // A step that gave up because a fail-fast service did not answer ends the run with that service's code.
    return fail(run, { code: unavailableCodeIn(reason) ?? RunErrors.internal, message: reason });
  }

  // ---- operators --------------------------------------------------------------------------------------------------

  async function visible(trx: Transaction<ProvisioningTables>, tenants: TenantFilter, runId: string): Promise<Run> {
    const run = await findRun(trx, runId, tenants);
    if (!run) throw new AppError('PROVISIONING.RUN_NOT_FOUND', 'not-found', `there is no run ${runId}`, { runId });
    return run;
  }

  const notAwaitingApproval = (run: Run) =>
    new AppError('PROVISIONING.RUN_NOT_AWAITING_APPROVAL', 'conflict', `run ${run.id} is ${run.state}, not awaiting approval`, { runId: run.id, state: run.state });

  const planStale = (run: Run, reason: Failure) =>
    new AppError(RunErrors.planStale, 'conflict', reason.message, {
      runId: run.id,
      state: 'stale',
      ...(run.planDigest !== undefined ? { planDigest: run.planDigest } : {}),
      ...(run.planExpiresAt ? { planExpiresAt: run.planExpiresAt.toISOString() } : {}),
    });

  async function approve(tenants: TenantFilter, runId: string, approval: { planDigest: string; by: string; comment?: string }): Promise<Run> {
    // Who may approve is the ControlPlaneApi's to say (fail-fast: when it does not answer, nobody approves).
    const target = await retryingContention(() => findRun(db, runId, tenants));
    if (target) {
      const environment = await failFast(ExternalErrors.controlPlaneUnavailable, 'the ControlPlaneApi', () => services.controlPlane.environment(target.tenant, target.environment.id));
      if (!environment || (environment.approvers !== undefined && !environment.approvers.includes(approval.by))) {
        throw new AppError(ExternalErrors.approverNotAllowed, 'forbidden', `${approval.by} may not approve plans of environment ${target.environment.id}`, {
          runId,
          environment: target.environment.id,
          by: approval.by,
        });
      }
    }
    const outcome = await inTransaction(db, async (trx): Promise<{ approved: Run } | { stale: Run; reason: Failure }> => {
      const run = await visible(trx, tenants, runId);
      if (run.state === 'stale') return { stale: run, reason: run.error ?? { code: RunErrors.planStale, message: 'the plan is stale' } };
      if (run.state !== 'awaiting-approval') throw notAwaitingApproval(run);
      const at = now();
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
        throw new AppError('PROVISIONING.PLAN_DIGEST_MISMATCH', 'conflict', 'the approval names another plan than the one recorded for this run', {
          runId,
          approvedDigest: approval.planDigest,
          planDigest: run.planDigest,
        });
      }
      if (!(await transitionRun(trx, runId, 'applying', at, { waitingFor: null }))) throw notAwaitingApproval(await visible(trx, tenants, runId));
      await insertDecision(trx, runId, { decision: 'approved', planDigest: approval.planDigest, by: approval.by, ...(approval.comment !== undefined ? { comment: approval.comment } : {}), at: new Date(at) });
      return { approved: await visible(trx, tenants, runId) };
    });
    if ('stale' in outcome) throw planStale(outcome.stale, outcome.reason);
    return outcome.approved;
  }

  async function reject(tenants: TenantFilter, runId: string, rejection: { reason: string; by: string }): Promise<Run> {
    return inTransaction(db, async (trx) => {
      const run = await visible(trx, tenants, runId);
      // A plan waiting for its policy check is a plan an operator may decide against without waiting for the check.
      const policyWait = run.state === 'planning' && run.waitingFor?.kind === 'policy' ? run.waitingFor : undefined;
      if (run.state !== 'awaiting-approval' && run.state !== 'stale' && !policyWait) throw notAwaitingApproval(run);
      const at = now();
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
      const rejected = await visible(trx, tenants, runId);
      await outbox(trx, [provisioningFailed(rejected, repositoryOf(run), { code: error.code, reason: error.message, finishedAt: new Date(at) })]);
      return rejected;
    }).then(counted);
  }

  async function replan(tenants: TenantFilter, runId: string, by: string): Promise<Run> {
    return inTransaction(db, async (trx) => {
      const run = await visible(trx, tenants, runId);
      const notStale = (state: RunState) => new AppError('PROVISIONING.RUN_NOT_STALE', 'conflict', `run ${runId} is ${state}; only a stale run can be replanned`, { runId, state });
      if (run.state !== 'stale') throw notStale(run.state);
      if (!(await replacePlan(trx, run, { id: ids.next('plan'), by, now: now() }))) throw notStale((await visible(trx, tenants, runId)).state);
      return visible(trx, tenants, runId);
    });
  }

  async function cancel(tenants: TenantFilter, runId: string, by: string): Promise<Run> {
    return inTransaction(db, async (trx) => {
      const run = await visible(trx, tenants, runId);
      const refuse = (state: RunState) =>
        new AppError('PROVISIONING.RUN_NOT_CANCELABLE', 'conflict', `run ${runId} is ${state}; only a queued run can be canceled`, { runId, state });
      if (run.state !== 'queued') throw refuse(run.state);
      const at = now();
      const error = { code: RunErrors.canceled, message: `canceled by ${by}` };
      if (!(await transitionRun(trx, runId, 'canceled', at, { error, waitingFor: null, finished: true }))) throw refuse((await visible(trx, tenants, runId)).state);
      const canceled = await visible(trx, tenants, runId);
      await outbox(trx, [provisioningFailed(canceled, repositoryOf(run), { code: error.code, reason: error.message, finishedAt: new Date(at) })]);
      return canceled;
    }).then(counted);
  }

  const notLocked = (stack: string) => new AppError('PROVISIONING.STACK_NOT_LOCKED', 'not-found', `nothing holds the lock of stack ${stack}`, { stack });

  async function stackLock(tenants: TenantFilter, stack: string): Promise<StackLock> {
    const lock = await retryingContention(() => getStackLock(db, stack));
    if (!lock) throw notLocked(stack);
    // A tenant sees a lock only when one of its runs holds it: stacks of other tenants stay invisible.
    if (tenants.kind === 'one' && !(await retryingContention(() => findRun(db, lock.holderRun, tenants)))) throw notLocked(stack);
    return lock;
  }

  async function unlockStack(stack: string, request: { by: string; reason: string; version?: number }): Promise<BrokenStackLock> {
    const at = now();
    const lock = await inTransaction(db, (trx) =>
      breakStackLock(trx, dialect, { id: ids.next('lockbreak'), stack, by: request.by, reason: request.reason, now: at, ...(request.version !== undefined ? { version: request.version } : {}) }),
    );
    if (lock) return { lock, by: request.by, reason: request.reason, brokenAt: new Date(at) };
    const current = await retryingContention(() => getStackLock(db, stack));
    if (current && request.version !== undefined) {
      throw new AppError('PROVISIONING.STACK_LOCK_VERSION_MISMATCH', 'conflict', `the lock of stack ${stack} is at version ${current.version}, not ${request.version}; nothing was broken`, {
        stack,
        version: current.version,
        requestedVersion: request.version,
      });
    }
    throw notLocked(stack);
  }

  async function nextWaitingRun(of: { readonly runId: string } | { readonly stack: string }): Promise<string | undefined> {
    const stack = 'stack' in of ? of.stack : (await read(of.runId))?.stack;
    if (stack === undefined) return undefined;
    const lock = await retryingContention(() => getStackLock(db, stack));
    if (lock && lock.expiresAt.getTime() > now()) return undefined;
    return retryingContention(() => firstWaitingRun(db, dialect, stack));
  }

  async function getRun(tenants: TenantFilter, runId: string): Promise<RunDetail> {
    const detail = await retryingContention(() => findRunDetail(db, runId, tenants));
    if (!detail) throw new AppError('PROVISIONING.RUN_NOT_FOUND', 'not-found', `there is no run ${runId}`, { runId });
    return detail;
  }

  async function list(tenants: TenantFilter, query: { environment?: string; state?: RunState; limit: number; cursor?: string }): Promise<RunPage> {
    const after = query.cursor === undefined ? undefined : decodeCursor(query.cursor);
    if (query.cursor !== undefined && after === undefined) throw new AppError('REQUEST.INVALID_CURSOR', 'validation', 'the cursor is not one this API gave out');
    const items = await retryingContention(() =>
      listRuns(db, dialect, tenants, {
        limit: query.limit,
        ...(query.environment !== undefined ? { environment: query.environment } : {}),
        ...(query.state !== undefined ? { state: query.state } : {}),
        ...(after !== undefined ? { after } : {}),
      }),
    );
    const last = items[items.length - 1];
    return { items, ...(items.length === query.limit && last ? { nextCursor: encodeCursor(last.id) } : {}) };
  }

  return {
    timings,
    intake,
    poolResize,
    reconcile,
    plan,
    afterApproval,
    checkPolicy,
    apply,
    failRun,
    approve,
    reject,
    replan,
    cancel,
    stackLock,
    unlockStack,
    nextWaitingRun,
    getRun,
    listRuns: list,
    getRejection: (messageId) => retryingContention(() => findRejection(db, messageId)),
  };
}

/** A run's stack config: what the run sets over the stack file (a pool resize's `poolSize`). */
function configOf(run: Run): ConfigOverrides {
  return run.config ?? {};
}

/**
 * How a run plans, the same for its plan and its apply (the apply re-plans, and the digests must agree): a
 * reconciliation against what the target holds, with its proposal's ignore rules; every other run against the
 * recorded state.
 */
function planOptionsOf(run: Run): PlanOptions {
  return run.reconciliation ? { refresh: true, ignore: run.reconciliation.ignore } : {};
}

/** The run a promotion makes: its fields as the message gives them. */
function promotionRun(p: PromotionApproved): Omit<NewRun, 'id' | 'state' | 'error' | 'now'> {
  return {
    key: p.promotionId,
    tenant: p.tenantId,
    environment: p.environment,
    release: p.release,
    stack: p.desiredState.stack,
    desiredState: { repository: p.desiredState.repository, commit: p.desiredState.commit, path: p.desiredState.path },
    requestedBy: p.requestedBy,
    reason: 'promotion',
  };
}

/**
 * An expected failure (an AppError) that retrying cannot cure, as the run's error. Transient ones (`unavailable`:
 * a Git remote that did not answer) and anything unexpected are thrown, so the step is retried.
 */
function permanentFailure(thrown: unknown): Failure {
  const error = ensureError(thrown);
  if (error instanceof AppError && error.kind !== 'unavailable') return { code: error.code, message: error.message };
  throw error;
}

/** Plan errors of the engine (`IAC.*`) end the run; anything else is a fault and is thrown. */
function expectedFailure(thrown: unknown): Failure {
  const error = ensureError(thrown);
  if (error instanceof AppError && error.kind !== 'unavailable' && error.kind !== 'internal') return { code: error.code, message: error.message };
  throw error;
}

/**
 * Calls a fail-fast service: its own expected answers (an AppError that is not `unavailable`, such as an unknown
 * reference) pass; anything else, a service that did not answer, becomes `code` (kind `unavailable`), which the
 * caller throws on so the step is retried and, when the retries run out, the run fails with that code.
 */
async function failFast<T>(code: string, service: string, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (thrown) {
    const error = ensureError(thrown);
    if (error instanceof AppError && (error.code === code || (error.kind !== 'unavailable' && error.kind !== 'internal'))) throw error;
    throw serviceUnavailable(code, service, error);
  }
}

/** The ids a malformed message may still carry, for its rejection record and event. */
function readableIds(body: unknown): { promotionId?: string; tenantId?: string } {
  let value = body;
  if (typeof value === 'string') {
    try {
      value = JSON.parse(value) as unknown;
    } catch {
      return {};
    }
  }
  if (typeof value !== 'object' || value === null) return {};
  const { promotionId, tenantId } = value as { promotionId?: unknown; tenantId?: unknown };
  const usable = (v: unknown) => typeof v === 'string' && v.length > 0 && v.length <= 200;
  return { ...(usable(promotionId) ? { promotionId: promotionId as string } : {}), ...(usable(tenantId) ? { tenantId: tenantId as string } : {}) };
}
