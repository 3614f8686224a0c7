import { crashPoint } from '../../shared/platform/faults/crash-points';
import * as df from 'durable-functions';
import { PROPOSAL_STATUSES } from '../../shared/inventory/proposal';
import { isTerminal } from '../../shared/provisioning/run';
import { lazySchema } from '../../shared/platform/validation/lazy-schema';
import { endpoint, pageOf, pageQuery } from '../http/endpoint';
import { moduleApp } from '../app';
import { startRun } from '../provisioning/promotion-intake';
import { proposalPageSchema, proposalSchema } from './views';

const listQuery = lazySchema((z) => pageQuery().extend({ status: z.enum(PROPOSAL_STATUSES).optional(), environment: z.string().min(1).max(200).optional() }));

export const listProposals = endpoint({
  tag: 'Proposals',
  summary: 'List reconciliation proposals',
  description:
    "The caller's tenant's reconciliation proposals, newest first, a page at a time (`?limit=&cursor=`), optionally only those in one " +
    '`status` (`open`, `accepted`, `dismissed`, `superseded`, `resolved`) or of one `environment`. A drifted environment has at most ' +
    'one open proposal. A service or a PlatformAdmin names the tenant with `X-Tenant-Id` or `?tenant=`.',
  scope: 'factory.runtime.read',
  query: listQuery,
  response: proposalPageSchema,
}, async ({ deps, tenants, query: q }) => {
  const page = await deps.inventory.listProposals(tenants(), {
    ...pageOf(q),
    ...(q.status !== undefined ? { status: q.status } : {}),
    ...(q.environment !== undefined ? { environment: q.environment } : {}),
  });
  return { status: 200, jsonBody: page };
});

export const getProposal = endpoint({
  tag: 'Proposals',
  summary: 'Get a reconciliation proposal',
  description:
    'One proposal: its findings grouped by resource and graded by severity, the reconciliation plan (create, replace, update with ' +
    'paths; unmanaged resources left alone; paths kept by rules), when it was first and last seen, and what became of it (`runId` once ' +
    "accepted, `supersededBy`, who dismissed it and why). 404 `INVENTORY.PROPOSAL_NOT_FOUND`, also for another tenant's proposal.",
  scope: 'factory.runtime.read',
  response: proposalSchema,
}, async ({ request, deps, tenants }) => {
  return { status: 200, jsonBody: await deps.inventory.getProposal(tenants(), request.params.id ?? '') };
});

export const acceptProposal = endpoint({
  tag: 'Proposals',
  summary: 'Accept a proposal as a provisioning run',
  description:
    "Accepts an open proposal: a provisioning run with trigger `reconciliation` re-plans the environment's desired state with a " +
    'refresh (against what is really there) and applies it under the usual approval rules; ignore rules that hold on apply are kept. ' +
    'The caller counts as one who asked for the run, for four eyes. 200 with the proposal (accepted, with `runId`); accepting it ' +
    'again gives the same run. A reconciliation run that fails or is rejected opens the proposal again. ' +
    '409 `INVENTORY.PROPOSAL_NOT_OPEN` for a proposal that is dismissed, superseded or resolved; 404 `INVENTORY.PROPOSAL_NOT_FOUND`.',
  scope: 'factory.provisioning.operate',
  response: proposalSchema,
}, async ({ request, context, deps, tenants, principal }) => {
  const request_ = await deps.inventory.reconciliationFor(tenants(), request.params.id ?? '', principal.person);
  const result = await deps.provisioning.reconcile(request_);
  crashPoint('reconciliation:recorded', result.run.id);
  if (!isTerminal(result.run.state)) await startRun(df.getClient(context), result.run, deps.provisioning.timings, { onlyIfAbsent: result.outcome === 'duplicate' });
  crashPoint('reconciliation:started', result.run.id);
  return { status: 200, jsonBody: await deps.inventory.acceptedAs(request_.proposalId, result.run.id, principal.person) };
});

/** Changing this body is a breaking change for Studio and operators' scripts. */
const dismissBody = lazySchema((z) => z.object({ reason: z.string().min(1).max(2000) }));

export const dismissProposal = endpoint({
  tag: 'Proposals',
  summary: 'Dismiss a proposal',
  description:
    'Dismisses an open proposal, recorded with who and why (`reason`): the same findings then open no new proposal, while other ' +
    'findings would. 200 with the proposal; 409 `INVENTORY.PROPOSAL_NOT_OPEN` for one that is not open; 404 `INVENTORY.PROPOSAL_NOT_FOUND`.',
  scope: 'factory.provisioning.operate',
  body: dismissBody,
  response: proposalSchema,
}, async ({ request, deps, tenants, principal, body }) => {
  return { status: 200, jsonBody: await deps.inventory.dismiss(tenants(), request.params.id ?? '', { by: principal.person, reason: body.reason }) };
});

const app = moduleApp('inventory');
app.http('listProposals', { route: 'runtime-cloud/proposals', methods: ['GET'], authLevel: 'anonymous', handler: listProposals });
app.http('getProposal', { route: 'runtime-cloud/proposals/{id}', methods: ['GET'], authLevel: 'anonymous', handler: getProposal });
app.http('acceptProposal', { route: 'runtime-cloud/proposals/{id}/accept', methods: ['POST'], authLevel: 'anonymous', extraInputs: [df.input.durableClient()], handler: acceptProposal });
app.http('dismissProposal', { route: 'runtime-cloud/proposals/{id}/dismiss', methods: ['POST'], authLevel: 'anonymous', handler: dismissProposal });
