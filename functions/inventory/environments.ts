import { endpoint, idempotencyKey, idempotencyKeyOf, pageOf, pageQuery } from '../http/endpoint';
import { lazySchema } from '../../shared/platform/validation/lazy-schema';
import { moduleApp } from '../app';
import { driftSchema, environmentPageSchema, environmentSchema, ignoreRulePageSchema, ignoreRuleSchema, scanSchema } from './views';

/** How these routes answer for an environment the caller cannot see, in their descriptions. */
const ENVIRONMENT_NOT_FOUND = "404 `INVENTORY.ENVIRONMENT_NOT_FOUND`, also for another tenant's environment";

export const listEnvironments = endpoint({
  tag: 'Environments',
  summary: 'List environments',
  description:
    "The caller's tenant's environments, a page at a time (`?limit=&cursor=`): each with its desired release, last run, drift status " +
    '(`in-sync`, `drifted`, or `unknown` while stale, before its first observation or when no scan succeeded within twice its interval) ' +
    'with its times, and whether scheduled scans are on. A service or a PlatformAdmin names the tenant with `X-Tenant-Id` or `?tenant=`.',
  scope: 'factory.runtime.read',
  query: pageQuery,
  response: environmentPageSchema,
}, async ({ deps, tenants, query }) => {
  return { status: 200, jsonBody: await deps.inventory.listEnvironments(tenants(), pageOf(query)) };
});

export const getEnvironment = endpoint({
  tag: 'Environments',
  summary: 'Get an environment',
  description:
    "One environment of the caller's tenant: desired release, last run, drift status with `lastObservedAt`, `staleSince` and why, " +
    'and scanning. ' + ENVIRONMENT_NOT_FOUND + '; 409 `INVENTORY.ENVIRONMENT_AMBIGUOUS` when a caller bound to no tenant names an id ' +
    'that several tenants use (name the tenant).',
  scope: 'factory.runtime.read',
  response: environmentSchema,
}, async ({ request, deps, tenants }) => {
  return { status: 200, jsonBody: await deps.inventory.getEnvironment(tenants(), request.params.id ?? '') };
});

export const getInventory = endpoint({
  tag: 'Inventory and drift',
  summary: "List an environment's observed resources",
  description:
    'What the last successful observation of the environment found on its target, a resource per item, a page at a time, with the ' +
    "environment's drift status and times. Secret values are never shown: where the desired value is a reference, a computed marker " +
    'or a secret mask, the observed one is replaced by that marker; an unmanaged resource shows its urn, type and id only. ' +
    ENVIRONMENT_NOT_FOUND + '; 503 `INVENTORY.TABLES_UNAVAILABLE` when the observed inventory cannot be read.',
  scope: 'factory.runtime.read',
  query: pageQuery,
}, async ({ request, deps, tenants, query }) => {
  return { status: 200, jsonBody: await deps.inventory.inventory(tenants(), request.params.id ?? '', pageOf(query)) };
});

export const getDrift = endpoint({
  tag: 'Inventory and drift',
  summary: "Show an environment's drift",
  description:
    "The last observation's findings grouped by resource and graded by severity (`missing` and `replaced` high, `modified` with the " +
    'property path and both values medium, `unmanaged` low), the findings ignore rules set aside with the rule ids (`ignored`), rules ' +
    "that expired (`expiredRules`), and the newest scans with their outcomes. A stale environment's drift is `unknown`, never in sync. " +
    ENVIRONMENT_NOT_FOUND + '.',
  scope: 'factory.runtime.read',
  response: driftSchema,
}, async ({ request, deps, tenants }) => {
  return { status: 200, jsonBody: await deps.inventory.drift(tenants(), request.params.id ?? '') };
});

export const scanEnvironment = endpoint({
  tag: 'Inventory and drift',
  summary: 'Scan an environment now',
  description:
    'Observes the environment on its target now and diffs it with the desired state, as a scheduled scan does (drift events and a ' +
    'reconciliation proposal where it drifted), recorded as a manual scan by the caller. 200 with the scan record: `completed`, or ' +
    '`failed` (the environment turns stale, with the reason) or `skipped` (e.g. while a run applies to the stack) with why. ' +
    ENVIRONMENT_NOT_FOUND + '.',
  scope: 'factory.provisioning.operate',
  response: scanSchema,
}, async ({ request, deps, tenants, principal }) => {
  const environment = await deps.inventory.getEnvironment(tenants(), request.params.id ?? '');
  return { status: 200, jsonBody: await deps.inventory.scan({ tenant: environment.tenantId, id: environment.id }, { kind: 'manual', by: principal.person }) };
});

