import type { Transaction } from 'kysely';
import type { NewEvent } from '../platform/bus/events';
import { AppError, ensureError } from '../platform/errors/app-error';
import { inTransaction, retryingContention } from '../platform/sql/transaction';
import { recordDriftFindings } from '../platform/telemetry/metrics';
import { diffResources, type DriftReport, type IgnoreRule, type Resources } from './drift';
import { desiredResources, desiredToCompare, groupByResource, observedForInventory, reconciliationPlan, scanIntervalMs, type EnvironmentKey } from './environment';
import { againOnUniqueViolation, appendEvents, environmentByKey, intervalOf, keyOf, nowOf, stackOfRow, type InventoryContext } from './inventory.context';
import { reconciliationProposed, runtimeDriftDetected } from './inventory-events';
import { manifestComparison } from './kubernetes-fields';
import {
  claimScan,
  dueEnvironments,
  findEnvironment,
  insertProposal,
  latestDecidedProposal,
  listIgnoreRules,
  lockEnvironment,
  openProposal,
  proposalsIn,
  updateEnvironment,
  updateProposal,
  type EnvironmentRow,
} from './inventory.repository';
import type { InventoryTables } from './inventory.tables';
import type { ObservedRow, ReplaceOutcome, ScanRecord } from './observed-inventory.repository';
import { problemError } from '../platform/errors/catalogue';
import { InventoryErrors } from './errors';

/**
 * Drift scans: observe one environment (never past the scan's timeout), store what was seen in Table storage, diff
 * it with the desired state under the ignore rules, record the outcome (a skip and a failure too, with why: a
 * check that did not happen never shows green) and open, keep or resolve the environment's one proposal. The timer
 * scans the environments that are due, each claimed by one host.
 */

export type ScanTrigger = { readonly kind: 'timer' } | { readonly kind: 'applied' } | { readonly kind: 'manual'; readonly by: string };

/** A skipped scan of a busy environment is tried again this soon, rather than a whole interval later. */
const BUSY_RETRY_MS = 30_000;

