import type { WaitReason } from '../capacity/lease-queue';
import { qualifiedStackName, type StackRef } from '../platform/iac/stack-ref';
import type { EnvironmentTier } from './promotion';
import type { Reconciliation } from './reconciliation';

/**
 * Provisioning runs: the pure model (no I/O). A run is one promotion on one stack, from intake to a final state.
 *
 *   queued → planning → awaiting-approval → applying → applied
 *                     ↘─────────────────↗          ↘ failed
 *   queued → superseded | canceled;   awaiting-approval → rejected;   intake of an invalid promotion → rejected
 *   awaiting-approval | applying → stale → planning (replan) | rejected | failed
 *   planning (waiting for a policy check) → rejected
 *
 * A queued run waits for its stack (the lock is taken to plan); a run that needs approval gives the stack up while
 * it waits for the decision and takes it again to apply. A plan the GovernanceHost decides on later (a policy
 * check, e.g. a person's review) keeps the run planning, without its stack, until the check is decided. A plan goes stale when it expired before its approval, or
 * when the stack's state moved on before its apply: a stale run waits for an operator to replan (a fresh plan that
 * needs its own approval) or to reject it.
 */
export const RUN_STATES = ['queued', 'planning', 'awaiting-approval', 'applying', 'stale', 'applied', 'failed', 'rejected', 'superseded', 'canceled'] as const;
export type RunState = (typeof RUN_STATES)[number];

export const TERMINAL_RUN_STATES: readonly RunState[] = ['applied', 'failed', 'rejected', 'superseded', 'canceled'];

/**
 * Every allowed move. Anything else is a bug or a race lost to another writer: the repository changes a run's state
 * only with a conditional update on `statesBefore(to)`, so a disallowed move changes nothing.
 */
const TRANSITIONS: Readonly<Record<RunState, readonly RunState[]>> = {
  // failed: the run could not start (its orchestration failed before planning).
  queued: ['planning', 'superseded', 'canceled', 'failed'],
  // failed: the desired state or the program could not be planned, or its policy check denied it or took too long.
  // rejected: an operator rejected a plan that waits for its policy check.
  planning: ['awaiting-approval', 'applying', 'failed', 'rejected'],
  // failed: the approval did not come in time. stale: the plan expired before it was approved.
  'awaiting-approval': ['applying', 'rejected', 'failed', 'stale'],
  // stale: the stack's state changed after the plan was made (an approved run that waited for the stack while
  // another run applied, or an import); nothing was applied.
  applying: ['applied', 'failed', 'stale'],
  // planning: an operator asked for a fresh plan. failed: nobody decided in time.
  stale: ['planning', 'rejected', 'failed'],
  applied: [],
  failed: [],
  rejected: [],
  superseded: [],
  canceled: [],
};

export function isTerminal(state: RunState): boolean {
  return TERMINAL_RUN_STATES.includes(state);
}

export function canTransition(from: RunState, to: RunState): boolean {
  return TRANSITIONS[from].includes(to);
}

/** The states a run may be in for a move to `to`: what the conditional update of a run row checks. */
export function statesBefore(to: RunState): RunState[] {
  return RUN_STATES.filter((from) => canTransition(from, to));
}

/**
 * What a run that is not moving waits for. Shown to operators ("queued behind run X", "the stack lock held by run
 * Y", "an approval of digest D", "the policy check C of digest D").
 *
 * BREAKING-CHANGE SHAPE: stored as JSON on the run and shown by the HTTP API.
 */
export type WaitingFor =
  | {
      readonly kind: 'stack-lock';
      /** `tenant/project/stack`. */
      readonly stack: string;
      /** The run holding the stack's lock, when one does. */
      readonly heldBy?: string;
      /** An earlier run of the stack that goes first (FIFO), when the lock is free but that run is waiting too. */
      readonly queuedBehind?: string;
    }
  | { readonly kind: 'approval'; readonly planDigest: string }
  /** A stale run: an operator replans it (`POST /runs/{id}/replan`) or rejects it. */
  | { readonly kind: 'replan'; readonly planDigest: string }
  /**
   * A planning run whose plan the GovernanceHost took in and decides on later (`checkId` is its id there); the plan
   * is recorded once the check allows it. `since`: when the check was asked for (ISO-8601 UTC).
   */
  | { readonly kind: 'policy'; readonly checkId: string; readonly planDigest: string; readonly since: string }
  /**
   * The run's plan or apply job waits for an agent of the target's runner pool (`position` is added by the views).
   * `collectingUntil` (ISO-8601 UTC, internal): a host is collecting the job's finished outcome until then, so no
   * other takes it up meanwhile (the result endpoint collects at once; the run's deadline timer may fire meanwhile).
   */
  /**
   * A job in a runner pool's queue: `position` (1 = next) and `reason`, in the capacity queue's vocabulary
   * (`QUEUED_BEHIND` with its position; next in line, `POOL_FULL` with the pool's jobs running against its agents online).
   */
  | { readonly kind: 'runner'; readonly pool: string; readonly jobId: string; readonly position?: number; readonly reason?: WaitReason; readonly collectingUntil?: string };

