import type { Generated } from 'kysely';
import type { InboxTable } from '../platform/bus/bus.tables';
import type { OutboxTables } from '../platform/bus/outbox';

/** Row types of the provisioning module; they never leave the repository. Times are epoch milliseconds. */

/**
 * The lock that lets one run at a time act on a stack. It is a lease: a host that dies stops renewing it and it
 * lapses at `expires_at`, so another run takes it over without anyone stepping in. One per `tenant/project/stack`.
 */
export interface ProvisioningStackLockTable {
  tenant_id: string;
  project: string;
  stack: string;
  holder_run: string;
  /** The host (instance) that took the lock for the run; for operators, and for telling hosts apart in logs. */
  holder_host: string;
  acquired_at: number;
  expires_at: number;
  /** Bumped on every acquisition: a holder that lost the lock meanwhile can be told apart from the current one. */
  version: number;
}

/** An operator breaking a stack lock, kept for the audit trail. */
export interface ProvisioningLockBreakTable {
  id: string;
  tenant_id: string;
  project: string;
  stack: string;
  holder_run: string;
  holder_host: string;
  broken_by: string;
  reason: string;
  broken_at: number;
}

/**
 * One run per promotion. The receipts are write-once: the repository sets each only where it is still null, in the
 * same statement as the state change it belongs to, so a receipt once written never changes.
 */
export interface ProvisioningRunTable {
  /** Insertion order; among one stack's runs, their FIFO order. */
  seq: Generated<number>;
  id: string;
  promotion_id: string;
  tenant_id: string;
  environment_id: string;
  environment_name: string;
  tier: string;
  release_name: string;
  release_version: string;
  /**
   * The `name` of the stack's `Pulumi.yaml`: with the tenant and the stack, the stack's identity. Empty for a run
   * rejected before its project could be read.
   */
  project: string;
  stack: string;
  /** As the promotion gave it (it may carry credentials: views and events show it redacted). */
  repository: string;
  commit_sha: string;
  project_path: string;
  requested_by: string;
  /** `promotion`, `pool-resize` or `reconciliation`. */
  reason: string;
  /** JSON of the run model's `PoolResize` for a pool-resize run; null for other runs. */
  origin: string | null;
  /** JSON of the run model's `Reconciliation` for a reconciliation run; null for other runs. */
  reconciliation: string | null;
  /** JSON of the config set over the stack file's values; null when none. */
  config: string | null;
  state: string;
  /** `stack-lock`, `approval`, `replan` or `policy` while the run waits for one; null otherwise. */
  waiting_kind: string | null;
  /** JSON of the run model's `WaitingFor`. */
  waiting_for: string | null;
  plan_digest: string | null;
  /** Until when the recorded plan may be approved. */
  plan_expires_at: number | null;
  /** 1 or 0 once planned. */
  approval_required: number | null;
  /** JSON of the plan receipt; write-once. */
  plan_receipt: string | null;
  /** JSON of the apply receipt; write-once. */
  apply_receipt: string | null;
  error_code: string | null;
  error_message: string | null;
  superseded_by: string | null;
  /** When an apply in the host began its engine's changes (null: not begun, or the apply runs as a runner job). */
  apply_began_at: number | null;
  created_at: number;
  updated_at: number;
  finished_at: number | null;
}

/** The decision on a run that needed approval: one per run, bound to the digest of the plan it decided on. */
export interface ProvisioningApprovalTable {
  run_id: string;
  /** `approved` or `rejected`. */
  decision: string;
  plan_digest: string;
  decided_by: string;
  /** The approver's comment, or the reason of a rejection. */
  comment: string | null;
  decided_at: number;
}

/**
 * A plan that went stale and was replaced by a replan: its receipt as it was written, and the decision on it if
 * one was recorded, moved here unchanged so the run's current plan can be recorded (receipts are never rewritten).
 */
export interface ProvisioningReplacedPlanTable {
  id: string;
  run_id: string;
  plan_digest: string;
  /** JSON of the plan receipt. */
  plan_receipt: string;
  /** JSON of the decision on it (an approval that came before the stack moved on); null when none. */
  decision: string | null;
  stale_code: string;
  stale_message: string;
  replanned_by: string;
  replanned_at: number;
}

/** A message on the promotions queue that was not a PromotionApproved: no run exists for it, this row says why. */
export interface ProvisioningRejectionTable {
  message_id: string;
  /** Whatever of the promotion could be read (for the event and for operators); null when unreadable. */
  promotion_id: string | null;
  tenant_id: string | null;
  code: string;
  reason: string;
  /** JSON array of `{field, message}`. */
  problems: string;
  received_at: number;
}

/**
 * What a run stored at an external service, by the id the service gave: its receipts at the KnowledgeHost
 * (`plan-receipt`, `apply-receipt`) and its apply's evidence at the GovernanceHost (`audit-evidence`).
 */
export interface ProvisioningRunArtifactTable {
  run_id: string;
  kind: string;
  external_id: string;
  recorded_at: number;
}

/**
 * A plan waiting for the GovernanceHost to decide its policy check: the plan receipt as it will be recorded (without
 * the decision) once the check allows it. One per run; gone once the run records its plan or ends.
 */
