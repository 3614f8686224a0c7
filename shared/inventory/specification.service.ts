import { isUniqueViolation } from '../platform/cloud/local-cloud.repository';
import { inTransaction, retryingContention } from '../platform/sql/transaction';
import { desiredStateOf, type EnvironmentKey } from './environment';
import { againOnUniqueViolation, nowOf, type InventoryContext } from './inventory.context';
import { findProposalByRun, insertEnvironment, lockEnvironment, updateEnvironment, updateProposal } from './inventory.repository';

/**
 * What provisioning tells inventory: an environment's desired state (`SpecificationApplied`), and how its runs
 * ended (`ProvisioningApplied` / `ProvisioningFailed`).
 */

export type SpecificationOutcome = { readonly outcome: 'recorded' | 'outdated'; readonly environment: EnvironmentKey } | { readonly outcome: 'invalid'; readonly reason: string };

/** Records the desired state of a `SpecificationApplied`; an older one arriving late changes nothing. */
export async function recordSpecification(ctx: InventoryContext, event: { readonly id: string; readonly time: string; readonly data: unknown }): Promise<SpecificationOutcome> {
  const parsed = desiredStateOf(event.data);
  if ('problems' in parsed) return { outcome: 'invalid' as const, reason: parsed.problems.join('; ') };
  const desired = parsed.ok;
  const at = Date.parse(event.time) || nowOf(ctx);
  const fields = {
    tenant_id: desired.tenant,
    name: desired.environment.name,
    tier: desired.environment.tier,
    project: desired.project,
    stack: desired.stack,
    release_name: desired.release.name,
    release_version: desired.release.version,
    desired: JSON.stringify(desired.resources),
    project_rules: JSON.stringify(desired.projectRules),
    desired_run_id: desired.runId,
    desired_at: at,
    // Scanned at the next timer tick at the latest (the intake also scans it at once).
    next_scan_at: nowOf(ctx),
  };
  // The environment of this tenant only: another tenant's environment of the same id is another row.
  const key = { tenant: desired.tenant, id: desired.environment.id };
  return againOnUniqueViolation(() =>
    inTransaction(ctx.db, async (trx): Promise<SpecificationOutcome> => {
      const row = await lockEnvironment(trx, ctx.dialect, key);
      if (row && Number(row.desired_at) > at) return { outcome: 'outdated' as const, environment: key };
      if (row) await updateEnvironment(trx, key, fields);
      else await insertEnvironment(trx, { environment_id: key.id, ...emptyChecks(), ...fields });
      return { outcome: 'recorded' as const, environment: key };
    }),
  );
}

export async function recordRunOutcome(ctx: InventoryContext, data: unknown): Promise<void> {
  const d = data as { runId?: unknown; tenantId?: unknown; environment?: { id?: unknown }; state?: unknown; finishedAt?: unknown; code?: unknown; reason?: unknown };
  if (typeof d.runId !== 'string' || typeof d.tenantId !== 'string' || typeof d.environment?.id !== 'string' || typeof d.state !== 'string') return;
  const at = typeof d.finishedAt === 'string' ? Date.parse(d.finishedAt) || nowOf(ctx) : nowOf(ctx);
  const runId = d.runId;
  const tenant = d.tenantId;
  const environmentId = d.environment.id;
  await retryingContention(() =>
    ctx.db
      .updateTable('inventory_environments')
      .set({ last_run_id: runId, last_run_state: d.state as string, last_run_at: at })
      .where('tenant_id', '=', tenant)
      .where('environment_id', '=', environmentId)
      .where((eb) => eb.or([eb('last_run_at', 'is', null), eb('last_run_at', '<=', at)]))
      .execute(),
  );
  if (d.state === 'applied') return;
  // A reconciliation run that did not apply gives its proposal back for another decision.
  const proposal = await retryingContention(() => findProposalByRun(ctx.db, runId));
  if (proposal?.status !== 'accepted') return;
  const note = `reconciliation run ${runId} ended ${d.state}${typeof d.code === 'string' ? ` (${d.code})` : ''}; open again`;
  try {
    await retryingContention(() => updateProposal(ctx.db, proposal.id, ['accepted'], { status: 'open', updated_at: nowOf(ctx), note }));
  } catch (thrown) {
    // A scan opened a newer proposal meanwhile: that one is the environment's open proposal, this one is superseded.
    if (!isUniqueViolation(thrown)) throw thrown;
    await retryingContention(() => updateProposal(ctx.db, proposal.id, ['accepted'], { status: 'superseded', updated_at: nowOf(ctx), note: `${note}, but a newer proposal is open` }));
  }
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
