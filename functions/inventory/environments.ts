import { endpoint, idempotencyKey, idempotencyKeyOf, pageOf, pageQuery } from '../http/endpoint';
import { lazySchema } from '../../shared/platform/validation/lazy-schema';
import { moduleApp } from '../app';

/** The caller's tenant's environments: desired release, last run, drift status (unknown when stale or overdue). */
export const listEnvironments = endpoint({ scope: 'factory.runtime.read', query: pageQuery }, async ({ deps, tenants, query }) => {
  return { status: 200, jsonBody: await deps.inventory.listEnvironments(tenants(), pageOf(query)) };
});

export const getEnvironment = endpoint({ scope: 'factory.runtime.read' }, async ({ request, deps, tenants }) => {
  return { status: 200, jsonBody: await deps.inventory.getEnvironment(tenants(), request.params.id ?? '') };
});

/** The observed inventory (Table storage) of an environment, with the environment's drift status and times. */
export const getInventory = endpoint({ scope: 'factory.runtime.read', query: pageQuery }, async ({ request, deps, tenants, query }) => {
  return { status: 200, jsonBody: await deps.inventory.inventory(tenants(), request.params.id ?? '', pageOf(query)) };
});

/** The last observation's findings grouped by resource, the ignored ones with their rules, and the newest scans. */
export const getDrift = endpoint({ scope: 'factory.runtime.read' }, async ({ request, deps, tenants }) => {
  return { status: 200, jsonBody: await deps.inventory.drift(tenants(), request.params.id ?? '') };
});

/** Scans the environment now: 200 with the scan record (completed, failed or skipped, with why). */
export const scanEnvironment = endpoint({ scope: 'factory.provisioning.operate' }, async ({ request, deps, tenants, principal }) => {
  const environment = await deps.inventory.getEnvironment(tenants(), request.params.id ?? '');
  return { status: 200, jsonBody: await deps.inventory.scan({ tenant: environment.tenantId, id: environment.id }, { kind: 'manual', by: principal.person }) };
});

/**
 * Pauses or resumes the environment's scheduled scans, recorded with who and why. A paused environment's timer
 * scans are recorded as skipped with that reason, and its drift status turns unknown once it is overdue.
 * Changing this body is a breaking change for operators' scripts.
 */
const scanningBody = lazySchema((z) => z.object({ enabled: z.boolean(), reason: z.string().min(1).max(2000) }));

export const setScanning = endpoint({ scope: 'factory.provisioning.operate', body: scanningBody }, async ({ request, deps, tenants, principal, body }) => {
  return { status: 200, jsonBody: await deps.inventory.setScanning(tenants(), request.params.id ?? '', { enabled: body.enabled, by: principal.person, reason: body.reason }) };
});

const rulesQuery = lazySchema((z) => pageQuery().extend({ includeDeleted: z.enum(['true', 'false']).default('false') }));

export const listIgnoreRules = endpoint({ scope: 'factory.runtime.read', query: rulesQuery }, async ({ request, deps, tenants, query: q }) => {
  return { status: 200, jsonBody: await deps.inventory.listIgnoreRules(tenants(), request.params.id ?? '', { ...pageOf(q), includeDeleted: q.includeDeleted === 'true' }) };
});

/**
 * A recorded ignore rule (drift.ts `IgnoreRule`): a scope (a resource type or one urn), a property path, why, whose,
 * until when, and whether it also holds on apply. Changing this body is a breaking change.
 */
const ignoreRuleBody = lazySchema((z) =>
  z
    .object({
      scope: z.union([z.object({ type: z.string().min(1).max(200) }).strict(), z.object({ urn: z.string().min(1).max(1000) }).strict()]),
      path: z.string().min(1).max(500),
      reason: z.string().min(1).max(2000),
      owner: z.string().min(1).max(200),
      expiresAt: z.iso.datetime({ offset: true }),
      holdsOnApply: z.boolean(),
      idempotencyKey: idempotencyKey().optional(),
    })
    .strict(),
);

/** 201 with the rule; 200 with the same rule when its Idempotency-Key (header or body) made it before. */
export const addIgnoreRule = endpoint({ scope: 'factory.provisioning.operate', body: ignoreRuleBody }, async ({ request, deps, tenants, principal, body }) => {
  const key = idempotencyKeyOf(request, body.idempotencyKey);
  const { idempotencyKey: _key, ...rule } = body;
  const { rule: recorded, created } = await deps.inventory.addIgnoreRule(tenants(), request.params.id ?? '', { ...rule, expiresAt: new Date(rule.expiresAt).toISOString() }, {
    by: principal.person,
    ...(key !== undefined ? { idempotencyKey: key } : {}),
  });
  const location = `/runtime-cloud/environments/${encodeURIComponent(request.params.id ?? '')}/ignore-rules/${recorded.id}`;
  return { status: created ? 201 : 200, headers: { location }, jsonBody: recorded };
});

/** Deletes a rule: it stops applying; it stays listed with `?includeDeleted=true`, with who deleted it. */
export const deleteIgnoreRule = endpoint({ scope: 'factory.provisioning.operate' }, async ({ request, deps, tenants, principal }) => {
  await deps.inventory.deleteIgnoreRule(tenants(), request.params.id ?? '', request.params.ruleId ?? '', principal.person);
  return { status: 204 };
});

const app = moduleApp('inventory');
const route = (name: string, path: string, methods: ('GET' | 'POST' | 'PUT' | 'DELETE')[], handler: ReturnType<typeof endpoint>) =>
  app.http(name, { route: `runtime-cloud/environments${path}`, methods, authLevel: 'anonymous', handler });
route('listEnvironments', '', ['GET'], listEnvironments);
route('getEnvironment', '/{id}', ['GET'], getEnvironment);
route('getInventory', '/{id}/inventory', ['GET'], getInventory);
route('getDrift', '/{id}/drift', ['GET'], getDrift);
route('scanEnvironment', '/{id}/scan', ['POST'], scanEnvironment);
route('setScanning', '/{id}/scanning', ['PUT'], setScanning);
route('listIgnoreRules', '/{id}/ignore-rules', ['GET'], listIgnoreRules);
route('addIgnoreRule', '/{id}/ignore-rules', ['POST'], addIgnoreRule);
route('deleteIgnoreRule', '/{id}/ignore-rules/{ruleId}', ['DELETE'], deleteIgnoreRule);
