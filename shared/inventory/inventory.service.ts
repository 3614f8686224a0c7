import { createHash } from 'node:crypto';
import type { Transaction } from 'kysely';
import type { TenantFilter } from '../platform/auth/auth';
import type { NewEvent } from '../platform/bus/events';
import { appendToOutbox } from '../platform/bus/outbox';
import { AppError, ensureError } from '../platform/errors/app-error';
import { decodeCursor, encodeCursor } from '../platform/http/cursor';
import { isUniqueViolation } from '../platform/cloud/local-cloud.repository';
import type { SqlStore } from '../platform/sql/database';
import { inTransaction, retryingContention } from '../platform/sql/transaction';
import { recordDriftFindings } from '../platform/telemetry/metrics';
import type { Clock, Ids } from '../platform/time/clock';
import { canonicalJson, diffResources, ignoreRuleProblems, type DriftReport, type IgnoreRule, type Resources } from './drift';
import {
  desiredStateOf,
  driftStatusAt,
  groupByResource,
  observedForInventory,
  reconciliationPlan,
  scanIntervalMs,
  type DriftStatusView,
  type ProposalStatus,
  type ReconciliationPlan,
  type ResourceFindings,
} from './environment';
import { reconciliationProposed, runtimeDriftDetected } from './inventory-events';
import {
  claimScan,
  deleteIgnoreRule,
  dueEnvironments,
  findIgnoreRuleByKey,
  findEnvironment,
  findProposal,
  findProposalByRun,
  insertEnvironment,
  insertIgnoreRule,
  insertProposal,
  inventoryDb,
  latestDecidedProposal,
  listEnvironments,
  listIgnoreRules,
  listProposals,
  lockEnvironment,
  openProposal,
  proposalsIn,
  updateEnvironment,
  updateProposal,
  type EnvironmentRow,
  type ProposalRow,
  type RecordedIgnoreRule,
} from './inventory.repository';
import type { InventoryTables } from './inventory.tables';
import type { ObservedInventory, ScanRecord, StoredResource } from './observed-inventory.repository';
import type { ObservationScope, Observer } from './observer';

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

export type ScanTrigger = { readonly kind: 'timer' } | { readonly kind: 'applied' } | { readonly kind: 'manual'; readonly by: string };

/** An environment as the HTTP API shows it. Serialized shape: changing it is a breaking change. */
export interface EnvironmentView {
  readonly id: string;
  readonly name: string;
  readonly tier: string;
  readonly tenantId: string;
  readonly stack: string;
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
  readonly stack: string;
  readonly requestedBy: string;
  /** The environment's unexpired rules that hold on apply: the run leaves those paths as they are. */
  readonly ignore: readonly Pick<IgnoreRule, 'scope' | 'path'>[];
}