/** The step counts approval policy looks at; a plan's `counts` has them. */
export interface PlanCounts {
  readonly create: number;
  readonly update: number;
  readonly replace: number;
  readonly delete: number;
  readonly same: number;
}

export interface ApprovalDecision {
  readonly required: boolean;
  /** Why approval is required, for the receipt and the operator: `production tier`, `2 replace steps`, … */
  readonly reasons: readonly string[];
}

/**
 * When a plan needs a person's approval, per environment. The default rule asks it for every plan of some tiers and
 * for any plan that destroys something (a delete or a replace): destroyed data does not come back. An environment
 * (by id, else by name) may say otherwise: `always` asks it for every plan of that environment (or, false, for none
 * by its tier), `onDeleteOrReplace` overrides the destroy rule.
 */
export interface ApprovalPolicy {
  /** Tiers whose every plan needs approval. Example: `['production']`. */
  readonly tiers: readonly EnvironmentTier[];
  readonly onDeleteOrReplace: boolean;
  /**
   * Tiers where a second person must approve: whoever asked for the run (its `requestedBy`, or an operator who
   * replanned it) may not approve it. Example: `['production']`.
   */
  readonly secondPersonTiers: readonly EnvironmentTier[];
  /** By environment id or name. Example: `{ 'env-dev-1': { always: true }, sandbox: { onDeleteOrReplace: false } }`. */
  readonly byEnvironment: Readonly<Record<string, EnvironmentApprovalRule>>;
}

export interface EnvironmentApprovalRule {
  readonly always?: boolean;
  readonly onDeleteOrReplace?: boolean;
  /** Whether a second person must approve here, whatever the tier says. */
  readonly secondPerson?: boolean;
}

/** Production plans, and plans that delete or replace anything, in every environment; production by a second person. */
export const DEFAULT_APPROVAL_POLICY: ApprovalPolicy = { tiers: ['production'], onDeleteOrReplace: true, secondPersonTiers: ['production'], byEnvironment: {} };

/** Whether the environment's plans must be approved by someone other than whoever asked for the run (four eyes). */
export function secondPersonRequired(environment: { readonly id: string; readonly name: string; readonly tier: EnvironmentTier }, policy: ApprovalPolicy = DEFAULT_APPROVAL_POLICY): boolean {
  const rule: EnvironmentApprovalRule = policy.byEnvironment[environment.id] ?? policy.byEnvironment[environment.name] ?? {};
  return rule.secondPerson ?? policy.secondPersonTiers.includes(environment.tier);
}

export function approvalRequired(
  environment: { readonly id: string; readonly name: string; readonly tier: EnvironmentTier },
  counts: PlanCounts,
  policy: ApprovalPolicy = DEFAULT_APPROVAL_POLICY,
): ApprovalDecision {
  const rule: EnvironmentApprovalRule = policy.byEnvironment[environment.id] ?? policy.byEnvironment[environment.name] ?? {};
  const reasons: string[] = [];
  if (rule.always === true) reasons.push(`required for environment ${environment.name}`);
  else if (rule.always === undefined && policy.tiers.includes(environment.tier)) reasons.push(`${environment.tier} tier`);
  if (rule.onDeleteOrReplace ?? policy.onDeleteOrReplace) {
    if (counts.delete > 0) reasons.push(`${counts.delete} delete step${counts.delete === 1 ? '' : 's'}`);
    if (counts.replace > 0) reasons.push(`${counts.replace} replace step${counts.replace === 1 ? '' : 's'}`);
  }
  return { required: reasons.length > 0, reasons };
}

