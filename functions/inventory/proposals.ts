import { crashPoint } from '../../shared/platform/faults/crash-points';
import * as df from 'durable-functions';
import { PROPOSAL_STATUSES } from '../../shared/inventory/proposal';
import { isTerminal } from '../../shared/provisioning/run';
import { lazySchema } from '../../shared/platform/validation/lazy-schema';
import { endpoint, pageOf, pageQuery } from '../http/endpoint';
import { moduleApp } from '../app';
import { startRun } from '../provisioning/promotion-intake';

const listQuery = lazySchema((z) => pageQuery().extend({ status: z.enum(PROPOSAL_STATUSES).optional(), environment: z.string().min(1).max(200).optional() }));

/** The caller's tenant's reconciliation proposals, newest first, filtered by status and environment. */
export const listProposals = endpoint({ scope: 'factory.runtime.read', query: listQuery }, async ({ deps, tenants, query: q }) => {
  const page = await deps.inventory.listProposals(tenants(), {
    ...pageOf(q),
    ...(q.status !== undefined ? { status: q.status } : {}),
    ...(q.environment !== undefined ? { environment: q.environment } : {}),
  });
  return { status: 200, jsonBody: page };
});

export const getProposal = endpoint({ scope: 'factory.runtime.read' }, async ({ request, deps, tenants }) => {
  return { status: 200, jsonBody: await deps.inventory.getProposal(tenants(), request.params.id ?? '') };
});

/**
 * Accepts an open proposal: a provisioning run with reason `reconciliation` re-applies the environment's desired
 * state against what is really there (approval rules apply as to any run; rules that hold on apply are kept).
 * 200 with the proposal (accepted, `runId`); accepting it again gives the same run. 409
 * `INVENTORY.PROPOSAL_NOT_OPEN` for a proposal that is dismissed, superseded or resolved.
 */
export const acceptProposal = endpoint({ scope: 'factory.provisioning.operate' }, async ({ request, context, deps, tenants, principal }) => {
  const request_ = await deps.inventory.reconciliationFor(tenants(), request.params.id ?? '', principal.person);
  const result = await deps.provisioning.reconcile(request_);
  crashPoint('reconciliation:recorded', result.run.id);
  if (!isTerminal(result.run.state)) await startRun(df.getClient(context), result.run, deps.provisioning.timings, { onlyIfAbsent: result.outcome === 'duplicate' });
  crashPoint('reconciliation:started', result.run.id);
  return { status: 200, jsonBody: await deps.inventory.acceptedAs(request_.proposalId, result.run.id, principal.person) };
});

/** Changing this body is a breaking change for Studio and operators' scripts. */
const dismissBody = lazySchema((z) => z.object({ reason: z.string().min(1).max(2000) }));

/** Dismisses an open proposal, recorded with who and why; the same findings open no new proposal. */
export const dismissProposal = endpoint({ scope: 'factory.provisioning.operate', body: dismissBody }, async ({ request, deps, tenants, principal, body }) => {
  return { status: 200, jsonBody: await deps.inventory.dismiss(tenants(), request.params.id ?? '', { by: principal.person, reason: body.reason }) };
});

const app = moduleApp('inventory');
app.http('listProposals', { route: 'runtime-cloud/proposals', methods: ['GET'], authLevel: 'anonymous', handler: listProposals });
app.http('getProposal', { route: 'runtime-cloud/proposals/{id}', methods: ['GET'], authLevel: 'anonymous', handler: getProposal });
app.http('acceptProposal', { route: 'runtime-cloud/proposals/{id}/accept', methods: ['POST'], authLevel: 'anonymous', extraInputs: [df.input.durableClient()], handler: acceptProposal });
app.http('dismissProposal', { route: 'runtime-cloud/proposals/{id}/dismiss', methods: ['POST'], authLevel: 'anonymous', handler: dismissProposal });
