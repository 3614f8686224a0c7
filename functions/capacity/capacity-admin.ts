import { editionSpecSchema, poolSpecSchema, tenantSpecSchema } from '../../shared/capacity/capacity.seed';
import { endpoint } from '../http/endpoint';
import { moduleApp } from '../app';

/** Pools with capacity, used and free units per kind, and each visible tenant's use against its quota. */
export const capacitySummary = endpoint({ scope: 'factory.runtime.read' }, async ({ deps, tenants }) => {
  const summary = await deps.capacity.summary(tenants());
  return { status: 200, headers: { 'cache-control': 'no-store' }, jsonBody: summary };
});

/**
 * Creates or changes a pool. Shrinking below current use revokes nothing: grants stop until use falls. A size
 * change on a pool sized by an IaC stack is requested from provisioning (`PoolResizeRequested`).
 */
export const putPool = endpoint({ scope: 'factory.runtime.admin', platformOnly: true, body: poolSpecSchema }, async ({ request, deps, body }) => {
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

/** Creates an edition or replaces its per-kind limits. */
export const putEdition = endpoint({ scope: 'factory.runtime.admin', platformOnly: true, body: editionSpecSchema }, async ({ request, deps, body }) => {
  const name = request.params.name ?? '';
  const { created } = await deps.capacity.putEdition({ name, limits: body.limits });
  return { status: created ? 201 : 200, jsonBody: { name, limits: body.limits } };
});

/** Creates a tenant or moves it to another edition. */
export const putTenant = endpoint({ scope: 'factory.runtime.admin', platformOnly: true, body: tenantSpecSchema }, async ({ request, deps, body }) => {
  const id = request.params.id ?? '';
  const { created } = await deps.capacity.putTenant({ id, edition: body.edition });
  return { status: created ? 201 : 200, jsonBody: { id, edition: body.edition } };
});

moduleApp('capacity').http('capacitySummary', { route: 'runtime-cloud/capacity', methods: ['GET'], authLevel: 'anonymous', handler: capacitySummary });
moduleApp('capacity').http('putPool', { route: 'runtime-cloud/pools/{id}', methods: ['PUT'], authLevel: 'anonymous', handler: putPool });
moduleApp('capacity').http('putEdition', { route: 'runtime-cloud/editions/{name}', methods: ['PUT'], authLevel: 'anonymous', handler: putEdition });
moduleApp('capacity').http('putTenant', { route: 'runtime-cloud/tenants/{id}', methods: ['PUT'], authLevel: 'anonymous', handler: putTenant });
