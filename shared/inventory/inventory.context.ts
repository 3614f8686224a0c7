import type { EventBodyReader } from '../platform/bus/event-bodies';
import type { Kysely, Transaction } from 'kysely';
import type { TenantFilter } from '../platform/auth/auth';
import type { NewEvent } from '../platform/bus/events';
import { appendToOutbox } from '../platform/bus/outbox';
import { AppError } from '../platform/errors/app-error';
import { decodeCursor, encodeCursor } from '../platform/http/cursor';
import { qualifiedStackName, type StackRef } from '../platform/iac/stack-ref';
import type { SqlStore } from '../platform/sql/database';
import type { SqlDialect } from '../platform/sql/dialect';
import { retryingContention } from '../platform/sql/transaction';
import type { Clock, Ids } from '../platform/time/clock';
import type { DriftReport, IgnoreRule } from './drift';
import { driftStatusAt, scanIntervalMs, type EnvironmentKey, type DriftStatusView, type ReconciliationPlan, type ResourceFindings } from './environment';
import type { ProposalStatus } from './proposal';
import { findEnvironment, findEnvironments, findProposal, inventoryDb, listIgnoreRules, type EnvironmentRow, type ProposalRow, type RecordedIgnoreRule } from './inventory.repository';
import type { InventoryTables } from './inventory.tables';
import type { ObservedInventory, ScanRecord } from './observed-inventory.repository';
import type { ObservationScope, Observer } from './observer';
import { problemError } from '../platform/errors/catalogue';
import { InventoryErrors } from './errors';
import { isUniqueViolation } from '../platform/sql/dialect';

/** `?limit=&cursor=` of a list. */
export interface PageRequest {
  readonly limit: number;
  readonly cursor?: string;
}

/** A page of a list: `nextCursor` when there is more. */
export interface Page<T> {
  readonly items: T[];
  readonly nextCursor?: string;
}

/** An environment as the HTTP API shows it. Serialized shape: changing it is a breaking change. */
export interface EnvironmentView {
  readonly id: string;
  readonly name: string;
  readonly tier: string;
  readonly tenantId: string;
  readonly project: string;
  readonly stack: string;
  /** `tenant/project/stack`. */
  readonly qualifiedStack: string;
  readonly desiredRelease: { readonly name: string; readonly version: string; readonly runId: string; readonly appliedAt: string };
  readonly lastRun?: { readonly id: string; readonly state: string; readonly at: string };
  readonly drift: DriftStatusView;
  readonly scanning: {
    readonly intervalSeconds: number;
    readonly nextScanAt: string;
    readonly lastOutcome?: string;
    readonly lastReason?: string;
    readonly paused?: { readonly by: string; readonly reason: string; readonly at: string };
  };
}

/** A proposal as the HTTP API shows it. Serialized shape: changing it is a breaking change. */
export interface ProposalView {
  readonly id: string;
  readonly environmentId: string;
  readonly tenantId: string;
  readonly status: ProposalStatus;
  readonly fingerprint: string;
  readonly findings: readonly ResourceFindings[];
  readonly ignored: DriftReport['ignored'];
  readonly plan: ReconciliationPlan;
  readonly createdAt: string;
  readonly lastSeenAt: string;
  readonly updatedAt: string;
  readonly supersededBy?: string;
  readonly runId?: string;
  readonly decidedBy?: string;
  readonly note?: string;
}

/** What a reconciliation run needs from an accepted proposal (provisioning's `reconcile`). */
export interface ReconciliationRequest {
  readonly proposalId: string;
  readonly tenant: string;
  readonly environmentId: string;
  readonly project: string;
  readonly stack: string;
  readonly requestedBy: string;
  /** The environment's unexpired rules that hold on apply: the run leaves those paths as they are. */
  readonly ignore: readonly Pick<IgnoreRule, 'scope' | 'path'>[];
}

/** An environment's drift as the HTTP API shows it. Serialized shape: changing it is a breaking change. */
export interface DriftView {
  readonly environment: EnvironmentView;
  readonly findings: readonly ResourceFindings[];
  readonly ignored: DriftReport['ignored'];
  readonly expiredRules: readonly string[];
  readonly fingerprint?: string;
  readonly openProposalId?: string;
  /** The newest scans, newest first: what ran, what failed and what was skipped, with why. */
  readonly scans: readonly ScanRecord[];
}