/** A run as the use cases see it. Times are Dates; receipts are read separately (they can be large). */
export interface Run {
  readonly id: string;
  /** Insertion order across all runs; among one stack's runs it is their FIFO order. */
  readonly seq: number;
  readonly promotionId: string;
  readonly tenant: string;
  readonly environment: { readonly id: string; readonly name: string; readonly tier: EnvironmentTier };
  readonly release: { readonly name: string; readonly version: string };
  /**
   * The `name` of the project's `Pulumi.yaml`, read at intake: with the tenant and `stack`, the stack's identity
   * (`stackOf`). Empty only for a run rejected before its project could be read.
   */
  readonly project: string;
  /** The stack's own name, as the promotion gave it. */
  readonly stack: string;
  readonly desiredState: { readonly repository: string; readonly commit: string; readonly path: string };
  readonly requestedBy: string;
  /** What made the run: a promotion, a pool resize of the capacity module, or an accepted reconciliation proposal. */
  readonly reason: RunReason;
  /** Set only for a pool-resize run: the event it came from. */
  readonly poolResize?: PoolResize;
  /** Set only for a reconciliation run: the proposal it carries out, and the ignore rules it plans with. */
  readonly reconciliation?: Reconciliation;
  /**
   * Config set over the stack file's values (`poolSize` of a pool resize). Values or references only as the
   * promotion or event gave them; never a resolved secret.
   */
  readonly config?: Readonly<Record<string, string | number | boolean>>;
  readonly state: RunState;
  readonly waitingFor?: WaitingFor;
  /** The digest of the recorded plan, once planned: what an approval must name. */
  readonly planDigest?: string;
  /** Until when the recorded plan may be approved; an approval after it is refused as stale. */
  readonly planExpiresAt?: Date;
  readonly approvalRequired?: boolean;
  /** Why the run failed, was rejected, superseded or canceled, or why its plan went stale. */
  readonly error?: { readonly code: string; readonly message: string };
  /** A superseded run points at the newer run of the same environment and stack. */
  readonly supersededBy?: string;
  /** When the host's engine began the run's apply (an apply in the host only; a runner job is its own record). */
  readonly applyBeganAt?: Date;
  readonly createdAt: Date;
  readonly updatedAt: Date;
  readonly finishedAt?: Date;
}

/** The run's stack: `tenant/project/stack`, whose lock, state and resources are that tenant's alone. */
export function stackOf(run: Pick<Run, 'tenant' | 'project' | 'stack'>): StackRef {
  return { tenant: run.tenant, project: run.project, stack: run.stack };
}

/**
 * `reconciliation`: an operator accepted an inventory reconciliation proposal; the run applies the stack's latest
 * applied desired state again, planned against what the target holds (refresh), with the proposal's ignore rules.
 */
export const RUN_REASONS = ['promotion', 'pool-resize', 'reconciliation'] as const;
export type RunReason = (typeof RUN_REASONS)[number];

/**
 * The `PoolResizeRequested` a pool-resize run came from.
 *
 * BREAKING-CHANGE SHAPE: stored with the run and shown by the HTTP API and in the run's events.
 */
export interface PoolResize {
  readonly pool: string;
  readonly eventId: string;
  readonly fromCapacity: number;
  readonly toCapacity: number;
}

/** The config key a pool-resize run sets to the pool's new capacity; the stack's project declares and uses it. */
export const POOL_SIZE_CONFIG_KEY = 'poolSize';

/**
 * How long a plan may wait for its approval, per environment: an environment's id, else its name, else the default.
 * A plan approved later would apply to a world its approver never saw.
 */
export interface PlanExpiryPolicy {
  readonly defaultMs: number;
  /** By environment id or name. Example: `{ production: 4 * 3600_000 }`. */
  readonly byEnvironment: Readonly<Record<string, number>>;
}

export const DEFAULT_PLAN_EXPIRY_MS = 24 * 60 * 60 * 1000;

export function planExpiryMs(policy: PlanExpiryPolicy, environment: { readonly id: string; readonly name: string }): number {
  return policy.byEnvironment[environment.id] ?? policy.byEnvironment[environment.name] ?? policy.defaultMs;
}

/** How often a run waiting for a policy check asks the GovernanceHost for its decision, by default. */
export const DEFAULT_POLICY_POLL_MS = 5_000;

/**
 * How long a run waits for a policy check by default: a check may be a person's review, so as long as an approval.
 */
export const DEFAULT_POLICY_TIMEOUT_MS = 24 * 60 * 60 * 1000;