export interface ProvisioningPolicyCheckTable {
  run_id: string;
  /** The check's id at the GovernanceHost. */
  check_id: string;
  plan_digest: string;
  /** JSON of the plan receipt without `policy`. */
  plan_receipt: string;
  requested_at: number;
}

/**
 * The stack an environment of a tenant is bound to, from its first run: a promotion for the environment naming
 * another stack is refused (`PROVISIONING.STACK_MISMATCH`).
 */
export interface ProvisioningEnvironmentStackTable {
  tenant_id: string;
  environment_id: string;
  project: string;
  stack: string;
  /** The run that bound it. */
  bound_by_run: string;
  bound_at: number;
  /** The target the environment lives on, bound with its stack; null for bindings made before targets were bound. */
  target: string | null;
}

/** An approval refused because whoever asked for the run tried to give it (four eyes), kept for the audit trail. */
export interface ProvisioningRefusedApprovalTable {
  id: string;
  run_id: string;
  refused_by: string;
  plan_digest: string;
  code: string;
  reason: string;
  refused_at: number;
}

/**
 * A plan or apply of a run, dispatched to the runner pool of the run's target: `queued` until an agent claims it,
 * `running` while the agent's heartbeats keep its lease (`lease_expires_at`), then `done` (its outcome accepted),
 * `lost` (its lease lapsed) or `canceled` (the run ended or was superseded). Only the hash of its token is kept.
 */
export interface ProvisioningRunnerJobTable {
  id: string;
  run_id: string;
  tenant_id: string;
  kind: 'plan' | 'apply';
  pool: string;
  target: string;
  state: 'queued' | 'running' | 'done' | 'lost' | 'canceled';
  /** JSON RunnerJobSpec without lease times. */
  spec: string;
  fencing_token: number;
  token_hash: string | null;
  agent: string | null;
  /** The capacity lease (kind `runner`) the job holds while it runs, and its fencing token. */
  lease_id: string | null;
  lease_fencing: number | null;
  created_at: number;
  claimed_at: number | null;
  lease_expires_at: number | null;
  finished_at: number | null;
  /** JSON RunnerJobOutcome. */
  outcome: string | null;
  /** JSON array of the config references resolved from last known values at claim (apply jobs). */
  degraded: string | null;
  /** The tail of the job's log, as its agent reported it and the host recorded its target calls. */
  log: string;
  /** When the host let the apply job's agent begin changing the target; null while it has changed nothing. */
  apply_began_at: number | null;
  /**
   * Until when the job may run (its claim plus its target's maximum duration for its kind); null while queued. Its
   * lease never reaches past it, so a job still running then is lost, however its agent beats.
   */
  deadline_at: number | null;
}

/** A stack whose apply lost its runner: what the target holds is not what the state says, so its next plan refreshes. */
export interface ProvisioningStackRefreshTable {
  tenant_id: string;
  project: string;
  stack: string;
  run_id: string;
  reason: string;
  since: number;
}

/** An agent of a pool as the host last heard from it (a claim poll or a heartbeat), and the job it runs. */
export interface ProvisioningRunnerAgentTable {
  pool: string;
  agent: string;
  job_id: string | null;
  last_seen: number;
}

/**
 * A promotion run's report to the DeliveryHost (delivery-reports.service.ts): written once with the run's terminal
 * event, sent until acknowledged. The report itself is built from the ended run when it is sent.
 */
export interface ProvisioningDeliveryReportTable {
  tenant_id: string;
  run_id: string;
  created_at: number;
  /** Epoch ms before which it is not sent again (the back-off after a failed send). */
  next_attempt_at: number;
  attempts: number;
  /** The relay pass sending it now, and until when that claim holds (a crashed pass's claim lapses). */
  claimed_by: string | null;
  claimed_until: number | null;
  /** When the DeliveryHost acknowledged it, and the id it answered; null while it is still to be sent. */
  acknowledged_at: number | null;
  report_id: string | null;
  last_error: string | null;
}

export interface ProvisioningTables extends OutboxTables {
  provisioning_delivery_reports: ProvisioningDeliveryReportTable;
  provisioning_runner_agents: ProvisioningRunnerAgentTable;
  provisioning_runner_jobs: ProvisioningRunnerJobTable;
  provisioning_stack_refresh: ProvisioningStackRefreshTable;
  provisioning_refused_approvals: ProvisioningRefusedApprovalTable;
  provisioning_environment_stacks: ProvisioningEnvironmentStackTable;
  provisioning_policy_checks: ProvisioningPolicyCheckTable;
  provisioning_run_artifacts: ProvisioningRunArtifactTable;
  provisioning_stack_locks: ProvisioningStackLockTable;
  provisioning_lock_breaks: ProvisioningLockBreakTable;
  provisioning_runs: ProvisioningRunTable;
  provisioning_approvals: ProvisioningApprovalTable;
  provisioning_replaced_plans: ProvisioningReplacedPlanTable;
  provisioning_rejections: ProvisioningRejectionTable;
  inbox: InboxTable;
}