/** Observes one environment now, diffs it and records the outcome (also a skip or a failure, with why). */
export async function scan(ctx: InventoryContext, key: EnvironmentKey, trigger: ScanTrigger): Promise<ScanRecord> {
  const row = await environmentByKey(ctx, key);
  const startedAt = nowOf(ctx);
  const scanId = ctx.ids.next('scan');
  const interval = intervalOf(ctx, row);
  const base = { scanId, tenantId: key.tenant, environmentId: key.id, trigger: trigger.kind, startedAt: new Date(startedAt).toISOString() };

  const outcome = (outcome: 'failed' | 'skipped', reason: string) => finish(ctx, { ...base, outcome, reason, finishedAt: new Date(nowOf(ctx)).toISOString() });
  const skip = async (reason: string, retryInMs: number) => {
    await retryingContention(() =>
      updateEnvironment(ctx.db, key, { last_scan_at: startedAt, last_scan_outcome: 'skipped', last_scan_reason: reason, next_scan_at: startedAt + retryInMs }),
    );
    return outcome('skipped', reason);
  };
  if (trigger.kind === 'timer' && row.scan_disabled_by !== null) {
    return skip(`scans are paused by ${row.scan_disabled_by}: ${row.scan_disabled_reason ?? ''}`, interval);
  }
  const applying = await ctx.applyingRun(stackOfRow(row));
  if (applying !== undefined) return skip(`the environment is busy applying (run ${applying})`, Math.min(interval, BUSY_RETRY_MS));

  const desired = JSON.parse(row.desired) as Resources;
  const failed = async (reason: string) => {
    // Stale only if no observation at or after this scan's start is recorded: a late failure never marks stale an
    // environment another scan has observed since.
    const marked = await retryingContention(() =>
      ctx.db
        .updateTable('inventory_environments')
        .set((eb) => ({
          last_scan_at: startedAt,
          last_scan_outcome: 'failed',
          last_scan_reason: reason,
          stale_since: eb.fn.coalesce('stale_since', eb.val(startedAt)),
          stale_reason: reason,
          next_scan_at: startedAt + interval,
        }))
        .where('tenant_id', '=', key.tenant)
        .where('environment_id', '=', key.id)
        .where((eb) => eb.or([eb('last_observed_at', 'is', null), eb('last_observed_at', '<', startedAt)]))
        .executeTakeFirst(),
    );
    return outcome('failed', Number(marked.numUpdatedRows) === 1 ? reason : `${reason}; a newer observation is recorded, so the environment is not marked stale`);
  };
  let observed: Resources;
  let compared: Resources;
  let rows: ObservedRow[];
  try {
    const { scope, observer, resources } = await observeWithTimeout(ctx, row, desired);
    observed = observedForInventory(desired, resources);
    // Only what the observer can see, and of that only what it could read back, is compared.
    const reaches = observer.reaches?.bind(observer);
    compared = desiredToCompare(desired, resources, reaches && ((resource) => reaches(scope, resource)));
    rows = resources.map((r) => ({ urn: r.urn, type: r.type, id: r.id, properties: observed[r.urn]!.properties }));
  } catch (thrown) {
    const error = ensureError(thrown);
    return failed(error instanceof AppError ? `${error.code}: ${error.message}` : `the observation failed: ${error.message}`);
  }

  // Checked before anything is written: an observation made against a desired state that has changed since, or
  // older than one recorded meanwhile, is not kept.
  const before = outdatedBy(row, await retryingContention(() => findEnvironment(ctx.db, key)), startedAt);
  if (before !== undefined) return outcome('skipped', before);
  let stored: Extract<ReplaceOutcome, { outcome: 'stored' }>;
  try {
    const replaced = await ctx.tables.replace(key, rows, { at: new Date(startedAt), scanId });
    if (replaced.outcome === 'superseded') return await outcome('skipped', `a newer observation is stored (scan ${replaced.by.scanId} at ${replaced.by.observedAt})`);
    stored = replaced;
  } catch (thrown) {
    // Observed but not stored: what the inventory shows would not be this observation, so it is stale too.
    return failed(`the observed inventory could not be stored: ${ensureError(thrown).message}`);
  }

  const recorded = await retryingContention(() => listIgnoreRules(ctx.db, ctx.dialect, key, { includeDeleted: false }));
  const rules = [...recorded, ...(JSON.parse(row.project_rules) as IgnoreRule[])];
  // Kubernetes resources are compared on what their manifest sets: the server's defaults and other managers' fields
  // are not drift.
  const report = diffResources(compared, observed, rules, new Date(startedAt), manifestComparison);
  const status = report.findings.length === 0 ? 'in-sync' : 'drifted';
  const after = await againOnUniqueViolation(() =>
    inTransaction(ctx.db, async (trx): Promise<string | undefined> => {
      const locked = await lockEnvironment(trx, ctx.dialect, key);
      const outdated = outdatedBy(row, locked, startedAt);
      if (outdated !== undefined || !locked) return outdated;
      await updateEnvironment(trx, key, {
        last_scan_at: startedAt,
        last_scan_outcome: 'completed',
        last_scan_reason: null,
        last_observed_at: startedAt,
        stale_since: null,
        stale_reason: null,
        drift_status: status,
        report: JSON.stringify(report),
        observed_digest: stored.digest,
        next_scan_at: Math.max(Number(locked.next_scan_at), startedAt + interval),
      });
      await appendEvents(ctx, trx, await recordProposal(ctx, trx, locked, report, { scanId, at: startedAt }));
      return undefined;
    }),
  );
  // The desired state changed, or a newer observation was recorded, while this scan stored its own: its findings
  // are not the environment's. (A new desired state makes the environment due at once.)
  if (after !== undefined) return outcome('skipped', after);
  recordDriftFindings(report.findings);
  return finish(ctx, {
    ...base,
    outcome: 'completed',
    finishedAt: new Date(nowOf(ctx)).toISOString(),
    resources: Object.keys(observed).length,
    findings: report.findings.length,
    driftStatus: status,
    written: stored.written,
    deleted: stored.deleted,
  });
}

/**
 * Why what a scan observed is no longer the environment's (`current` is its row now, `scanned` as the scan began),
 * or undefined: its desired state changed, or a scan that began after this one recorded its observation, or its
 * failure (an older observation must not clear the stale marker of a newer failure).
 */