/** Error codes a run ends with that are not the engine's or the desired state's own. */
export const RunErrors = {
  invalidPromotion: 'PROVISIONING.INVALID_PROMOTION',
  invalidPoolResize: 'PROVISIONING.INVALID_POOL_RESIZE',
  /**
   * A pool (or a reconciliation) names a stack no run has applied (for that tenant and environment): where its
   * project lives is not known.
   */
  unknownStack: 'PROVISIONING.UNKNOWN_STACK',
  /** A reconciliation request that is malformed, or whose ignore rule paths cannot be read. */
  invalidReconciliation: 'PROVISIONING.INVALID_RECONCILIATION',
  /** The target did not answer: an apply to it, or the refresh of a reconciliation's plan. */
  targetUnreachable: 'PROVISIONING.TARGET_UNREACHABLE',
  unknownTenant: 'PROVISIONING.UNKNOWN_TENANT',
  /** The promotion's environment is bound to another stack (by its first run): the promotion is refused. */
  stackMismatch: 'PROVISIONING.STACK_MISMATCH',
  /** The environment lives on another target than the one its first run bound it to: the promotion is refused. */
  targetMismatch: 'PROVISIONING.TARGET_MISMATCH',
  /**
   * The promotion names another tier than the ControlPlaneApi gives its environment: the tier decides approval and
   * four eyes, so it is the control plane's, never the message's (only a tier the control plane leaves unspecified
   * lets the message's stand).
   */
  tierMismatch: 'PROVISIONING.TIER_MISMATCH',
  /** The ControlPlaneApi puts the environment on a target this installation does not have. */
  unknownTarget: 'PROVISIONING.UNKNOWN_TARGET',
  superseded: 'PROVISIONING.SUPERSEDED',
  canceled: 'PROVISIONING.CANCELED',
  rejected: 'PROVISIONING.REJECTED',
  approvalTimeout: 'PROVISIONING.APPROVAL_TIMEOUT',
  /** Whoever asked for the run tried to approve it where a second person must (`ApprovalPolicy.secondPersonTiers`). */
  selfApproval: 'PROVISIONING.SELF_APPROVAL',
  /** The GovernanceHost did not decide a policy check of the plan in time (`RunTimings.policyTimeoutMs`). */
  policyTimeout: 'PROVISIONING.POLICY_TIMEOUT',
  /** The plan expired before its approval, or the stack's state changed between plan and apply. */
  planStale: 'PROVISIONING.PLAN_STALE',
  /** The run lost its stack lock during the apply (its lease lapsed or an operator broke it); the apply stopped. */
  stackLockLost: 'PROVISIONING.STACK_LOCK_LOST',
  /** No runner can run the step: none of the target's pool claimed its job in time, or this host has no engine. */
  runnerUnavailable: 'PROVISIONING.RUNNER_UNAVAILABLE',
  /**
   * The runner of an apply went silent or ran past its maximum duration (its job's lease lapsed): the run fails,
   * never applied a second time.
   */
  runnerLost: 'PROVISIONING.RUNNER_LOST',
  /**
   * The run's plan jobs were lost (their runners went silent or ran past their maximum duration) more often than a
   * plan is dispatched again (`MAX_PLAN_REDISPATCHES`).
   */
  runnerTimeout: 'PROVISIONING.RUNNER_TIMEOUT',
  /**
   * The host stopped (killed, crashed) while its own engine applied the plan: what it changed is not known, so the
   * run fails, never applied a second time (an apply in the host; a runner job's is `RUNNER_LOST`).
   */
  applyInterrupted: 'PROVISIONING.APPLY_INTERRUPTED',
  /**
   * The plan a runner reported is not the job's: of another project or stack, listing a reference the job's project
   * does not name, or with an update plan that would do what its steps do not. The run fails; nothing of the plan is
   * recorded.
   */
  planNotOfJob: 'PROVISIONING.PLAN_NOT_OF_JOB',
  /**
   * What an apply's runner reported is not the approved plan carried out: another plan digest or stack, a step the
   * plan never had, another op than the plan's, an `applied` result missing one of the plan's steps, or "nothing
   * applied" after the host recorded that the apply began. The run fails with a receipt of what the runner reported,
   * the stack is marked to refresh before its next plan, and the host logs a security event.
   */
  applyDiverged: 'PROVISIONING.APPLY_DIVERGED',
  /** The orchestration gave up on a step after its retries (a store or engine fault). */
  internal: 'PROVISIONING.INTERNAL',
} as const;

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
  | { readonly outcome: 'ended'; readonly state: RunState }
  /**
   * The step runs as a runner job: wait for its result (the runner-result event), at the latest `until` (ISO-8601:
   * its claim deadline while queued, its lease's expiry while it runs), then collect it.
   */
  | { readonly outcome: 'running'; readonly jobId: string; readonly kind: 'plan' | 'apply'; readonly until: string };

/** Where a run stands, for a step that found it already moved on (a retried or replayed step). */
export function stepOf(run: Run): RunStep {
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
  return { outcome: 'waiting', waitingFor: run.waitingFor ?? { kind: 'stack-lock', stack: qualifiedStackName(stackOf(run)) } };
}
