import type { InvocationContext } from '@azure/functions';
import * as df from 'durable-functions';
import { AppError } from '../../shared/platform/errors/app-error';
import { lazySchema } from '../../shared/platform/validation/lazy-schema';
import { RUN_STATES, RunErrors, stackOf } from '../../shared/provisioning/run';
import { endpoint } from '../http/endpoint';
import { moduleApp } from '../app';
import { APPROVAL_EVENT } from './provisioning-run.orchestrator';
import { runDetailSchema, runDetailView, runEventsSchema, runPageSchema, runView, runViewSchema } from './run-view';
import { wakeNextOnStack, raiseStackFree } from './stack-free';
import { logOf } from '../log';

const listQuery = lazySchema((z) =>
  z.object({
    environment: z.string().min(1).max(200).optional(),
    status: z.enum(RUN_STATES).optional(),
    limit: z.coerce.number().int().min(1).max(1000).default(100),
    cursor: z.string().min(1).optional(),
    order: z.enum(['oldest', 'newest']).default('oldest'),
    tenant: z.string().optional(),
  }),
);

export const listRuns = endpoint({
  tag: 'Runs',
  summary: 'List provisioning runs',
  description:
    "The caller's tenant's runs in the order they were taken in (`order=newest`: the newest first), a page at a time (`?limit=&cursor=`, " +
    '`nextCursor` while more remain; the next page is asked for with the same `order`), ' +
    'optionally only those of one environment (`environment`: its id or name) or in one state (`status`). Each run shows its state, ' +
    'what it waits for (`waitingFor`: the stack lock, a runner, a policy check, an approval or a replan) and its plan digest. ' +
    'A token bound to a tenant sees that tenant only; a service or a PlatformAdmin names the tenant with `X-Tenant-Id` or `?tenant=` ' +
    '(a PlatformAdmin naming none sees every tenant). 400 `REQUEST.INVALID` for a bad filter, `REQUEST.INVALID_CURSOR` for a cursor ' +
    'this API did not give out.',
  scope: 'factory.runtime.read',
  query: listQuery,
  response: runPageSchema,
}, async ({ deps, tenants, query: q }) => {
  const page = await deps.provisioning.listRuns(tenants(), {
    limit: q.limit,
    ...(q.environment !== undefined ? { environment: q.environment } : {}),
    ...(q.status !== undefined ? { state: q.status } : {}),
    ...(q.cursor !== undefined ? { cursor: q.cursor } : {}),
    order: q.order,
  });
  return { status: 200, jsonBody: { items: page.items.map(runView), ...(page.nextCursor ? { nextCursor: page.nextCursor } : {}) } };
});

export const getRun = endpoint({
  tag: 'Runs',
  summary: 'Get a provisioning run with its receipts',
  description:
    "One run of the caller's tenant: its state, the plan receipt (steps, counts, digest, why approval is needed; an update's or " +
    "replace's step gives each changed path's old value, what the stack state held, in `oldValues`, masked as its `inputs` are), " +
    'the apply receipt (per-resource results, outputs, error code), the decision on its plan, refused approvals, and the plans a replan ' +
    'replaced (`replacedPlans`). Receipts name secret and config references, never their values. ' +
    "404 `PROVISIONING.RUN_NOT_FOUND`, also for another tenant's run.",
  scope: 'factory.runtime.read',
  response: runDetailSchema,
}, async ({ request, deps, tenants }) => {
  const detail = await deps.provisioning.getRun(tenants(), request.params.id ?? '');
  return { status: 200, jsonBody: runDetailView(detail) };
});

export const getRunEvents = endpoint({
  tag: 'Runs',
  summary: 'List the events published for a run',
  description:
    'The CloudEvents the host wrote for the run (`SpecificationDeclared`, `ProvisioningApplied` or `ProvisioningFailed`, and the like), ' +
    'oldest first: each with its id, type and time, and when it was handed to the bus (absent while it waits in the outbox). ' +
    "404 `PROVISIONING.RUN_NOT_FOUND`, also for another tenant's run.",
  scope: 'factory.runtime.read',
  response: runEventsSchema,
}, async ({ request, deps, tenants }) => ({
  status: 200,
  jsonBody: { items: await deps.provisioning.runEvents(tenants(), request.params.id ?? '') },
}));

/** Bodies of the decision endpoints. Changing them is a breaking change for Studio and operators' scripts. */
const approveBody = lazySchema((z) => z.object({ planDigest: z.string().regex(/^sha256:[0-9a-f]{64}$/, 'a plan digest is sha256:<64 hex>'), comment: z.string().max(2000).optional() }));
const rejectBody = lazySchema((z) => z.object({ reason: z.string().min(1).max(2000) }));

export const approveRun = endpoint({
  tag: 'Approvals',
  summary: "Approve a run's plan",
  description:
    "Approves the recorded plan of a run awaiting approval, named by its digest (`planDigest` from the run's plan receipt), " +
    'recorded with the caller as approver and an optional comment: 200 with the run, now applying exactly that plan. ' +
    '409 `PROVISIONING.PLAN_DIGEST_MISMATCH` for another digest; 409 `PROVISIONING.RUN_NOT_AWAITING_APPROVAL` when there is nothing ' +
    'to approve (also for an approval repeated: its effect cannot double); 409 `PROVISIONING.PLAN_STALE` for a plan past its expiry ' +
    'or made against a state that has moved (the run turns stale and waits for a replan or a rejection); ' +
    '403 `PROVISIONING.SELF_APPROVAL` (recorded on the run) when the environment needs a second person and the caller asked for the run; ' +
    "403 `PROVISIONING.APPROVER_NOT_ALLOWED` when the ControlPlaneApi's approvers of the environment do not include the caller.",
  scope: 'factory.provisioning.operate',
  body: approveBody,
  response: runViewSchema,
}, async ({ request, context, deps, principal, tenants, body }) => {
  const runId = request.params.id ?? '';
  let run;
  try {
    run = await deps.provisioning.approve(tenants(), runId, {
      planDigest: body.planDigest,
      by: principal.person,
      ...(body.comment !== undefined ? { comment: body.comment } : {}),
    });
  } catch (thrown) {
    // 409 PLAN_STALE: the refusal turned the run stale; its orchestration now waits for a replan or a rejection.
    if (thrown instanceof AppError && thrown.code === RunErrors.planStale) await wakeRun(context, runId, 'stale');
    throw thrown;
  }
  await wakeRun(context, run.id, 'approved');
  return { status: 200, jsonBody: runView(run) };
});