export interface InventoryServiceOptions {
  readonly store: SqlStore;
  readonly tables: ObservedInventory;
  /**
   * The observer of each target, by target id (deps.ts: as the target's kind says, `observersByTarget`). An
   * environment on a target without one is not observed: its scans fail (`INVENTORY.TARGET_NOT_OBSERVED`) and it
   * is stale. Example: `new Map([['local', createLocalCloudObserver({ cloud })]])`.
   */
  readonly observers: ReadonlyMap<string, Observer>;
  readonly clock: Clock;
  readonly ids: Ids;
  readonly scanInterval: { readonly defaultMs: number; readonly byEnvironment: Readonly<Record<string, number>> };
  readonly scanConcurrency: number;
  readonly observeTimeoutMs: number;
  /** Where an environment's resources live, beyond its stack (Azure and Kubernetes scopes by tenant and environment). */
  readonly scopeOf: (environment: { readonly tenant: string; readonly id: string; readonly tier: string; readonly stack: StackRef }) => ObservationScope | Promise<ObservationScope>;
  /** The run applying to the stack right now, if any: a scan then is skipped (it would see a half-applied stack). */
  readonly applyingRun: (stack: StackRef) => Promise<string | undefined>;
  /** Whether this host knows the tenant (the capacity module administers tenants): a desired state of another is refused. */
  readonly knowsTenant: (tenant: string) => Promise<boolean>;
  /**
   * Where claim-checked events' data is read (shared/platform/bus/event-bodies.ts); without it such an event is
   * refused, naming the missing store. Example: `blobEventBodies(config.outbox.bodiesConnection)`.
   */
  readonly eventBodies?: EventBodyReader;
}

/**
 * What every inventory use case works with: the SQL store of environments, rules and proposals, the observed
 * inventory in Table storage, the targets' observers, the clock and ids, and the scan settings. Built once per host by
 * `createInventoryService`; the use case files (specification, scan, environments, ignore-rules, proposals) take
 * it first.
 */
export interface InventoryContext {
  readonly db: Kysely<InventoryTables>;
  readonly dialect: SqlDialect;
  readonly tables: ObservedInventory;
  readonly observers: InventoryServiceOptions['observers'];
  readonly clock: Clock;
  readonly ids: Ids;
  readonly scanInterval: InventoryServiceOptions['scanInterval'];
  readonly scanConcurrency: number;
  readonly observeTimeoutMs: number;
  readonly scopeOf: InventoryServiceOptions['scopeOf'];
  readonly applyingRun: InventoryServiceOptions['applyingRun'];
  readonly knowsTenant: InventoryServiceOptions['knowsTenant'];
  readonly eventBodies: InventoryServiceOptions['eventBodies'];
}

export function createInventoryContext(options: InventoryServiceOptions): InventoryContext {
  const { store, ...rest } = options;
  return { ...rest, eventBodies: options.eventBodies, db: inventoryDb(store.db), dialect: store.dialect };
}

export function nowOf(ctx: InventoryContext): number {
  return ctx.clock.now().getTime();
}

export function intervalOf(ctx: InventoryContext, row: EnvironmentRow): number {
  return scanIntervalMs(ctx.scanInterval, { id: row.environment_id, name: row.name });
}

/** Writes events to the outbox in the caller's transaction. */
export async function appendEvents(ctx: InventoryContext, trx: Transaction<InventoryTables>, events: readonly NewEvent[]): Promise<void> {
  await appendToOutbox(trx, events, ctx.clock, ctx.ids);
}

/** The stack an environment is bound to: `tenant/project/stack`. */
export function stackOfRow(row: EnvironmentRow): StackRef {
  return { tenant: row.tenant_id, project: row.project, stack: row.stack };
}

/** The key of an environment's row. */
export function keyOf(row: EnvironmentRow): EnvironmentKey {
  return { tenant: row.tenant_id, id: row.environment_id };
}

/**
 * The environment a request names by id, among those the caller's tenants may see. A caller of all tenants (a
 * PlatformAdmin) naming an id that two tenants use is asked to name the tenant: 409 `INVENTORY.ENVIRONMENT_AMBIGUOUS`.
 */
export async function existingEnvironment(ctx: InventoryContext, tenants: TenantFilter, environmentId: string): Promise<EnvironmentRow> {
  const rows = await retryingContention(() => findEnvironments(ctx.db, environmentId, tenants));
  if (rows.length > 1) {
    const owners = rows.map((r) => r.tenant_id);
    throw problemError(InventoryErrors.environmentAmbiguous, `environment ${environmentId} exists in tenants ${owners.join(', ')}; name the tenant (X-Tenant-Id or ?tenant=)`, {
      environmentId,
      tenants: owners,
    });
  }
  const row = rows[0];
  if (!row) throw problemError(InventoryErrors.environmentNotFound, `no environment ${environmentId} has been applied to`, { environmentId });
  return row;
}

/** The environment of a key inventory holds itself (a scan's, a proposal's). */
export async function environmentByKey(ctx: InventoryContext, key: EnvironmentKey): Promise<EnvironmentRow> {
  const row = await retryingContention(() => findEnvironment(ctx.db, key));
  if (!row) throw problemError(InventoryErrors.environmentNotFound, `no environment ${key.id} has been applied to`, { environmentId: key.id });
  return row;
}