export interface InventoryService {
  /** Records the desired state of a `SpecificationApplied`; an older one arriving late changes nothing. */
  recordSpecification(event: { readonly id: string; readonly time: string; readonly data: unknown }): Promise<{ outcome: 'recorded' | 'outdated'; environmentId: string } | { outcome: 'invalid'; reason: string }>;
  /** Notes a run's end (`ProvisioningApplied`/`Failed`); a failed reconciliation run reopens its proposal. */
  recordRunOutcome(data: unknown): Promise<void>;
  /** Observes one environment now, diffs it and records the outcome (also a skip or a failure, with why). */
  scan(environmentId: string, trigger: ScanTrigger): Promise<ScanRecord>;
  /** Scans the environments that are due, at most `scanConcurrency` at once; returns the records of this round. */
  scanDue(): Promise<ScanRecord[]>;
  setScanning(tenants: TenantFilter, environmentId: string, request: { enabled: boolean; by: string; reason: string }): Promise<EnvironmentView>;
  listEnvironments(tenants: TenantFilter, page: PageRequest): Promise<Page<EnvironmentView>>;
  getEnvironment(tenants: TenantFilter, environmentId: string): Promise<EnvironmentView>;
  /**
   * The environment and a page of its observed resources, in the order Table storage keeps them: by row key (the
   * urn percent-encoded, or its sha-256 past 512 characters), which is not urn order. The cursor holds the last
   * row's key.
   */
  inventory(tenants: TenantFilter, environmentId: string, page: PageRequest): Promise<{ environment: EnvironmentView; items: StoredResource[]; nextCursor?: string }>;
  drift(tenants: TenantFilter, environmentId: string): Promise<DriftView>;
  listIgnoreRules(tenants: TenantFilter, environmentId: string, query: PageRequest & { includeDeleted: boolean }): Promise<Page<RecordedIgnoreRule>>;
  /**
   * Records a rule; `created` false when the Idempotency-Key made one before (that rule is returned). The key used
   * for a different rule is refused with 422 `REQUEST.IDEMPOTENCY_KEY_REUSED`.
   */
  addIgnoreRule(tenants: TenantFilter, environmentId: string, rule: Omit<IgnoreRule, 'id'>, made: { by: string; idempotencyKey?: string }): Promise<{ rule: RecordedIgnoreRule; created: boolean }>;
  deleteIgnoreRule(tenants: TenantFilter, environmentId: string, ruleId: string, by: string): Promise<void>;
  listProposals(tenants: TenantFilter, query: PageRequest & { status?: ProposalStatus; environment?: string }): Promise<Page<ProposalView>>;
  getProposal(tenants: TenantFilter, proposalId: string): Promise<ProposalView>;
  /** The run request for accepting an open proposal; `acceptedAs` then records the run. */
  reconciliationFor(tenants: TenantFilter, proposalId: string, by: string): Promise<ReconciliationRequest>;
  acceptedAs(proposalId: string, runId: string, by: string): Promise<ProposalView>;
  dismiss(tenants: TenantFilter, proposalId: string, request: { by: string; reason: string }): Promise<ProposalView>;
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
  readonly observer: Observer;
  readonly clock: Clock;
  readonly ids: Ids;
  readonly scanInterval: { readonly defaultMs: number; readonly byEnvironment: Readonly<Record<string, number>> };
  readonly scanConcurrency: number;
  readonly observeTimeoutMs: number;
  /** Where an environment's resources live, beyond its stack (Azure and Kubernetes scopes by environment id). */
  readonly scopeOf: (environment: { readonly id: string; readonly stack: string }) => ObservationScope;
  /** The run applying to the stack right now, if any: a scan then is skipped (it would see a half-applied stack). */
  readonly applyingRun: (stack: string) => Promise<string | undefined>;
}

/** A skipped scan of a busy environment is tried again this soon, rather than a whole interval later. */
const BUSY_RETRY_MS = 30_000;
const SCANS_SHOWN = 20;

