/**
 * The fields of the API's views that the console reads. openapi.json describes requests but not yet response bodies,
 * so these are written from the views the host answers with (shared/provisioning/run-queries.service.ts,
 * shared/inventory/environments; functions/capacity/lease-view.ts, shared/capacity/capacity.context.ts
 * `CapacitySummary`, shared/provisioning/runner-pools.service.ts, functions/provisioning/stacks.ts): a field the console reads that the host stops sending shows as missing, never
 * as a wrong value, since every optional field is read as optional.
 */
export type RunState = 'queued' | 'planning' | 'awaiting-approval' | 'applying' | 'stale' | 'applied' | 'failed' | 'rejected' | 'superseded' | 'canceled';

export interface Page<T> {
  readonly items: readonly T[];
  readonly nextCursor?: string;
}

export interface PlanStep {
  readonly urn: string;
  readonly name: string;
  readonly type: string;
  /** create, update, replace, delete or same (another, from a newer host, is shown as it is). */
  readonly op: string;
  readonly changedPaths: readonly string[];
  /** What the state held at each changed path (masked as inputs are); absent in plans recorded before it. */
  readonly oldValues?: Record<string, unknown>;
  readonly inputs?: Record<string, unknown>;
  readonly protect?: boolean;
}

export interface PlanReceipt {
  readonly startedAt: string;
  readonly finishedAt: string;
  readonly expiresAt?: string;
  readonly approvalRequired?: boolean;
  readonly approvalReasons?: readonly string[];
  readonly runner?: { readonly name: string; readonly version?: string; readonly agent?: string; readonly engineMs?: number; readonly jobId?: string };
  readonly plan: { readonly digest: string; readonly steps: readonly PlanStep[]; readonly counts: Record<string, number>; readonly outputs?: Record<string, unknown> };
  readonly policy?: { readonly decision: string; readonly policies: readonly { readonly name?: string; readonly decision?: string; readonly message?: string }[] };
}

export interface ApplyReceipt {
  readonly runner?: PlanReceipt['runner'];
  readonly result: { readonly status: string; readonly serial?: number; readonly resources?: readonly { readonly urn: string; readonly op: string; readonly status: string }[] };
  readonly startedAt?: string;
  readonly finishedAt?: string;
}

/** What a run waits for (shared/provisioning/run.ts `WaitingFor`). */
export type WaitingFor =
  | { readonly kind: 'stack-lock'; readonly stack: string; readonly heldBy?: string; readonly queuedBehind?: string }
  | { readonly kind: 'approval'; readonly planDigest: string }
  | { readonly kind: 'replan'; readonly planDigest: string }
  | { readonly kind: 'policy'; readonly checkId: string; readonly planDigest: string; readonly since: string }
  | { readonly kind: 'runner'; readonly pool: string; readonly jobId: string; readonly position?: number };

export interface Run {
  readonly runId: string;
  readonly reason: string;
  readonly tenant: string;
  readonly environment: { readonly id: string; readonly name: string; readonly tier: string };
  readonly release?: { readonly name: string; readonly version: string };
  readonly project: string;
  readonly stack: string;
  readonly qualifiedStack: string;
  readonly desiredState?: { readonly repository: string; readonly commit: string; readonly path: string };
  readonly requestedBy?: string;
  readonly state: RunState;
  readonly waitingFor?: WaitingFor;
  readonly planDigest?: string;
  readonly planExpiresAt?: string;
  readonly approvalRequired?: boolean;
  readonly createdAt: string;
  readonly updatedAt: string;
  readonly finishedAt?: string;
  readonly error?: { readonly code: string; readonly message: string };
  readonly planReceipt?: PlanReceipt;
  readonly applyReceipt?: ApplyReceipt;
  readonly decision?: { readonly decision: string; readonly planDigest?: string; readonly by: string; readonly comment?: string; readonly at: string };
  readonly artifacts?: readonly { readonly kind: string; readonly id: string; readonly recordedAt: string }[];
}

export interface RunEvent {
  readonly eventId: string;
  readonly type: string;
  readonly time: string;
  readonly publishedAt?: string;
}

