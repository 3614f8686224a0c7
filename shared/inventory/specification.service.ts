import { isUniqueViolation } from '../platform/sql/dialect';
import { inTransaction, retryingContention } from '../platform/sql/transaction';
import { describeFieldProblems } from '../platform/validation/validation';
import { desiredStateOf, type DesiredState, type EnvironmentKey, type RunOutcome } from './environment';
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
  if ('problems' in parsed) return { outcome: 'invalid' as const, reason: describeFieldProblems(parsed.problems) };
  return recordDesiredState(ctx, parsed.ok, event.time);
}

/** Records an environment's desired state as of `time` (the event's); an older one arriving late changes nothing. */
export async function recordDesiredState(ctx: InventoryContext, desired: DesiredState, time: string): Promise<{ readonly outcome: 'recorded' | 'outdated'; readonly environment: EnvironmentKey }> {
  const at = Date.parse(time) || nowOf(ctx);
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
    inTransaction(ctx.db, async (trx) => {
      const row = await lockEnvironment(trx, ctx.dialect, key);
      if (row && Number(row.desired_at) > at) return { outcome: 'outdated' as const, environment: key };
      if (row) await updateEnvironment(trx, key, fields);
      else await insertEnvironment(trx, { environment_id: key.id, ...emptyChecks(), ...fields });
      return { outcome: 'recorded' as const, environment: key };
    }),
  );
}

/**
 * Notes a run's end on its environment: false when nothing changed (inventory has no such environment, a pool's
 * stack say, or a later end is noted already).
 */
export async function recordRunOutcome(ctx: InventoryContext, run: RunOutcome): Promise<boolean> {
  const at = run.finishedAt ?? nowOf(ctx);
  const runId = run.runId;
  const updated = await retryingContention(() =>
    ctx.db
      .updateTable('inventory_environments')
      .set({ last_run_id: runId, last_run_state: run.state, last_run_at: at })
      .where('tenant_id', '=', run.environment.tenant)
      .where('environment_id', '=', run.environment.id)
      .where((eb) => eb.or([eb('last_run_at', 'is', null), eb('last_run_at', '<=', at)]))
      .executeTakeFirst(),
  );
  const noted = Number(updated.numUpdatedRows) > 0;
  if (run.state === 'applied') return noted;
  // A reconciliation run that did not apply gives its proposal back for another decision.
  const proposal = await retryingContention(() => findProposalByRun(ctx.db, runId));
  if (proposal?.status !== 'accepted') return noted;
  const note = `reconciliation run ${runId} ended ${run.state}${run.code !== undefined ? ` (${run.code})` : ''}; open again`;
  try {
    await retryingContention(() => updateProposal(ctx.db, proposal.id, ['accepted'], { status: 'open', updated_at: nowOf(ctx), note }));
  } catch (thrown) {
    // A scan opened a newer proposal meanwhile: that one is the environment's open proposal, this one is superseded.
    if (!isUniqueViolation(thrown)) throw thrown;
    await retryingContention(() => updateProposal(ctx.db, proposal.id, ['accepted'], { status: 'superseded', updated_at: nowOf(ctx), note: `${note}, but a newer proposal is open` }));
  }
  return noted;
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
