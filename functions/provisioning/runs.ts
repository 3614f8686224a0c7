import type { InvocationContext } from '@azure/functions';
import * as df from 'durable-functions';
import { AppError } from '../../shared/platform/errors/app-error';
import { lazySchema } from '../../shared/platform/validation/lazy-schema';
import { RUN_STATES, RunErrors, stackOf } from '../../shared/provisioning/run';
import { endpoint } from '../http/endpoint';
import { moduleApp } from '../app';
import { APPROVAL_EVENT } from './provisioning-run.orchestrator';
import { runDetailView, runView } from './run-view';
import { wakeNextOnStack, raiseStackFree } from './stack-free';
import { logOf } from '../log';

const listQuery = lazySchema((z) =>
  z.object({
    environment: z.string().min(1).max(200).optional(),
    status: z.enum(RUN_STATES).optional(),
    limit: z.coerce.number().int().min(1).max(1000).default(100),
    cursor: z.string().min(1).optional(),
    tenant: z.string().optional(),
  }),
);

/** The caller's tenant's runs in the order they were taken in, filtered by environment (id or name) and status. */
export const listRuns = endpoint({ scope: 'factory.runtime.read', query: listQuery }, async ({ deps, tenants, query: q }) => {
  const page = await deps.provisioning.listRuns(tenants(), {
    limit: q.limit,
    ...(q.environment !== undefined ? { environment: q.environment } : {}),
    ...(q.status !== undefined ? { state: q.status } : {}),
    ...(q.cursor !== undefined ? { cursor: q.cursor } : {}),
  });
  return { status: 200, jsonBody: { items: page.items.map(runView), ...(page.nextCursor ? { nextCursor: page.nextCursor } : {}) } };
});

/** One run with its plan receipt (steps, counts, digest), apply receipt (per-resource results) and decision. */
export const getRun = endpoint({ scope: 'factory.runtime.read' }, async ({ request, deps, tenants }) => {
  const detail = await deps.provisioning.getRun(tenants(), request.params.id ?? '');
  return { status: 200, jsonBody: runDetailView(detail) };
});

/** Bodies of the decision endpoints. Changing them is a breaking change for Studio and operators' scripts. */
const approveBody = lazySchema((z) => z.object({ planDigest: z.string().regex(/^sha256:[0-9a-f]{64}$/, 'a plan digest is sha256:<64 hex>'), comment: z.string().max(2000).optional() }));
const rejectBody = lazySchema((z) => z.object({ reason: z.string().min(1).max(2000) }));

/**
 * Approves the recorded plan of a run awaiting approval, named by its digest: 200 with the run (now applying);
 * 409 `PROVISIONING.PLAN_DIGEST_MISMATCH` for another digest, 409 `PROVISIONING.RUN_NOT_AWAITING_APPROVAL` when
 * there is nothing to approve (also for an approval repeated: its effect cannot double).
 */
export const approveRun = endpoint({ scope: 'factory.provisioning.operate', body: approveBody }, async ({ request, context, deps, principal, tenants, body }) => {
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

/**
 * Rejects a run awaiting approval, a stale one, or one whose plan waits for its policy check: 200 with the run
 * (rejected, ProvisioningFailed published). The event wakes its orchestration, which then ends.
 */
export const rejectRun = endpoint({ scope: 'factory.provisioning.operate', body: rejectBody }, async ({ request, context, deps, principal, tenants, body }) => {
  const run = await deps.provisioning.reject(tenants(), request.params.id ?? '', { reason: body.reason, by: principal.person });
  await wakeRun(context, run.id, 'rejected');
  return { status: 200, jsonBody: runView(run) };
});

/**
 * Replans a stale run: its stale plan is kept in `replacedPlans` and the run plans afresh; the new plan needs its
 * own approval where the policy asks for one. 200 with the run (planning); 409 `PROVISIONING.RUN_NOT_STALE`.
 */
export const replanRun = endpoint({ scope: 'factory.provisioning.operate' }, async ({ request, context, deps, principal, tenants }) => {
  const run = await deps.provisioning.replan(tenants(), request.params.id ?? '', principal.person);
  await wakeRun(context, run.id, 'replan');
  return { status: 200, jsonBody: runView(run) };
});

/** Cancels a queued run: 200 with the run; 409 `PROVISIONING.RUN_NOT_CANCELABLE` once it has started planning. */
export const cancelRun = endpoint({ scope: 'factory.provisioning.operate' }, async ({ request, context, deps, principal, tenants }) => {
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
moduleApp('provisioning').http('approveRun', { route: 'runtime-cloud/runs/{id}/approve', methods: ['POST'], authLevel: 'anonymous', extraInputs: durableClient, handler: approveRun });
moduleApp('provisioning').http('rejectRun', { route: 'runtime-cloud/runs/{id}/reject', methods: ['POST'], authLevel: 'anonymous', extraInputs: durableClient, handler: rejectRun });
moduleApp('provisioning').http('replanRun', { route: 'runtime-cloud/runs/{id}/replan', methods: ['POST'], authLevel: 'anonymous', extraInputs: durableClient, handler: replanRun });
moduleApp('provisioning').http('cancelRun', { route: 'runtime-cloud/runs/{id}/cancel', methods: ['POST'], authLevel: 'anonymous', extraInputs: durableClient, handler: cancelRun });
