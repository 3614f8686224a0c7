import type { PolicyDecision } from './external-services.client';
import type { ApplyResult, Plan } from '../platform/iac/plan';
import { type Run } from './run';

/**
 * The receipts of a run and what goes with them: the plan receipt and the apply receipt (write-once, shown by the
 * HTTP API), the engine and agent that made them, the decision on a plan, plans replaced by a replan, refused
 * approvals, and the artifacts a run stored at external services. Pure shapes: the store reads and writes them in
 * receipts.repository.ts.
 */

/**
 * The plan receipt: what was planned, from which commit, by which runner, and whether it needs approval.
 *
 * BREAKING-CHANGE SHAPE: stored write-once with the run and shown by the HTTP API; the `plan` inside is the engine's
 * `Plan` (its own schema, `planSchema`), which is what an apply carries out. References appear as references.
 */
export interface PlanReceipt {
  readonly runId: string;
  /** The stack's own name; `qualifiedStack` is its identity, `tenant/project/stack` (absent in older receipts). */
  readonly stack: string;
  readonly qualifiedStack?: string;
  /** Without credentials. */
  readonly repository: string;
  readonly commit: string;
  readonly path: string;
  readonly runner: ReceiptEngine;
  /** The plan read the target first (a reconciliation; a stack whose last apply lost its runner). */
  readonly refreshed?: boolean;
  readonly approvalRequired: boolean;
  readonly approvalReasons: readonly string[];
  readonly plan: Plan;
  /** ISO-8601 UTC. */
  readonly startedAt: string;
  readonly finishedAt: string;
  /** ISO-8601 UTC: an approval after this is refused as stale (`PROVISIONING.PLAN_STALE`). */
  readonly expiresAt?: string;
  /** The GovernanceHost's policy decision (an allow: a denied plan is not recorded, the run fails). */
  readonly policy?: PolicyDecision;
  /**
   * Set when the GovernanceHost decided later (it answered `pending`): its check id, when the run asked for the
   * decision and when it found it made (ISO-8601 UTC). The plan was made at `finishedAt`, before the check.
   */
  readonly policyCheck?: { readonly checkId: string; readonly requestedAt: string; readonly decidedAt: string };
}

/** A plan receipt before the GovernanceHost's decision: what a run waiting for a policy check keeps. */
export type UndecidedPlanReceipt = Omit<PlanReceipt, 'policy' | 'policyCheck'>;

/** A run's plan waiting for the GovernanceHost to decide its policy check. */
export interface PolicyWait {
  readonly checkId: string;
  readonly receipt: UndecidedPlanReceipt;
  readonly requestedAt: Date;
}

/**
 * The engine that made a plan or an apply (its name and version), and when an agent ran it as a job, the agent and
 * the job. Serialized as the receipt's `runner` member (a breaking-change shape, so the name stays there).
 */
export interface ReceiptEngine {
  readonly name: string;
  readonly version: string;
  readonly agent?: string;
  readonly jobId?: string;
  /** The engine's own time in the runner job, ms. */
  readonly engineMs?: number;
}

/**
 * The apply receipt: the engine's result (per-resource results, outputs, status, error code, times) and who ran it.
 *
 * BREAKING-CHANGE SHAPE: stored write-once with the run's final state and shown by the HTTP API.
 */
export interface ApplyReceipt {
  readonly runId: string;
  /** As in the plan receipt. */
  readonly stack: string;
  readonly qualifiedStack?: string;
  readonly commit: string;
  readonly runner: ReceiptEngine;
  readonly result: ApplyResult;
  /**
   * The Config Platform references the apply used a last known value for, because the platform did not answer:
   * the reference, why, and when that value was current (ISO-8601 UTC). Absent when none.
   */
  readonly degraded?: readonly DegradedReference[];
  /**
   * The apply's runner went silent (its job's lease lapsed): what the host last heard of it and what its job changed
   * on the target as the host recorded it. The result's resources are `unknown` where the runner reported nothing.
   */
  readonly runnerLost?: { readonly agent?: string; readonly lastHeardAt?: string; readonly log: string };
  /**
   * The apply's agent reported what the approved plan is not (`PROVISIONING.APPLY_DIVERGED`): why, and what it
   * reported, as it reported it (its result, or that the state had moved). The result's resources are `unknown`.
   */
  readonly diverged?: { readonly reason: string; readonly reported: ApplyResult | { readonly stateMoved: { readonly baseSerial: number } } };
}

/** BREAKING-CHANGE SHAPE: part of the apply receipt. */
export interface DegradedReference {
  readonly ref: string;
  readonly reason: string;
  readonly lastKnownAt: string;
}

/** What a run stored at an external service, by the service's id. */
export interface RunArtifact {
  /** `plan-receipt` and `apply-receipt` at the KnowledgeHost; `audit-evidence` at the GovernanceHost. */
  readonly kind: 'plan-receipt' | 'apply-receipt' | 'audit-evidence';
  readonly id: string;
  readonly recordedAt: Date;
}

export interface Decision {
  readonly decision: 'approved' | 'rejected';
  readonly planDigest: string;
  readonly by: string;
  readonly comment?: string;
  readonly at: Date;
}

/** A plan of the run that went stale and was replaced by a replan, with the decision on it if there was one. */
export interface ReplacedPlan {
  readonly planDigest: string;
  readonly planReceipt: PlanReceipt;
  readonly decision?: Decision;
  /** Why it went stale. */
  readonly stale: { readonly code: string; readonly message: string };
  readonly replannedBy: string;
  readonly replannedAt: Date;
}

/** An approval refused because its approver had asked for the run where a second person must approve. */
export interface RefusedApproval {
  readonly by: string;
  readonly planDigest: string;
  readonly code: string;
  readonly reason: string;
  readonly at: Date;
}

export interface RunDetail {
  readonly run: Run;
  /** Approvals refused as self-approvals, oldest first. */
  readonly refusedApprovals: readonly RefusedApproval[];
  readonly planReceipt?: PlanReceipt;
  readonly applyReceipt?: ApplyReceipt;
  readonly decision?: Decision;
  /** Earlier plans of the run, oldest first (a run has them only when it was replanned). */
  readonly replacedPlans: readonly ReplacedPlan[];
  /** Its receipts' artifact ids and its apply's evidence id, oldest first. */
  readonly artifacts: readonly RunArtifact[];
}