export interface Environment {
  readonly id: string;
  readonly name: string;
  readonly tier: string;
  readonly tenantId: string;
  readonly qualifiedStack: string;
  readonly desiredRelease?: { readonly name: string; readonly version: string; readonly runId: string; readonly appliedAt: string };
  readonly lastRun?: { readonly id: string; readonly state: RunState; readonly at: string };
  readonly drift?: { readonly status: string; readonly stale: boolean; readonly lastObservedAt?: string; readonly lastScanAt?: string; readonly findings?: number };
  readonly scanning?: { readonly intervalSeconds?: number; readonly nextScanAt?: string; readonly lastOutcome?: string };
}

/** One finding on a resource (drift.ts): what differs, how badly. */
export interface Finding {
  /** missing, replaced, modified or unmanaged. */
  readonly kind: string;
  /** high, medium or low. */
  readonly severity: string;
  readonly urn: string;
  readonly type: string;
  readonly path?: readonly string[];
}

/** A resource's findings, at the worst severity among them. */
export interface ResourceFindings {
  readonly urn: string;
  readonly type: string;
  readonly severity: string;
  readonly findings: readonly Finding[];
}

export interface Drift {
  readonly environment: Environment;
  readonly findings: readonly ResourceFindings[];
  readonly scans: readonly { readonly scanId: string; readonly trigger: string; readonly startedAt: string; readonly outcome: string; readonly driftStatus?: string; readonly findings?: number; readonly reason?: string }[];
}

export interface Proposal {
  readonly id: string;
  readonly environmentId: string;
  readonly tenantId: string;
  /** open, accepted, dismissed, superseded or resolved. */
  readonly status: string;
  readonly findings: readonly ResourceFindings[];
  readonly plan: { readonly steps: readonly { readonly urn: string; readonly type: string; readonly op: string; readonly paths?: readonly string[] }[]; readonly leftAlone: readonly unknown[]; readonly keptByRules: readonly unknown[] };
  readonly createdAt: string;
  readonly updatedAt: string;
  readonly runId?: string;
}

export interface IgnoreRule {
  readonly id: string;
  readonly scope: { readonly type: string } | { readonly urn: string };
  readonly path: string;
  readonly reason: string;
  readonly owner: string;
  readonly expiresAt: string;
  readonly holdsOnApply: boolean;
}

/** GET /runtime-cloud/capacity: pools are the installation's; `tenants` holds only the tenants the caller may see. */
export interface CapacitySummary {
  readonly kinds: readonly { readonly kind: string; readonly capacity: number; readonly used: number; readonly free: number }[];
  readonly pools: readonly CapacityPool[];
  readonly tenants?: readonly TenantUse[];
}

export interface CapacityPool {
  readonly id: string;
  readonly kind: string;
  readonly target: string;
  readonly capacity: number;
  readonly min: number;
  readonly max: number;
  readonly labels: Record<string, string>;
  /** The provisioning stack that sizes the pool, `tenant/project/stack`. */
  readonly iacStack?: string;
  readonly used: number;
  readonly free: number;
}

/** A tenant's use of each kind against its edition's quota; `limit` null: the edition grants none of the kind. */
export interface TenantUse {
  readonly tenant: string;
  readonly edition: string;
  readonly usage: readonly { readonly kind: string; readonly used: number; readonly limit: number | null }[];
}

/** `state` is the effective state: an active lease past its expiry is expired before the sweep marks it. */
export interface Lease {
  readonly leaseId: string;
  readonly tenant: string;
  readonly kind: string;
  readonly pool: string;
  readonly units: number;
  readonly holder: string;
  readonly fencingToken: number;
  readonly grantedAt: string;
  readonly expiresAt: string;
  readonly renewedAt?: string;
  readonly state: 'active' | 'released' | 'expired';
}

export interface RunnerPool {
  readonly pool: string;
  readonly target: string;
  readonly engine: string;
  readonly capacityPool: string;
  readonly tenants: readonly string[];
  readonly agentsOnline: number;
  readonly jobsRunning: number;
  readonly jobsWaiting: number;
}

export interface RunnerAgent {
  readonly agent: string;
  readonly online: boolean;
  readonly jobId?: string;
  readonly lastHeartbeat: string;
}

/** GET …/stacks/{project}/{stack}/lock; `version` is the lock's fencing token, and what unlock names. */
export interface StackLock {
  readonly stack: string;
  readonly holderRun: string;
  readonly holderHost: string;
  readonly acquiredAt: string;
  readonly expiresAt: string;
  readonly version: number;
  readonly expired: boolean;
}