function outdatedBy(scanned: EnvironmentRow, current: EnvironmentRow | undefined, startedAt: number): string | undefined {
  if (!current || Number(current.desired_at) !== Number(scanned.desired_at)) return 'the desired state changed during the scan';
  const at = (ms: number | null) => new Date(Number(ms)).toISOString();
  if (current.last_observed_at !== null && Number(current.last_observed_at) > startedAt) return `a newer observation is recorded (at ${at(current.last_observed_at)})`;
  if (current.last_scan_outcome === 'failed' && Number(current.last_scan_at) > startedAt) return `a newer scan failed (at ${at(current.last_scan_at)}); the environment stays stale`;
  return undefined;
}

async function finish(ctx: InventoryContext, record: ScanRecord): Promise<ScanRecord> {
  await ctx.tables.recordScan(record);
  return record;
}

/** Observes the environment with the observer of its target, never past the scan's timeout. */
async function observeWithTimeout(ctx: InventoryContext, row: EnvironmentRow, desired: Resources) {
  const where = await ctx.scopeOf({ tenant: row.tenant_id, id: row.environment_id, tier: row.tier, stack: stackOfRow(row) });
  const scope = { ...where, desired: desiredResources(desired) };
  const observer = ctx.observers.get(scope.target);
  if (!observer) {
    throw problemError(InventoryErrors.targetNotObserved, `no observer reads target ${scope.target} of environment ${scope.environmentId}: it is not among RuntimeCloud__Targets`, {
      environmentId: scope.environmentId,
      target: scope.target,
    });
  }
  const controller = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      controller.abort();
      reject(problemError(InventoryErrors.observeTimeout, `the ${observer.name} observer did not answer within ${ctx.observeTimeoutMs} ms`));
    }, ctx.observeTimeoutMs);
  });
  try {
    return { scope, observer, resources: await Promise.race([observer.observe(scope, { signal: controller.signal }), timeout]) };
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
async function recordProposal(ctx: InventoryContext, trx: Transaction<InventoryTables>, env: EnvironmentRow, report: DriftReport, scanInfo: { scanId: string; at: number }): Promise<NewEvent[]> {
  const at = scanInfo.at;
  const key = keyOf(env);
  const ref = { environmentId: env.environment_id, name: env.name, tenant: env.tenant_id, stack: stackOfRow(env) };
  const open = await openProposal(trx, key);
  if (report.findings.length === 0) {
    for (const p of await proposalsIn(trx, key, ['open', 'accepted'])) {
      await updateProposal(trx, p.id, [p.status], { status: 'resolved', updated_at: at, note: `drift gone at scan ${scanInfo.scanId}` });
    }
    return [];
  }
  if (open?.fingerprint === report.fingerprint) {
    await updateProposal(trx, open.id, ['open'], { last_seen_at: at });
    return [];
  }
  const decided = open ? undefined : await latestDecidedProposal(trx, key);
  if (decided?.fingerprint === report.fingerprint) {
    await updateProposal(trx, decided.id, [decided.status], { last_seen_at: at });
    return [];
  }
  const id = ctx.ids.next('prop');
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

export async function scanDue(ctx: InventoryContext): Promise<ScanRecord[]> {
  const at = nowOf(ctx);
  const due = await retryingContention(() => dueEnvironments(ctx.db, at, 10_000));
  const records: ScanRecord[] = [];
  let next = 0;
  const worker = async () => {
    while (next < due.length) {
      const { key, name, nextScanAt: seen } = due[next++]!;
      // Another host's timer may have taken this environment in this round: only the claim's winner scans it. The
      // claim moves its next scan one of its own intervals on (the scan keeps the later of that and its own).
      const interval = scanIntervalMs(ctx.scanInterval, { id: key.id, name });
      if (!(await retryingContention(() => claimScan(ctx.db, key, seen, at + interval)))) continue;
      try {
        records.push(await scan(ctx, key, { kind: 'timer' }));
      } catch (thrown) {
        // One environment's store fault must not stop the round; its next scan time is already moved on.
        records.push({ scanId: '', tenantId: key.tenant, environmentId: key.id, trigger: 'timer', outcome: 'failed', reason: ensureError(thrown).message, startedAt: new Date(at).toISOString(), finishedAt: new Date(nowOf(ctx)).toISOString() });
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(ctx.scanConcurrency, due.length) }, worker));
  return records;
}