export const rejectRun = endpoint({
  tag: 'Approvals',
  summary: 'Reject a run',
  description:
    'Rejects a run awaiting approval, a stale one, or one whose plan waits for its policy check, recorded with who and why (`reason`): ' +
    '200 with the run, now rejected; `ProvisioningFailed` is published and nothing is applied. ' +
    '409 `PROVISIONING.RUN_NOT_AWAITING_APPROVAL` for a run in any other state; 404 `PROVISIONING.RUN_NOT_FOUND`.',
  scope: 'factory.provisioning.operate',
  body: rejectBody,
  response: runViewSchema,
}, async ({ request, context, deps, principal, tenants, body }) => {
  const run = await deps.provisioning.reject(tenants(), request.params.id ?? '', { reason: body.reason, by: principal.person });
  await wakeRun(context, run.id, 'rejected');
  return { status: 200, jsonBody: runView(run) };
});

export const replanRun = endpoint({
  tag: 'Approvals',
  summary: 'Replan a stale run',
  description:
    "Makes a fresh plan for a stale run (its plan expired, or the stack's state moved since it was made): the stale plan's receipt " +
    "and the decision on it move unchanged to the run's `replacedPlans`, and the new plan needs its own approval where the policy asks " +
    'for one (an approval never carries over). The caller counts as one who asked for the run, for four eyes. ' +
    '200 with the run, now planning; 409 `PROVISIONING.RUN_NOT_STALE` for a run that is not stale.',
  scope: 'factory.provisioning.operate',
  response: runViewSchema,
}, async ({ request, context, deps, principal, tenants }) => {
  const run = await deps.provisioning.replan(tenants(), request.params.id ?? '', principal.person);
  await wakeRun(context, run.id, 'replan');
  return { status: 200, jsonBody: runView(run) };
});

export const cancelRun = endpoint({
  tag: 'Runs',
  summary: 'Cancel a queued run',
  description:
    'Cancels a run that is still queued (waiting for its stack or behind another run), recorded with who: 200 with the run, now canceled; ' +
    '`ProvisioningFailed` is published, and the next run waiting for the stack goes on. ' +
    '409 `PROVISIONING.RUN_NOT_CANCELABLE` once it has started planning (reject it at its approval instead).',
  scope: 'factory.provisioning.operate',
  response: runViewSchema,
}, async ({ request, context, deps, principal, tenants }) => {
  const run = await deps.provisioning.cancel(tenants(), request.params.id ?? '', principal.person);
  // Its orchestration finds the run canceled when it next asks for the stack, and ends: woken now rather than at its
  // retry timer. Runs that queued behind it may go first now.
  try {
    await raiseStackFree(context, run.id);
  } catch (thrown) {
    logOf(context).warn('the run is canceled, but its orchestration could not be woken', { runId: run.id }, thrown);
  }
  await wakeNextOnStack(context, deps.provisioning, { stack: stackOf(run) });
  return { status: 200, jsonBody: runView(run) };
});

/**
 * Tells the run's orchestration that a decision was recorded. The decision is committed already; if the event
 * cannot be raised the orchestration still finds it when its approval timer fires, so this logs and does not fail.
 */
async function wakeRun(context: InvocationContext, runId: string, decision: string): Promise<void> {
  try {
    await df.getClient(context).raiseEvent(runId, APPROVAL_EVENT, { decision });
  } catch (thrown) {
    logOf(context).warn(`the ${decision} decision is recorded but the run's orchestration could not be woken`, { runId }, thrown);
  }
}

const durableClient = [df.input.durableClient()];
moduleApp('provisioning').http('listRuns', { route: 'runtime-cloud/runs', methods: ['GET'], authLevel: 'anonymous', handler: listRuns });
moduleApp('provisioning').http('getRun', { route: 'runtime-cloud/runs/{id}', methods: ['GET'], authLevel: 'anonymous', handler: getRun });
moduleApp('provisioning').http('getRunEvents', { route: 'runtime-cloud/runs/{id}/events', methods: ['GET'], authLevel: 'anonymous', handler: getRunEvents });
moduleApp('provisioning').http('approveRun', { route: 'runtime-cloud/runs/{id}/approve', methods: ['POST'], authLevel: 'anonymous', extraInputs: durableClient, handler: approveRun });
moduleApp('provisioning').http('rejectRun', { route: 'runtime-cloud/runs/{id}/reject', methods: ['POST'], authLevel: 'anonymous', extraInputs: durableClient, handler: rejectRun });
moduleApp('provisioning').http('replanRun', { route: 'runtime-cloud/runs/{id}/replan', methods: ['POST'], authLevel: 'anonymous', extraInputs: durableClient, handler: replanRun });
moduleApp('provisioning').http('cancelRun', { route: 'runtime-cloud/runs/{id}/cancel', methods: ['POST'], authLevel: 'anonymous', extraInputs: durableClient, handler: cancelRun });
