import { editionSpecSchema, poolSpecSchema, tenantSpecSchema } from '../../shared/capacity/capacity.seed';
import { endpoint } from '../http/endpoint';
import { moduleApp } from '../app';
import { lazySchema } from '../../shared/platform/validation/lazy-schema';

/** What `capacitySummary` answers (capacity.context.ts `CapacitySummary`), for the OpenAPI document. */
const capacitySummarySchema = lazySchema((z) =>
  z.object({
    kinds: z.array(z.object({ kind: z.string(), capacity: z.number(), used: z.number(), free: z.number() })),
    pools: z.array(
      z.object({
        id: z.string(),
        kind: z.string(),
        target: z.string(),
        capacity: z.number(),
        min: z.number(),
        max: z.number(),
        labels: z.record(z.string(), z.string()),
        iacStack: z.string().optional(),
        used: z.number(),
        free: z.number(),
      }),
    ),
    tenants: z.array(z.object({ tenant: z.string(), edition: z.string(), usage: z.array(z.object({ kind: z.string(), used: z.number(), limit: z.number().nullable() })) })),
  }),
);

export const capacitySummary = endpoint({
  tag: 'Capacity',
  summary: 'Summarize capacity and quota use',
  description:
    "Per kind and per pool: capacity, used and free units; and each visible tenant's use of each kind against its edition's quota. " +
    'A token bound to a tenant sees its own use only; a PlatformAdmin sees every tenant. Never cached.',
  scope: 'factory.runtime.read',
  response: capacitySummarySchema,
}, async ({ deps, tenants }) => {
  const summary = await deps.capacity.summary(tenants());
  return { status: 200, headers: { 'cache-control': 'no-store' }, jsonBody: summary };
});

export const putPool = endpoint({
  tag: 'Capacity',
  summary: 'Create or change a capacity pool',
  description:
    'Creates the pool or replaces its kind, target, capacity, bounds and labels: 201 when created, 200 when changed. Shrinking below ' +
    'current use revokes nothing: grants stop until use falls below the new capacity. A size change on a pool sized by a provisioning ' +
    'stack (`iacStack`, `tenant/project/stack`) is requested from provisioning as a run (`PoolResizeRequested`; `resizeRequested` in ' +
    'the answer). 400 `CAPACITY.INVALID_POOL`; 409 `CAPACITY.POOL_IN_USE` for a kind change while units are leased.',
  scope: 'factory.runtime.admin',
  platformOnly: true,
  body: poolSpecSchema,
}, async ({ request, deps, body }) => {
  const { created, pool, resizeRequested } = await deps.capacity.putPool(request.params.id ?? '', {
    kind: body.kind,
    target: body.target,
    capacity: body.capacity,
    ...(body.min !== undefined ? { min: body.min } : {}),
    ...(body.max !== undefined ? { max: body.max } : {}),
    ...(body.labels !== undefined ? { labels: body.labels } : {}),
    ...(body.iacStack !== undefined ? { iacStack: body.iacStack } : {}),
  });
  return { status: created ? 201 : 200, jsonBody: { ...pool, resizeRequested } };
});

export const putEdition = endpoint({
  tag: 'Capacity',
  summary: 'Create or change an edition',
  description:
    'Creates the edition or replaces its per-kind limits (`maxUnits` a tenant may hold at once, `maxTtlSeconds` a lease may run, ' +
    "`maxWaitSeconds` a request may wait in a pool's queue, default 300) and its `weight` in a pool queue's fair share (default 1): " +
    '201 when created, 200 when changed. A kind left out grants nothing to tenants on the edition.',
  scope: 'factory.runtime.admin',
  platformOnly: true,
  body: editionSpecSchema,
}, async ({ request, deps, body }) => {
  const name = request.params.name ?? '';
  const edition = { name, limits: body.limits, weight: body.weight ?? 1 };
  const { created } = await deps.capacity.putEdition(edition);
  return { status: created ? 201 : 200, jsonBody: edition };
});

export const putTenant = endpoint({
  tag: 'Capacity',
  summary: 'Create a tenant or change its edition',
  description:
    "Creates the tenant with an edition, or moves it to another: 201 when created, 200 when changed. Its quotas are the edition's at " +
    'once; a lower quota revokes no lease held, grants stop until use falls below it. 400 `CAPACITY.EDITION_NOT_FOUND` for an edition that does not exist.',
  scope: 'factory.runtime.admin',
  platformOnly: true,
  body: tenantSpecSchema,
}, async ({ request, deps, body }) => {
  const id = request.params.id ?? '';
  const { created } = await deps.capacity.putTenant({ id, edition: body.edition });
  return { status: created ? 201 : 200, jsonBody: { id, edition: body.edition } };
});

moduleApp('capacity').http('capacitySummary', { route: 'runtime-cloud/capacity', methods: ['GET'], authLevel: 'anonymous', handler: capacitySummary });
moduleApp('capacity').http('putPool', { route: 'runtime-cloud/pools/{id}', methods: ['PUT'], authLevel: 'anonymous', handler: putPool });
moduleApp('capacity').http('putEdition', { route: 'runtime-cloud/editions/{name}', methods: ['PUT'], authLevel: 'anonymous', handler: putEdition });
moduleApp('capacity').http('putTenant', { route: 'runtime-cloud/tenants/{id}', methods: ['PUT'], authLevel: 'anonymous', handler: putTenant });
