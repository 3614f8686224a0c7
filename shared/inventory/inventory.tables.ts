import type { OutboxTables } from '../platform/bus/outbox';

/** Row types of the inventory module; they never leave the repository. Times are epoch milliseconds. */

/**
 * One environment that provisioning has applied to: its desired resources (from the last `SpecificationApplied`),
 * the state of its drift checks, and its latest findings. The observed resources themselves live in Table storage.
 */
export interface InventoryEnvironmentTable {
  /** Unique within its tenant only: the row's key is (tenant_id, environment_id). */
  environment_id: string;
  tenant_id: string;
  name: string;
  tier: string;
  /** With the tenant and `stack`, the stack it is bound to (`tenant/project/stack`). */
  project: string;
  stack: string;
  release_name: string;
  release_version: string;
  /** JSON `Resources` (drift.ts): urn → { type, properties }, references left unresolved. */
  desired: string;
  /** JSON `IgnoreRule[]`: the project's own `ignoreChanges` of the desired resources. */
  project_rules: string;
  desired_run_id: string;
  /** When the run that applied `desired` finished; an older `SpecificationApplied` arriving late changes nothing. */
  desired_at: number;
  last_run_id: string | null;
  last_run_state: string | null;
  last_run_at: number | null;
  /** Set while scans are paused by an operator: who, why, since when. */
  scan_disabled_by: string | null;
  scan_disabled_reason: string | null;
  scan_disabled_at: number | null;
  /** When the timer should scan this environment next. */
  next_scan_at: number;
  /** The last scan that ran or was skipped (its outcome and reason are in the scan records). */
  last_scan_at: number | null;
  last_scan_outcome: string | null;
  last_scan_reason: string | null;
  /** The last observation that succeeded. */
  last_observed_at: number | null;
  /** Set when an observation failed and cleared by the next that succeeds; `stale_reason` says why. */
  stale_since: number | null;
  stale_reason: string | null;
  /** in-sync or drifted, as of `last_observed_at`; the view turns it unknown when stale or overdue. */
  drift_status: string | null;
  /** JSON `DriftReport` of the last observation. */
  report: string | null;
  /** sha-256 of the last observed resources as stored: an unchanged observation writes no Table rows. */
  observed_digest: string | null;
}

/**
 * A recorded ignore rule (drift.ts `IgnoreRule`). Deleting one keeps the row (`deleted_at`, `deleted_by`), so
 * findings it once silenced can still be explained.
 */
export interface InventoryIgnoreRuleTable {
  id: string;
  environment_id: string;
  tenant_id: string;
  /** `type` or `urn`. */
  scope_kind: string;
  scope_value: string;
  path: string;
  reason: string;
  owner: string;
  expires_at: number;
  holds_on_apply: number;
  created_by: string;
  created_at: number;
  deleted_by: string | null;
  deleted_at: number | null;
  /** The POST's Idempotency-Key, and a sha-256 of what it asked for: the key used for another rule is refused. */
  idempotency_key: string | null;
  request_digest: string | null;
}

/**
 * A reconciliation proposal. At most one per environment is `open` (a unique filtered index), and it is found by
 * the fingerprint of its findings, so two scans of one environment at once cannot open two.
 */
export interface InventoryProposalTable {
  id: string;
  environment_id: string;
  tenant_id: string;
  fingerprint: string;
  /** open | accepted | dismissed | superseded | resolved */
  status: string;
  /** JSON: the findings grouped by resource, and the ignored ones. */
  findings: string;
  /** JSON: what re-applying the desired state would do. */
  plan: string;
  created_at: number;
  last_seen_at: number;
  updated_at: number;
  superseded_by: string | null;
  run_id: string | null;
  decided_by: string | null;
  /** Why it was dismissed, superseded, resolved or reopened. */
  note: string | null;
}

/**
 * A message of inventory's subscription that could not be taken in, keyed by its messageId, with what could be read
 * of it and why (intake.service.ts). Its inbox entry says `rejected`.
 */
export interface InventoryRejectionTable {
  message_id: string;
  event_id: string | null;
  event_type: string | null;
  tenant_id: string | null;
  code: string;
  reason: string;
  /** JSON: `FieldProblem[]`, the fields that are wrong. */
  problems: string;
  received_at: number;
}

export interface InventoryTables extends OutboxTables {
  inventory_environments: InventoryEnvironmentTable;
  inventory_ignore_rules: InventoryIgnoreRuleTable;
  inventory_proposals: InventoryProposalTable;
  inventory_rejections: InventoryRejectionTable;
}