export function createInventoryService(options: InventoryServiceOptions): InventoryService {
  const { store, tables, observer, clock, ids } = options;
  const db = inventoryDb(store.db);
  const now = () => clock.now().getTime();
  const intervalOf = (row: EnvironmentRow) => scanIntervalMs(options.scanInterval, { id: row.environment_id, name: row.name });
  const outbox = (trx: Transaction<InventoryTables>, events: readonly NewEvent[]) => appendToOutbox(trx, events, clock, ids);

  async function existingEnvironment(tenants: TenantFilter, environmentId: string): Promise<EnvironmentRow> {
    const row = await retryingContention(() => findEnvironment(db, environmentId, tenants));
    if (!row) throw new AppError('INVENTORY.ENVIRONMENT_NOT_FOUND', 'not-found', `no environment ${environmentId} has been applied to`, { environmentId });
    return row;
  }

  function environmentView(row: EnvironmentRow): EnvironmentView {
    const intervalMs = intervalOf(row);
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
      now(),
    );
    return {
      id: row.environment_id,
      name: row.name,
      tier: row.tier,
      tenantId: row.tenant_id,
      stack: row.stack,
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

  function proposalView(row: ProposalRow): ProposalView {
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

  async function recordSpecification(event: { readonly id: string; readonly time: string; readonly data: unknown }) {
    const parsed = desiredStateOf(event.data);
    if ('problems' in parsed) return { outcome: 'invalid' as const, reason: parsed.problems.join('; ') };
    const desired = parsed.ok;
    const at = Date.parse(event.time) || now();
    const fields = {
      tenant_id: desired.tenant,
      name: desired.environment.name,
      tier: desired.environment.tier,
      stack: desired.stack,
      release_name: desired.release.name,
      release_version: desired.release.version,
      desired: JSON.stringify(desired.resources),
      project_rules: JSON.stringify(desired.projectRules),
      desired_run_id: desired.runId,
      desired_at: at,
      // Scanned at the next timer tick at the latest (the intake also scans it at once).
      next_scan_at: now(),
    };
    const environmentId = desired.environment.id;
    return againOnUniqueViolation(() =>
      inTransaction(db, async (trx) => {
        const row = await lockEnvironment(trx, store.dialect, environmentId);
        if (row && Number(row.desired_at) > at) return { outcome: 'outdated' as const, environmentId };
        if (row) await updateEnvironment(trx, environmentId, fields);
        else await insertEnvironment(trx, { environment_id: environmentId, ...emptyChecks(), ...fields });
        return { outcome: 'recorded' as const, environmentId };
      }),
    );
  }

  async function recordRunOutcome(data: unknown): Promise<void> {
    const d = data as { runId?: unknown; environment?: { id?: unknown }; state?: unknown; finishedAt?: unknown; code?: unknown; reason?: unknown };
    if (typeof d.runId !== 'string' || typeof d.environment?.id !== 'string' || typeof d.state !== 'string') return;
    const at = typeof d.finishedAt === 'string' ? Date.parse(d.finishedAt) || now() : now();
    const runId = d.runId;
    const environmentId = d.environment.id;
    await retryingContention(() =>
      db
        .updateTable('inventory_environments')
        .set({ last_run_id: runId, last_run_state: d.state as string, last_run_at: at })
        .where('environment_id', '=', environmentId)
        .where((eb) => eb.or([eb('last_run_at', 'is', null), eb('last_run_at', '<=', at)]))
        .execute(),
    );
    if (d.state === 'applied') return;
    // A reconciliation run that did not apply gives its proposal back for another decision.
    const proposal = await retryingContention(() => findProposalByRun(db, runId));
    if (proposal?.status !== 'accepted') return;
    const note = `reconciliation run ${runId} ended ${d.state}${typeof d.code === 'string' ? ` (${d.code})` : ''}; open again`;
    try {
      await retryingContention(() => updateProposal(db, proposal.id, ['accepted'], { status: 'open', updated_at: now(), note }));
    } catch (thrown) {
      // A scan opened a newer proposal meanwhile: that one is the environment's open proposal, this one is superseded.
      if (!isUniqueViolation(thrown)) throw thrown;
      await retryingContention(() => updateProposal(db, proposal.id, ['accepted'], { status: 'superseded', updated_at: now(), note: `${note}, but a newer proposal is open` }));
    }
  }

  async function scan(environmentId: string, trigger: ScanTrigger): Promise<ScanRecord> {
    const row = await existingEnvironment({ kind: 'all' }, environmentId);
    const startedAt = now();
    const scanId = ids.next('scan');
    const interval = intervalOf(row);
    const base = { scanId, environmentId, trigger: trigger.kind, startedAt: new Date(startedAt).toISOString() };

    const skip = async (reason: string, retryInMs: number) => {
      await retryingContention(() =>
        updateEnvironment(db, environmentId, { last_scan_at: startedAt, last_scan_outcome: 'skipped', last_scan_reason: reason, next_scan_at: startedAt + retryInMs }),
      );
      return finish({ ...base, outcome: 'skipped', reason, finishedAt: new Date(now()).toISOString() });
    };
    if (trigger.kind === 'timer' && row.scan_disabled_by !== null) {
      return skip(`scans are paused by ${row.scan_disabled_by}: ${row.scan_disabled_reason ?? ''}`, interval);
    }
    const applying = await options.applyingRun(row.stack);
    if (applying !== undefined) return skip(`the environment is busy applying (run ${applying})`, Math.min(interval, BUSY_RETRY_MS));

    const desired = JSON.parse(row.desired) as Resources;
    let observed: Resources;
    let written = { written: 0, deleted: 0 };
    let digest: string;
    const failed = async (reason: string) => {
      await retryingContention(() =>
        db
          .updateTable('inventory_environments')
          .set((eb) => ({
            last_scan_at: startedAt,
            last_scan_outcome: 'failed',
            last_scan_reason: reason,
            stale_since: eb.fn.coalesce('stale_since', eb.val(startedAt)),
            stale_reason: reason,
            next_scan_at: startedAt + interval,
          }))
          .where('environment_id', '=', environmentId)
          .execute(),
      );
      return finish({ ...base, outcome: 'failed', reason, finishedAt: new Date(now()).toISOString() });
    };
    try {
      const resources = await observeWithTimeout(row);
      observed = observedForInventory(desired, resources);
      const stored = resources.map((r) => ({ urn: r.urn, type: r.type, id: r.id, properties: observed[r.urn]!.properties }));
      digest = createHash('sha256').update(canonicalJson(stored.map((r) => [r.urn, r.type, r.id, r.properties]).sort())).digest('hex');
      try {
        if (digest !== row.observed_digest) written = await tables.replace(environmentId, stored, new Date(startedAt));
      } catch (thrown) {
        // Observed but not stored: what the inventory shows would not be this observation, so it is stale too.
        return await failed(`the observed inventory could not be stored: ${ensureError(thrown).message}`);
      }
    } catch (thrown) {
      const error = ensureError(thrown);
      return failed(error instanceof AppError ? `${error.code}: ${error.message}` : `the observation failed: ${error.message}`);
    }

    const recorded = await retryingContention(() => listIgnoreRules(db, store.dialect, environmentId, { includeDeleted: false }));
    const rules = [...recorded, ...(JSON.parse(row.project_rules) as IgnoreRule[])];
    const report = diffResources(desired, observed, rules, new Date(startedAt));
    const status = report.findings.length === 0 ? 'in-sync' : 'drifted';
    const current = await againOnUniqueViolation(() =>
      inTransaction(db, async (trx) => {
        const locked = await lockEnvironment(trx, store.dialect, environmentId);
        if (!locked || Number(locked.desired_at) !== Number(row.desired_at)) return false;
        await updateEnvironment(trx, environmentId, {
          last_scan_at: startedAt,
          last_scan_outcome: 'completed',
          last_scan_reason: null,
          last_observed_at: startedAt,
          stale_since: null,
          stale_reason: null,
          drift_status: status,
          report: JSON.stringify(report),
          observed_digest: digest,
          next_scan_at: Math.max(Number(locked.next_scan_at), startedAt + interval),
        });
        await outbox(trx, await recordProposal(trx, locked, report, { scanId, at: startedAt }));
        return true;
      }),
    );
    // A newer desired state arrived while this scan observed: its findings are against the old one. The next scan
    // (due at once) compares with the new one.
    if (!current) return finish({ ...base, outcome: 'skipped', reason: 'the desired state changed during the scan', finishedAt: new Date(now()).toISOString() });
    recordDriftFindings(report.findings);
    return finish({
      ...base,
      outcome: 'completed',
      finishedAt: new Date(now()).toISOString(),
      resources: Object.keys(observed).length,
      findings: report.findings.length,
      driftStatus: status,
      ...written,
    });
  }

  async function finish(record: ScanRecord): Promise<ScanRecord> {
    await tables.recordScan(record);
    return record;
  }

  async function observeWithTimeout(row: EnvironmentRow) {
    const controller = new AbortController();
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        controller.abort();
        reject(new AppError('INVENTORY.OBSERVE_TIMEOUT', 'unavailable', `the ${observer.name} observer did not answer within ${options.observeTimeoutMs} ms`));
      }, options.observeTimeoutMs);
    });
    try {
      return await Promise.race([observer.observe(options.scopeOf({ id: row.environment_id, stack: row.stack }), { signal: controller.signal }), timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * The proposal side of a completed scan, under the environment's row lock: one open proposal per environment,
   * found by its fingerprint. Same findings: seen again. Other findings: a new proposal supersedes the open one.
   * No findings: open and accepted proposals are resolved. Findings an operator already decided on (accepted, its
   * run under way, or dismissed) open nothing new. Returns the events to publish.
   */
  async function recordProposal(trx: Transaction<InventoryTables>, env: EnvironmentRow, report: DriftReport, scanInfo: { scanId: string; at: number }): Promise<NewEvent[]> {
    const at = scanInfo.at;
    const ref = { environmentId: env.environment_id, name: env.name, tenant: env.tenant_id, stack: env.stack };
    const open = await openProposal(trx, env.environment_id);
    if (report.findings.length === 0) {
      for (const p of await proposalsIn(trx, env.environment_id, ['open', 'accepted'])) {
        await updateProposal(trx, p.id, [p.status], { status: 'resolved', updated_at: at, note: `drift gone at scan ${scanInfo.scanId}` });
      }
      return [];
    }
    if (open?.fingerprint === report.fingerprint) {
      await updateProposal(trx, open.id, ['open'], { last_seen_at: at });
      return [];
    }
    const decided = open ? undefined : await latestDecidedProposal(trx, env.environment_id);
    if (decided?.fingerprint === report.fingerprint) {
      await updateProposal(trx, decided.id, [decided.status], { last_seen_at: at });
      return [];
    }
    const id = ids.next('prop');
    const plan = reconciliationPlan(report);
    if (open) await updateProposal(trx, open.id, ['open'], { status: 'superseded', superseded_by: id, updated_at: at, note: `findings changed at scan ${scanInfo.scanId}` });
    await insertProposal(trx, {
      id,
      environment_id: env.environment_id,
      tenant_id: env.tenant_id,
      fingerprint: report.fingerprint,
      status: 'open',
      findings: JSON.stringify({ findings: groupByResource(report.findings), ignored: report.ignored }),
      plan: JSON.stringify(plan),
      created_at: at,
      last_seen_at: at,
      updated_at: at,
      superseded_by: null,
      run_id: null,
      decided_by: null,
      note: null,
    });
    return [
      runtimeDriftDetected(ref, { scanId: scanInfo.scanId, observedAt: new Date(at) }, report, id),
      reconciliationProposed(ref, { id, fingerprint: report.fingerprint, ...(open ? { supersedes: open.id } : {}) }, report, plan),
    ];
  }

  async function scanDue(): Promise<ScanRecord[]> {
    const at = now();
    const due = await retryingContention(() => dueEnvironments(db, at, 10_000));
    const records: ScanRecord[] = [];
    let next = 0;
    const worker = async () => {
      while (next < due.length) {
        const { environment_id: id, next_scan_at: seen } = due[next++]!;
        // Another host's timer may have taken this environment in this round: only the claim's winner scans it.
        if (!(await retryingContention(() => claimScan(db, id, seen, at + options.scanInterval.defaultMs)))) continue;
        try {
          records.push(await scan(id, { kind: 'timer' }));
        } catch (thrown) {
          // One environment's store fault must not stop the round; its next scan time is already moved on.
          records.push({ scanId: '', environmentId: id, trigger: 'timer', outcome: 'failed', reason: ensureError(thrown).message, startedAt: new Date(at).toISOString(), finishedAt: new Date(now()).toISOString() });
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(options.scanConcurrency, due.length) }, worker));
    return records;
  }

  return {
    recordSpecification,
    recordRunOutcome,
    scan,
    scanDue,

    async setScanning(tenants, environmentId, request) {
      await existingEnvironment(tenants, environmentId);
      const at = now();
      await retryingContention(() =>
        updateEnvironment(
          db,
          environmentId,
          request.enabled
            ? { scan_disabled_by: null, scan_disabled_reason: null, scan_disabled_at: null, next_scan_at: at }
            : { scan_disabled_by: request.by, scan_disabled_reason: request.reason, scan_disabled_at: at },
        ),
      );
      return environmentView(await existingEnvironment(tenants, environmentId));
    },

    async listEnvironments(tenants, page) {
      const after = cursorKey(page.cursor);
      const rows = await retryingContention(() => listEnvironments(db, store.dialect, tenants, { ...(after !== undefined ? { after } : {}), limit: page.limit + 1 }));
      return pageOf(rows, page.limit, (r) => r.environment_id, environmentView);
    },

    async getEnvironment(tenants, environmentId) {
      return environmentView(await existingEnvironment(tenants, environmentId));
    },

    async inventory(tenants, environmentId, page) {
      const after = cursorKey(page.cursor);
      const row = await existingEnvironment(tenants, environmentId);
      // Paged in Table storage, in its key order: a page reads about `limit` rows, never the whole partition (an
      // environment may hold 100,000 resources).
      const rows = await tables.listPage(environmentId, { ...(after !== undefined ? { after } : {}), limit: page.limit + 1 });
      return { environment: environmentView(row), ...pageOf(rows, page.limit, (r) => r.key, (r) => r.resource) };
    },

    async drift(tenants, environmentId) {
      const row = await existingEnvironment(tenants, environmentId);
      const report = row.report !== null ? (JSON.parse(row.report) as DriftReport) : undefined;
      const open = await retryingContention(() => openProposal(db, environmentId));
      return {
        environment: environmentView(row),
        findings: report ? groupByResource(report.findings) : [],
        ignored: report?.ignored ?? [],
        expiredRules: report?.expiredRules ?? [],
        ...(report ? { fingerprint: report.fingerprint } : {}),
        ...(open ? { openProposalId: open.id } : {}),
        scans: await tables.scans(environmentId, SCANS_SHOWN),
      };
    },

    async listIgnoreRules(tenants, environmentId, query) {
      const after = cursorKey(query.cursor);
      await existingEnvironment(tenants, environmentId);
      const rows = await retryingContention(() =>
        listIgnoreRules(db, store.dialect, environmentId, { includeDeleted: query.includeDeleted, page: { ...(after !== undefined ? { after } : {}), limit: query.limit + 1 } }),
      );
      return pageOf(rows, query.limit, (r) => r.id, (r) => r);
    },

    async addIgnoreRule(tenants, environmentId, rule, made) {
      const env = await existingEnvironment(tenants, environmentId);
      const recorded: IgnoreRule = { ...rule, id: ids.next('ign') };
      const problems = ignoreRuleProblems(recorded);
      if (problems.length > 0) throw new AppError('INVENTORY.INVALID_IGNORE_RULE', 'validation', `the ignore rule is not valid: ${problems.join('; ')}`, { problems });
      const requestDigest = createHash('sha256').update(canonicalJson(rule)).digest('hex');
      const earlier = async () => {
        const found = made.idempotencyKey === undefined ? undefined : await retryingContention(() => findIgnoreRuleByKey(db, environmentId, made.idempotencyKey!));
        if (found && found.requestDigest !== requestDigest) throw new AppError('REQUEST.IDEMPOTENCY_KEY_REUSED', 'unprocessable', 'this Idempotency-Key was used for a different ignore rule');
        return found && { rule: await ruleById(environmentId, found.id), created: false };
      };
      const before = await earlier();
      if (before) return before;
      if (Date.parse(rule.expiresAt) <= now()) throw new AppError('INVENTORY.INVALID_IGNORE_RULE', 'validation', 'expiresAt must be in the future', { expiresAt: rule.expiresAt });
      try {
        await retryingContention(() =>
          insertIgnoreRule(db, environmentId, env.tenant_id, recorded, { by: made.by, at: now(), requestDigest, ...(made.idempotencyKey !== undefined ? { idempotencyKey: made.idempotencyKey } : {}) }),
        );
      } catch (thrown) {
        // The same key sent twice at once: the other request recorded the rule.
        const raced = isUniqueViolation(thrown) ? await earlier() : undefined;
        if (raced) return raced;
        throw thrown;
      }
      return { rule: await ruleById(environmentId, recorded.id), created: true };
    },

    async deleteIgnoreRule(tenants, environmentId, ruleId, by) {
      await existingEnvironment(tenants, environmentId);
      if (!(await retryingContention(() => deleteIgnoreRule(db, environmentId, ruleId, by, now())))) {
        throw new AppError('INVENTORY.IGNORE_RULE_NOT_FOUND', 'not-found', `environment ${environmentId} has no ignore rule ${ruleId} in force`, { environmentId, ruleId });
      }
    },

    async listProposals(tenants, query) {
      const before = cursorKey(query.cursor);
      const rows = await retryingContention(() =>
        listProposals(db, store.dialect, tenants, {
          ...(query.status !== undefined ? { status: query.status } : {}),
          ...(query.environment !== undefined ? { environment: query.environment } : {}),
          ...(before !== undefined ? { before } : {}),
          limit: query.limit + 1,
        }),
      );
      return pageOf(rows, query.limit, (r) => r.id, proposalView);
    },

    async getProposal(tenants, proposalId) {
      return proposalView(await existingProposal(tenants, proposalId));
    },

    async reconciliationFor(tenants, proposalId, by) {
      const proposal = await existingProposal(tenants, proposalId);
      // Accepting again after the run was made gives the same run (provisioning's reconcile is idempotent per proposal).
      if (proposal.status !== 'open' && !(proposal.status === 'accepted' && proposal.run_id !== null)) {
        throw new AppError('INVENTORY.PROPOSAL_NOT_OPEN', 'conflict', `proposal ${proposalId} is ${proposal.status}; only an open proposal can be accepted`, { status: proposal.status });
      }
      const env = await existingEnvironment({ kind: 'all' }, proposal.environment_id);
      const rules = await retryingContention(() => listIgnoreRules(db, store.dialect, env.environment_id, { includeDeleted: false }));
      const at = now();
      const ignore = rules.filter((r) => r.holdsOnApply && Date.parse(r.expiresAt) > at).map((r) => ({ scope: r.scope, path: r.path }));
      return { proposalId, tenant: env.tenant_id, environmentId: env.environment_id, stack: env.stack, requestedBy: by, ignore };
    },

    async acceptedAs(proposalId, runId, by) {
      const at = now();
      await retryingContention(() => updateProposal(db, proposalId, ['open'], { status: 'accepted', run_id: runId, decided_by: by, updated_at: at, note: `accepted by ${by}: run ${runId}` }));
      const proposal = await existingProposal({ kind: 'all' }, proposalId);
      if (proposal.run_id !== runId) {
        throw new AppError('INVENTORY.PROPOSAL_NOT_OPEN', 'conflict', `proposal ${proposalId} is ${proposal.status}; only an open proposal can be accepted`, { status: proposal.status });
      }
      return proposalView(proposal);
    },

    async dismiss(tenants, proposalId, request) {
      await existingProposal(tenants, proposalId);
      const moved = await retryingContention(() =>
        updateProposal(db, proposalId, ['open'], { status: 'dismissed', decided_by: request.by, updated_at: now(), note: `dismissed by ${request.by}: ${request.reason}` }),
      );
      const proposal = await existingProposal(tenants, proposalId);
      if (!moved) throw new AppError('INVENTORY.PROPOSAL_NOT_OPEN', 'conflict', `proposal ${proposalId} is ${proposal.status}; only an open proposal can be dismissed`, { status: proposal.status });
      return proposalView(proposal);
    },
  };

  async function ruleById(environmentId: string, ruleId: string): Promise<RecordedIgnoreRule> {
    const rules = await retryingContention(() => listIgnoreRules(db, store.dialect, environmentId, { includeDeleted: true }));
    return rules.find((r) => r.id === ruleId)!;
  }

  async function existingProposal(tenants: TenantFilter, proposalId: string): Promise<ProposalRow> {
    const row = await retryingContention(() => findProposal(db, proposalId, tenants));
    if (!row) throw new AppError('INVENTORY.PROPOSAL_NOT_FOUND', 'not-found', `no proposal ${proposalId}`, { proposalId });
    return row;
  }
}

/**
 * Runs `work` once more when it failed on a unique key: another host inserted the same environment, or opened the
 * environment's one open proposal, between this transaction's read and its insert. The second run reads their row.
 */
async function againOnUniqueViolation<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (thrown) {
    if (!isUniqueViolation(thrown)) throw thrown;
    return work();
  }
}

/** The key in a list cursor; a cursor this API did not make is refused with 400. */
function cursorKey(cursor: string | undefined): string | undefined {
  if (cursor === undefined) return undefined;
  const key = decodeCursor(cursor);
  if (key === undefined) throw new AppError('REQUEST.INVALID_CURSOR', 'validation', 'the cursor is not one this API returned');
  return key;
}

/** A page from `limit + 1` rows: the first `limit` as items, and a cursor after the last when there was one more. */
function pageOf<R, T>(rows: readonly R[], limit: number, keyOf: (row: R) => string, view: (row: R) => T): Page<T> {
  const shown = rows.slice(0, limit);
  const last = shown[shown.length - 1];
  return { items: shown.map(view), ...(rows.length > limit && last !== undefined ? { nextCursor: encodeCursor(keyOf(last)) } : {}) };
}

function emptyChecks() {
  return {
    last_run_id: null,
    last_run_state: null,
    last_run_at: null,
    scan_disabled_by: null,
    scan_disabled_reason: null,
    scan_disabled_at: null,
    last_scan_at: null,
    last_scan_outcome: null,
    last_scan_reason: null,
    last_observed_at: null,
    stale_since: null,
    stale_reason: null,
    drift_status: null,
    report: null,
    observed_digest: null,
  };
}