/** Changing this body is a breaking change for operators' scripts. */
const scanningBody = lazySchema((z) => z.object({ enabled: z.boolean(), reason: z.string().min(1).max(2000) }));

export const setScanning = endpoint({
  tag: 'Inventory and drift',
  summary: "Pause or resume an environment's scheduled scans",
  description:
    "Turns the environment's scheduled scans off or on (`enabled`), recorded with who and why (`reason`). A paused environment's timer " +
    'scans are recorded as skipped with that reason, and its drift status turns `unknown` once it is overdue: a paused environment is ' +
    'never shown in sync for long. Manual scans still run. 200 with the environment; ' + ENVIRONMENT_NOT_FOUND + '.',
  scope: 'factory.provisioning.operate',
  body: scanningBody,
}, async ({ request, deps, tenants, principal, body }) => {
  return { status: 200, jsonBody: await deps.inventory.setScanning(tenants(), request.params.id ?? '', { enabled: body.enabled, by: principal.person, reason: body.reason }) };
});

const rulesQuery = lazySchema((z) => pageQuery().extend({ includeDeleted: z.enum(['true', 'false']).default('false') }));

export const listIgnoreRules = endpoint({
  tag: 'Ignore rules',
  summary: "List an environment's ignore rules",
  description:
    "The environment's recorded ignore rules, a page at a time: scope, path, reason, owner, expiry, whether they hold on apply, and who " +
    'made them; deleted rules too, with who deleted them, with `includeDeleted=true`. ' + ENVIRONMENT_NOT_FOUND + '.',
  scope: 'factory.runtime.read',
  query: rulesQuery,
  response: ignoreRulePageSchema,
}, async ({ request, deps, tenants, query: q }) => {
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

export const addIgnoreRule = endpoint({
  tag: 'Ignore rules',
  summary: 'Add an ignore rule',
  description:
    'Records a rule that sets drift findings aside: a scope (a resource `type` or one `urn`), a property `path` (`sku.capacity`, ' +
    '`rules.0.port`, `tags.*`, `*`), why, whose, until when (`expiresAt`, in the future), and whether a reconciliation run leaves the ' +
    'path alone too (`holdsOnApply`). Findings it matches are still listed, under `ignored`. 201 with the rule and its `Location`; 200 ' +
    'with the same rule when its `Idempotency-Key` (header or body field) made it before. 400 `INVENTORY.INVALID_IGNORE_RULE` for a ' +
    'path or expiry that is not valid; 422 `REQUEST.IDEMPOTENCY_KEY_REUSED` for a key used for another rule; 400 ' +
    '`REQUEST.IDEMPOTENCY_KEY_MISMATCH` when header and body field differ; ' + ENVIRONMENT_NOT_FOUND + '.',
  scope: 'factory.provisioning.operate',
  body: ignoreRuleBody,
  response: ignoreRuleSchema,
}, async ({ request, deps, tenants, principal, body }) => {
  const key = idempotencyKeyOf(request, body.idempotencyKey);
  const { idempotencyKey: _key, ...rule } = body;
  const { rule: recorded, created } = await deps.inventory.addIgnoreRule(tenants(), request.params.id ?? '', { ...rule, expiresAt: new Date(rule.expiresAt).toISOString() }, {
    by: principal.person,
    ...(key !== undefined ? { idempotencyKey: key } : {}),
  });
  const location = `/runtime-cloud/environments/${encodeURIComponent(request.params.id ?? '')}/ignore-rules/${recorded.id}`;
  return { status: created ? 201 : 200, headers: { location }, jsonBody: recorded };
});

export const deleteIgnoreRule = endpoint({
  tag: 'Ignore rules',
  summary: 'Delete an ignore rule',
  description:
    'Deletes a rule, recorded with who: it stops applying from the next scan on, and stays listed with `includeDeleted=true`. ' +
    '204; 404 `INVENTORY.IGNORE_RULE_NOT_FOUND` for a rule not in force (unknown or deleted already), ' +
    "`INVENTORY.ENVIRONMENT_NOT_FOUND` for another tenant's environment.",
  scope: 'factory.provisioning.operate',
}, async ({ request, deps, tenants, principal }) => {
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