export function environmentView(ctx: InventoryContext, row: EnvironmentRow): EnvironmentView {
  const intervalMs = intervalOf(ctx, row);
  const num = (v: number | null) => (v === null ? undefined : Number(v));
  const iso = (v: number | null) => new Date(Number(v)).toISOString();
  const paused = row.scan_disabled_by !== null ? { by: row.scan_disabled_by, reason: row.scan_disabled_reason ?? '', at: Number(row.scan_disabled_at) } : undefined;
  const drift = driftStatusAt(
    {
      intervalMs,
      desiredAt: Number(row.desired_at),
      ...(num(row.last_scan_at) !== undefined ? { lastScanAt: num(row.last_scan_at)! } : {}),
      ...(num(row.last_observed_at) !== undefined ? { lastObservedAt: num(row.last_observed_at)! } : {}),
      ...(num(row.stale_since) !== undefined ? { staleSince: num(row.stale_since)! } : {}),
      ...(row.stale_reason !== null ? { staleReason: row.stale_reason } : {}),
      ...(row.drift_status === 'in-sync' || row.drift_status === 'drifted' ? { observedStatus: row.drift_status } : {}),
      ...(paused ? { scanDisabled: paused } : {}),
    },
    nowOf(ctx),
  );
  return {
    id: row.environment_id,
    name: row.name,
    tier: row.tier,
    tenantId: row.tenant_id,
    // The stack's own name; with the project and the tenant, its identity (`qualifiedStack`).
    project: row.project,
    stack: row.stack,
    qualifiedStack: qualifiedStackName(stackOfRow(row)),
    desiredRelease: { name: row.release_name, version: row.release_version, runId: row.desired_run_id, appliedAt: iso(row.desired_at) },
    ...(row.last_run_id !== null ? { lastRun: { id: row.last_run_id, state: row.last_run_state ?? '', at: iso(row.last_run_at) } } : {}),
    drift,
    scanning: {
      intervalSeconds: Math.round(intervalMs / 1000),
      nextScanAt: iso(row.next_scan_at),
      ...(row.last_scan_outcome !== null ? { lastOutcome: row.last_scan_outcome } : {}),
      ...(row.last_scan_reason !== null ? { lastReason: row.last_scan_reason } : {}),
      ...(paused ? { paused: { by: paused.by, reason: paused.reason, at: new Date(paused.at).toISOString() } } : {}),
    },
  };
}

export function proposalView(row: ProposalRow): ProposalView {
  const findings = JSON.parse(row.findings) as { findings: ResourceFindings[]; ignored: DriftReport['ignored'] };
  return {
    id: row.id,
    environmentId: row.environment_id,
    tenantId: row.tenant_id,
    status: row.status as ProposalStatus,
    fingerprint: row.fingerprint,
    findings: findings.findings,
    ignored: findings.ignored,
    plan: JSON.parse(row.plan) as ReconciliationPlan,
    createdAt: new Date(Number(row.created_at)).toISOString(),
    lastSeenAt: new Date(Number(row.last_seen_at)).toISOString(),
    updatedAt: new Date(Number(row.updated_at)).toISOString(),
    ...(row.superseded_by !== null ? { supersededBy: row.superseded_by } : {}),
    ...(row.run_id !== null ? { runId: row.run_id } : {}),
    ...(row.decided_by !== null ? { decidedBy: row.decided_by } : {}),
    ...(row.note !== null ? { note: row.note } : {}),
  };
}

export async function ruleById(ctx: InventoryContext, key: EnvironmentKey, ruleId: string): Promise<RecordedIgnoreRule> {
  const rules = await retryingContention(() => listIgnoreRules(ctx.db, ctx.dialect, key, { includeDeleted: true }));
  return rules.find((r) => r.id === ruleId)!;
}

export async function existingProposal(ctx: InventoryContext, tenants: TenantFilter, proposalId: string): Promise<ProposalRow> {
  const row = await retryingContention(() => findProposal(ctx.db, proposalId, tenants));
  if (!row) throw problemError(InventoryErrors.proposalNotFound, `no proposal ${proposalId}`, { proposalId });
  return row;
}

/**
 * Runs `work` once more when it failed on a unique key: another host inserted the same environment, or opened the
 * environment's one open proposal, between this transaction's read and its insert. The second run reads their row.
 */
export async function againOnUniqueViolation<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (thrown) {
    if (!isUniqueViolation(thrown)) throw thrown;
    return work();
  }
}

/** The key in a list cursor; a cursor this API did not make is refused with 400. */
export function cursorKey(cursor: string | undefined): string | undefined {
  if (cursor === undefined) return undefined;
  const key = decodeCursor(cursor);
  if (key === undefined) throw new AppError('REQUEST.INVALID_CURSOR', 'validation', 'the cursor is not one this API returned');
  return key;
}

/** A page from `limit + 1` rows: the first `limit` as items, and a cursor after the last when there was one more. */
export function pageOf<R, T>(rows: readonly R[], limit: number, keyOf: (row: R) => string, view: (row: R) => T): Page<T> {
  const shown = rows.slice(0, limit);
  const last = shown[shown.length - 1];
  return { items: shown.map(view), ...(rows.length > limit && last !== undefined ? { nextCursor: encodeCursor(keyOf(last)) } : {}) };
}
