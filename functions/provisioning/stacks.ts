import type { HttpRequest } from '@azure/functions';
import * as df from 'durable-functions';
import { resolveTenant } from '../../shared/platform/auth/auth';
import { qualifiedStackName, type StackRef } from '../../shared/platform/iac/stack-ref';
import { lazySchema } from '../../shared/platform/validation/lazy-schema';
import type { StackLock } from '../../shared/provisioning/stack-lock.repository';
import { endpoint } from '../http/endpoint';
import { moduleApp } from '../app';
import { wakeNextOnStack } from './stack-free';
import { logOf } from '../log';

/**
 * A stack lock as the HTTP API shows it (operators). Changing this shape is a breaking change for its clients.
 * `expired`: the holder's lease has lapsed; the next run to ask takes the lock over.
 */
function lockView(lock: StackLock, now: Date) {
  return {
    stack: qualifiedStackName(lock.stack),
    tenant: lock.stack.tenant,
    project: lock.stack.project,
    holderRun: lock.holderRun,
    holderHost: lock.holderHost,
    acquiredAt: lock.acquiredAt.toISOString(),
    expiresAt: lock.expiresAt.toISOString(),
    version: lock.version,
    expired: lock.expiresAt.getTime() <= now.getTime(),
  };
}

/** The stack a route names: `/tenants/{tenant}/stacks/{project}/{stack}`. */
function routeStack(request: HttpRequest): StackRef {
  return { tenant: request.params.tenant ?? '', project: request.params.project ?? '', stack: request.params.stack ?? '' };
}

/**
 * Who holds a stack's lock: 200 with holder run, host, expiry and version; 404 `PROVISIONING.STACK_NOT_LOCKED`. A
 * caller bound to another tenant than the route's is refused (403 `AUTH.TENANT_MISMATCH`).
 */
export const getStackLock = endpoint({ scope: 'factory.runtime.read' }, async ({ request, deps, principal }) => {
  const stack = routeStack(request);
  const lock = await deps.provisioning.stackLock(resolveTenant(principal, 'factory.runtime.read', stack.tenant), stack);
  return { status: 200, headers: { 'cache-control': 'no-store' }, jsonBody: lockView(lock, deps.clock.now()) };
});

/**
 * The body of unlock. `version` (from GET …/lock) breaks only that version, so a retried request cannot break a
 * lock another run took after the first. Changing it is a breaking change for operators' scripts.
 */
const unlockBody = lazySchema((z) => z.object({ reason: z.string().min(1).max(2000), version: z.number().int().positive().optional() }));

/**
 * An operator breaks a stack's lock (a host that hung holding it, a run stuck mid-apply): recorded with who and
 * why. The run that held it loses it: an apply stops before its next step and fails with
 * `PROVISIONING.STACK_LOCK_LOST`. 200 with the broken lock; 404 when nothing holds it; 409 for another version.
 */
export const unlockStack = endpoint({ scope: 'factory.runtime.admin', platformOnly: true, body: unlockBody }, async ({ request, context, deps, principal, body }) => {
  const stack = routeStack(request);
  const broken = await deps.provisioning.unlockStack(stack, { by: principal.person, reason: body.reason, ...(body.version !== undefined ? { version: body.version } : {}) });
  logOf(context).warn(`the stack lock (version ${broken.lock.version}) was broken by ${broken.by}: ${broken.reason}`, { stack: qualifiedStackName(stack), runId: broken.lock.holderRun });
  // The first run waiting for the stack takes it now rather than at its retry timer.
  await wakeNextOnStack(context, deps.provisioning, { stack });
  return {
    status: 200,
    jsonBody: { broken: lockView(broken.lock, broken.brokenAt), by: broken.by, reason: broken.reason, brokenAt: broken.brokenAt.toISOString() },
  };
});

const STACK_ROUTE = 'runtime-cloud/tenants/{tenant}/stacks/{project}/{stack}';
moduleApp('provisioning').http('getStackLock', { route: `${STACK_ROUTE}/lock`, methods: ['GET'], authLevel: 'anonymous', handler: getStackLock });
moduleApp('provisioning').http('unlockStack', { route: `${STACK_ROUTE}/unlock`, methods: ['POST'], authLevel: 'anonymous', extraInputs: [df.input.durableClient()], handler: unlockStack });
