import type { TenantFilter } from '../platform/auth/auth';
import { retryingContention } from '../platform/sql/transaction';
import type { ProposalStatus } from './proposal';
import { cursorKey, environmentByKey, existingProposal, keyOf, nowOf, pageOf, proposalView, type InventoryContext, type Page, type PageRequest, type ProposalView, type ReconciliationRequest } from './inventory.context';
import { listIgnoreRules, listProposals as listProposalRows, updateProposal } from './inventory.repository';
import { problemError } from '../platform/errors/catalogue';
import { InventoryErrors } from './errors';

/**
 * Reconciliation proposals as operators decide them: accepted (the run request for provisioning, then the run it
 * became) or dismissed.
 */

export async function listProposals(ctx: InventoryContext, tenants: TenantFilter, query: PageRequest & { status?: ProposalStatus; environment?: string }): Promise<Page<ProposalView>> {
  const before = cursorKey(query.cursor);
  const rows = await retryingContention(() =>
    listProposalRows(ctx.db, ctx.dialect, tenants, {
      ...(query.status !== undefined ? { status: query.status } : {}),
      ...(query.environment !== undefined ? { environment: query.environment } : {}),
      ...(before !== undefined ? { before } : {}),
      limit: query.limit + 1,
    }),
  );
  return pageOf(rows, query.limit, (r) => r.id, proposalView);
}

export async function getProposal(ctx: InventoryContext, tenants: TenantFilter, proposalId: string): Promise<ProposalView> {
  return proposalView(await existingProposal(ctx, tenants, proposalId));
}

export async function reconciliationFor(ctx: InventoryContext, tenants: TenantFilter, proposalId: string, by: string): Promise<ReconciliationRequest> {
  const proposal = await existingProposal(ctx, tenants, proposalId);
  // Accepting again after the run was made gives the same run (provisioning's reconcile is idempotent per proposal).
  if (proposal.status !== 'open' && !(proposal.status === 'accepted' && proposal.run_id !== null)) {
    throw problemError(InventoryErrors.proposalNotOpen, `proposal ${proposalId} is ${proposal.status}; only an open proposal can be accepted`, { status: proposal.status });
  }
  const env = await environmentByKey(ctx, { tenant: proposal.tenant_id, id: proposal.environment_id });
  const rules = await retryingContention(() => listIgnoreRules(ctx.db, ctx.dialect, keyOf(env), { includeDeleted: false }));
  const at = nowOf(ctx);
  const ignore = rules.filter((r) => r.holdsOnApply && Date.parse(r.expiresAt) > at).map((r) => ({ scope: r.scope, path: r.path }));
  return { proposalId, tenant: env.tenant_id, environmentId: env.environment_id, project: env.project, stack: env.stack, requestedBy: by, ignore };
}

export async function acceptedAs(ctx: InventoryContext, proposalId: string, runId: string, by: string): Promise<ProposalView> {
  const at = nowOf(ctx);
  await retryingContention(() => updateProposal(ctx.db, proposalId, ['open'], { status: 'accepted', run_id: runId, decided_by: by, updated_at: at, note: `accepted by ${by}: run ${runId}` }));
  const proposal = await existingProposal(ctx, { kind: 'all' }, proposalId);
  if (proposal.run_id !== runId) {
    throw problemError(InventoryErrors.proposalNotOpen, `proposal ${proposalId} is ${proposal.status}; only an open proposal can be accepted`, { status: proposal.status });
  }
  return proposalView(proposal);
}

export async function dismiss(ctx: InventoryContext, tenants: TenantFilter, proposalId: string, request: { by: string; reason: string }): Promise<ProposalView> {
  await existingProposal(ctx, tenants, proposalId);
  const moved = await retryingContention(() =>
    updateProposal(ctx.db, proposalId, ['open'], { status: 'dismissed', decided_by: request.by, updated_at: nowOf(ctx), note: `dismissed by ${request.by}: ${request.reason}` }),
  );
  const proposal = await existingProposal(ctx, tenants, proposalId);
  if (!moved) throw problemError(InventoryErrors.proposalNotOpen, `proposal ${proposalId} is ${proposal.status}; only an open proposal can be dismissed`, { status: proposal.status });
  return proposalView(proposal);
}
