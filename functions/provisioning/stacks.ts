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

/** What `getStackLock` answers (`lockView`), for the OpenAPI document. */
const stackLockSchema = lazySchema((z) =>
  z.object({
    stack: z.string(),
    tenant: z.string(),
    project: z.string(),
    holderRun: z.string(),
    holderHost: z.string(),
    acquiredAt: z.string(),
    expiresAt: z.string(),
    version: z.number().int(),
    expired: z.boolean(),
  }),
);

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

export const getStackLock = endpoint({
  tag: 'Stacks',
  summary: "Show who holds a stack's lock",
  description:
    'Who holds the lock of the stack `tenant/project/stack` (a lease that a run takes to plan and to apply): 200 with the holder run ' +
    'and host, when it was taken and expires, its `version` (what unlock names) and whether it has `expired` (the next run to ask ' +
    'takes it over). 404 `PROVISIONING.STACK_NOT_LOCKED` when nothing holds it; 403 `AUTH.TENANT_MISMATCH` for a token bound to ' +
    "another tenant than the route's.",
  scope: 'factory.runtime.read',
  response: stackLockSchema,
}, async ({ request, deps, principal }) => {
  const stack = routeStack(request);
  const lock = await deps.provisioning.stackLock(resolveTenant(principal, 'factory.runtime.read', stack.tenant), stack);
  return { status: 200, headers: { 'cache-control': 'no-store' }, jsonBody: lockView(lock, deps.clock.now()) };
});

/**
 * The body of unlock. `version` (from GET …/lock) breaks only that version, so a retried request cannot break a
 * lock another run took after the first. Changing it is a breaking change for operators' scripts.
 */
const unlockBody = lazySchema((z) => z.object({ reason: z.string().min(1).max(2000), version: z.number().int().positive().optional() }));

export const unlockStack = endpoint({
  tag: 'Stacks',
  summary: "Break a stack's lock",
  description:
    "Breaks a stack's lock when its holder hung (a host that stopped holding it, a run stuck mid-apply), recorded with who, why and " +
    'whose it was. The run that held it loses it: an apply stops before its next step and fails with `PROVISIONING.STACK_LOCK_LOST`, ' +
    'and the first run waiting for the stack takes it. Send the `version` read from the lock, so that a retried request cannot break ' +
    'a lock another run took since. ' +
    '200 with the broken lock, who and when; 404 `PROVISIONING.STACK_NOT_LOCKED` when nothing holds it; ' +
    '409 `PROVISIONING.STACK_LOCK_VERSION_MISMATCH` when the lock has another version.',
  scope: 'factory.runtime.admin',
  platformOnly: true,
  body: unlockBody,
}, async ({ request, context, deps, principal, body }) => {
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
